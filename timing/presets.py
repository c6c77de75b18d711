"""Named timing models with their sources.

======================================  ===========================================================
``"llama2-7b-h100"``                    fitted to Vidur's H100 profile of Llama-2-7B (token-
                                        parallel operators) plus attention terms from the model
                                        shape and the H100's bandwidth and peak FLOP/s
``"llama3.1-8b-h200"``                  derived from PolyServe's statements about Llama-3.1-8B on
                                        H200 (vLLM) plus the same physics
``"opt-13b-a100-distserve"``            DistServe simulator's fit, OPT-13B on A100-80G
``"opt-13b-h100-slos"``                 SLOs-Serve batch timer, OPT-13B on H100
``"opt-6.7b-a100-slos"``                SLOs-Serve batch timer, OPT-6.7B on A100 (two lines)
``"opt-30b-4gpu-slos"``                 SLOs-Serve batch timer, OPT-30B on 4 GPUs, speculative
``"sa-qwen2.5-7b-v100"``                SA-ordering paper's predictor, Qwen2.5-7B on 2x V100
``"MODEL/GPU/tpN"``                     generated from Vidur's profiles for 8 models on A100,
                                        H100 and A40 at TP 1-8 (:mod:`slolab.timing.generated`),
                                        e.g. ``"llama2-70b/h100/tp4"``
======================================  ===========================================================

:func:`preset_source` gives each one's origin; ``docs/timing.md`` gives every derivation and
assumption. The fitted preset is stored in ``data/llama2-7b-h100.json`` and reproduced by
:func:`refit_llama2_7b_h100`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slolab.timing.base import LinearTiming, TimingModel

if TYPE_CHECKING:
    from slolab.timing.fitting import FitReport

from slolab.timing.forms import MeanLengthTiming, PhaseSumTiming, RooflineTiming, ThresholdTiming
from slolab.timing.shapes import (
    A100_80GB,
    ATTENTION_FLOP_EFFICIENCY,
    H100_SXM,
    H200,
    LLAMA2_7B,
    LLAMA31_8B,
    Accelerator,
    TransformerShape,
    attention_terms,
    with_terms,
)

__all__ = [
    "A100_80GB",
    "H100_SXM",
    "H200",
    "LLAMA2_7B",
    "LLAMA31_8B",
    "Accelerator",
    "TransformerShape",
    "attention_terms",
    "available_presets",
    "preset",
    "preset_kv_bytes_per_token",
    "preset_source",
    "preset_table",
    "refit_llama2_7b_h100",
    "register_preset",
]

logger = logging.getLogger("slolab")

DATA_DIR = Path(__file__).resolve().parent / "data"
VIDUR_H100_LLAMA2_7B_PROFILE = DATA_DIR / "vidur_h100_llama2-7b_mlp.csv"
LLAMA2_7B_H100_JSON = DATA_DIR / "llama2-7b-h100.json"


def refit_llama2_7b_h100(
    out_path: str | Path | None = None,
) -> tuple[RooflineTiming, dict[str, FitReport]]:
    """Fit the ``"llama2-7b-h100"`` preset from the vendored Vidur profile.

    1. Read ``data/vidur_h100_llama2-7b_mlp.csv`` (TP 1, 32 layers) with
       :func:`~slolab.timing.fitting.load_vidur_mlp_profile`: the token-parallel GPU time of one
       iteration against the tokens in the batch.
    2. Fit ``max(floor, a + b * tokens)`` (:func:`~slolab.timing.fitting.fit`, form
       ``"roofline"``, relative least squares, ``b >= 0``); fit a plain linear model too, for
       comparison.
    3. Add the attention terms of :func:`attention_terms` for :data:`LLAMA2_7B` on
       :data:`H100_SXM` to both lines of the roofline (attention adds to the GEMM time
       whichever GEMM regime binds).

    Parameters
    ----------
    out_path : str or Path, optional
        Where to write the JSON (model, fit reports, assumptions); nothing is written when
        None. The shipped file is ``data/llama2-7b-h100.json``.

    Returns
    -------
    (RooflineTiming, dict)
        The model and the fit reports ``{"roofline": ..., "linear": ...}`` of the GEMM part.
    """
    from slolab.timing.fitting import fit, load_vidur_mlp_profile

    profile = load_vidur_mlp_profile(VIDUR_H100_LLAMA2_7B_PROFILE, tp=1, num_layers=32)
    gemm, roofline_report = fit(profile, "roofline", regressors=("tokens",), name="gemm")
    _, linear_report = fit(profile, "linear", regressors=("tokens",), name="gemm-linear")
    assert isinstance(gemm, RooflineTiming)
    terms = attention_terms(LLAMA2_7B, H100_SXM)
    name = "llama2-7b-h100"
    model = RooflineTiming(
        [
            with_terms(gemm.lines[0], terms, f"{name}[floor]"),
            with_terms(gemm.lines[1], terms, f"{name}[slope]"),
        ],
        name=name,
    )
    reports = {"roofline": roofline_report, "linear": linear_report}
    if out_path is not None:
        document = {
            "preset": name,
            "source": _SOURCES[name],
            "model": model.to_dict(),
            "gemm_fit": {form: report.to_record() for form, report in reports.items()},
            "assumptions": {
                "profile": VIDUR_H100_LLAMA2_7B_PROFILE.name,
                "tensor_parallel": 1,
                "num_layers": LLAMA2_7B.num_layers,
                "kv_bytes_per_token": LLAMA2_7B.kv_bytes_per_token,
                "hbm_bytes_per_s": H100_SXM.hbm_bytes_per_s,
                "peak_flops": H100_SXM.peak_flops,
                "attention_flop_efficiency": ATTENTION_FLOP_EFFICIENCY,
                "hbm_efficiency": 1.0,
            },
        }
        Path(out_path).write_text(json.dumps(document, indent=2) + "\n")
        logger.info("wrote the %s preset to %s", name, out_path)
    return model, reports


def _llama2_7b_h100() -> TimingModel:
    document = json.loads(LLAMA2_7B_H100_JSON.read_text())
    return TimingModel.from_dict(document["model"])


#: PolyServe Sec. 5.1: minimal per-token latency of vLLM on H200 (batch 1, context 1).
POLYSERVE_MIN_ITERATION_S = 0.015
#: PolyServe Sec. 3.6: decode batch of about 50 at a 20 ms TPOT and about 150 at 40 ms.
POLYSERVE_TPOT_BATCH_POINTS = ((0.020, 50), (0.040, 150))


def _llama31_8b_h200() -> TimingModel:
    (t_small, b_small), (t_large, b_large) = POLYSERVE_TPOT_BATCH_POINTS
    per_sequence_s = (t_large - t_small) / (b_large - b_small)
    intercept_s = t_small - b_small * per_sequence_s
    reference = _llama2_7b_h100()
    assert isinstance(reference, RooflineTiming)
    h100_gemm_s_per_token = reference.lines[1].coefficients["prefill_tokens"]
    gemm_s_per_token = (
        h100_gemm_s_per_token * LLAMA31_8B.gemm_flops_per_token / LLAMA2_7B.gemm_flops_per_token
    )
    terms = attention_terms(LLAMA31_8B, H200)
    name = "llama3.1-8b-h200"
    slope = LinearTiming(
        intercept_s,
        {"prefill_tokens": gemm_s_per_token, "decode_tokens": gemm_s_per_token, **terms},
        name=f"{name}[slope]",
    )
    floor = LinearTiming(POLYSERVE_MIN_ITERATION_S, {}, name=f"{name}[floor]")
    return RooflineTiming([floor, slope], name=name)


def _opt_13b_a100_distserve() -> TimingModel:
    ms = 1e-3
    name = "opt-13b-a100-distserve"
    sum_l_sq_ms = 7.122e-6 * ms
    prefill = LinearTiming(
        18.10 * ms,
        {"prefill_tokens": 0.1019 * ms - sum_l_sq_ms, "prefill_attention_work": 2.0 * sum_l_sq_ms},
        name=f"{name}[prefill]",
    )
    decode_small = LinearTiming(
        19.93 * ms,
        {"decode_kv_tokens": 0.000627 * ms, "num_decode_seqs": 0.0385 * ms},
        name=f"{name}[decode<95]",
    )
    decode_large = LinearTiming(
        7.166 * ms,
        {"decode_kv_tokens": 0.000580 * ms, "num_decode_seqs": 0.1583 * ms},
        name=f"{name}[decode>=95]",
    )
    decode = ThresholdTiming(
        "num_decode_seqs", 95, decode_small, decode_large, name=f"{name}[decode]"
    )
    return PhaseSumTiming(prefill, decode, name=name)


def _opt_13b_a100_hyperflexis() -> TimingModel:
    """HyperFlexis Eqs. 1-2 (DistServe's forms) with DistServe's OPT-13B A100 coefficients:
    one decode line for every batch size (Eq. 2 is linear in batch and context)."""
    distserve = _opt_13b_a100_distserve()
    assert isinstance(distserve, PhaseSumTiming)
    assert isinstance(distserve.decode, ThresholdTiming)
    prefill = distserve.prefill
    below = distserve.decode.below
    assert isinstance(prefill, LinearTiming) and isinstance(below, LinearTiming)
    name = "opt-13b-a100-hyperflexis"
    return PhaseSumTiming(
        LinearTiming(prefill.intercept_s, prefill.coefficients, name=f"{name}[prefill]"),
        LinearTiming(below.intercept_s, below.coefficients, name=f"{name}[decode]"),
        name=name,
    )


def _opt_13b_h100_slos() -> TimingModel:
    return RooflineTiming.from_token_lines([(4.177e-5, 0.0, 0.02743)], name="opt-13b-h100-slos")


def _opt_6_7b_a100_slos() -> TimingModel:
    return RooflineTiming.from_token_lines(
        [(6.878e-5, 0.0, 0.02480), (7.523e-5, 0.0, 0.003033)], name="opt-6.7b-a100-slos"
    )


def _opt_30b_4gpu_slos() -> TimingModel:
    return RooflineTiming.from_token_lines(
        [(9.314e-5, 0.002797, 0.03788)], name="opt-30b-4gpu-slos"
    )


#: SA paper, Table 2, prefill row (ms): coefficients of ``s * l``, ``s``, ``l``, 1.
SA_PREFILL_MS = (0.1, 5.7, 0.01, 43.67)
#: SA paper, Table 2, decode row (ms): coefficients of ``s * L``, ``s``, ``L``, 1.
SA_DECODE_MS = (0.0002, 0.275, 0.00088, 15.85)


def _sa_qwen25_7b_v100() -> TimingModel:
    ms = 1e-3
    name = "sa-qwen2.5-7b-v100"
    p_sl, p_s, p_l, p_1 = (v * ms for v in SA_PREFILL_MS)
    d_sl, d_s, d_l, d_1 = (v * ms for v in SA_DECODE_MS)
    prefill = MeanLengthTiming(
        LinearTiming(
            p_1, {"prefill_tokens": p_sl, "num_prefill_seqs": p_s}, name=f"{name}[prefill]"
        ),
        prefill_length_coef_s=p_l,
        name=f"{name}[prefill]",
    )
    decode = MeanLengthTiming(
        LinearTiming(
            d_1, {"decode_kv_tokens": d_sl, "num_decode_seqs": d_s}, name=f"{name}[decode]"
        ),
        decode_context_coef_s=d_l,
        name=f"{name}[decode]",
    )
    return PhaseSumTiming(prefill, decode, name=name)


_SOURCES: dict[str, str] = {
    "llama2-7b-h100": (
        "Fitted: microsoft/vidur data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv "
        "(MIT; TP 1, 32 layers) as max(floor, a + b * tokens), plus decode KV reads at the "
        "H100 SXM's 3.35 TB/s and prefill attention at 35% of 989 TFLOP/s; see docs/timing.md"
    ),
    "llama3.1-8b-h200": (
        "Derived: PolyServe Sec. 5.1 (15 ms per token at batch 1, context 1; 100 ms saturates "
        "the engine) and Sec. 3.6 (decode batch ~50 at 20 ms TPOT, ~150 at 40 ms), GEMM slope "
        "scaled from the llama2-7b-h100 fit by FLOPs per token, KV reads at the H200's "
        "4.8 TB/s; see docs/timing.md"
    ),
    "opt-13b-a100-distserve": (
        "DistServe simulator fit for OPT-13B on A100-80G, TP 1 (prefill 18.10 + 0.1019 sum(l) "
        "+ 7.122e-6 sum(l^2) ms; decode 19.93 + 0.000627 sum(ctx) + 0.0385 batch ms below 95 "
        "sequences, 7.166 + 0.000580 sum(ctx) + 0.1583 batch ms from 95); mixed iterations "
        "pay both parts"
    ),
    "opt-13b-a100-hyperflexis": (
        "HyperFlexis Eqs. 1-2 (Sec. 3, after DistServe): prefill 18.10 + 0.1019 sum(l) + "
        "7.122e-6 sum(l^2) ms, decode step 19.93 + 0.000627 sum(ctx) + 0.0385 batch ms at "
        "every batch size; DistServe's OPT-13B A100-80G coefficients (HyperFlexis publishes "
        "none); mixed iterations pay both parts; see docs/hyperflexis.md"
    ),
    "opt-13b-h100-slos": "SLOs-Serve batch timer, OPT-13B on H100: 4.177e-5 s/token + 0.02743 s",
    "opt-6.7b-a100-slos": (
        "SLOs-Serve batch timer, OPT-6.7B on A100: max(6.878e-5 tokens + 0.02480, "
        "7.523e-5 tokens + 0.003033) s"
    ),
    "opt-30b-4gpu-slos": (
        "SLOs-Serve batch timer, OPT-30B on 4 GPUs: 9.314e-5 s/token + 0.002797 s/spec step "
        "+ 0.03788 s"
    ),
    "sa-qwen2.5-7b-v100": (
        "SA-ordering paper Sec. 4.2 Eqs. (14)-(15) and Table 2, Qwen2.5-7B on 2x V100 (ms): "
        "prefill 0.1 s*l + 5.7 s + 0.01 l + 43.67; per-token decode 0.0002 s*L + 0.275 s + "
        "0.00088 L + 15.85 (column order derived in docs/timing.md)"
    ),
}

_BUILDERS: dict[str, Callable[[], TimingModel]] = {
    "llama2-7b-h100": _llama2_7b_h100,
    "llama3.1-8b-h200": _llama31_8b_h200,
    "opt-13b-a100-distserve": _opt_13b_a100_distserve,
    "opt-13b-a100-hyperflexis": _opt_13b_a100_hyperflexis,
    "opt-13b-h100-slos": _opt_13b_h100_slos,
    "opt-6.7b-a100-slos": _opt_6_7b_a100_slos,
    "opt-30b-4gpu-slos": _opt_30b_4gpu_slos,
    "sa-qwen2.5-7b-v100": _sa_qwen25_7b_v100,
}


def register_preset(name: str, build: Callable[[], TimingModel], source: str) -> None:
    """Make ``build() -> TimingModel`` available as the timing preset ``name`` (``--timing
    NAME``); ``source`` says where its numbers come from."""
    if not name:
        raise ValueError("a timing preset needs a name")
    if not callable(build):
        raise TypeError(f"timing preset {name!r} must be callable, got {type(build).__name__}")
    existing = _BUILDERS.get(name)
    if existing is not None and existing is not build:
        raise ValueError(f"timing preset {name!r} is already registered")
    _BUILDERS[name] = build
    _SOURCES[name] = source


def _register_plugin_preset(name: str, build: Any) -> None:
    from slolab.plugin_loading import description_of

    register_preset(name, build, description_of(build, "a plugin preset"))


def available_presets() -> list[str]:
    """Names of the presets (the built-in ones and the plugins'), sorted."""
    from slolab.plugin_loading import load_plugins

    load_plugins("presets", _register_plugin_preset)
    _register_generated()
    return sorted(_BUILDERS)


def _register_generated() -> None:
    """Register the presets generated from the fitted Vidur table (once, on first listing)."""
    from slolab.timing.generated import generated_preset, generated_preset_names

    names = generated_preset_names()
    if len(_GENERATED) == len(names):
        return
    for name in names:
        if name not in _BUILDERS:
            info = generated_preset(name)
            _GENERATED[name] = info
            register_preset(name, info.timing_model, info.source())
    _register_calibrated()


def _register_calibrated() -> None:
    """Register ``MODEL/GPU/tpN/calibrated`` for every generated preset: its timing with the
    serving terms of :data:`slolab.timing.overheads.CALIBRATED_TERMS`."""
    import dataclasses
    import functools

    from slolab.timing.overheads import calibrated_preset_names, calibrated_timing

    for name in calibrated_preset_names():
        if name in _BUILDERS:
            continue
        base = _GENERATED[name.rsplit("/", 1)[0]]
        _GENERATED[name] = dataclasses.replace(base, name=name)
        build = functools.partial(calibrated_timing, base.model, base.gpu, base.tp)
        kernel = (
            "vLLM 0.11's per-token kernel factor (measured on H100)"
            if base.gpu == "h100"
            else "no kernel factor (measured on H100 only)"
        )
        register_preset(
            name,
            build,
            f"{base.source()}; plus vLLM 0.11's per-iteration and per-prefill serving terms "
            f"(inference-sim's H100 runs, Apache-2.0), {kernel}, and the all-reduce latency "
            "floor fitted on DistServe's A100 vLLM fits (Apache-2.0); see docs/timing.md",
        )


#: The generated presets registered so far, with their GPUs, price and KV capacity.
_GENERATED: dict[str, Any] = {}


def _known(name: str) -> None:
    from slolab.timing.generated import preset_refusal

    why = preset_refusal(name)
    if why is not None:
        raise ValueError(why)
    if name not in available_presets():
        raise ValueError(f"unknown timing preset {name!r}; known: {', '.join(available_presets())}")


def preset(name: str) -> TimingModel:
    """A named timing model (a fresh object on every call).

    Parameters
    ----------
    name : str
        One of :func:`available_presets`.

    Returns
    -------
    TimingModel
        The model; its ``name`` is the preset's name.

    Raises
    ------
    ValueError
        For an unknown name, listing the known ones.
    """
    _known(name)
    return _BUILDERS[name]()


def resolve_timing(timing: str | TimingModel) -> TimingModel:
    """A timing model from a preset name, or the model itself."""
    return preset(timing) if isinstance(timing, str) else timing


#: The model whose KV cache a preset's servers hold, where the preset names one with its shape.
_SHAPES: dict[str, TransformerShape] = {
    "llama2-7b-h100": LLAMA2_7B,
    "llama3.1-8b-h200": LLAMA31_8B,
}


def preset_kv_bytes_per_token(timing: str | TimingModel) -> int | None:
    """Bytes of KV cache per token of the model a preset is derived for (what a disaggregated
    cluster moves per token), or None when the preset (or a model given as an object) names no
    model shape."""
    name = timing if isinstance(timing, str) else getattr(timing, "name", "")
    available_presets()
    shape = _SHAPES.get(name) or getattr(_GENERATED.get(name), "shape", None)
    return shape.kv_bytes_per_token if shape is not None else None


#: KV-cache tokens per server where neither ``--kv-capacity`` nor the preset gives one (the
#: hand-written presets declare no memory).
DEFAULT_KV_CAPACITY_TOKENS = 200_000


def preset_kv_capacity(timing: str | TimingModel) -> int | None:
    """KV-cache tokens per server a preset declares (a generated preset ``MODEL/GPU/tpN``: what
    its GPUs' memory leaves after the weights), or None when it declares none."""
    name = timing if isinstance(timing, str) else getattr(timing, "name", "")
    available_presets()
    info = _GENERATED.get(name)
    return None if info is None else int(info.kv_capacity_tokens)


def kv_capacity_of(timing: str | TimingModel, given: int | None = None) -> tuple[int, str]:
    """The KV-cache tokens per server a run uses and where they come from: ``given`` (the
    ``--kv-capacity`` flag), else the preset's (:func:`preset_kv_capacity`), else
    :data:`DEFAULT_KV_CAPACITY_TOKENS`; the source is ``"--kv-capacity"``, ``"preset NAME"``
    or ``"default"``."""
    if given is not None:
        return int(given), "--kv-capacity"
    own = preset_kv_capacity(timing)
    if own is not None:
        name = timing if isinstance(timing, str) else getattr(timing, "name", "")
        return own, f"preset {name}"
    return DEFAULT_KV_CAPACITY_TOKENS, "default"


def preset_source(name: str) -> str:
    """Where a preset's numbers come from (paper and section, or data file and method)."""
    _known(name)
    return _SOURCES[name]


def preset_table() -> list[dict[str, Any]]:
    """One record per preset: name, form, source, time of a decode step at batch 1, and for a
    generated preset its GPU, TP degree, GPUs per server, price ($/h), KV capacity (tokens)
    and the median and largest relative error of its fit against the profile (None for the
    other presets), and the median |relative error| of its iteration times against real
    serving measurements (``real_median_abs_rel_error``; None where no source covers it)."""
    from slolab.timing.overheads import real_hardware_error

    records = []
    for name in available_presets():
        model = preset(name)
        info = _GENERATED.get(name)
        real = real_hardware_error(name)
        records.append(
            {
                "name": name,
                "form": model.form,
                "decode_step_s_batch1": float(
                    model.time_of(decode_tokens=1, num_decode_seqs=1, decode_kv_tokens=1)
                ),
                "model": None if info is None else info.model,
                "gpu": None if info is None else info.gpu,
                "tp": None if info is None else info.tp,
                "gpus_per_server": None if info is None else info.gpus_per_server,
                "price_usd_per_hour": None if info is None else info.price_usd_per_hour,
                "kv_capacity_tokens": None if info is None else info.kv_capacity_tokens,
                "fit_median_rel_error": None if info is None else info.iteration_median_rel_error,
                "fit_max_rel_error": None if info is None else info.iteration_max_rel_error,
                "real_median_abs_rel_error": None if real is None else real["median_abs_rel_error"],
                "source": _SOURCES[name],
            }
        )
    return records
