"""Timing presets generated from the fitted Vidur table, one per (model, GPU, TP degree).

A preset ``MODEL/GPU/tpN`` (for example ``llama2-70b/h100/tp4``) is a server of N GPUs of one
type running one model with tensor parallelism N. Its iteration time is

- the token-parallel time (projections, MLP, norms) fitted to the profile at that TP,
  ``max(floor, a + b * tokens)``;
- plus, for N > 1, two all-reduces per layer of ``tokens * embedding_dim * 2`` bytes, each
  ``max(floor, a + b * bytes)`` fitted to the DGX node's all-reduce profile at N workers;
- plus the attention terms of :func:`~slolab.timing.presets.attention_terms` from the model
  shape and the GPU's peak rates, divided by N (each GPU holds ``1/N`` of the heads).

The sum of two maxima of lines is the maximum of the four sums, so the model is a
:class:`~slolab.timing.forms.RooflineTiming` of four lines (two at TP 1). The KV capacity is
what is left of the server's memory, less :data:`MEMORY_RESERVE_FRACTION` for activations and
the runtime, after the FP16 weights; the price is N times the GPU's hourly price. The table is
``data/vidur_fits.json``, written by :mod:`slolab.timing.vendor_vidur`.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slolab.timing.base import LinearTiming
from slolab.timing.forms import RooflineTiming
from slolab.timing.shapes import Accelerator, TransformerShape, attention_terms, with_terms

__all__ = [
    "MEMORY_RESERVE_FRACTION",
    "TENSOR_PARALLEL_DEGREES",
    "GeneratedPreset",
    "fit_error_table",
    "generated_preset",
    "generated_preset_names",
    "model_shape",
    "preset_refusal",
    "roofline_from_fits",
    "refused_presets",
    "vidur_fits_table",
    "weight_bytes",
]

VIDUR_FITS_JSON = Path(__file__).resolve().parent / "data" / "vidur_fits.json"
#: Fraction of each GPU's memory kept for activations, the runtime and fragmentation (vLLM's
#: default ``gpu_memory_utilization`` of 0.9; Vidur's memory margin is the same 10 %).
MEMORY_RESERVE_FRACTION = 0.10
#: Tensor-parallel degrees the profiles cover.
TENSOR_PARALLEL_DEGREES: tuple[int, ...] = (1, 2, 4, 8)
#: Bytes per weight (FP16/BF16).
WEIGHT_BYTES = 2
#: Bytes in the table's ``memory_gb`` (Vidur's figures are GiB: 80 for an 80 GB A100/H100).
BYTES_PER_GB = 2**30
#: Node whose all-reduce profile a server of N GPUs pays (N GPUs of one NVSwitch node).
NODE_KIND = "dgx"
#: Suffix of a generated preset with the serving terms of :mod:`slolab.timing.overheads`.
CALIBRATED_SUFFIX = "/calibrated"
_NAME = re.compile(r"^(?P<model>[^/]+)/(?P<gpu>[^/]+)/tp(?P<tp>\d+)(?:/calibrated)?$")


@functools.cache
def vidur_fits_table(path: Path = VIDUR_FITS_JSON) -> dict[str, Any]:
    """The vendored Vidur fits (models, GPUs, token-parallel profiles), read once."""
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def model_shape(model: str, table: dict[str, Any] | None = None) -> TransformerShape:
    """The :class:`~slolab.timing.presets.TransformerShape` of a model of the table.

    Layer parameters: ``layers * (2 h^2 + 2 h kv_heads head_dim + m h mlp)`` with ``m = 3``
    for a gated MLP and 2 otherwise (biases and norm weights left out).
    """
    spec = (table or vidur_fits_table())["models"][model]
    hidden = spec["embedding_dim"]
    head_dim = hidden // spec["num_q_heads"]
    kv_width = spec["num_kv_heads"] * head_dim
    mlp_matrices = 3 if spec["use_gated_mlp"] else 2
    per_layer = (
        2 * hidden**2 + 2 * hidden * kv_width + mlp_matrices * hidden * spec["mlp_hidden_dim"]
    )
    return TransformerShape(
        model,
        spec["num_layers"],
        hidden,
        spec["num_kv_heads"],
        head_dim,
        float(spec["num_layers"] * per_layer),
    )


def weight_bytes(model: str, table: dict[str, Any] | None = None) -> float:
    """FP16 bytes of a model's weights: layer parameters plus input and output embeddings
    (``2 * vocab * hidden``, untied)."""
    spec = (table or vidur_fits_table())["models"][model]
    shape = model_shape(model, table)
    embeddings = 2 * spec["vocab_size"] * spec["embedding_dim"]
    return WEIGHT_BYTES * (shape.non_embedding_params + embeddings)


@dataclass(frozen=True, slots=True)
class GeneratedPreset:
    """A server of ``tp`` GPUs running one model, with its timing and its cost.

    Attributes
    ----------
    name : str
        ``MODEL/GPU/tpN``.
    model : str
        Model slug (``llama2-70b``).
    gpu : str
        GPU type (``h100``).
    tp : int
        Tensor-parallel degree.
    gpus_per_server : int
        GPUs one server (one model replica) takes: ``tp``.
    price_usd_per_hour : float
        Server price: ``tp`` times the GPU's on-demand price ($/h, dated in the table).
    kv_capacity_tokens : int
        Tokens of KV cache the server holds.
    weight_bytes : float
        FP16 bytes of the model's weights (over all ``tp`` GPUs).
    shape : TransformerShape
        The model's dimensions.
    iteration_median_rel_error, iteration_max_rel_error : float
        Errors of the fitted token-parallel plus all-reduce time against the profiled times
        over the profile's rows (attention is not in the profile).
    """

    name: str
    model: str
    gpu: str
    tp: int
    gpus_per_server: int
    price_usd_per_hour: float
    kv_capacity_tokens: int
    weight_bytes: float
    shape: TransformerShape
    iteration_median_rel_error: float
    iteration_max_rel_error: float

    def __post_init__(self) -> None:
        if self.tp not in TENSOR_PARALLEL_DEGREES:
            raise ValueError(f"tp must be one of {TENSOR_PARALLEL_DEGREES}, got {self.tp}")
        if self.gpus_per_server != self.tp:
            raise ValueError(f"gpus_per_server must equal tp {self.tp}, got {self.gpus_per_server}")
        if not self.price_usd_per_hour > 0:
            raise ValueError(f"price_usd_per_hour must be > 0, got {self.price_usd_per_hour}")
        if self.kv_capacity_tokens < 1:
            raise ValueError(f"kv_capacity_tokens must be >= 1, got {self.kv_capacity_tokens}")

    def timing_model(self) -> RooflineTiming:
        """The iteration-time model (see the module docstring)."""
        fits = vidur_fits_table()["token_parallel"][f"{self.model}/{self.gpu}"][str(self.tp)]
        return roofline_from_fits(self.name, self.shape, self.gpu, self.tp, fits)

    def source(self) -> str:
        """Where the preset's numbers come from, in one line."""
        spec = vidur_fits_table()["gpus"][self.gpu]
        return (
            f"Generated: Vidur {self.model} on {self.gpu} at TP {self.tp} (MIT), token-parallel "
            f"fit{' + 2 fitted all-reduces per layer' if self.tp > 1 else ''} + attention from "
            f"the shape / {self.tp}; {self.kv_capacity_tokens} KV tokens, "
            f"${self.price_usd_per_hour:.2f}/h ({spec['price_date']}); see docs/timing.md"
        )


def roofline_from_fits(
    name: str, shape: TransformerShape, gpu: str, tp: int, fits: dict[str, float]
) -> RooflineTiming:
    """The four-line roofline of the module docstring for a model ``shape`` on ``tp`` GPUs
    of type ``gpu``, from its token-parallel fit ``fits`` (``floor_s``, ``intercept_s``,
    ``slope_s``) and the table's all-reduce fit and GPU peak rates."""
    table = vidur_fits_table()
    parts = [_token_lines(fits["floor_s"], fits["intercept_s"], fits["slope_s"])]
    if tp > 1:
        reduce = table["all_reduce"][f"{gpu}_{NODE_KIND}"][str(tp)]
        per_iteration = 2 * shape.num_layers
        bytes_per_token = shape.hidden_size * 2
        parts.append(
            _token_lines(
                per_iteration * reduce["floor_s"],
                per_iteration * reduce["intercept_s"],
                per_iteration * reduce["slope_s"] * bytes_per_token,
            )
        )
    spec = table["gpus"][gpu]
    accelerator = Accelerator(gpu, spec["hbm_tb_per_s"] * 1e12, spec["fp16_dense_tflops"] * 1e12)
    terms = {k: v / tp for k, v in attention_terms(shape, accelerator).items()}
    lines = [_sum_lines(combo) for combo in _combinations(parts)]
    return RooflineTiming(
        [with_terms(line, terms, f"{name}[{k}]") for k, line in enumerate(lines)], name=name
    )


def _token_lines(floor_s: float, intercept_s: float, slope_s: float) -> list[LinearTiming]:
    per_token = {"prefill_tokens": slope_s, "decode_tokens": slope_s}
    return [LinearTiming(floor_s, {}), LinearTiming(intercept_s, per_token)]


def _combinations(parts: list[list[LinearTiming]]) -> list[list[LinearTiming]]:
    combos: list[list[LinearTiming]] = [[]]
    for lines in parts:
        combos = [[*combo, line] for combo in combos for line in lines]
    return combos


def _sum_lines(lines: list[LinearTiming]) -> LinearTiming:
    coefficients: dict[str, float] = {}
    for line in lines:
        for feature, value in line.coefficients.items():
            coefficients[feature] = coefficients.get(feature, 0.0) + value
    return LinearTiming(sum(line.intercept_s for line in lines), coefficients)


def preset_refusal(name: str) -> str | None:
    """Why the table cannot support ``MODEL/GPU/tpN`` (one line naming it), or None when it
    can. Names that do not read as ``MODEL/GPU/tpN`` of a known model and GPU are not
    generated presets: None as well."""
    match = _NAME.match(name)
    table = vidur_fits_table()
    if match is None or match["model"] not in table["models"] or match["gpu"] not in table["gpus"]:
        return None
    model, gpu, tp = match["model"], match["gpu"], int(match["tp"])
    profiled = table["token_parallel"].get(f"{model}/{gpu}")
    if profiled is None:
        gpus = sorted(k.split("/")[1] for k in table["token_parallel"] if k.startswith(f"{model}/"))
        return f"{name}: no profile of {model} on {gpu} (profiled on {', '.join(gpus)})"
    if str(tp) not in profiled:
        return f"{name}: {model} on {gpu} is profiled at TP {', '.join(sorted(profiled))} only"
    spec = table["models"][model]
    for heads in ("num_q_heads", "num_kv_heads"):
        if spec[heads] % tp:
            return f"{name}: TP {tp} does not divide the {spec[heads]} {heads[4:]} of {model}"
    if tp > 1 and str(tp) not in table["all_reduce"].get(f"{gpu}_{NODE_KIND}", {}):
        return f"{name}: no all-reduce profile of {tp} {gpu} GPUs in one node"
    per_gpu = weight_bytes(model, table) / tp
    usable = (1 - MEMORY_RESERVE_FRACTION) * table["gpus"][gpu]["memory_gb"] * BYTES_PER_GB
    if per_gpu >= usable:
        return (
            f"{name}: the weights of {model} need {per_gpu / BYTES_PER_GB:.1f} GiB per GPU at "
            f"TP {tp}, more than the {usable / BYTES_PER_GB:.1f} GiB one {gpu.upper()} holds "
            f"after its {MEMORY_RESERVE_FRACTION:.0%} reserve"
        )
    return None


def _candidates() -> list[str]:
    table = vidur_fits_table()
    return [
        f"{key}/tp{tp}" for key in sorted(table["token_parallel"]) for tp in TENSOR_PARALLEL_DEGREES
    ]


def generated_preset_names() -> list[str]:
    """Names of the presets the table supports, sorted."""
    return list(_supported())


@functools.cache
def _supported() -> tuple[str, ...]:
    return tuple(name for name in _candidates() if preset_refusal(name) is None)


def refused_presets() -> dict[str, str]:
    """Profiled (model, GPU) pairs at TP 1, 2, 4, 8 the table cannot support: name -> why."""
    refusals = {name: preset_refusal(name) for name in _candidates()}
    return {name: why for name, why in refusals.items() if why is not None}


def generated_preset(name: str) -> GeneratedPreset:
    """The generated preset ``MODEL/GPU/tpN``.

    Raises
    ------
    ValueError
        One line saying why, for a combination the data cannot support, or naming the known
        presets for a name that is not ``MODEL/GPU/tpN`` of the table.
    """
    why = preset_refusal(name)
    if why is not None:
        raise ValueError(why)
    match = _NAME.match(name)
    table = vidur_fits_table()
    if match is None or f"{match['model']}/{match['gpu']}" not in table["token_parallel"]:
        raise ValueError(
            f"unknown generated preset {name!r}; known: {', '.join(generated_preset_names())}"
        )
    model, gpu, tp = match["model"], match["gpu"], int(match["tp"])
    shape = model_shape(model, table)
    spec = table["gpus"][gpu]
    usable = (1 - MEMORY_RESERVE_FRACTION) * spec["memory_gb"] * BYTES_PER_GB * tp
    kv_tokens = math.floor((usable - weight_bytes(model, table)) / shape.kv_bytes_per_token)
    fits = table["token_parallel"][f"{model}/{gpu}"][str(tp)]
    return GeneratedPreset(
        name=name,
        model=model,
        gpu=gpu,
        tp=tp,
        gpus_per_server=tp,
        price_usd_per_hour=tp * spec["price_usd_per_hour"],
        kv_capacity_tokens=kv_tokens,
        weight_bytes=weight_bytes(model, table),
        shape=shape,
        iteration_median_rel_error=fits["iteration_median_rel_error"],
        iteration_max_rel_error=fits["iteration_max_rel_error"],
    )


def fit_error_table() -> str:
    """The Markdown table of ``docs/timing.md``: per (model, GPU) and TP degree, the median /
    largest relative error (%) of the fitted iteration time against the profile."""
    lines = ["| model / GPU | TP 1 | TP 2 | TP 4 | TP 8 |", "|---|---|---|---|---|"]
    for key, per_tp in sorted(vidur_fits_table()["token_parallel"].items()):
        cells = [
            f"{100 * fits['iteration_median_rel_error']:.1f} / "
            f"{100 * fits['iteration_max_rel_error']:.1f}"
            if (fits := per_tp.get(str(tp))) is not None
            else "-"
            for tp in TENSOR_PARALLEL_DEGREES
        ]
        lines.append(f"| {key} | {' | '.join(cells)} |")
    return "\n".join(lines)
