"""The shared token-level timing model: the time of one iteration from its shape.

An iteration's *shape* is described by a fixed vector of features (:data:`FEATURES`):

============================  =============================================================
``prefill_tokens``            prompt tokens processed in the iteration (sum of chunk sizes)
``decode_tokens``             decode tokens generated (one per decoding sequence, more with
                              speculative decoding)
``num_decode_seqs``           number of decoding sequences
``decode_kv_tokens``          KV tokens read by decode attention (sum of their contexts)
``prefill_attention_work``    sum over prefill chunks of ``c * (prefix + (c + 1) / 2)``
``num_prefill_seqs``          number of sequences with a prefill chunk
``spec_steps``                speculative decoding steps (0 without speculation)
============================  =============================================================

Every timing model maps a ``(n, 7)`` feature matrix to ``n`` iteration times in seconds
(:meth:`TimingModel.times`), vectorised. Forms live in :mod:`slolab.timing.forms`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, overload

import numpy as np

FEATURES: tuple[str, ...] = (
    "prefill_tokens",
    "decode_tokens",
    "num_decode_seqs",
    "decode_kv_tokens",
    "prefill_attention_work",
    "num_prefill_seqs",
    "spec_steps",
)
N_FEATURES = len(FEATURES)
(
    F_PREFILL_TOKENS,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_DECODE_KV,
    F_PREFILL_ATTN,
    F_NUM_PREFILL,
    F_SPEC,
) = range(N_FEATURES)


@overload
def prefill_attention_work(chunk: np.ndarray, prefix: np.ndarray | int) -> np.ndarray: ...
@overload
def prefill_attention_work(chunk: int, prefix: np.ndarray | int) -> np.ndarray | float: ...
def prefill_attention_work(chunk: np.ndarray | int, prefix: np.ndarray | int) -> np.ndarray | float:
    """Attention work of prefill chunks: ``c * (prefix + (c + 1) / 2)`` per chunk.

    A chunk of ``c`` tokens whose sequence already has ``prefix`` tokens in the KV cache attends,
    token by token, to ``prefix + 1, ..., prefix + c`` keys: ``c * prefix + c (c + 1) / 2``.
    """
    c = np.asarray(chunk, dtype=float)
    return c * (np.asarray(prefix, dtype=float) + (c + 1.0) / 2.0)


def prefill_chunk_attention(chunk: float, prefix: float) -> float:
    """:func:`prefill_attention_work` of one chunk as a Python float, for code that builds one
    feature row at a time: ``chunk * (prefix + (chunk + 1) / 2)``, the same float operations in
    the same order (whole numbers, as ints or floats: integers below 2**53 convert to floats
    exactly), so the same bits."""
    return chunk * (prefix + (chunk + 1) / 2.0)


def padded_prefill_features(batch_size: float, prompt_tokens: Any) -> np.ndarray:
    """``(n, 7)`` features of a prefill iteration of ``batch_size`` sequences of ``p`` prompt
    tokens each (a static batch padded to ``p``), one row per entry of ``prompt_tokens``.

    ``s`` sequences of ``p`` tokens: ``prefill_tokens = s p``, ``num_prefill_seqs = s`` and
    ``prefill_attention_work = s p (p + 1) / 2``.
    """
    p = np.atleast_1d(np.asarray(prompt_tokens, dtype=float))
    s = float(batch_size)
    f = np.zeros((len(p), N_FEATURES))
    f[:, F_PREFILL_TOKENS] = s * p
    f[:, F_NUM_PREFILL] = s
    f[:, F_PREFILL_ATTN] = s * p * (p + 1.0) / 2.0
    return f


def padded_decode_features(batch_size: float, kv_tokens: Any) -> np.ndarray:
    """``(n, 7)`` features of a decode iteration of ``batch_size`` sequences that each read
    ``kv`` KV tokens, one row per entry of ``kv_tokens``: ``decode_tokens = num_decode_seqs =
    s`` and ``decode_kv_tokens = s kv``."""
    kv = np.atleast_1d(np.asarray(kv_tokens, dtype=float))
    s = float(batch_size)
    f = np.zeros((len(kv), N_FEATURES))
    f[:, F_DECODE_TOKENS] = s
    f[:, F_NUM_DECODE] = s
    f[:, F_DECODE_KV] = s * kv
    return f


def decode_run_features(batch: int, kv_tokens: float, steps: int) -> np.ndarray:
    """``(steps, 7)`` features of a decode-only batch of ``batch`` requests repeated ``steps``
    times: the first iteration reads ``kv_tokens`` KV tokens, each next one ``batch`` more (every
    request's previous token joins its cache)."""
    f = np.zeros((steps, N_FEATURES))
    f[:, F_DECODE_TOKENS] = batch
    f[:, F_NUM_DECODE] = batch
    f[:, F_DECODE_KV] = kv_tokens + batch * np.arange(steps)
    return f


def accumulate_from(start: float, durations: np.ndarray) -> np.ndarray:
    """``[start, start + d_0, (start + d_0) + d_1, ...]``: the ends of iterations run one after
    another from ``start``, added left to right (a cumulative sum does), so each is the float that
    stepping ``end = start + duration`` one iteration at a time gives."""
    times = np.empty(len(durations) + 1)
    times[0] = start
    times[1:] = durations
    return times.cumsum(out=times)


@dataclass(frozen=True, slots=True)
class BatchShape:
    """Shape of one iteration (see :data:`FEATURES`)."""

    prefill_tokens: float = 0.0
    decode_tokens: float = 0.0
    num_decode_seqs: float = 0.0
    decode_kv_tokens: float = 0.0
    prefill_attention_work: float = 0.0
    num_prefill_seqs: float = 0.0
    spec_steps: float = 0.0

    def __post_init__(self) -> None:
        for name in FEATURES:
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"{name} must be >= 0, got {v}")

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, n) for n in FEATURES], dtype=float)

    @property
    def tokens(self) -> float:
        """Tokens in the batch: prefill chunk tokens plus decode tokens."""
        return self.prefill_tokens + self.decode_tokens

    @classmethod
    def of(
        cls,
        prefill_chunks: list[tuple[int, int]] = (),  # type: ignore[assignment]
        decode_contexts: list[int] = (),  # type: ignore[assignment]
        spec_steps: int = 0,
    ) -> BatchShape:
        """Shape from prefill chunks ``(chunk_tokens, prefix_tokens)`` and decode contexts."""
        chunks = np.array(prefill_chunks, dtype=float).reshape(-1, 2)
        ctx = np.asarray(decode_contexts, dtype=float)
        return cls(
            prefill_tokens=float(chunks[:, 0].sum()),
            decode_tokens=float(len(ctx)),
            num_decode_seqs=float(len(ctx)),
            decode_kv_tokens=float(ctx.sum()),
            prefill_attention_work=float(
                np.sum(prefill_attention_work(chunks[:, 0], chunks[:, 1]))
            ),
            num_prefill_seqs=float(len(chunks)),
            spec_steps=float(spec_steps),
        )


class TimingModel(ABC):
    """Time of one iteration from its shape, in seconds.

    Subclasses implement :meth:`times` (vectorised), :meth:`to_dict` and, where the form
    allows it, :meth:`affine`. An *empty* iteration (all features zero) is never run by the
    engine, so its time is irrelevant.
    """

    #: Name of the form, used by (de)serialisation.
    form: ClassVar[str] = ""
    #: Registry of forms by name, filled by subclasses.
    _forms: ClassVar[dict[str, type[TimingModel]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.form:
            TimingModel._forms[cls.form] = cls

    @abstractmethod
    def times(self, features: np.ndarray) -> np.ndarray:
        """Iteration times (s) for a ``(n, 7)`` feature matrix (columns as :data:`FEATURES`)."""

    def time(self, shape: BatchShape) -> float:
        """Time (s) of one iteration of the given shape."""
        return float(self.times(shape.vector()[None, :])[0])

    def time_of(self, **features: float) -> float:
        """Time (s) of one iteration given features by name (missing ones are 0)."""
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURES)}")
        v = np.array([float(features.get(n, 0.0)) for n in FEATURES])
        return float(self.times(v[None, :])[0])

    def affine(self) -> tuple[float, np.ndarray] | None:
        """``(intercept, coefficients)`` when the model is affine in the features, else None.

        Exact models need this view; a form that cannot give one returns None and the model
        builder says so.
        """
        return None

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description, including ``"form"``."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingModel:
        """Inverse of :meth:`to_dict` for any registered form."""
        form = data.get("form")
        if form not in TimingModel._forms:
            raise ValueError(
                f"unknown timing form {form!r}; known: {', '.join(sorted(TimingModel._forms))}"
            )
        return TimingModel._forms[form]._from_dict(data)

    @classmethod
    @abstractmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> TimingModel: ...


class LinearTiming(TimingModel):
    """Iteration time affine in the shape features: ``intercept + sum_i coef_i * feature_i``.

    Covers the ProServe, DistServe/HyperFlexis and SA-paper predictors as special cases.

    Parameters
    ----------
    intercept_s : float
        Fixed cost of an iteration (s).
    coefficients : mapping of feature name to seconds per unit
        Missing features have coefficient 0.
    name : str
        Label (a preset name or a description of its source).
    """

    form = "linear"

    def __init__(self, intercept_s: float, coefficients: Mapping[str, float], name: str = "linear"):
        unknown = set(coefficients) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURES)}")
        if not np.isfinite(intercept_s):
            raise ValueError(f"intercept_s must be finite, got {intercept_s}")
        self.intercept_s = float(intercept_s)
        self.coef = np.array([float(coefficients.get(n, 0.0)) for n in FEATURES])
        if not np.all(np.isfinite(self.coef)):
            raise ValueError(f"coefficients must be finite, got {dict(coefficients)}")
        #: ``(feature index, coefficient)`` of the non-zero coefficients, in feature order
        self.terms = tuple((j, c) for j, c in enumerate(self.coef.tolist()) if c != 0.0)
        self.name = name

    def times(self, features: np.ndarray) -> np.ndarray:
        """``intercept + x_0 c_0 + x_1 c_1 + ...`` added left to right over the non-zero
        coefficients, row by row: a row's time does not depend on the rows beside it (a
        matrix product may sum a row in another order depending on their number), so the
        engine's vectorised decode windows equal its one-iteration steps bit for bit."""
        f = np.asarray(features, dtype=float)
        if f.ndim == 2 and f.shape[0] == 1:
            return np.array([self.time_of_row(f[0].tolist())])
        out = np.full(f.shape[:-1], self.intercept_s)
        for j, c in self.terms:
            out += f[..., j] * c
        return out

    def time_of_row(self, row: list[float]) -> float:
        """The time of one feature row (a list), summed as :meth:`times` sums each row."""
        t = self.intercept_s
        for j, c in self.terms:
            t += row[j] * c
        return t

    def affine(self) -> tuple[float, np.ndarray]:
        return self.intercept_s, self.coef.copy()

    @property
    def coefficients(self) -> dict[str, float]:
        return {n: float(c) for n, c in zip(FEATURES, self.coef, strict=True) if c != 0.0}

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "intercept_s": self.intercept_s,
            "coefficients": {n: float(c) for n, c in zip(FEATURES, self.coef, strict=True)},
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> LinearTiming:
        return cls.from_fields(data)

    @classmethod
    def from_fields(cls, data: Mapping[str, Any]) -> LinearTiming:
        """A line from the fields :meth:`to_dict` writes (``intercept_s``, ``coefficients``,
        ``name``); a form made of lines reads each of its lines with it."""
        return cls(data["intercept_s"], data["coefficients"], name=data.get("name", "linear"))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LinearTiming)
            and self.intercept_s == other.intercept_s
            and np.array_equal(self.coef, other.coef)
        )

    def __hash__(self) -> int:
        return hash((self.intercept_s, tuple(self.coef)))

    def __repr__(self) -> str:
        return f"LinearTiming({self.name!r}, intercept_s={self.intercept_s}, {self.coefficients})"
