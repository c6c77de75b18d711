"""SLOs-Serve admission: the record of one scheduler call, its instance encoding and builders.

:class:`AdmissionProblem` holds the running and new requests of one call (times relative to
the call); :meth:`AdmissionProblem.from_instance` reads an ``"slos-admission"`` instance (the
encoding is in the package docstring), :func:`snapshot_instance` writes one from per-request
arrays, and :func:`random_problem` draws a small seeded call. :func:`served_rows` is the set a
decision serves: the running rows and the admitted new ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import (
    CACHED_COLUMN,
    Cluster,
    Instance,
    Workload,
    cached_prompt_tokens,
)
from slolab.timing.base import TimingModel

__all__ = [
    "PROBLEM",
    "TIME_TOL",
    "AdmissionProblem",
    "random_problem",
    "served_rows",
    "snapshot_instance",
]

#: ``Instance.problem`` of an admission instance.
PROBLEM = "slos-admission"
#: Tolerance (s, or batch units) when times are compared or snapped to a grid.
TIME_TOL = 1e-9


def _frozen(values: Any, dtype: str, name: str, n: int | None) -> np.ndarray:
    arr = np.array(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has length {len(arr)}, expected {n}")
    arr.setflags(write=False)
    return arr


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


@dataclass(frozen=True, slots=True)
class AdmissionProblem:
    """Data of one SLOs-Serve scheduler call (all times relative to the call, in seconds).

    Rows are requests; the same row index is the request id in schedules. Build one directly,
    from an instance (:meth:`from_instance`), or build an instance from arrays with
    :func:`snapshot_instance`.

    Parameters
    ----------
    running : bool array (n,)
        True for requests already admitted (forced: they must keep their SLOs).
    remaining_prefill_tokens : int array (n,)
        Prompt tokens still to prefill; 0 for a decoding request, >= 1 for a new one. With a
        given cache, only the uncached ones (:meth:`from_instance` takes the cache off).
    prefill_deadline_s : float array (n,)
        Time by which the prefill must be complete (the first token emitted); ignored (may be
        nan) for decoding requests. A deadline before ``t0`` cannot be met.
    tpot_s : float array (n,)
        Decode TPOT tier of each request (> 0).
    kv_tokens : int array (n,)
        KV memory the request holds for its whole life (prompt plus expected output; with a
        given cache, less the cached tokens, which stay outside the capacity).
    value : float array (n,)
        Value of admitting a new request (ignored for running ones).
    output_tokens : int array (n,)
        Output tokens of the request (used to end its decode entries in schedules).
    kv_capacity_tokens : int
        KV memory of the server (tokens).
    timing : TimingModel
        Iteration-time model; batches carry ``time2bs(duration)`` tokens.
    generated_tokens : int array (n,), optional
        Output tokens already emitted (default 1 for decoding requests, 0 otherwise).
    call_time_s : float
        Time of the call on the instance clock (added to schedule times).
    batch_duration_s : float, optional
        ``t0``; default the tightest TPOT over all rows. Must not exceed any row's TPOT.
    horizon_s : float, optional
        Planning horizon; default the latest prefill deadline plus the loosest TPOT. Must be
        at least every prefill deadline.

    References
    ----------
    SLOs-Serve, Sec. 3.2.1 (notation: ``p_i``, ``m_i``, ``pDDL_i``, ``TPOT_1..L``, ``v_i``).
    """

    running: np.ndarray
    remaining_prefill_tokens: np.ndarray
    prefill_deadline_s: np.ndarray
    tpot_s: np.ndarray
    kv_tokens: np.ndarray
    value: np.ndarray
    output_tokens: np.ndarray
    kv_capacity_tokens: int
    timing: TimingModel
    generated_tokens: np.ndarray | None = None
    call_time_s: float = 0.0
    batch_duration_s: float | None = None
    horizon_s: float | None = None

    def __post_init__(self) -> None:
        running = _frozen(self.running, "bool", "running", None)
        n = len(running)
        if n == 0:
            raise ValueError("an admission problem needs at least one request")
        object.__setattr__(self, "running", running)
        for name, dtype in (
            ("remaining_prefill_tokens", "float64"),
            ("prefill_deadline_s", "float64"),
            ("tpot_s", "float64"),
            ("kv_tokens", "float64"),
            ("value", "float64"),
            ("output_tokens", "float64"),
        ):
            object.__setattr__(self, name, _frozen(getattr(self, name), dtype, name, n))
        for name in ("remaining_prefill_tokens", "kv_tokens", "output_tokens"):
            arr = getattr(self, name)
            bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < 0)
            if bad.any():
                i = _first(bad)
                raise ValueError(f"{name} must be an integer >= 0, got {arr[i]} (row {i})")
            object.__setattr__(self, name, _frozen(arr, "int64", name, n))
        prefill, new = self.remaining_prefill_tokens, ~running
        if (new & (prefill < 1)).any():
            i = _first(new & (prefill < 1))
            raise ValueError(
                f"remaining_prefill_tokens of a new request must be >= 1, got 0 (row {i})"
            )
        if (self.output_tokens < 1).any():
            i = _first(self.output_tokens < 1)
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens[i]} (row {i})")
        deadline = self.prefill_deadline_s
        bad = (prefill > 0) & ~np.isfinite(deadline)
        if bad.any():
            i = _first(bad)
            raise ValueError(
                f"prefill_deadline_s must be finite for a prefilling request, got {deadline[i]} (row {i})"
            )
        tpot = self.tpot_s
        if (~np.isfinite(tpot) | (tpot <= 0)).any():
            i = _first(~np.isfinite(tpot) | (tpot <= 0))
            raise ValueError(f"tpot_s must be a finite number > 0, got {tpot[i]} (row {i})")
        val = self.value
        if (~np.isfinite(val) | (val < 0)).any():
            i = _first(~np.isfinite(val) | (val < 0))
            raise ValueError(f"value must be a finite number >= 0, got {val[i]} (row {i})")
        decoding = running & (prefill == 0)
        if self.generated_tokens is None:
            generated = decoding.astype("int64")
        else:
            generated = np.array(self.generated_tokens, dtype="float64")
            if generated.shape != (n,):
                raise ValueError(f"generated_tokens has shape {generated.shape}, expected ({n},)")
            bad = ~np.isfinite(generated) | (generated != np.round(generated)) | (generated < 0)
            if bad.any():
                i = _first(bad)
                raise ValueError(
                    f"generated_tokens must be an integer >= 0, got {generated[i]} (row {i})"
                )
            generated = generated.astype("int64")
        if (generated > self.output_tokens).any():
            i = _first(generated > self.output_tokens)
            raise ValueError(
                f"generated_tokens must be <= output_tokens, got {generated[i]} > "
                f"{self.output_tokens[i]} (row {i})"
            )
        object.__setattr__(
            self, "generated_tokens", _frozen(generated, "int64", "generated_tokens", n)
        )
        if int(self.kv_capacity_tokens) != self.kv_capacity_tokens or self.kv_capacity_tokens < 1:
            raise ValueError(
                f"kv_capacity_tokens must be an integer >= 1, got {self.kv_capacity_tokens}"
            )
        object.__setattr__(self, "kv_capacity_tokens", int(self.kv_capacity_tokens))
        if not isinstance(self.timing, TimingModel):
            raise TypeError(f"timing must be a TimingModel, got {type(self.timing).__name__}")
        if not math.isfinite(self.call_time_s):
            raise ValueError(f"call_time_s must be finite, got {self.call_time_s}")
        tightest = float(tpot.min())
        t0 = tightest if self.batch_duration_s is None else float(self.batch_duration_s)
        if not 0 < t0 <= tightest * (1 + TIME_TOL):
            raise ValueError(
                f"batch_duration_s must be in (0, {tightest}] (the tightest TPOT), got {t0}"
            )
        object.__setattr__(self, "batch_duration_s", t0)
        finite_deadlines = deadline[prefill > 0]
        latest = float(finite_deadlines.max()) if finite_deadlines.size else 0.0
        horizon = (
            max(latest, 0.0) + float(tpot.max())
            if self.horizon_s is None
            else float(self.horizon_s)
        )
        if not (math.isfinite(horizon) and horizon >= latest and horizon > 0):
            raise ValueError(
                f"horizon_s must be > 0 and >= the latest prefill deadline {latest}, got {horizon}"
            )
        object.__setattr__(self, "horizon_s", horizon)

    # -- views ----------------------------------------------------------------------------
    @property
    def n_requests(self) -> int:
        return len(self.running)

    @property
    def new_rows(self) -> np.ndarray:
        """Rows of the new requests (the decisions)."""
        return np.flatnonzero(~self.running)

    @property
    def running_rows(self) -> np.ndarray:
        """Rows of the running requests (forced)."""
        return np.flatnonzero(self.running)

    @property
    def decoding(self) -> np.ndarray:
        """Bool mask of running requests already decoding (no prefill left)."""
        return self.running & (self.remaining_prefill_tokens == 0)

    @property
    def tier_tpot_s(self) -> np.ndarray:
        """Distinct TPOT tiers, tightest first."""
        return np.unique(self.tpot_s)

    @property
    def tier(self) -> np.ndarray:
        """Tier index of each row (into :attr:`tier_tpot_s`)."""
        return np.searchsorted(self.tier_tpot_s, self.tpot_s)

    @property
    def decode_tokens_left(self) -> np.ndarray:
        """Decode iterations each request still needs (its first token comes from the prefill)."""
        first_from_prefill = (self.remaining_prefill_tokens > 0).astype("int64")
        return np.maximum(self.output_tokens - self.generated_tokens - first_from_prefill, 0)

    # -- instance encoding ----------------------------------------------------------------
    @classmethod
    def from_instance(cls, instance: Instance) -> AdmissionProblem:
        """The problem encoded by an ``"slos-admission"`` instance (see the module docstring).

        With a given cache (the workload column ``cached_tokens``), a new request's
        ``remaining_prefill_tokens`` and ``kv_tokens`` are its columns less its cached tokens:
        the models charge the uncached prompt and hold the cache outside the capacity.

        Raises
        ------
        ValueError
            The instance is for another problem or misses a column, or a running request has
            cached tokens.
        """
        if instance.problem != PROBLEM:
            raise ValueError(
                f"instance {instance.name!r} is for problem {instance.problem!r}, expected {PROBLEM!r}"
            )
        w = instance.workload
        missing = [c for c in ("running", "remaining_prefill_tokens", "kv_tokens") if c not in w]
        if missing:
            raise ValueError(f"instance {instance.name!r} misses column(s) {', '.join(missing)}")
        settings = instance.settings
        call = float(settings.get("call_time_s", float(w.arrival_s.max())))
        if "prefill_deadline_s" in w:
            deadline = np.asarray(w["prefill_deadline_s"], dtype=float)
        else:
            deadline = w.arrival_s + w["ttft_slo_s"]
        running = np.asarray(w["running"], dtype=bool)
        prefill, kv = _uncached(instance, running)
        return cls(
            running=running,
            remaining_prefill_tokens=prefill,
            prefill_deadline_s=deadline - call,
            tpot_s=w["tpot_slo_s"],
            kv_tokens=kv,
            value=w["value"],
            output_tokens=w.output_tokens,
            kv_capacity_tokens=int(
                settings.get("kv_capacity_tokens", instance.cluster.kv_capacity_tokens)
            ),
            timing=instance.timing,
            generated_tokens=w["generated_tokens"] if "generated_tokens" in w else None,
            call_time_s=call,
            batch_duration_s=settings.get("batch_duration_s"),
            horizon_s=settings.get("horizon_s"),
        )


def _uncached(instance: Instance, running: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(p_r, m_r)`` of an instance: its prefill and memory columns less each new request's
    given cache (:data:`~slolab.instances.records.CACHED_COLUMN`; the columns themselves
    without it). A new request computes only its uncached prompt and holds only what it
    computes and generates against the capacity (docs/engine.md, "A snapshot's given cache").

    Raises
    ------
    ValueError
        A running request has cached tokens (it is warm-started holding its KV), or a new
        request's columns leave nothing to prefill or a negative memory once the cache is out.
    """
    w = instance.workload
    prefill = np.asarray(w["remaining_prefill_tokens"], dtype=np.int64)
    kv = np.asarray(w["kv_tokens"], dtype=np.int64)
    cached = cached_prompt_tokens(w)
    if not cached.any():
        return prefill, kv
    bad = running & (cached > 0)
    if bad.any():
        i = _first(bad)
        raise ValueError(
            f"{PROBLEM} instance {instance.name!r}: {CACHED_COLUMN} of a running request must "
            f"be 0 (it is warm-started holding its KV), got {cached[i]} (row {i})"
        )
    bad = (cached > 0) & ((prefill - cached < 1) | (kv - cached < 0))
    if bad.any():
        i = _first(bad)
        raise ValueError(
            f"{PROBLEM} instance {instance.name!r}: {CACHED_COLUMN} {cached[i]} leaves a new request "
            f"{prefill[i] - cached[i]} tokens to prefill and {kv[i] - cached[i]} of memory "
            f"(remaining_prefill_tokens {prefill[i]}, kv_tokens {kv[i]}, row {i})"
        )
    return prefill - cached, kv - cached


def random_problem(
    seed: int,
    *,
    timing: TimingModel,
    new_range: tuple[int, int] = (1, 8),
    running_range: tuple[int, int] = (0, 5),
    tiers: tuple[float, ...] = (0.05, 0.1, 0.075),
) -> AdmissionProblem:
    """A small random scheduler call (seeded), memory in multiples of 64 tokens.

    New and running counts are drawn from ``[lo, hi)`` of ``new_range`` / ``running_range``;
    about 60% of running requests are decoding, the others still prefilling; TPOTs from
    ``tiers``; deadlines on a millisecond grid.
    """
    rng = np.random.default_rng(seed)
    n_new, n_run = int(rng.integers(*new_range)), int(rng.integers(*running_range))
    n = n_new + n_run
    running = np.arange(n) < n_run
    decoding = running & (rng.random(n) < 0.6)
    prefill = np.where(running, rng.integers(10, 80, n), rng.integers(20, 300, n))
    deadline = np.where(running, rng.uniform(0.3, 0.8, n), rng.uniform(0.05, 0.6, n)).round(3)
    return AdmissionProblem(
        running=running,
        remaining_prefill_tokens=np.where(decoding, 0, prefill),
        prefill_deadline_s=np.where(decoding, np.nan, deadline),
        tpot_s=rng.choice(tiers, n),
        kv_tokens=64 * rng.integers(1, 8, n),
        value=rng.integers(1, 10, n).astype(float),
        output_tokens=rng.integers(1, 20, n),
        kv_capacity_tokens=64 * int(rng.integers(n, 4 * n + 2)),
        timing=timing,
    )


def snapshot_instance(
    name: str,
    call_time_s: float,
    arrival_s: Sequence[float] | np.ndarray,
    prompt_tokens: Sequence[int] | np.ndarray,
    output_tokens: Sequence[int] | np.ndarray,
    ttft_slo_s: Sequence[float] | np.ndarray,
    tpot_slo_s: Sequence[float] | np.ndarray,
    timing: TimingModel,
    cluster: Cluster | None = None,
    running: Sequence[bool] | np.ndarray | None = None,
    remaining_prefill_tokens: Sequence[int] | np.ndarray | None = None,
    kv_tokens: Sequence[int] | np.ndarray | None = None,
    value: Sequence[float] | np.ndarray | None = None,
    generated_tokens: Sequence[int] | np.ndarray | None = None,
    prefill_deadline_s: Sequence[float] | np.ndarray | None = None,
    cached_tokens: Sequence[int] | np.ndarray | None = None,
    **settings: Any,
) -> Instance:
    """An ``"slos-admission"`` instance from per-request arrays (a trace snapshot).

    Rows are sorted by arrival (stable); the column ``snapshot_row`` keeps each row's position
    in the given arrays. Defaults: ``running`` all False; ``remaining_prefill_tokens`` the
    prompt (needed when a request is running); ``kv_tokens`` ``prompt_tokens +
    output_tokens``; ``value`` 1; ``prefill_deadline_s`` ``arrival_s + ttft_slo_s``.
    ``cached_tokens`` (new requests only; 0 for running ones) is the snapshot's given cache,
    written as the workload column ``cached_tokens``; the columns ``remaining_prefill_tokens``
    and ``kv_tokens`` keep their meaning without it (the prompt, prompt plus output).
    ``settings`` are stored on the instance (``kv_capacity_tokens``, ``batch_duration_s``,
    ``horizon_s``, ``b2_cells_per_batch``), with ``call_time_s``. The result is checked by
    building its :class:`AdmissionProblem`.
    """
    arrival = np.asarray(arrival_s, dtype=float)
    n = len(arrival)
    order = np.argsort(arrival, kind="stable")
    prompt = np.asarray(prompt_tokens)
    output = np.asarray(output_tokens)
    columns: dict[str, Any] = {
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "ttft_slo_s": np.asarray(ttft_slo_s, dtype=float),
        "tpot_slo_s": np.asarray(tpot_slo_s, dtype=float),
        "value": np.ones(n) if value is None else np.asarray(value, dtype=float),
        "running": np.zeros(n, dtype=bool) if running is None else np.asarray(running, dtype=bool),
        "remaining_prefill_tokens": prompt
        if remaining_prefill_tokens is None
        else np.asarray(remaining_prefill_tokens),
        "kv_tokens": prompt + output if kv_tokens is None else np.asarray(kv_tokens),
        "snapshot_row": np.arange(n),
    }
    if generated_tokens is not None:
        columns["generated_tokens"] = np.asarray(generated_tokens)
    if prefill_deadline_s is not None:
        columns["prefill_deadline_s"] = np.asarray(prefill_deadline_s, dtype=float)
    if cached_tokens is not None:
        columns[CACHED_COLUMN] = np.asarray(cached_tokens, dtype=np.int64)
    if remaining_prefill_tokens is None and columns["running"].any():
        raise ValueError("remaining_prefill_tokens is needed when some request is running")
    for key, col in columns.items():
        if len(col) != n:
            raise ValueError(f"{key} has length {len(col)}, expected {n}")
    workload = Workload({k: v[order] for k, v in columns.items()}, source=f"snapshot {name}")
    instance = Instance(
        name=name,
        workload=workload,
        cluster=cluster if cluster is not None else Cluster(),
        timing=timing,
        problem=PROBLEM,
        settings={"call_time_s": float(call_time_s), **settings},
    )
    AdmissionProblem.from_instance(instance)
    return instance


def served_rows(problem: AdmissionProblem, admitted: Sequence[int]) -> np.ndarray:
    """Rows a decision serves: the running rows and the ``admitted`` new ones, sorted."""
    rows = np.union1d(problem.running_rows, np.asarray(admitted, dtype="int64"))
    return rows.astype("int64")
