"""Real serving measurements, read and validated, and the iteration shapes they pin down.

Two sources are vendored in ``data/measured/`` (``data/measured/README.md`` names the commits,
paths and licences):

- DistServe's profiler fits of vLLM on A100-80GB (:func:`read_distserve_fits`): per (model, TP)
  a prefill ``a + b * sum(l) + c * sum(l^2)`` and a decode ``a + b * sum(context) + c * batch``
  for small and large batches, in milliseconds. These are fits, not raw rows: the measurement
  this module derives from them is the fit evaluated on a grid inside the profiled range.
- inference-sim's vLLM 0.11 runs on one H100 (:func:`read_inference_sim_runs`): one row per
  request (arrival, TTFT, end-to-end, time in queue, prefill and decode, token counts) and what
  was served, read from the engine's log.

:func:`iteration_samples` turns both into :class:`IterationSample` records: the iteration shapes
of one measured time (one row per iteration) and the time. For the request runs only requests
that ran alone are used: their prefill is the prompt's chunks at ``max_num_batched_tokens`` and
their decode steps run at batch 1, so every iteration's shape is known.

A malformed file raises ``ValueError`` with one line naming the file, the line, the field and
the value.
"""

from __future__ import annotations

import csv
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from slolab.timing.base import FEATURES

__all__ = [
    "DISTSERVE_DECODE_BATCHES",
    "DISTSERVE_DECODE_CONTEXTS",
    "DISTSERVE_PREFILL_BATCHES",
    "DISTSERVE_PREFILL_LENGTHS",
    "MEASURED_DIR",
    "DistServeFit",
    "IterationSample",
    "MeasuredRun",
    "distserve_samples",
    "isolated_requests",
    "iteration_samples",
    "read_distserve_fits",
    "read_inference_sim_runs",
    "request_run_samples",
]

MEASURED_DIR = Path(__file__).resolve().parent / "data" / "measured"
DISTSERVE_JSON = MEASURED_DIR / "distserve_a100_vllm.json"
INFERENCE_SIM_MANIFEST = MEASURED_DIR / "inference_sim_runs.json"
#: HF model names of the DistServe file -> slolab slugs.
DISTSERVE_MODELS = {"facebook/opt-13b": "opt-13b", "facebook/opt-66b": "opt-66b"}
#: The grid the DistServe fits are evaluated on (inside OPT's 2,048-token context).
DISTSERVE_PREFILL_LENGTHS: tuple[int, ...] = (128, 256, 512, 1024, 2048)
DISTSERVE_PREFILL_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
DISTSERVE_PREFILL_MAX_TOKENS = 8192
DISTSERVE_DECODE_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DISTSERVE_DECODE_CONTEXTS: tuple[int, ...] = (128, 512, 1024, 1536)
REQUEST_COLUMNS = (
    "arrival_s",
    "ttft_s",
    "e2e_s",
    "queue_s",
    "prefill_s",
    "decode_s",
    "prompt_tokens",
    "output_tokens",
)
_COLUMN = {name: k for k, name in enumerate(FEATURES)}


def _line_of(text: str, *keys: str) -> int:
    """1-based line of the last of ``keys`` found in order in a JSON text (1 if none)."""
    position = 0
    for key in keys:
        found = text.find(f'"{key}"', position)
        if found < 0:
            break
        position = found
    return text.count("\n", 0, position) + 1


@dataclass(frozen=True, slots=True)
class DistServeFit:
    """DistServe's fitted iteration times of one (model, TP) on vLLM, milliseconds.

    Attributes
    ----------
    model : str
        slolab slug (``opt-13b``).
    tp : int
        Tensor-parallel degree.
    prefill_ms : tuple of float
        ``(a, b, c)`` of ``a + b * sum(l) + c * sum(l^2)``.
    decode_small_ms, decode_large_ms : tuple of float
        ``(a, b, c)`` of ``a + b * sum(context) + c * batch`` below and from ``threshold``.
    threshold : int
        Batch size from which the large-batch line applies.
    """

    model: str
    tp: int
    prefill_ms: tuple[float, float, float]
    decode_small_ms: tuple[float, float, float]
    decode_large_ms: tuple[float, float, float]
    threshold: int

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp must be >= 1, got {self.tp} ({self.model})")
        if self.threshold < 1:
            raise ValueError(f"threshold must be >= 1, got {self.threshold} ({self.model})")

    def prefill_s(self, lengths: np.ndarray) -> float:
        """Seconds of one prefill iteration of whole prompts of ``lengths`` tokens."""
        a, b, c = self.prefill_ms
        return 1e-3 * (a + b * float(lengths.sum()) + c * float((lengths**2).sum()))

    def decode_s(self, batch: int, kv_tokens: float) -> float:
        """Seconds of one decode iteration of ``batch`` sequences reading ``kv_tokens``."""
        a, b, c = self.decode_small_ms if batch < self.threshold else self.decode_large_ms
        return 1e-3 * (a + b * kv_tokens + c * batch)


def read_distserve_fits(path: str | Path = DISTSERVE_JSON) -> list[DistServeFit]:
    """DistServe's vLLM profile fits, one record per (model, TP), sorted."""
    path = Path(path)
    text = path.read_text()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: line {error.lineno}: not JSON ({error.msg})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: line 1: expected an object of models, got {document!r:.40}")
    fits = []
    for model, per_tp in document.items():
        if model not in DISTSERVE_MODELS:
            line = _line_of(text, model)
            raise ValueError(
                f"{path}: line {line}: model {model!r} is not one of {list(DISTSERVE_MODELS)}"
            )
        for tp, entry in per_tp.items():
            if not tp.isdigit() or int(tp) < 1:
                raise ValueError(
                    f"{path}: line {_line_of(text, model, tp)}: field tp, value {tp!r}: must be a positive integer"
                )
            fields: dict[str, Any] = {}
            for field in ("prefill", "decoding_smallbs", "decoding_largebs"):
                value = entry.get(field)
                ok = (
                    isinstance(value, list)
                    and len(value) == 3
                    and all(isinstance(v, (int, float)) and math.isfinite(v) for v in value)
                )
                if not ok:
                    line = _line_of(text, model, tp, field)
                    raise ValueError(
                        f"{path}: line {line}: field {model}/{tp}/{field}, value {value!r}: "
                        "must be three finite numbers"
                    )
                fields[field] = tuple(float(v) for v in value)
            threshold = entry.get("decoding_large_small_bs_threshold")
            if not isinstance(threshold, int) or threshold < 1:
                line = _line_of(text, model, tp, "decoding_large_small_bs_threshold")
                raise ValueError(
                    f"{path}: line {line}: field {model}/{tp}/decoding_large_small_bs_threshold, "
                    f"value {threshold!r}: must be an integer >= 1"
                )
            fits.append(
                DistServeFit(
                    DISTSERVE_MODELS[model],
                    int(tp),
                    fields["prefill"],
                    fields["decoding_smallbs"],
                    fields["decoding_largebs"],
                    threshold,
                )
            )
    return sorted(fits, key=lambda f: (f.model, f.tp))


@dataclass(frozen=True, slots=True)
class MeasuredRun:
    """One request-level run of a real serving engine.

    Attributes
    ----------
    name : str
        Run name in the source.
    model, gpu : str
        slolab model slug and GPU type (how the GPU was established: ``gpu_evidence``).
    tp : int
        Tensor-parallel degree.
    engine : str
        Serving engine and version (``vllm-0.11.0``).
    max_num_seqs, max_num_batched_tokens : int
        The engine's batch limits (sequences; tokens per iteration, the prefill chunk size).
    kv_cache_tokens : int
        Tokens of KV cache the engine reported.
    prefix_tokens : int
        Prompt tokens shared by every request (cached after the first one), 0 if none.
    prefix_cache_hit_rate : float
        The engine's last logged prefix-cache hit rate.
    gpu_evidence : str
        Why the GPU is the one named.
    requests : dict of numpy arrays
        Columns of :data:`REQUEST_COLUMNS`, sorted by arrival.
    """

    name: str
    model: str
    gpu: str
    tp: int
    engine: str
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_tokens: int
    prefix_tokens: int
    prefix_cache_hit_rate: float
    gpu_evidence: str
    requests: dict[str, np.ndarray]

    def __post_init__(self) -> None:
        for field in ("tp", "max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)} ({self.name})")
        if self.prefix_tokens < 0:
            raise ValueError(f"prefix_tokens must be >= 0, got {self.prefix_tokens} ({self.name})")


def _read_requests(path: Path) -> dict[str, np.ndarray]:
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(header) != REQUEST_COLUMNS:
            raise ValueError(
                f"{path}: line 1: field header, value {header!r}: expected {','.join(REQUEST_COLUMNS)}"
            )
        rows: list[list[float]] = []
        for number, row in enumerate(reader, start=2):
            if len(row) != len(REQUEST_COLUMNS):
                raise ValueError(
                    f"{path}: line {number}: field row, value {','.join(row)!r}: expected {len(REQUEST_COLUMNS)} fields"
                )
            values = []
            for name, cell in zip(REQUEST_COLUMNS, row, strict=True):
                try:
                    value = float(cell)
                except ValueError:
                    value = math.nan
                integer = name.endswith("_tokens")
                bad = not math.isfinite(value) or value < (1 if integer else 0)
                if integer and not bad and value != int(value):
                    bad = True
                if bad:
                    need = "an integer >= 1" if integer else "a finite number >= 0"
                    raise ValueError(
                        f"{path}: line {number}: field {name}, value {cell!r}: must be {need}"
                    )
                values.append(value)
            if values[1] > values[2]:
                raise ValueError(
                    f"{path}: line {number}: field ttft_s, value {row[1]!r}: exceeds e2e_s {row[2]}"
                )
            rows.append(values)
    if not rows:
        raise ValueError(f"{path}: line 2: field row, value '': no requests")
    table = np.array(rows)
    order = np.argsort(table[:, 0], kind="stable")
    return {name: table[order, k] for k, name in enumerate(REQUEST_COLUMNS)}


def read_inference_sim_runs(path: str | Path = INFERENCE_SIM_MANIFEST) -> list[MeasuredRun]:
    """The inference-sim runs of the manifest at ``path``, with their request tables."""
    path = Path(path)
    text = path.read_text()
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: line {error.lineno}: not JSON ({error.msg})") from None
    runs = []
    for entry in document.get("runs", []):
        name = entry.get("run", "?")
        for field, kind in (
            ("model", str),
            ("gpu", str),
            ("csv", str),
            ("vllm_version", str),
            ("tensor_parallel", int),
            ("max_num_seqs", int),
            ("max_num_batched_tokens", int),
            ("kv_cache_tokens", int),
            ("prefix_tokens", int),
        ):
            value = entry.get(field)
            if not isinstance(value, kind) or (isinstance(value, int) and value < 0):
                line = _line_of(text, name, field)
                raise ValueError(
                    f"{path}: line {line}: field {name}/{field}, value {value!r}: must be a {kind.__name__}"
                )
        runs.append(
            MeasuredRun(
                name=name,
                model=entry["model"],
                gpu=entry["gpu"],
                tp=entry["tensor_parallel"],
                engine=f"vllm-{entry['vllm_version']}",
                max_num_seqs=entry["max_num_seqs"],
                max_num_batched_tokens=entry["max_num_batched_tokens"],
                kv_cache_tokens=entry["kv_cache_tokens"],
                prefix_tokens=entry["prefix_tokens"],
                prefix_cache_hit_rate=float(entry.get("prefix_cache_hit_rate", 0.0)),
                gpu_evidence=str(entry.get("gpu_evidence", "")),
                requests=_read_requests(path.parent / entry["csv"]),
            )
        )
    return runs


@dataclass(frozen=True, slots=True)
class IterationSample:
    """A measured time and the shapes of the iterations it covers.

    Attributes
    ----------
    source : str
        ``distserve`` or the run's name.
    model, gpu : str
        Model slug and GPU type.
    tp : int
        Tensor-parallel degree.
    phase : str
        ``prefill`` or ``decode``.
    features : numpy.ndarray
        ``(k, 7)`` shapes of the ``k`` iterations (:data:`~slolab.timing.FEATURES`).
    measured_s : float
        Measured mean time of one of those iterations (total over ``k``).
    """

    source: str
    model: str
    gpu: str
    tp: int
    phase: str
    features: np.ndarray
    measured_s: float

    def __post_init__(self) -> None:
        if self.phase not in ("prefill", "decode"):
            raise ValueError(f"phase must be 'prefill' or 'decode', got {self.phase!r}")
        if (
            self.features.ndim != 2
            or self.features.shape[1] != len(FEATURES)
            or not len(self.features)
        ):
            raise ValueError(
                f"features must be (k >= 1, {len(FEATURES)}), got {self.features.shape}"
            )
        if not self.measured_s > 0:
            raise ValueError(f"measured_s must be > 0, got {self.measured_s} ({self.source})")

    @property
    def iterations(self) -> int:
        """Iterations the measured time covers."""
        return len(self.features)


def _row(**values: float) -> list[float]:
    row = [0.0] * len(FEATURES)
    for name, value in values.items():
        row[_COLUMN[name]] = value
    return row


def distserve_samples(fits: list[DistServeFit], gpu: str = "a100") -> list[IterationSample]:
    """One sample per grid shape and (model, TP): the fitted time of that iteration.

    Prefill: ``b`` whole prompts of ``l`` tokens for ``b`` in :data:`DISTSERVE_PREFILL_BATCHES`
    and ``l`` in :data:`DISTSERVE_PREFILL_LENGTHS` with ``b * l <= 8192``; decode: ``b``
    sequences at context ``c`` for ``b`` in :data:`DISTSERVE_DECODE_BATCHES` and ``c`` in
    :data:`DISTSERVE_DECODE_CONTEXTS`.
    """
    samples = []
    for fit in fits:
        for batch in DISTSERVE_PREFILL_BATCHES:
            for length in DISTSERVE_PREFILL_LENGTHS:
                if batch * length > DISTSERVE_PREFILL_MAX_TOKENS:
                    continue
                row = _row(
                    prefill_tokens=batch * length,
                    num_prefill_seqs=batch,
                    prefill_attention_work=batch * length * (length + 1) / 2,
                )
                measured = fit.prefill_s(np.full(batch, float(length)))
                samples.append(
                    IterationSample(
                        "distserve", fit.model, gpu, fit.tp, "prefill", np.array([row]), measured
                    )
                )
        for batch in DISTSERVE_DECODE_BATCHES:
            for context in DISTSERVE_DECODE_CONTEXTS:
                row = _row(
                    decode_tokens=batch, num_decode_seqs=batch, decode_kv_tokens=batch * context
                )
                measured = fit.decode_s(batch, batch * context)
                samples.append(
                    IterationSample(
                        "distserve", fit.model, gpu, fit.tp, "decode", np.array([row]), measured
                    )
                )
    return samples


def isolated_requests(run: MeasuredRun) -> np.ndarray:
    """Indices of the requests no other request overlapped (arrival to last token)."""
    start = run.requests["arrival_s"]
    end = start + run.requests["e2e_s"]
    order = np.arange(len(start))
    return np.array(
        [i for i in order if not np.any((start < end[i]) & (end > start[i]) & (order != i))],
        dtype=int,
    )


def cached_prefix(run: MeasuredRun, index: int) -> int:
    """Prompt tokens of request ``index`` already in the prefix cache: the shared prefix for
    every request after the first (rounded down to vLLM's 16-token blocks), else 0."""
    return 16 * (run.prefix_tokens // 16) if index > 0 else 0


def request_run_samples(run: MeasuredRun) -> list[IterationSample]:
    """Prefill and decode samples of the requests that ran alone.

    The run's first request is left out: it pays the engine's one-time warm-up (in
    ``jan21-llama7b-train-1`` its 1,527-token prefill took 272 ms, the next one's 1,493 tokens
    34 ms). Prefill: the uncached prompt in chunks of ``max_num_batched_tokens`` after the cached
    prefix (one iteration per chunk, each attending to its prefix), measured by the span's
    time in prefill. Decode: the steps at batch 1 from context ``prompt + 1`` to
    ``prompt + output - 1``, measured by the time in decode over ``output - 1`` steps
    (requests with fewer than 2 output tokens have none).
    """
    samples = []
    req = run.requests
    for i in isolated_requests(run):
        if i == 0:
            continue
        prompt = int(req["prompt_tokens"][i])
        output = int(req["output_tokens"][i])
        done = min(cached_prefix(run, i), prompt - 1)
        rows = []
        while done < prompt:
            chunk = min(run.max_num_batched_tokens, prompt - done)
            rows.append(
                _row(
                    prefill_tokens=chunk,
                    num_prefill_seqs=1,
                    prefill_attention_work=chunk * (done + (chunk + 1) / 2),
                )
            )
            done += chunk
        if req["prefill_s"][i] > 0:
            samples.append(
                IterationSample(
                    run.name,
                    run.model,
                    run.gpu,
                    run.tp,
                    "prefill",
                    np.array(rows),
                    float(req["prefill_s"][i]),
                )
            )
        if output >= 2 and req["decode_s"][i] > 0:
            contexts = prompt + np.arange(1, output)
            rows = [
                _row(decode_tokens=1, num_decode_seqs=1, decode_kv_tokens=float(c))
                for c in contexts
            ]
            samples.append(
                IterationSample(
                    run.name,
                    run.model,
                    run.gpu,
                    run.tp,
                    "decode",
                    np.array(rows),
                    float(req["decode_s"][i]),
                )
            )
    return samples


@functools.cache
def _default_samples() -> tuple[IterationSample, ...]:
    samples = distserve_samples(read_distserve_fits())
    for run in read_inference_sim_runs():
        samples += request_run_samples(run)
    return tuple(samples)


def iteration_samples() -> list[IterationSample]:
    """Every iteration sample of the vendored sources (DistServe grid, then each run's)."""
    return list(_default_samples())
