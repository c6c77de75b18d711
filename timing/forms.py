"""Timing-model forms beyond the affine one of :mod:`slolab.timing.base`.

==========================  ==================================================================
:class:`RooflineTiming`     maximum over affine lines (SLOs-Serve's batch timer)
:class:`ProfiledTiming`     table over (batch size, KV tokens), bilinear (PolyServe)
:class:`ThresholdTiming`    one of two models by a threshold on one feature (DistServe decode
                            regimes)
:class:`PhaseSumTiming`     prefill part plus decode part, each charged when the iteration has
                            that phase (DistServe and SA-paper predictors, fitted per phase)
:class:`MeanLengthTiming`   a model plus terms in the mean prefill length and mean decode
                            context per sequence (the SA-paper predictor's length terms)
==========================  ==================================================================

Every form maps a ``(n, 7)`` feature matrix (columns as :data:`slolab.timing.FEATURES`) to
``n`` times in seconds, serialises with ``to_dict`` and is rebuilt by
:meth:`slolab.timing.TimingModel.from_dict`. The engine calls ``times`` once per iteration on a
single row, so forms keep their parameters in preallocated arrays and the table form has a
scalar path for one row.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    FEATURES,
    LinearTiming,
    TimingModel,
    prefill_chunk_attention,
)

__all__ = [
    "MeanLengthTiming",
    "PhaseAffine",
    "PhaseSumTiming",
    "ProfiledTiming",
    "RooflineTiming",
    "ThresholdTiming",
    "phase_affine",
    "timing_lines",
]


class RooflineTiming(TimingModel):
    """Iteration time as the maximum over affine lines: ``T = max_l (b_l + c_l . features)``.

    Each line is a source of time (weight reads, token compute, the draft model of speculative
    decoding); the largest one is the bottleneck. SLOs-Serve's lines use only the tokens in
    the batch (prefill plus decode tokens) and the speculative steps; lines here may use any
    feature, so attention terms can be added to every line.

    Parameters
    ----------
    lines : sequence of LinearTiming
        At least one line.
    name : str
        Label (a preset name or a description of its source).

    References
    ----------
    SLOs-Serve, Sec. 3.1.1 (performance modelling for batch execution):
    ``T = max_l (k1_l #Tokens + k2_l #SpecStep + b_l)``.
    """

    form = "roofline"

    def __init__(self, lines: Sequence[LinearTiming], name: str = "roofline"):
        if len(lines) == 0:
            raise ValueError("lines must hold at least one LinearTiming, got none")
        for i, line in enumerate(lines):
            if not isinstance(line, LinearTiming):
                raise TypeError(f"lines[{i}] must be a LinearTiming, got {type(line).__name__}")
        self.lines: tuple[LinearTiming, ...] = tuple(lines)
        self.intercepts_s = np.array([line.intercept_s for line in self.lines])
        self.coef_matrix = np.stack([line.coef for line in self.lines], axis=1)
        self.name = name

    @classmethod
    def from_token_lines(
        cls, lines: Sequence[tuple[float, float, float]], name: str = "roofline"
    ) -> RooflineTiming:
        """Roofline in SLOs-Serve's parameters.

        Parameters
        ----------
        lines : sequence of ``(k1_s_per_token, k2_s_per_spec_step, b_s)``
            One triple per line; ``k1`` multiplies the tokens in the batch (prefill plus
            decode tokens), ``k2`` the speculative steps, ``b`` is the line's intercept.
        name : str
            Label.
        """
        return cls(
            [
                LinearTiming(
                    b,
                    {"prefill_tokens": k1, "decode_tokens": k1, "spec_steps": k2},
                    name=f"{name}[{i}]",
                )
                for i, (k1, k2, b) in enumerate(lines)
            ],
            name=name,
        )

    def times(self, features: np.ndarray) -> np.ndarray:
        """The largest of the lines' times, each line summed row by row as
        :meth:`LinearTiming.times` does (a row's time does not depend on the rows beside it)."""
        f = np.asarray(features, dtype=float)
        if f.shape[0] == 1:
            return np.array([self.time_of_row(f[0].tolist())])
        out = self.lines[0].times(f)
        for line in self.lines[1:]:
            np.maximum(out, line.times(f), out=out)
        return out

    def time_of_row(self, row: list[float]) -> float:
        """The time of one feature row (a list): the largest of the lines' times, each summed as
        :meth:`LinearTiming.time_of_row` sums it (what :meth:`times` gives for one row)."""
        return max(line.time_of_row(row) for line in self.lines)

    def affine(self) -> tuple[float, np.ndarray] | None:
        """The single line's ``(intercept, coefficients)``; None with two or more lines."""
        if len(self.lines) == 1:
            return self.lines[0].affine()
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "lines": [line.to_dict() for line in self.lines],
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> RooflineTiming:
        lines = [LinearTiming.from_fields(line) for line in data["lines"]]
        return cls(lines, name=data.get("name", "roofline"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RooflineTiming) and self.lines == other.lines

    def __hash__(self) -> int:
        return hash((self.form, self.lines))

    def __repr__(self) -> str:
        return f"RooflineTiming({self.name!r}, lines={list(self.lines)})"


_BATCH_AXES = ("tokens", "sequences")


def row_timer(timing: TimingModel) -> Callable[[list[float]], float]:
    """The time of one iteration from its feature row given as a list: the float
    ``timing.times`` gives for that row, without building an array for the linear and
    roofline forms (their ``times`` sums one row with ``time_of_row``)."""
    if type(timing) is LinearTiming:
        return timing.time_of_row
    if type(timing) is RooflineTiming:
        lines = [(line.intercept_s, line.terms) for line in timing.lines]

        def roofline_row(row: list[float]) -> float:
            # RooflineTiming.time_of_row without its generator and method calls: each line
            # summed as LinearTiming.time_of_row sums it, then the largest
            times = []
            for t, terms in lines:
                for j, c in terms:
                    t += row[j] * c
                times.append(t)
            return max(times)

        return roofline_row

    def one_row(row: list[float]) -> float:
        return float(timing.times(np.array([row]))[0])

    return one_row


class ProfiledTiming(TimingModel):
    """Iteration time from a profiled table over (batch size, KV tokens), bilinear.

    The batch coordinate is the tokens in the batch (``prefill_tokens + decode_tokens``,
    ``batch_axis="tokens"``) or the sequences in it (``num_decode_seqs + num_prefill_seqs``,
    ``batch_axis="sequences"``); the two agree for decode-only iterations without speculation,
    which is what the table is profiled on. The KV coordinate is ``decode_kv_tokens``; prefill
    attention is not charged, as in PolyServe, which argues it is small next to the rest for
    chunked prefill of sequences under 10K tokens.

    Between grid points the time is bilinear in the two coordinates. Outside the grid it is
    extrapolated linearly from the edge cell (the edge cell's bilinear function continued), and
    the result is clamped at zero from below. A table non-decreasing along both axes gives a
    model non-decreasing in both coordinates, inside and outside the grid.

    Parameters
    ----------
    batch_sizes : sequence of float
        Strictly increasing grid of the batch coordinate, at least two points.
    kv_tokens : sequence of float
        Strictly increasing grid of KV tokens, at least two points.
    times_s : array ``(len(batch_sizes), len(kv_tokens))``
        Profiled iteration times (s), finite and non-negative.
    batch_axis : {"tokens", "sequences"}
        Which features make the batch coordinate.
    name : str
        Label.

    References
    ----------
    PolyServe, Sec. 4.5 (profile-based batch formation): a map of (batch size, KV cache size)
    to iteration time, used to admit a request when the predicted iteration time is below the
    TPOT.
    """

    form = "profiled"

    def __init__(
        self,
        batch_sizes: Sequence[float] | np.ndarray,
        kv_tokens: Sequence[float] | np.ndarray,
        times_s: Sequence[Sequence[float]] | np.ndarray,
        batch_axis: str = "tokens",
        name: str = "profiled",
    ):
        self.batch_sizes = _strictly_increasing("batch_sizes", batch_sizes)
        self.kv_tokens = _strictly_increasing("kv_tokens", kv_tokens)
        table = np.array(times_s, dtype=float)
        expected = (len(self.batch_sizes), len(self.kv_tokens))
        if table.shape != expected:
            raise ValueError(f"times_s must have shape {expected}, got {table.shape}")
        if not np.all(np.isfinite(table)) or np.any(table < 0):
            raise ValueError("times_s must be finite and >= 0")
        if batch_axis not in _BATCH_AXES:
            raise ValueError(f"batch_axis must be one of {_BATCH_AXES}, got {batch_axis!r}")
        self.times_s = table
        self.batch_axis = batch_axis
        self.name = name
        if batch_axis == "tokens":
            self._batch_columns = [F_PREFILL_TOKENS, F_DECODE_TOKENS]
        else:
            self._batch_columns = [F_NUM_DECODE, F_NUM_PREFILL]
        self._xs = self.batch_sizes.tolist()
        self._ys = self.kv_tokens.tolist()
        self._table = table.tolist()

    @classmethod
    def from_model(
        cls,
        model: TimingModel,
        batch_sizes: Sequence[float] | np.ndarray,
        kv_tokens: Sequence[float] | np.ndarray,
        batch_axis: str = "tokens",
        name: str = "profiled",
    ) -> ProfiledTiming:
        """Tabulate another model on decode-only shapes (``batch`` sequences, ``kv`` tokens).

        Each grid point is the shape with ``decode_tokens = num_decode_seqs = batch`` and
        ``decode_kv_tokens = kv``, so the table holds what a profiler of decode iterations
        would measure on a server that behaves like ``model``.
        """
        b = np.asarray(batch_sizes, dtype=float)
        kv = np.asarray(kv_tokens, dtype=float)
        grid_b, grid_kv = np.meshgrid(b, kv, indexing="ij")
        features = np.zeros((grid_b.size, len(FEATURES)))
        features[:, F_DECODE_TOKENS] = grid_b.ravel()
        features[:, F_NUM_DECODE] = grid_b.ravel()
        features[:, F_DECODE_KV] = grid_kv.ravel()
        table = model.times(features).reshape(grid_b.shape)
        return cls(b, kv, table, batch_axis=batch_axis, name=name)

    def times(self, features: np.ndarray) -> np.ndarray:
        f = np.asarray(features, dtype=float)
        if f.shape[0] == 1:
            row = f[0].tolist()
            x = row[self._batch_columns[0]] + row[self._batch_columns[1]]
            return np.array([self.scalar_time(x, row[F_DECODE_KV])])
        x = f[:, self._batch_columns[0]] + f[:, self._batch_columns[1]]
        y = f[:, F_DECODE_KV]
        xs, ys, table = self.batch_sizes, self.kv_tokens, self.times_s
        i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
        j = np.clip(np.searchsorted(ys, y, side="right") - 1, 0, len(ys) - 2)
        tx = (x - xs[i]) / (xs[i + 1] - xs[i])
        ty = (y - ys[j]) / (ys[j + 1] - ys[j])
        low = table[i, j] + tx * (table[i + 1, j] - table[i, j])
        high = table[i, j + 1] + tx * (table[i + 1, j + 1] - table[i, j + 1])
        return np.maximum(low + ty * (high - low), 0.0)

    def scalar_time(self, x: float, y: float) -> float:
        """The table's reading (s) at batch size ``x`` and decode KV ``y``, on plain floats:
        :meth:`times` of one row without building a feature array."""
        xs, ys, table = self._xs, self._ys, self._table
        i = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
        j = min(max(bisect_right(ys, y) - 1, 0), len(ys) - 2)
        tx = (x - xs[i]) / (xs[i + 1] - xs[i])
        ty = (y - ys[j]) / (ys[j + 1] - ys[j])
        row0, row1 = table[i], table[i + 1]
        low = row0[j] + tx * (row1[j] - row0[j])
        high = row0[j + 1] + tx * (row1[j + 1] - row0[j + 1])
        return max(low + ty * (high - low), 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "batch_axis": self.batch_axis,
            "batch_sizes": self.batch_sizes.tolist(),
            "kv_tokens": self.kv_tokens.tolist(),
            "times_s": self.times_s.tolist(),
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> ProfiledTiming:
        return cls(
            data["batch_sizes"],
            data["kv_tokens"],
            data["times_s"],
            batch_axis=data.get("batch_axis", "tokens"),
            name=data.get("name", "profiled"),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ProfiledTiming)
            and self.batch_axis == other.batch_axis
            and np.array_equal(self.batch_sizes, other.batch_sizes)
            and np.array_equal(self.kv_tokens, other.kv_tokens)
            and np.array_equal(self.times_s, other.times_s)
        )

    def __hash__(self) -> int:
        return hash((self.form, self.batch_axis, self.times_s.tobytes()))

    def __repr__(self) -> str:
        return (
            f"ProfiledTiming({self.name!r}, {len(self.batch_sizes)} batch sizes x "
            f"{len(self.kv_tokens)} KV sizes, batch_axis={self.batch_axis!r})"
        )


def _strictly_increasing(field: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.array(values, dtype=float)
    if arr.ndim != 1 or len(arr) < 2:
        raise ValueError(f"{field} must be a 1-D grid of at least 2 points, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) <= 0):
        raise ValueError(f"{field} must be finite and strictly increasing, got {arr.tolist()}")
    return arr


class ThresholdTiming(TimingModel):
    """One of two models, chosen by a threshold on one feature.

    ``T = below(features)`` when ``features[feature] < threshold``, else ``above(features)``.

    Parameters
    ----------
    feature : str
        One of :data:`slolab.timing.FEATURES`.
    threshold : float
        Boundary value; a feature equal to it selects ``above``.
    below, above : TimingModel
        The two regimes.
    name : str
        Label.

    References
    ----------
    DistServe's simulator fits decode time with two regimes by batch size (below and from 95
    sequences), see :func:`slolab.timing.presets.preset` ``"opt-13b-a100-distserve"``.
    """

    form = "threshold"

    def __init__(
        self,
        feature: str,
        threshold: float,
        below: TimingModel,
        above: TimingModel,
        name: str = "threshold",
    ):
        if feature not in FEATURES:
            raise ValueError(f"feature must be one of {', '.join(FEATURES)}; got {feature!r}")
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold}")
        for label, part in (("below", below), ("above", above)):
            if not isinstance(part, TimingModel):
                raise TypeError(f"{label} must be a TimingModel, got {type(part).__name__}")
        self.feature = feature
        self.threshold = float(threshold)
        self.below = below
        self.above = above
        self.name = name
        self._column = FEATURES.index(feature)

    def times(self, features: np.ndarray) -> np.ndarray:
        f = np.asarray(features, dtype=float)
        if f.shape[0] == 1:
            part = self.below if float(f[0, self._column]) < self.threshold else self.above
            return part.times(f)
        return np.where(
            f[:, self._column] < self.threshold, self.below.times(f), self.above.times(f)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "feature": self.feature,
            "threshold": self.threshold,
            "below": self.below.to_dict(),
            "above": self.above.to_dict(),
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> ThresholdTiming:
        return cls(
            data["feature"],
            data["threshold"],
            TimingModel.from_dict(data["below"]),
            TimingModel.from_dict(data["above"]),
            name=data.get("name", "threshold"),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ThresholdTiming)
            and self.feature == other.feature
            and self.threshold == other.threshold
            and self.below == other.below
            and self.above == other.above
        )

    def __hash__(self) -> int:
        return hash((self.form, self.feature, self.threshold, self.below, self.above))

    def __repr__(self) -> str:
        return (
            f"ThresholdTiming({self.name!r}, {self.feature} < {self.threshold}: {self.below!r}, "
            f"else {self.above!r})"
        )


class PhaseSumTiming(TimingModel):
    """A prefill part plus a decode part, each charged when the iteration has that phase.

    ``T = [prefill_tokens > 0] * prefill(features) + [decode_tokens > 0] * decode(features)``.

    Predictors fitted separately on prefill-only and decode-only iterations (DistServe, the
    SA paper) each carry their own intercept. This form reproduces both exactly on pure
    iterations and charges a mixed iteration as its prefill iteration followed by its decode
    iteration: both intercepts are paid, so a mixed iteration is never cheaper than the two
    phases run apart. Each part should depend only on its own phase's features.

    Parameters
    ----------
    prefill, decode : TimingModel
        The two parts.
    name : str
        Label.
    """

    form = "phase-sum"

    def __init__(self, prefill: TimingModel, decode: TimingModel, name: str = "phase-sum"):
        for label, part in (("prefill", prefill), ("decode", decode)):
            if not isinstance(part, TimingModel):
                raise TypeError(f"{label} must be a TimingModel, got {type(part).__name__}")
        self.prefill = prefill
        self.decode = decode
        self.name = name

    def times(self, features: np.ndarray) -> np.ndarray:
        f = np.asarray(features, dtype=float)
        if f.shape[0] == 1:
            row = f[0].tolist()
            total = 0.0
            if row[F_PREFILL_TOKENS] > 0:
                total += float(self.prefill.times(f)[0])
            if row[F_DECODE_TOKENS] > 0:
                total += float(self.decode.times(f)[0])
            return np.array([total])
        has_prefill = f[:, F_PREFILL_TOKENS] > 0
        has_decode = f[:, F_DECODE_TOKENS] > 0
        return np.where(has_prefill, self.prefill.times(f), 0.0) + np.where(
            has_decode, self.decode.times(f), 0.0
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> PhaseSumTiming:
        return cls(
            TimingModel.from_dict(data["prefill"]),
            TimingModel.from_dict(data["decode"]),
            name=data.get("name", "phase-sum"),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PhaseSumTiming)
            and self.prefill == other.prefill
            and self.decode == other.decode
        )

    def __hash__(self) -> int:
        return hash((self.form, self.prefill, self.decode))

    def __repr__(self) -> str:
        return f"PhaseSumTiming({self.name!r}, prefill={self.prefill!r}, decode={self.decode!r})"


class MeanLengthTiming(TimingModel):
    """A base model plus terms in the mean length per sequence.

    ``T = base(features) + a * prefill_tokens / num_prefill_seqs
    + c * decode_kv_tokens / num_decode_seqs``, each ratio taken as 0 when its count is 0.

    The first ratio is the mean prefill chunk per prefill sequence (the prompt length ``l``
    for a padded static batch), the second the mean context per decoding sequence (the
    accumulated length ``L``). Predictors with terms in ``l`` or ``L`` that are not multiplied
    by the batch size (the SA paper's) need them: they are not linear in the batch totals.

    Parameters
    ----------
    base : TimingModel
        Model of the remaining terms.
    prefill_length_coef_s : float
        Seconds per token of mean prefill length.
    decode_context_coef_s : float
        Seconds per token of mean decode context.
    name : str
        Label.

    References
    ----------
    SA ordering paper, Sec. 4.2, Eqs. (14)-(15): prefill time and per-token decode time linear
    in the length, the batch size and their product.
    """

    form = "mean-length"

    def __init__(
        self,
        base: TimingModel,
        prefill_length_coef_s: float = 0.0,
        decode_context_coef_s: float = 0.0,
        name: str = "mean-length",
    ):
        if not isinstance(base, TimingModel):
            raise TypeError(f"base must be a TimingModel, got {type(base).__name__}")
        for label, value in (
            ("prefill_length_coef_s", prefill_length_coef_s),
            ("decode_context_coef_s", decode_context_coef_s),
        ):
            if not np.isfinite(value):
                raise ValueError(f"{label} must be finite, got {value}")
        self.base = base
        self.prefill_length_coef_s = float(prefill_length_coef_s)
        self.decode_context_coef_s = float(decode_context_coef_s)
        self.name = name

    def times(self, features: np.ndarray) -> np.ndarray:
        f = np.asarray(features, dtype=float)
        base = self.base.times(f)
        if f.shape[0] == 1:
            row = f[0].tolist()
            extra = 0.0
            if row[F_NUM_PREFILL] > 0:
                extra += self.prefill_length_coef_s * row[F_PREFILL_TOKENS] / row[F_NUM_PREFILL]
            if row[F_NUM_DECODE] > 0:
                extra += self.decode_context_coef_s * row[F_DECODE_KV] / row[F_NUM_DECODE]
            return base + extra
        # the same operations in the same order as one row above, so rows equal one-row calls
        prefill_term = np.divide(
            self.prefill_length_coef_s * f[:, F_PREFILL_TOKENS],
            f[:, F_NUM_PREFILL],
            out=np.zeros(f.shape[0]),
            where=f[:, F_NUM_PREFILL] > 0,
        )
        decode_term = np.divide(
            self.decode_context_coef_s * f[:, F_DECODE_KV],
            f[:, F_NUM_DECODE],
            out=np.zeros(f.shape[0]),
            where=f[:, F_NUM_DECODE] > 0,
        )
        return base + (prefill_term + decode_term)

    def to_dict(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "base": self.base.to_dict(),
            "prefill_length_coef_s": self.prefill_length_coef_s,
            "decode_context_coef_s": self.decode_context_coef_s,
        }

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> MeanLengthTiming:
        return cls(
            TimingModel.from_dict(data["base"]),
            data.get("prefill_length_coef_s", 0.0),
            data.get("decode_context_coef_s", 0.0),
            name=data.get("name", "mean-length"),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MeanLengthTiming)
            and self.base == other.base
            and self.prefill_length_coef_s == other.prefill_length_coef_s
            and self.decode_context_coef_s == other.decode_context_coef_s
        )

    def __hash__(self) -> int:
        return hash((self.form, self.base, self.prefill_length_coef_s, self.decode_context_coef_s))

    def __repr__(self) -> str:
        return (
            f"MeanLengthTiming({self.name!r}, base={self.base!r}, "
            f"prefill_length_coef_s={self.prefill_length_coef_s}, "
            f"decode_context_coef_s={self.decode_context_coef_s})"
        )


_PREFILL_FEATURES = (F_PREFILL_TOKENS, F_PREFILL_ATTN, F_NUM_PREFILL)
_DECODE_FEATURES = (F_DECODE_TOKENS, F_NUM_DECODE, F_DECODE_KV)


@dataclass(frozen=True, slots=True)
class PhaseAffine:
    """An iteration time affine in the shape once its phases are known.

    ``T = any_s + prefill_s [has prefill] + decode_s [has decode] + coef . features``: a
    :class:`LinearTiming` has only ``any_s``; a :class:`PhaseSumTiming` of two linear parts (the
    DistServe / HyperFlexis Eqs. 1-2 form) has ``prefill_s`` and ``decode_s``.
    """

    any_s: float
    prefill_s: float
    decode_s: float
    coef: np.ndarray

    def prefill_part_s(self, prompt: int, cached: int = 0) -> float:
        """Coefficient terms of one whole prompt of ``prompt`` tokens (no intercept), the first
        ``cached`` of them in a given prefix cache: ``prompt - cached`` prefill tokens whose
        attention runs over the cached prefix (docs/engine.md, "A snapshot's given cache")."""
        c = self.coef
        chunk = prompt - cached
        work = prefill_chunk_attention(chunk, cached)
        return float(c[F_PREFILL_TOKENS] * chunk + c[F_PREFILL_ATTN] * work + c[F_NUM_PREFILL])

    @property
    def decode_token_s(self) -> float:
        """Coefficient terms of one decode token, context aside."""
        return float(self.coef[F_DECODE_TOKENS] + self.coef[F_NUM_DECODE])

    @property
    def kv_s(self) -> float:
        """Seconds per KV token a decode reads."""
        return float(self.coef[F_DECODE_KV])


def phase_affine(timing: TimingModel) -> PhaseAffine | None:
    """The :class:`PhaseAffine` view of ``timing``, or None when it has none.

    Linear models and one-line rooflines have it; a phase sum has it when both parts are
    linear and each part's coefficients touch only its own phase's features.
    """
    view = timing.affine()
    if view is not None:
        intercept, coef = view
        return PhaseAffine(float(intercept), 0.0, 0.0, np.asarray(coef, dtype=float))
    if not isinstance(timing, PhaseSumTiming):
        return None
    parts = []
    for part, others in ((timing.prefill, _DECODE_FEATURES), (timing.decode, _PREFILL_FEATURES)):
        if not isinstance(part, LinearTiming | RooflineTiming):
            return None
        affine = part.affine()
        if affine is None or any(affine[1][i] != 0 for i in others):
            return None
        parts.append(affine)
    (b_p, c_p), (b_d, c_d) = parts
    return PhaseAffine(0.0, float(b_p), float(b_d), np.asarray(c_p + c_d, dtype=float))


def timing_lines(timing: TimingModel) -> tuple[np.ndarray, np.ndarray]:
    """``(intercepts (L,), coefficients (L, 7))`` of a model that is a maximum of affine lines.

    A :class:`~slolab.timing.LinearTiming` is one line; a :class:`RooflineTiming` its lines.
    Other forms (profiled tables, phase sums, thresholds) have no such view (their time is not
    convex piecewise-linear in the features), and a ValueError says so. The PolyServe tier
    models and batch formation use this view.
    """
    if isinstance(timing, LinearTiming):
        b, c = timing.affine()
        return np.array([b]), np.asarray(c, dtype=float)[None, :]
    if isinstance(timing, RooflineTiming):
        return timing.intercepts_s.copy(), timing.coef_matrix.T.copy()
    raise ValueError(
        f"this needs a linear or roofline timing model (a maximum of affine lines); "
        f"got the {getattr(timing, 'form', type(timing).__name__)!r} form "
        f"{getattr(timing, 'name', '')!r}"
    )
