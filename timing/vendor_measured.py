"""Derive the compact measurement files of ``data/measured/`` from their public sources.

Run with the folder of inference-sim's ``eval/ground_truth/`` runs (commit ``e7a4aa37`` of
inference-sim/inference-sim) and DistServe's vLLM profile fit::

    python -m slolab.timing.vendor_measured GROUND_TRUTH_DIR PROFILER_A100_VLLM_JSON

For each run folder (``exp-config.yaml``, ``profile.yaml``, ``traces.json``, ``vllm.log``) it
writes ``inference_sim_<run>.csv``: one row per request span, sorted by arrival, with the arrival
relative to the run's first request and the span's latencies and token counts (seconds, rounded
to the microsecond). What was served (model, tensor-parallel degree, batch limits, chunk size, KV
cache, prefix caching and its last logged hit rate) is read from the log of the engine that served
the run (the last start in ``vllm.log``), not from ``exp-config.yaml``, and goes to
``inference_sim_runs.json``. DistServe's JSON is copied unchanged. The package reads only the
written files; the sources are not needed at run time.

References
----------
inference-sim (Apache-2.0), ``eval/ground_truth/``; DistServe (Zhong et al., OSDI 2024,
Apache-2.0), ``simdistserve/estimators/profile_data/profiler-a100-80g.vllm.json``.
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["derive_run", "main"]

logger = logging.getLogger("slolab")

DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "measured"
INFERENCE_SIM_COMMIT = "e7a4aa3715982f089bddd0441e85e0a7d1690ec2"
DISTSERVE_COMMIT = "82831f1604cc6b10bebd360f6c437a07790dde9f"
#: Served model (as vLLM names it) -> slolab's model slug.
MODEL_SLUGS = {
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "meta-llama/Llama-2-7b-hf": "llama2-7b",
}
#: HBM bandwidth (bytes/s) of the 80 GB GPUs the logs' memory admits (NVIDIA data sheets).
A100_80GB_HBM_BYTES_PER_S = 2.039e12
H100_SXM_HBM_BYTES_PER_S = 3.35e12
CSV_COLUMNS = (
    "arrival_s",
    "ttft_s",
    "e2e_s",
    "queue_s",
    "prefill_s",
    "decode_s",
    "prompt_tokens",
    "output_tokens",
)
_ATTRIBUTES = {
    "ttft_s": "gen_ai.latency.time_to_first_token",
    "e2e_s": "gen_ai.latency.e2e",
    "queue_s": "gen_ai.latency.time_in_queue",
    "prefill_s": "gen_ai.latency.time_in_model_prefill",
    "decode_s": "gen_ai.latency.time_in_model_decode",
    "prompt_tokens": "gen_ai.usage.prompt_tokens",
    "output_tokens": "gen_ai.usage.completion_tokens",
}


def _spans(path: Path) -> list[dict[str, float]]:
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    values = {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
                    row = {"start_ns": float(span["startTimeUnixNano"])}
                    row.update({col: float(values[key]) for col, key in _ATTRIBUTES.items()})
                    rows.append(row)
    rows.sort(key=lambda r: r["start_ns"])
    return rows


def _last_engine_log(log: str) -> str:
    """The part of the log from the last start of the API server (the engine that served)."""
    starts = [m.start() for m in re.finditer(r"non-default args", log)]
    return log[starts[-1] - 200 if starts else 0 :]


def _isolated(rows: list[dict[str, float]]) -> list[int]:
    start = np.array([r["start_ns"] / 1e9 for r in rows])
    end = start + np.array([r["e2e_s"] for r in rows])
    return [
        i
        for i in range(len(rows))
        if not np.any((start < end[i]) & (end > start[i]) & (np.arange(len(rows)) != i))
    ]


def derive_run(folder: Path) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """The request rows and the manifest entry of one inference-sim run folder."""
    rows = _spans(folder / "traces.json")
    log = _last_engine_log((folder / "vllm.log").read_text())
    args_match = re.search(r"non-default args: (\{.*\})", log)
    if args_match is None:
        raise ValueError(f"{folder / 'vllm.log'}: no 'non-default args' line")
    args = ast.literal_eval(args_match.group(1))
    served = args["served_model_name"][0]

    def grab(pattern: str) -> str:
        match = re.search(pattern, log)
        if match is None:
            raise ValueError(f"{folder / 'vllm.log'}: no match for {pattern!r}")
        return match.group(1)

    hit_rates = re.findall(r"Prefix cache hit rate: ([0-9.]+)%", log)
    prefix_tokens = int(grab_yaml(folder / "profile.yaml", "prefix_tokens"))
    weights_gib = float(grab(r"Model loading took ([0-9.]+) GiB"))
    isolated = _isolated(rows)
    steps = [
        rows[i]["decode_s"] / (rows[i]["output_tokens"] - 1)
        for i in isolated
        if rows[i]["output_tokens"] > 8
    ]
    fastest_step_s = min(steps)
    weight_bytes = weights_gib * 2**30
    a100_bound_s = weight_bytes / A100_80GB_HBM_BYTES_PER_S
    h100_bound_s = weight_bytes / H100_SXM_HBM_BYTES_PER_S
    gpu = "h100" if h100_bound_s <= fastest_step_s < a100_bound_s else "unknown"
    evidence = (
        f"memory: {weights_gib:.2f} GiB of weights + {grab(r'Available KV cache memory: ([0-9.]+) GiB')}"
        " GiB of KV cache at gpu_memory_utilization 0.9 is an 80 GB GPU; speed: the fastest "
        f"batch-1 decode step of an isolated request took {1e3 * fastest_step_s:.2f} ms, below "
        f"the {1e3 * a100_bound_s:.2f} ms an A100-80GB needs to read the weights at 2.039 TB/s "
        f"and above the {1e3 * h100_bound_s:.2f} ms of an H100 SXM at 3.35 TB/s; the source's "
        "evaluator (python_scripts/evaluator.py) simulates these runs with --hardware H100"
    )
    entry = {
        "run": folder.name,
        "csv": f"inference_sim_{folder.name}.csv",
        "source_path": f"eval/ground_truth/{folder.name}/traces.json",
        "served_model": served,
        "model": MODEL_SLUGS[served],
        "tensor_parallel": int(grab(r"tensor_parallel_size=(\d+)")),
        "gpu": gpu,
        "gpu_evidence": evidence,
        "vllm_version": grab(r"API server version ([0-9.]+)"),
        "dtype": grab(r"dtype=torch\.([a-z0-9]+)"),
        "max_num_seqs": int(args.get("max_num_seqs", 256)),
        "max_num_batched_tokens": int(grab(r"max_num_batched_tokens=(\d+)")),
        "max_model_len": int(grab(r"max_seq_len=(\d+)")),
        "kv_cache_tokens": int(grab(r"GPU KV cache size: ([0-9,]+) tokens").replace(",", "")),
        "prefix_caching": grab(r"enable_prefix_caching=(\w+)") == "True",
        "prefix_tokens": prefix_tokens,
        "prefix_cache_hit_rate": float(hit_rates[-1]) / 100 if hit_rates else 0.0,
        "requests": len(rows),
    }
    return rows, entry


def grab_yaml(path: Path, key: str) -> str:
    """The value of ``key:`` in a flat YAML file (the guidellm profile)."""
    match = re.search(rf"^\s*{key}:\s*(\S+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{path}: no {key!r}")
    return match.group(1)


def write_csv(rows: list[dict[str, float]], path: Path) -> None:
    """Write request rows with arrivals relative to the first request."""
    t0 = rows[0]["start_ns"]
    lines = [",".join(CSV_COLUMNS)]
    for row in rows:
        values = [f"{(row['start_ns'] - t0) / 1e9:.6f}"]
        values += [f"{row[c]:.6f}" for c in CSV_COLUMNS[1:6]]
        values += [str(int(row["prompt_tokens"])), str(int(row["output_tokens"]))]
        lines.append(",".join(values))
    path.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ground_truth", type=Path, help="inference-sim eval/ground_truth folder")
    parser.add_argument("distserve_json", type=Path, help="profiler-a100-80g.vllm.json")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.distserve_json, args.out / "distserve_a100_vllm.json")
    runs = []
    for folder in sorted(p for p in args.ground_truth.iterdir() if (p / "traces.json").exists()):
        rows, entry = derive_run(folder)
        write_csv(rows, args.out / entry["csv"])
        runs.append(entry)
        logger.info("%s: %d requests, %s", folder.name, len(rows), entry["served_model"])
    manifest = {
        "source": "https://github.com/inference-sim/inference-sim",
        "commit": INFERENCE_SIM_COMMIT,
        "license": "Apache-2.0",
        "runs": runs,
    }
    (args.out / "inference_sim_runs.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
