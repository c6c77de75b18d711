"""Serving overheads the kernel profiles miss, as named terms of the timing model, fitted to
real serving measurements.

A generated preset prices the GPU kernels of an iteration (Vidur's per-layer profiles, the
all-reduces, attention from the model shape). A serving engine adds, per iteration (docs/timing.md,
"Serving overheads"):

``iteration_s``
    CPU-side time of every iteration: scheduling, preparing the inputs, sampling and returning
    tokens, the launches a CUDA graph does not hide.
``prefill_seq_s``
    per prefill chunk in the batch (its metadata, its attention launch).
``decode_seq_s``
    per decoding sequence (its sampling and bookkeeping).
``allreduce_latency_s``
    per all-reduce and per ``log2(tp)`` at ``tp > 1``: the latency floor of tensor-parallel
    communication beyond the profiled one (two all-reduces per layer; decode's are latency
    bound), ``2 * layers * log2(tp) * allreduce_latency_s`` per iteration.
``kernel_time_scale``
    a factor on the profile-built time: the engine's kernels against the profiler's.
``token_time_scale``
    a factor on the per-token part of every line only (the work that grows with the batch:
    token-parallel compute, attention, KV reads), not on the intercepts (the weight reads and
    the profiled floors): faster or slower compute kernels at the same memory traffic.

So ``T_served(x) = kernel_time_scale * T_preset'(x) + iteration_s + prefill_seq_s *
num_prefill_seqs + decode_seq_s * num_decode_seqs + 2 * layers * log2(tp) *
allreduce_latency_s``, where ``T_preset'`` is the preset with every line's per-token
coefficients multiplied by ``token_time_scale``: the same four-line roofline with every line
rescaled and shifted, so the engine pays nothing more per iteration. The terms are fitted per
serving engine (one :class:`ServingOverheads` per calibration of
``data/measured/overheads.json``, written by ``python -m slolab.timing.overheads``); a term the
data cannot pin down is fixed at its neutral value and the file says why.

The named generated presets are unchanged. ``MODEL/GPU/tpN/calibrated`` exists for every
generated preset and applies the terms of :data:`CALIBRATED_TERMS`, each from the calibration
whose data supports it and on the GPUs it was measured on where it is a kernel-speed term
(:func:`calibrated_overheads`; docs/timing.md says which terms are extrapolated).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from slolab.timing.base import FEATURES, LinearTiming
from slolab.timing.forms import RooflineTiming
from slolab.timing.generated import (
    CALIBRATED_SUFFIX,
    generated_preset,
    model_shape,
    roofline_from_fits,
    vidur_fits_table,
)
from slolab.timing.measured import MEASURED_DIR, IterationSample, iteration_samples
from slolab.timing.shapes import TransformerShape

__all__ = [
    "CALIBRATED_SUFFIX",
    "CALIBRATED_TERMS",
    "OVERHEAD_TERMS",
    "SCALE_TERMS",
    "ServingOverheads",
    "apply_overheads",
    "base_refusal",
    "base_timing",
    "calibrated_overheads",
    "calibrated_preset_names",
    "calibrated_timing",
    "calibration",
    "calibrations",
    "fit_overheads",
    "main",
    "opt_shape",
    "preset_errors",
    "real_hardware_error",
]

logger = logging.getLogger("slolab")

OVERHEADS_JSON = MEASURED_DIR / "overheads.json"
#: The calibration whose runs give the ``/calibrated`` presets their engine terms (and their
#: real-hardware error).
DEFAULT_CALIBRATION = "vllm-0.11"
#: The additive terms, in the order of the fit's columns.
OVERHEAD_TERMS: tuple[str, ...] = (
    "iteration_s",
    "prefill_seq_s",
    "decode_seq_s",
    "allreduce_latency_s",
)
#: The factors, fitted or fixed at 1.
SCALE_TERMS: tuple[str, ...] = ("kernel_time_scale", "token_time_scale")
#: ``token_time_scale`` is fitted on a grid (the roofline's maximum is not linear in it): a
#: coarse pass of 0.05, then 0.01 around the best point, within these bounds.
TOKEN_SCALE_BOUNDS = (0.5, 1.5)
_PREFILL_SEQS = FEATURES.index("num_prefill_seqs")
_DECODE_SEQS = FEATURES.index("num_decode_seqs")
#: OPT shapes (Hugging Face ``config.json`` of facebook/opt-13b and facebook/opt-66b):
#: layers, width, heads, MLP width (ReLU, not gated).
OPT_CONFIGS: dict[str, tuple[int, int, int, int]] = {
    "opt-13b": (40, 5120, 40, 20480),
    "opt-66b": (64, 9216, 72, 36864),
}


@dataclass(frozen=True, slots=True)
class ServingOverheads:
    """The serving terms of one engine (see the module docstring), seconds.

    Attributes
    ----------
    engine : str
        Calibration name (``vllm-0.11``).
    iteration_s, prefill_seq_s, decode_seq_s, allreduce_latency_s : float
        The additive terms, each >= 0.
    kernel_time_scale : float
        Factor on the profile-built time, > 0.
    token_time_scale : float
        Factor on the per-token coefficients of every line (not on the intercepts), > 0.
    fitted_on : tuple of str
        Sources the terms were fitted on.
    notes : dict
        Per term fixed at its neutral value, why.
    """

    engine: str
    iteration_s: float = 0.0
    prefill_seq_s: float = 0.0
    decode_seq_s: float = 0.0
    allreduce_latency_s: float = 0.0
    kernel_time_scale: float = 1.0
    token_time_scale: float = 1.0
    fitted_on: tuple[str, ...] = ()
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in OVERHEAD_TERMS:
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"{name} must be a finite number >= 0, got {value} ({self.engine})"
                )
        for name in SCALE_TERMS:
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value} ({self.engine})")

    def intercept_s(self, num_layers: int, tp: int) -> float:
        """The per-iteration part: ``iteration_s + 2 * layers * log2(tp) * allreduce_latency_s``."""
        return self.iteration_s + 2 * num_layers * math.log2(tp) * self.allreduce_latency_s

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        record = asdict(self)
        record["fitted_on"] = list(self.fitted_on)
        return record


def apply_overheads(
    model: RooflineTiming, overheads: ServingOverheads, num_layers: int, tp: int, name: str
) -> RooflineTiming:
    """``model`` with the serving terms: every line scaled by ``kernel_time_scale`` (its
    per-token coefficients also by ``token_time_scale``), its intercept raised by
    :meth:`ServingOverheads.intercept_s` and the per-sequence terms added."""
    lines = []
    for k, line in enumerate(model.lines):
        scale = overheads.kernel_time_scale
        per_token = scale * overheads.token_time_scale
        coefficients = {f: per_token * v for f, v in line.coefficients.items()}
        for feature, value in (
            ("num_prefill_seqs", overheads.prefill_seq_s),
            ("num_decode_seqs", overheads.decode_seq_s),
        ):
            if value:
                coefficients[feature] = coefficients.get(feature, 0.0) + value
        intercept = scale * line.intercept_s + overheads.intercept_s(num_layers, tp)
        lines.append(LinearTiming(intercept, coefficients, name=f"{name}[{k}]"))
    return RooflineTiming(lines, name=name)


def opt_shape(model: str) -> TransformerShape:
    """The shape of an OPT model of :data:`OPT_CONFIGS` (layer parameters ``4 h^2 + 2 h m``)."""
    layers, hidden, heads, mlp = OPT_CONFIGS[model]
    return TransformerShape(
        model,
        layers,
        hidden,
        heads,
        hidden // heads,
        float(layers * (4 * hidden**2 + 2 * hidden * mlp)),
    )


def _proxy_timing(model: str, gpu: str, tp: int) -> RooflineTiming:
    """A model without a Vidur profile, priced from the profiled model on the same GPU and TP
    whose layers are closest in parameters: its fitted floor, intercept and slope scaled by the
    layer count, and the floor and slope also by parameters per layer; all-reduces and
    attention from the model's own shape (:func:`~slolab.timing.generated.roofline_from_fits`)."""
    shape = opt_shape(model)
    per_layer = shape.non_embedding_params / shape.num_layers
    table = vidur_fits_table()
    candidates = []
    for key, per_tp in table["token_parallel"].items():
        reference, profiled_gpu = key.split("/")
        if profiled_gpu == gpu and str(tp) in per_tp:
            ref = model_shape(reference, table)
            ref_per_layer = ref.non_embedding_params / ref.num_layers
            candidates.append(
                (abs(math.log(per_layer / ref_per_layer)), reference, ref, ref_per_layer)
            )
    if not candidates:
        raise ValueError(f"{model}/{gpu}/tp{tp}: no profiled model on {gpu} at TP {tp}")
    _, reference, ref, ref_per_layer = min(candidates)
    fits = table["token_parallel"][f"{reference}/{gpu}"][str(tp)]
    layers = shape.num_layers / ref.num_layers
    params = per_layer / ref_per_layer
    scaled = {
        "floor_s": fits["floor_s"] * layers * params,
        "intercept_s": fits["intercept_s"] * layers,
        "slope_s": fits["slope_s"] * layers * params,
    }
    return roofline_from_fits(f"{model}/{gpu}/tp{tp}~{reference}", shape, gpu, tp, scaled)


@functools.cache
def base_timing(model: str, gpu: str, tp: int) -> tuple[RooflineTiming, int]:
    """The uncalibrated timing of ``model`` on ``tp`` GPUs ``gpu`` and its layer count: the
    generated preset, or for OPT the shape-scaled proxy of :func:`_proxy_timing`."""
    if model in OPT_CONFIGS:
        return _proxy_timing(model, gpu, tp), OPT_CONFIGS[model][0]
    info = generated_preset(f"{model}/{gpu}/tp{tp}")
    return info.timing_model(), info.shape.num_layers


@functools.cache
def _token_scaled(model: str, gpu: str, tp: int, token_time_scale: float) -> RooflineTiming:
    """:func:`base_timing` with every line's per-token coefficients times ``token_time_scale``."""
    base, _ = base_timing(model, gpu, tp)
    if token_time_scale == 1.0:
        return base
    return RooflineTiming(
        [
            LinearTiming(
                line.intercept_s,
                {f: token_time_scale * v for f, v in line.coefficients.items()},
                name=line.name,
            )
            for line in base.lines
        ],
        name=base.name,
    )


def _regressors(sample: IterationSample, token_time_scale: float = 1.0) -> tuple[float, np.ndarray]:
    """The base time of a sample's iterations (per-token coefficients times
    ``token_time_scale``) and the sums of the terms' features."""
    _, layers = base_timing(sample.model, sample.gpu, sample.tp)
    model = _token_scaled(sample.model, sample.gpu, sample.tp, token_time_scale)
    base = float(model.times(sample.features).sum())
    k = sample.iterations
    features = np.array(
        [
            k,
            sample.features[:, _PREFILL_SEQS].sum(),
            sample.features[:, _DECODE_SEQS].sum(),
            k * 2 * layers * math.log2(sample.tp),
        ]
    )
    return base, features


def predict(samples: Sequence[IterationSample], overheads: ServingOverheads | None) -> np.ndarray:
    """Predicted mean iteration time of each sample, with the terms (or without, for None)."""
    out = np.empty(len(samples))
    token = 1.0 if overheads is None else overheads.token_time_scale
    for i, sample in enumerate(samples):
        base, features = _regressors(sample, token)
        if overheads is None:
            out[i] = base / sample.iterations
            continue
        terms = np.array([getattr(overheads, name) for name in OVERHEAD_TERMS])
        out[i] = (overheads.kernel_time_scale * base + features @ terms) / sample.iterations
    return out


def measured(samples: Sequence[IterationSample]) -> np.ndarray:
    """Measured mean iteration time of each sample."""
    return np.array([s.measured_s / s.iterations for s in samples])


def fit_overheads(
    samples: Sequence[IterationSample],
    engine: str,
    terms: Sequence[str],
    notes: dict[str, str] | None = None,
    scales: Sequence[str] = ("kernel_time_scale",),
) -> ServingOverheads:
    """Fit the factors named in ``scales`` (of :data:`SCALE_TERMS`; the other one stays 1) and
    the named additive ``terms`` (the others stay 0) by least squares on the relative error of
    every sample's time: terms >= 0, ``kernel_time_scale`` in [0.5, 2] (``scipy.optimize.
    lsq_linear``), ``token_time_scale`` on a grid within :data:`TOKEN_SCALE_BOUNDS` (coarse
    0.05, then 0.01), each grid point solved for the rest."""
    from scipy.optimize import lsq_linear

    unknown = (set(terms) - set(OVERHEAD_TERMS)) | (set(scales) - set(SCALE_TERMS))
    if unknown:
        known = ", ".join((*OVERHEAD_TERMS, *SCALE_TERMS))
        raise ValueError(f"unknown terms {sorted(unknown)}; known: {known}")
    columns = [OVERHEAD_TERMS.index(t) for t in terms]
    fit_kernel = "kernel_time_scale" in scales

    def solve(token: float) -> tuple[float, np.ndarray]:
        rows, target = [], []
        for sample in samples:
            base, features = _regressors(sample, token)
            weight = 1.0 / sample.measured_s
            if fit_kernel:
                rows.append(np.concatenate([[base], features[columns]]) * weight)
                target.append(1.0)
            else:
                rows.append(features[columns] * weight)
                target.append(1.0 - base * weight)
        lower = [0.5] * fit_kernel + [0.0] * len(columns)
        upper = [2.0] * fit_kernel + [np.inf] * len(columns)
        result = lsq_linear(np.array(rows), np.array(target), bounds=(lower, upper))
        return float(result.cost), result.x

    token = 1.0
    if "token_time_scale" in scales:
        low, high = TOKEN_SCALE_BOUNDS
        coarse = np.round(np.arange(low, high + 1e-9, 0.05), 2)
        best = min(coarse, key=lambda t: solve(float(t))[0])
        fine = np.round(np.arange(best - 0.04, best + 0.04 + 1e-9, 0.01), 2)
        fine = fine[(fine >= low) & (fine <= high)]
        token = float(min(fine, key=lambda t: solve(float(t))[0]))
    _, solution = solve(token)
    kernel = float(solution[0]) if fit_kernel else 1.0
    values = dict(zip(terms, (float(v) for v in solution[int(fit_kernel) :]), strict=True))
    return ServingOverheads(
        engine,
        kernel_time_scale=kernel,
        token_time_scale=token,
        fitted_on=tuple(sorted({s.source for s in samples})),
        notes=dict(notes or {}),
        **values,
    )


#: Per calibration: which samples (by source), which terms are fitted, and why the others are
#: fixed. The reasons are findings about the data, checked by the fit's own collinearity.
CALIBRATIONS: dict[str, dict[str, Any]] = {
    "vllm-0.11": {
        "sources": ("inference-sim",),
        "terms": ("iteration_s", "prefill_seq_s"),
        "scales": ("token_time_scale",),
        "notes": {
            "decode_seq_s": "not supported: every isolated decode step runs at batch 1, where a "
            "per-sequence term cannot be told from the per-iteration one",
            "allreduce_latency_s": "not supported: every vLLM 0.11 run is at TP 1",
            "kernel_time_scale": "fixed at 1: on one GPU a factor on the whole time trades off "
            "against iteration_s (fitted on CodeLlama-34B alone it was 0.87 with 3.65 ms per "
            "iteration, and Llama-2-7B decode came out 35% slow held out); token_time_scale "
            "leaves the weight-read floor alone",
        },
    },
    "vllm-distserve": {
        "sources": ("distserve",),
        "terms": OVERHEAD_TERMS,
        "scales": ("kernel_time_scale",),
        "notes": {
            "token_time_scale": "fixed at 1: on the older engine's fits it runs to the bound of "
            "its grid with no gain held out",
        },
    },
}


def calibration_samples(
    name: str, samples: Sequence[IterationSample] | None = None
) -> list[IterationSample]:
    """The samples calibration ``name`` is fitted on."""
    sources = CALIBRATIONS[name]["sources"]
    pool = iteration_samples() if samples is None else samples
    return [s for s in pool if _family(s) in sources and base_refusal(s.model, s.gpu, s.tp) is None]


def base_refusal(model: str, gpu: str, tp: int) -> str | None:
    """Why :func:`base_timing` cannot price ``model`` on ``tp`` GPUs ``gpu`` (None if it can)."""
    try:
        base_timing(model, gpu, tp)
    except ValueError as error:
        return str(error)
    return None


def _family(sample: IterationSample) -> str:
    """``distserve`` or ``inference-sim`` (every run of the latter has its own source name)."""
    return "distserve" if sample.source == "distserve" else "inference-sim"


def fit_calibration(
    name: str, samples: Sequence[IterationSample] | None = None
) -> ServingOverheads:
    """Fit calibration ``name`` (of :data:`CALIBRATIONS`) on its samples (or on ``samples``)."""
    spec = CALIBRATIONS[name]
    chosen = calibration_samples(name) if samples is None else list(samples)
    return fit_overheads(chosen, name, spec["terms"], spec["notes"], spec["scales"])


@functools.cache
def _stored(path: Path = OVERHEADS_JSON) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def calibrations_from(records: dict[str, dict[str, Any]]) -> dict[str, ServingOverheads]:
    """:class:`ServingOverheads` from their JSON records, by name."""
    out = {}
    for name, record in records.items():
        fields = dict(record)
        fields["fitted_on"] = tuple(fields["fitted_on"])
        out[name] = ServingOverheads(**fields)
    return out


def calibrations() -> dict[str, ServingOverheads]:
    """The fitted calibrations of ``data/measured/overheads.json``, by name."""
    return calibrations_from(_stored()["calibrations"])


def preset_errors(fitted: dict[str, ServingOverheads]) -> dict[str, dict[str, Any]]:
    """Per generated preset a vLLM 0.11 run covers, and its calibrated variant: the median
    |relative error| of its iteration times (prefill and decode samples pooled) and the count;
    for the calibrated variant the vLLM 0.11 terms are fitted without that preset's runs (held
    out), and the in-sample error is given beside it."""
    samples = calibration_samples(DEFAULT_CALIBRATION)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted({(s.model, s.gpu, s.tp) for s in samples}):
        chosen = [s for s in samples if (s.model, s.gpu, s.tp) == key]
        name = f"{key[0]}/{key[1]}/tp{key[2]}"
        truth = measured(chosen)
        rest = [s for s in samples if (s.model, s.gpu, s.tp) != key]
        held = fit_calibration(DEFAULT_CALIBRATION, rest)
        rows = (
            (name, None, None),
            (
                name + CALIBRATED_SUFFIX,
                calibrated_overheads(key[1], {**fitted, DEFAULT_CALIBRATION: held}),
                calibrated_overheads(key[1], fitted),
            ),
        )
        for preset_name, terms, in_sample in rows:
            error = np.abs(predict(chosen, terms) / truth - 1)
            record: dict[str, Any] = {
                "median_abs_rel_error": float(np.median(error)),
                "samples": len(chosen),
            }
            if in_sample is not None:
                inside = np.abs(predict(chosen, in_sample) / truth - 1)
                record["in_sample_median_abs_rel_error"] = float(np.median(inside))
            record["sources"] = sorted({s.source for s in chosen})
            out[preset_name] = record
    return out


def real_hardware_error(name: str) -> dict[str, Any] | None:
    """The measured error of preset ``name`` against real serving (None: not measured)."""
    errors: dict[str, dict[str, Any]] = _stored().get("real_hardware_error", {})
    return errors.get(name)


def calibration(name: str = DEFAULT_CALIBRATION) -> ServingOverheads:
    """One stored calibration; unknown names raise and list the known ones."""
    known = calibrations()
    if name not in known:
        raise ValueError(f"unknown calibration {name!r}; known: {', '.join(sorted(known))}")
    return known[name]


#: What the ``/calibrated`` presets apply, term by term: the calibration the term comes from and
#: the GPUs it applies to (None: every GPU). The CPU-side terms of the serving engine
#: (``iteration_s``, ``prefill_seq_s``) are the engine's, not the GPU's: vLLM 0.11's, measured on
#: an H100 at TP 1, applied to every GPU and TP. ``token_time_scale`` is a statement about kernel
#: speed on the GPU it was measured on: H100 only. ``allreduce_latency_s`` comes from the only
#: measurements at several TP degrees, DistServe's older vLLM on A100-80GB, applied at every
#: TP > 1 on every GPU. The other terms stay neutral (``decode_seq_s`` 0, ``kernel_time_scale``
#: 1): they belong to the older engine (docs/timing.md, "The calibrated presets").
CALIBRATED_TERMS: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "iteration_s": (DEFAULT_CALIBRATION, None),
    "prefill_seq_s": (DEFAULT_CALIBRATION, None),
    "token_time_scale": (DEFAULT_CALIBRATION, ("h100",)),
    "allreduce_latency_s": ("vllm-distserve", None),
}


def calibrated_overheads(
    gpu: str, fitted: dict[str, ServingOverheads] | None = None
) -> ServingOverheads:
    """The terms a ``/calibrated`` preset on ``gpu`` applies (:data:`CALIBRATED_TERMS`), taken
    from ``fitted`` (default: the stored calibrations)."""
    known = calibrations() if fitted is None else fitted
    applied = ServingOverheads(f"calibrated/{gpu}")
    sources: set[str] = set()
    for term, (name, gpus) in CALIBRATED_TERMS.items():
        if gpus is None or gpu in gpus:
            applied = dataclasses.replace(applied, **{term: getattr(known[name], term)})
            sources.update(known[name].fitted_on)
    return dataclasses.replace(applied, fitted_on=tuple(sorted(sources)))


def calibrated_timing(model: str, gpu: str, tp: int) -> RooflineTiming:
    """The timing of ``model`` on ``tp`` GPUs ``gpu`` with :func:`calibrated_overheads`."""
    base, layers = base_timing(model, gpu, tp)
    return apply_overheads(
        base, calibrated_overheads(gpu), layers, tp, f"{model}/{gpu}/tp{tp}{CALIBRATED_SUFFIX}"
    )


def calibrated_preset_names() -> list[str]:
    """``MODEL/GPU/tpN/calibrated`` for every generated preset, sorted."""
    from slolab.timing.generated import generated_preset_names

    return [name + CALIBRATED_SUFFIX for name in generated_preset_names()]


def main(argv: Sequence[str] | None = None) -> None:
    """Fit every calibration on the vendored measurements and write ``overheads.json``."""
    parser = argparse.ArgumentParser(description="Fit the serving-overhead terms")
    parser.add_argument("--out", type=Path, default=OVERHEADS_JSON)
    args = parser.parse_args(argv)
    fitted = {}
    for name in CALIBRATIONS:
        overheads = fit_calibration(name)
        fitted[name] = overheads.to_record()
        chosen = calibration_samples(name)
        error = predict(chosen, overheads) / measured(chosen) - 1
        logger.info(
            "%s: %s; median |error| %.1f%% over %d samples",
            name,
            ", ".join(f"{k}={getattr(overheads, k):.4g}" for k in (*SCALE_TERMS, *OVERHEAD_TERMS)),
            100 * float(np.median(np.abs(error))),
            len(chosen),
        )
    document = {
        "units": "seconds (kernel_time_scale, token_time_scale: factors)",
        "command": "python -m slolab.timing.overheads",
        "calibrations": fitted,
        "real_hardware_error": preset_errors(calibrations_from(fitted)),
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    _stored.cache_clear()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
