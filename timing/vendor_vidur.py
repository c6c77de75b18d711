"""Fit Vidur's GPU profiles into the compact table the generated presets are built from.

Run with the folder of Vidur's profiles (``compute/``, ``network/``, ``models.csv``,
``gpus.csv``)::

    python -m slolab.timing.vendor_vidur ../shared/profiles/vidur

It writes ``data/vidur_fits.json`` (or ``--out PATH``): per (model, GPU, TP) the fitted
token-parallel time of one iteration, per (node, TP) the fitted all-reduce time, the model
shapes, and the GPU specs with their dated prices. Every fit is ``max(floor, a + b * x)``
(:func:`~slolab.timing.fitting.fit`, form ``"roofline"``, relative least squares), with its
median and largest relative error over the profile's rows. The package reads only the JSON;
the raw profiles are not needed at run time.

References
----------
Vidur (Agrawal et al., MLSys 2024), ``data/profiling/`` of microsoft/vidur (MIT licence).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.timing.fitting import fit, load_vidur_mlp_profile
from slolab.timing.forms import RooflineTiming

__all__ = ["MODEL_SLUGS", "fit_vidur_profiles", "main"]

logger = logging.getLogger("slolab")

DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "vidur_fits.json"

#: Short names of Vidur's models, as the presets use them (``MODEL/GPU/tpN``).
MODEL_SLUGS: dict[str, str] = {
    "microsoft/phi-2": "phi-2",
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
    "meta-llama/Llama-2-70b-hf": "llama2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama3-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "internlm/internlm-20b": "internlm-20b",
    "Qwen/Qwen-72B": "qwen-72b",
}
#: Date and source of the ``price_usd_per_hour_2024_02`` column of ``gpus.csv``.
PRICE_DATE = "2024-02-07"
PRICE_SOURCE = "CoreWeave on-demand resource-based pricing, as Vidur's config optimizer uses it"
_SHAPE_COLUMNS = (
    "num_layers",
    "num_q_heads",
    "num_kv_heads",
    "embedding_dim",
    "mlp_hidden_dim",
    "max_position_embeddings",
    "vocab_size",
)
#: Bytes of one activation element in an all-reduce (FP16).
ACTIVATION_BYTES = 2


def _roofline_fit(profile: pd.DataFrame, name: str) -> tuple[RooflineTiming, dict[str, Any]]:
    """``max(floor, a + b * tokens)`` fitted to ``profile`` and its coefficients and errors."""
    model, report = fit(profile, "roofline", regressors=("tokens",), name=name)
    assert isinstance(model, RooflineTiming)
    floor, line = model.lines
    relative = _relative_errors(model.times(_token_features(profile["tokens"])), profile)
    return model, {
        "floor_s": floor.intercept_s,
        "intercept_s": line.intercept_s,
        "slope_s": line.coefficients["prefill_tokens"],
        "n_points": report.n_points,
        "median_rel_error": float(np.median(relative)),
        "max_rel_error": report.max_rel_error,
    }


def _token_features(tokens: pd.Series) -> np.ndarray:
    from slolab.timing.base import FEATURES

    features = np.zeros((len(tokens), len(FEATURES)))
    features[:, FEATURES.index("prefill_tokens")] = tokens.to_numpy(dtype=float)
    return features


def _relative_errors(predicted_s: np.ndarray, profile: pd.DataFrame) -> np.ndarray:
    measured = profile["time_s"].to_numpy(dtype=float)
    return np.abs(predicted_s - measured) / measured


def _all_reduce_profiles(network_dir: Path) -> dict[str, dict[int, pd.DataFrame]]:
    """Per node type, per number of workers within one node: all-reduce time (s) against
    message size (bytes, in the ``tokens`` column :func:`fit` regresses on); the median over
    ranks of each row's median."""
    out: dict[str, dict[int, pd.DataFrame]] = {}
    for path in sorted(network_dir.glob("*/all_reduce.csv*")):
        raw = pd.read_csv(path)
        raw = raw[raw["num_workers"] <= raw["devices_per_node"]]
        grouped = (
            raw.groupby(["num_workers", "size"])["time_stats.all_reduce.median"]
            .median()
            .reset_index()
        )
        per_tp = {}
        for workers in sorted(int(w) for w in grouped["num_workers"].unique()):
            rows = grouped[grouped["num_workers"] == workers]
            per_tp[workers] = pd.DataFrame(
                {
                    "tokens": rows["size"].to_numpy(dtype=float),
                    "time_s": rows["time_stats.all_reduce.median"].to_numpy(dtype=float) / 1e3,
                }
            )
        out[path.parent.name] = per_tp
    return out


def _measured_all_reduce_s(profile: pd.DataFrame, size_bytes: np.ndarray) -> np.ndarray:
    """Measured all-reduce time at each size, interpolated log-log between profiled sizes."""
    sizes = profile["tokens"].to_numpy()
    times = profile["time_s"].to_numpy()
    return np.exp(np.interp(np.log(size_bytes), np.log(sizes), np.log(times)))


def fit_vidur_profiles(profiles_dir: str | Path) -> dict[str, Any]:
    """The compact table of fits (see the module docstring) from Vidur's profile folder.

    ``token_parallel[MODEL/GPU][TP]`` holds the fit of the token-parallel GPU time of one
    iteration (:func:`~slolab.timing.fitting.load_vidur_mlp_profile`) against the tokens in
    the batch, and ``iteration_median_rel_error`` / ``iteration_max_rel_error``: the errors of
    that fit plus two fitted all-reduces per layer (DGX node) against the profile plus two
    measured all-reduces per layer (interpolated log-log in the message size). ``all_reduce
    [NODE][TP]`` holds the fit of one all-reduce against its message size in bytes.
    """
    root = Path(profiles_dir)
    models = pd.read_csv(root / "models.csv")
    gpus = pd.read_csv(root / "gpus.csv")
    shapes: dict[str, dict[str, Any]] = {}
    for row in models.to_dict(orient="records"):
        slug = MODEL_SLUGS[row["model"]]
        shapes[slug] = {"source_name": row["model"]}
        shapes[slug].update({c: int(row[c]) for c in _SHAPE_COLUMNS})
        shapes[slug]["use_gated_mlp"] = bool(row["use_gated_mlp"])
        shapes[slug]["no_tensor_parallel"] = bool(row["no_tensor_parallel"])
    gpu_specs = {
        row["gpu"]: {
            "fp16_dense_tflops": float(row["fp16_dense_tflops"]),
            "memory_gb": float(row["memory_gb"]),
            "hbm_tb_per_s": float(row["hbm_tb_per_s"]),
            "price_usd_per_hour": float(row["price_usd_per_hour_2024_02"]),
            "price_date": PRICE_DATE,
            "price_source": PRICE_SOURCE,
            "price_usd_per_hour_later": float(row["price_usd_per_hour_later"]),
        }
        for row in gpus.to_dict(orient="records")
    }
    network = _all_reduce_profiles(root / "network")
    all_reduce = {
        node: {str(tp): _roofline_fit(profile, f"{node}-tp{tp}")[1] for tp, profile in per.items()}
        for node, per in network.items()
    }
    token_parallel: dict[str, dict[str, Any]] = {}
    for path in sorted(root.glob("compute/*/*/*/mlp.csv*")):
        gpu = path.parts[-4]
        slug = MODEL_SLUGS[f"{path.parts[-3]}/{path.parts[-2]}"]
        shape = shapes[slug]
        tps = sorted(int(t) for t in pd.read_csv(path)["num_tensor_parallel_workers"].unique())
        per_tp: dict[str, Any] = {}
        for tp in tps:
            profile = load_vidur_mlp_profile(path, tp=tp, num_layers=shape["num_layers"])
            model, record = _roofline_fit(profile, f"{slug}/{gpu}/tp{tp}")
            predicted = model.times(_token_features(profile["tokens"]))
            measured = profile["time_s"].to_numpy(dtype=float)
            node_profiles = network.get(f"{gpu}_dgx", {})
            if tp > 1 and tp in node_profiles:
                fitted_ar = all_reduce[f"{gpu}_dgx"][str(tp)]
                size = profile["tokens"].to_numpy() * shape["embedding_dim"] * ACTIVATION_BYTES
                per_layer = 2 * shape["num_layers"]
                predicted = predicted + per_layer * np.maximum(
                    fitted_ar["floor_s"], fitted_ar["intercept_s"] + fitted_ar["slope_s"] * size
                )
                measured = measured + per_layer * _measured_all_reduce_s(node_profiles[tp], size)
            relative = np.abs(predicted - measured) / measured
            record["iteration_median_rel_error"] = float(np.median(relative))
            record["iteration_max_rel_error"] = float(relative.max())
            per_tp[str(tp)] = record
        token_parallel[f"{slug}/{gpu}"] = per_tp
        logger.info("fitted %s on %s at TP %s", slug, gpu, tps)
    return {
        "source": "microsoft/vidur data/profiling (MIT licence, Copyright (c) Microsoft "
        "Corporation); fitted by slolab.timing.vendor_vidur",
        "units": "seconds; all-reduce slope in s per byte, token-parallel slope in s per token",
        "all_reduce_message": "num_tokens * embedding_dim * 2 bytes, two per layer",
        "models": shapes,
        "gpus": gpu_specs,
        "all_reduce": all_reduce,
        "token_parallel": token_parallel,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m slolab.timing.vendor_vidur PROFILES_DIR [--out PATH]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles_dir", help="folder of Vidur's profiles (compute/, network/)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON to write")
    args = parser.parse_args(argv)
    table = fit_vidur_profiles(args.profiles_dir)
    Path(args.out).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
