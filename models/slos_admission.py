"""SLOs-Serve admission at one scheduler call: the problem record and the exact models B1, B2.

At a scheduler call (time 0 below; ``call_time_s`` on the instance clock) the scheduler holds
*running* requests, which must keep their SLOs, and *new* requests, which it may admit or
decline. Each request has a prefill still to run (``remaining_prefill_tokens``, 0 when it is
decoding) that must be complete by its prefill deadline, a decode TPOT tier, a KV memory need
and (new requests) a value. The models choose the admitted set of largest total value such
that a batch process on one server keeps every admitted and running request within its SLOs.

- **B1** (:class:`AdmissionB1`, ``"slos-b1"``): the paper's batch process. Batches of fixed
  duration ``t0`` (the tightest TPOT in play) each carry ``C = time2bs(t0)`` tokens; decode
  tokens follow Algorithm 2's cadence; prefill budget is allocated earliest deadline first. A
  0-1 MILP with one cumulative token-budget constraint per distinct deadline and one
  per-batch decode-load constraint per (segment, slot pattern); plus brute force.
- **B2** (:class:`AdmissionB2`, ``"slos-b2"``): dynamic batch sizing. Batches are arcs on a
  time grid of step ``t0 / cells_per_batch``, each with its own duration (bounded by the
  tightest TPOT of the requests decoding during it) and token capacity ``time2bs(duration)``;
  each request picks when it starts decoding, and every decode token is emitted by its
  deadline, within the horizon and after it. B1's batches are one feasible choice when every
  TPOT is a multiple of ``t0``, so B2 >= B1 then. A 0-1 MILP; plus brute force.

The math, the reading of Algorithm 2 and the proofs are in ``docs/slos_serve.md``.

Instance encoding (``instance.problem == "slos-admission"``): one workload row per request.
Standard columns used: ``arrival_s``, ``prompt_tokens``, ``output_tokens``, ``ttft_slo_s``,
``tpot_slo_s`` (the decode tier), ``value``. Extra columns: ``running`` (bool),
``remaining_prefill_tokens`` (int; a new request's is its prompt), ``kv_tokens`` (int, KV
memory reserved for the request's whole life, prompt plus expected output), optional
``prefill_deadline_s`` (absolute; default ``arrival_s + ttft_slo_s``) and optional
``generated_tokens`` (output tokens already emitted; default 1 for decoding running requests,
0 otherwise). Settings: ``call_time_s`` (default the latest arrival), optional
``kv_capacity_tokens`` (default ``cluster.kv_capacity_tokens``), ``batch_duration_s`` (``t0``),
``horizon_s`` (relative to the call) and ``b2_cells_per_batch``.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim.schedule import PlannedIteration, Schedule
from slolab.solvers.base import ExactModel, MilpFormulation
from slolab.solvers.registry import register_model
from slolab.timing.base import TimingModel
from slolab.timing.inverse import time2bs

__all__ = [
    "PROBLEM",
    "AdmissionB1",
    "AdmissionB2",
    "AdmissionPlan",
    "AdmissionProblem",
    "BatchProcess",
    "batch_process",
    "plan_b1",
    "plan_schedule",
    "plan_violations",
    "snapshot_instance",
    "tier_releases_before",
]

logger = logging.getLogger("slolab")

#: ``Instance.problem`` of an admission instance.
PROBLEM = "slos-admission"
#: Tolerance (s, or batch units) when times are compared or snapped to a grid.
TIME_TOL = 1e-9
#: Default grid cells per ``t0`` in B2.
DEFAULT_CELLS_PER_BATCH = 2


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
        Prompt tokens still to prefill; 0 for a decoding request, >= 1 for a new one.
    prefill_deadline_s : float array (n,)
        Time by which the prefill must be complete (the first token emitted); ignored (may be
        nan) for decoding requests. A deadline before ``t0`` cannot be met.
    tpot_s : float array (n,)
        Decode TPOT tier of each request (> 0).
    kv_tokens : int array (n,)
        KV memory the request holds for its whole life (prompt plus expected output).
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

        Raises
        ------
        ValueError
            The instance is for another problem or misses a column.
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
        return cls(
            running=np.asarray(w["running"], dtype=bool),
            remaining_prefill_tokens=w["remaining_prefill_tokens"],
            prefill_deadline_s=deadline - call,
            tpot_s=w["tpot_slo_s"],
            kv_tokens=w["kv_tokens"],
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
    **settings: Any,
) -> Instance:
    """An ``"slos-admission"`` instance from per-request arrays (a trace snapshot).

    Rows are sorted by arrival (stable); the column ``snapshot_row`` keeps each row's position
    in the given arrays. Defaults: ``running`` all False; ``remaining_prefill_tokens`` the
    prompt (needed when a request is running); ``kv_tokens`` ``prompt_tokens +
    output_tokens``; ``value`` 1; ``prefill_deadline_s`` ``arrival_s + ttft_slo_s``.
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


# -- the batch process of B1 ------------------------------------------------------------------
def tier_releases_before(
    tpot_s: float, batch_duration_s: float, units: np.ndarray, per_batch: int = 1
) -> np.ndarray:
    """Decode-token releases ``k * tpot_s`` (``k >= 0``) strictly before ``units * t0 / per_batch``.

    Algorithm 2 releases a tier's ``k``-th decode token at ``k * TPOT`` (``schDDL`` starts at
    0 and grows by TPOT); a token released during a batch is served by that batch. The count
    of releases before time ``x`` is ``ceil(x / TPOT)`` for ``x > 0`` (0 at ``x = 0``).
    """
    x = np.asarray(units, dtype=float) * (batch_duration_s / per_batch) / tpot_s
    return np.maximum(np.ceil(x - TIME_TOL), 0).astype("int64")


@dataclass(frozen=True, slots=True)
class BatchProcess:
    """B1's batch process for one problem: batches ``[i t0, (i + 1) t0)``, ``i < n_batches``.

    Attributes
    ----------
    batch_duration_s : float
        ``t0``.
    batch_tokens : int
        ``C = time2bs(t0)``, tokens per batch.
    n_batches : int
        ``K = ceil(horizon / t0)``.
    deadline_batch : int array (n,)
        ``b_r = floor(d_r / t0)`` (clipped to ``[0, K]``): batches complete by the prefill
        deadline; the prefill runs in batches ``< b_r`` and decoding starts at batch ``b_r``.
        0 for decoding requests.
    tier_slots : int array (L, K + 1)
        ``G_l(J)``: decode tokens a tier-``l`` request decoding since time 0 receives in
        batches ``< J`` (Algorithm 2 cadence).
    slot : bool array (L, K)
        ``g_l(i) = G_l(i + 1) - G_l(i)``: whether tier ``l`` has a decode token in batch ``i``.
    """

    batch_duration_s: float
    batch_tokens: int
    n_batches: int
    deadline_batch: np.ndarray
    tier_slots: np.ndarray
    slot: np.ndarray

    def decode_demand(self, tier: int, start_batch: int, end_batch: int) -> int:
        """Decode tokens of a tier-``tier`` request decoding from ``start_batch``, in batches ``< end_batch``."""
        if end_batch <= start_batch:
            return 0
        return int(self.tier_slots[tier, end_batch] - self.tier_slots[tier, start_batch])


def batch_process(problem: AdmissionProblem) -> BatchProcess:
    """The B1 batch process of ``problem`` (``t0``, ``C``, ``K``, deadline batches, cadence)."""
    t0 = float(problem.batch_duration_s)  # type: ignore[arg-type]
    capacity = time2bs(problem.timing, t0)
    n_batches = max(1, int(math.ceil(float(problem.horizon_s) / t0 - TIME_TOL)))  # type: ignore[arg-type]
    deadline = np.where(problem.remaining_prefill_tokens > 0, problem.prefill_deadline_s, 0.0)
    b = np.clip(np.floor(deadline / t0 + TIME_TOL), 0, n_batches).astype("int64")
    b[problem.remaining_prefill_tokens == 0] = 0
    units = np.arange(n_batches + 1)
    tiers = problem.tier_tpot_s
    slots = np.stack([tier_releases_before(float(t), t0, units) for t in tiers])
    per_batch = np.diff(slots, axis=1)
    if (per_batch > 1).any():
        raise ValueError("a TPOT tier is tighter than batch_duration_s")
    slot = per_batch.astype(bool)
    for arr in (b, slots, slot):
        arr.setflags(write=False)
    return BatchProcess(t0, int(capacity), n_batches, b, slots, slot)


# -- plans ------------------------------------------------------------------------------------
Entry = tuple[int, str, int]


@dataclass(frozen=True, slots=True, eq=False)
class AdmissionPlan:
    """Admitted set and batches of one call, in the model's view (through the horizon).

    Compared by identity (it holds arrays); :func:`plan_violations` checks one.

    Attributes
    ----------
    admitted : tuple of int
        New rows admitted (sorted).
    batch_start_s, batch_end_s : float arrays (B,)
        Planned start and end of each batch, relative to the call (batches tile
        ``[0, horizon]``; a batch may be empty).
    prefill : tuple of tuple of (row, tokens)
        Prefill chunks of each batch.
    decode_rows : int array (D,)
        Rows that receive decode tokens (running and admitted).
    decode : bool array (D, B)
        ``decode[k, i]``: row ``decode_rows[k]`` gets one decode token in batch ``i``.
    """

    admitted: tuple[int, ...]
    batch_start_s: np.ndarray
    batch_end_s: np.ndarray
    prefill: tuple[tuple[tuple[int, int], ...], ...]
    decode_rows: np.ndarray
    decode: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.batch_start_s)
        if not len(self.batch_end_s) == len(self.prefill) == n:
            raise ValueError(
                f"batch_start_s, batch_end_s and prefill must have one entry per batch, got "
                f"{n}, {len(self.batch_end_s)}, {len(self.prefill)}"
            )
        if self.decode.shape != (len(self.decode_rows), n):
            raise ValueError(
                f"decode has shape {self.decode.shape}, expected ({len(self.decode_rows)}, {n})"
            )
        for name in ("batch_start_s", "batch_end_s", "decode_rows", "decode"):
            getattr(self, name).setflags(write=False)

    @property
    def n_batches(self) -> int:
        return len(self.batch_start_s)

    @property
    def batches(self) -> tuple[tuple[Entry, ...], ...]:
        """Entries of each batch: prefill chunks ``(r, "prefill", tokens)`` then ``(r, "decode", 1)``."""
        rows = self.decode_rows.tolist()
        out = []
        for i, chunks in enumerate(self.prefill):
            entries: list[Entry] = [(r, "prefill", t) for r, t in chunks]
            entries.extend(
                (rows[k], "decode", 1) for k in np.flatnonzero(self.decode[:, i]).tolist()
            )
            out.append(tuple(entries))
        return tuple(out)


def _edf_fill(pending: list[int], left: dict[int, int], budget: int) -> tuple[tuple[int, int], ...]:
    """Give ``budget`` prefill tokens to ``pending`` rows in order (earliest deadline first)."""
    chunks = []
    while budget > 0 and pending:
        r = pending[0]
        take = min(budget, left[r])
        chunks.append((r, take))
        left[r] -= take
        budget -= take
        if left[r] == 0:
            pending.pop(0)
    return tuple(chunks)


def _served_rows(problem: AdmissionProblem, admitted: Sequence[int]) -> np.ndarray:
    rows = np.union1d(problem.running_rows, np.asarray(admitted, dtype="int64"))
    return rows.astype("int64")


def _fill_prefill(
    deadline: np.ndarray,
    rows: np.ndarray,
    problem: AdmissionProblem,
    budgets: np.ndarray,
    ends: np.ndarray,
) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """Earliest-deadline-first prefill over batches with residual ``budgets``; a row must be
    complete in batches ending at or before its ``deadline`` (same units as ``ends``)."""
    prefill = problem.remaining_prefill_tokens
    pending = sorted((int(r) for r in rows if prefill[r] > 0), key=lambda r: (int(deadline[r]), r))
    left = {r: int(prefill[r]) for r in pending}
    out = []
    for budget, end in zip(budgets.tolist(), ends.tolist(), strict=True):
        if pending and deadline[pending[0]] < end:
            return None
        out.append(_edf_fill(pending, left, int(budget)))
    if pending:
        return None
    return tuple(out)


def plan_b1(
    problem: AdmissionProblem, admitted: Sequence[int], process: BatchProcess | None = None
) -> AdmissionPlan | None:
    """Run B1's batch process for ``admitted`` (plus the running rows); None if it fails.

    Batch ``i`` serves the decode token of every served request ``r`` with ``b_r <= i`` and a
    slot of its tier in batch ``i`` (Algorithm 2's cadence); the rest of its ``C`` tokens go to
    prefills, earliest deadline batch first (ties by row). The plan fails when a batch's decode
    tokens exceed ``C``, a prefill is not complete by its deadline batch, or memory exceeds
    the capacity.
    """
    proc = process if process is not None else batch_process(problem)
    rows = _served_rows(problem, admitted)
    if int(problem.kv_tokens[rows].sum()) > problem.kv_capacity_tokens:
        return None
    b = proc.deadline_batch
    n_batches = proc.n_batches
    decode = (b[rows][:, None] <= np.arange(n_batches)[None, :]) & proc.slot[problem.tier[rows], :]
    load = decode.sum(axis=0)
    if (load > proc.batch_tokens).any():
        return None
    prefill = _fill_prefill(b, rows, problem, proc.batch_tokens - load, np.arange(1, n_batches + 1))
    if prefill is None:
        return None
    starts = np.arange(n_batches) * proc.batch_duration_s
    used = decode.any(axis=1)
    return AdmissionPlan(
        tuple(sorted(int(r) for r in admitted)),
        starts,
        starts + proc.batch_duration_s,
        prefill,
        rows[used],
        decode[used],
    )


def plan_violations(
    problem: AdmissionProblem, plan: AdmissionPlan, token_deadlines: bool = False
) -> list[str]:
    """Check a plan against the admission rules, independently of how it was built.

    Rules: batches are ordered and tile ``[0, end]`` without gaps; each batch carries at most
    ``time2bs(duration)`` tokens and each request at most one entry; every served prefill
    totals its remaining tokens and ends by its deadline; no decode entry precedes the
    request's prefill completion; every decode release ``k * TPOT_r`` at or after the
    request's decode start (its prefill deadline, 0 when decoding) and before the plan's end
    falls in a batch that gives the request a decode token; a batch is no longer than the TPOT
    of any request it gives a decode token; memory within capacity. With ``token_deadlines``
    also the metric's token deadlines (docs/slos_serve.md, Sec. 4): the ``m``-th decode token
    of a prefilling request comes from a batch whose iteration, started at the batch start
    and taking the time of its tokens, ends by ``d_r + m TPOT_r`` (it carries at most
    ``time2bs(d_r + m TPOT_r - start)`` tokens), and every token due by the plan's end is in
    it. B2's plans meet them; B1's when every TPOT is a multiple of ``t0``. Returns the
    violations (empty when clean).
    """
    out: list[str] = []
    rows = _served_rows(problem, plan.admitted)
    if int(problem.kv_tokens[rows].sum()) > problem.kv_capacity_tokens:
        out.append(
            f"memory {int(problem.kv_tokens[rows].sum())} exceeds {problem.kv_capacity_tokens}"
        )
    start, end = np.asarray(plan.batch_start_s), np.asarray(plan.batch_end_s)
    if plan.n_batches == 0:
        return out + ["the plan has no batches"]
    if (
        abs(start[0]) > TIME_TOL
        or (np.abs(start[1:] - end[:-1]) > TIME_TOL).any()
        or (end <= start).any()
    ):
        out.append("batches do not tile the time line from 0 without gaps")
    served = set(int(r) for r in rows)
    prefill_left = {r: int(problem.remaining_prefill_tokens[r]) for r in served}
    prefill_done = {r: 0.0 for r in served if prefill_left[r] == 0}
    decode_batches: dict[int, list[int]] = {r: [] for r in served}
    capacity_of: dict[float, int] = {}
    batch_tokens = []
    for k, entries in enumerate(plan.batches):
        duration = round(float(end[k] - start[k]), 12)
        if duration not in capacity_of:
            capacity_of[duration] = time2bs(problem.timing, duration)
        tokens = sum(t for _, _, t in entries)
        batch_tokens.append(tokens)
        if tokens > capacity_of[duration]:
            out.append(f"batch {k} carries {tokens} tokens, more than {capacity_of[duration]}")
        seen: set[int] = set()
        for r, phase, t in entries:
            if r not in served:
                out.append(f"batch {k} serves request {r}, which is neither running nor admitted")
                continue
            if r in seen:
                out.append(f"request {r} appears twice in batch {k}")
            seen.add(r)
            if phase == "prefill":
                prefill_left[r] -= t
                if prefill_left[r] < 0:
                    out.append(f"request {r} gets more prefill tokens than it needs")
                if prefill_left[r] == 0:
                    prefill_done[r] = float(end[k])
            else:
                if r not in prefill_done or prefill_done[r] > start[k] + TIME_TOL:
                    out.append(f"request {r} decodes in batch {k} before its prefill is complete")
                if end[k] - start[k] > problem.tpot_s[r] + TIME_TOL:
                    out.append(f"batch {k} is longer than the TPOT of request {r} it serves")
                decode_batches[r].append(k)
    horizon_end = float(end[-1])
    for r in sorted(served):
        if prefill_left[r] > 0:
            out.append(f"request {r} has {prefill_left[r]} prefill tokens never scheduled")
            continue
        if problem.remaining_prefill_tokens[r] > 0:
            if prefill_done[r] > problem.prefill_deadline_s[r] + TIME_TOL:
                out.append(
                    f"request {r} completes its prefill at {prefill_done[r]:.6g} s, after its "
                    f"deadline {problem.prefill_deadline_s[r]:.6g} s"
                )
            decode_start = float(problem.prefill_deadline_s[r])
        else:
            decode_start = 0.0
        tpot = float(problem.tpot_s[r])
        first = max(0, math.ceil(decode_start / tpot - TIME_TOL))
        releases = np.arange(first, int(horizon_end / tpot) + 2) * tpot
        releases = releases[releases < horizon_end - TIME_TOL]
        holder = np.searchsorted(end, releases + TIME_TOL, side="right")
        holder = np.minimum(holder, plan.n_batches - 1)
        missing = sorted(set(holder.tolist()) - set(decode_batches[r]))
        if missing:
            out.append(f"request {r} misses decode tokens released during batches {missing[:5]}")
        if token_deadlines and problem.remaining_prefill_tokens[r] > 0:
            out.extend(_late_tokens(problem, r, decode_batches[r], start, end, batch_tokens))
    return out


def _late_tokens(
    problem: AdmissionProblem,
    row: int,
    batches: Sequence[int],
    start: np.ndarray,
    end: np.ndarray,
    batch_tokens: Sequence[int],
) -> list[str]:
    """Token-deadline violations of a prefilling ``row`` decoding in ``batches`` (in order)."""
    out = []
    d, tpot = float(problem.prefill_deadline_s[row]), float(problem.tpot_s[row])
    for m, k in enumerate(batches, start=1):
        due = d + m * tpot
        if end[k] <= due + TIME_TOL:
            continue
        if due <= start[k] or batch_tokens[k] > time2bs(problem.timing, due - float(start[k])):
            out.append(
                f"request {row}'s decode token {m} comes from batch {k}, whose iteration ends "
                f"after the token's deadline {due:.6g} s"
            )
    owed = math.floor((float(end[-1]) - d) / tpot + TIME_TOL)
    if len(batches) < owed:
        out.append(
            f"request {row} gets {len(batches)} decode tokens in the plan, but {owed} fall due "
            "by its end"
        )
    return out


def plan_schedule(
    problem: AdmissionProblem, plan: AdmissionPlan, complete: bool = True
) -> Schedule:
    """The engine-replayable schedule of a plan (one server).

    Empty batches are dropped; each iteration has ``not_before_s = call_time_s + planned start``
    so that no iteration runs before its planned start. Decode entries stop once the request
    has all its output tokens. With ``complete``, batches of ``t0`` continue after the plan on
    Algorithm 2's cadence until every served request has finished (decode only: a later
    scheduler call re-plans); their tokens are on time when the ``n`` served requests fit one
    batch and every token is released at least ``T(n)`` before its deadline, which B2 requires
    and B1 gives for ``n <= C`` when every TPOT is a multiple of ``t0`` (docs/slos_serve.md,
    Sec. 3 and 4). Declined new requests are ``rejected``.
    """
    proc = batch_process(problem)
    left = problem.decode_tokens_left.copy()
    rows = _served_rows(problem, plan.admitted)
    its: list[PlannedIteration] = []
    call = problem.call_time_s

    def emit(entries: Sequence[Entry], start_s: float) -> None:
        kept: list[Entry] = []
        for r, phase, t in entries:
            if phase == "decode":
                if left[r] == 0:
                    continue
                left[r] -= 1
            kept.append((int(r), phase, int(t)))
        if kept:
            its.append(PlannedIteration(tuple(kept), not_before_s=max(0.0, call + start_s)))

    for entries, start_s in zip(plan.batches, plan.batch_start_s, strict=True):
        emit(entries, float(start_s))
    if complete and left[rows].sum() > 0:
        t0 = proc.batch_duration_s
        first = int(round(float(plan.batch_end_s[-1]) / t0))
        ratio = problem.tier_tpot_s / t0
        span = int(np.ceil(left[rows].max() * ratio.max())) + 2
        units = np.arange(first, first + span + 1)
        due = np.stack([tier_releases_before(float(t), t0, units) for t in problem.tier_tpot_s])
        has_slot = np.diff(due, axis=1) > 0
        tiers = problem.tier[rows]
        for k in range(span):
            if left[rows].sum() == 0:
                break
            emit([(int(r), "decode", 1) for r in rows[has_slot[tiers, k]]], (first + k) * t0)
    rejected = frozenset(int(r) for r in problem.new_rows if int(r) not in set(plan.admitted))
    return Schedule((tuple(its),), rejected=rejected)


# -- exact models -----------------------------------------------------------------------------
def _as_problem(instance: Instance | AdmissionProblem) -> AdmissionProblem:
    if isinstance(instance, AdmissionProblem):
        return instance
    if isinstance(instance, Instance):
        return AdmissionProblem.from_instance(instance)
    raise TypeError(f"expected an Instance or AdmissionProblem, got {type(instance).__name__}")


class _AdmissionModel(ExactModel):
    """Shared parts of B1 and B2: the problem, admission variables, memory, objective."""

    sense = "max"

    def __init__(self, instance: Instance | AdmissionProblem) -> None:
        super().__init__(instance)
        self.problem = _as_problem(instance)
        self.process = batch_process(self.problem)
        #: PuLP variables of the last :meth:`milp` (power users): ``x[row]`` and model extras.
        self.variables: dict[str, Any] = {}

    def _admission_variables(self, prob: Any) -> tuple[dict[int, Any], Any]:
        """``x_i`` in {0, 1} per new row, and ``keep`` fixed to 1 that carries running terms."""
        x = {int(r): prob.add_variable(f"x_{int(r)}", cat="Binary") for r in self.problem.new_rows}
        keep = prob.add_variable("keep_running", lowBound=1, upBound=1)
        return x, keep

    def _coef(self, r: int, x: Mapping[int, Any], keep: Any) -> Any:
        """The decision of row ``r``: ``x_r`` when new, the constant-1 variable when running."""
        return keep if self.problem.running[r] else x[r]

    def _memory(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """``sum_r m_r x_r <= M`` over running (x = 1) and new rows."""
        p = self.problem
        prob += (
            pulp.lpSum(int(p.kv_tokens[r]) * self._coef(r, x, keep) for r in range(p.n_requests))
            <= p.kv_capacity_tokens,
            "memory",
        )

    def _objective(self, prob: Any, x: Mapping[int, Any], pulp: Any) -> None:
        """Maximize ``sum_i v_i x_i`` over new rows."""
        prob += pulp.lpSum(float(self.problem.value[i]) * xi for i, xi in x.items())

    def _admitted(self, x: Mapping[int, Any]) -> list[int]:
        return sorted(i for i, xi in x.items() if (xi.value() or 0.0) > 0.5)


@register_model("slos-b1")
class AdmissionB1(_AdmissionModel):
    """B1: admission under SLOs-Serve's fixed-duration batch process (exact 0-1 MILP).

    Variables ``x_i`` (admit new request ``i``); running requests have ``x = 1``. With
    ``b_r = floor(d_r / t0)``, ``G_l`` the tier cadence and ``C = time2bs(t0)``:

    - cumulative budget at every distinct deadline batch ``B``:
      ``sum_{r: b_r <= B} p_r x_r + sum_r x_r (G_{l_r}(B) - G_{l_r}(b_r))^+ <= B C``;
    - decode load of every batch ``i < K``: ``sum_{r: b_r <= i} g_{l_r}(i) x_r <= C``;
    - memory ``sum_r m_r x_r <= M``.

    The constraints are necessary and sufficient for the batch process with earliest-deadline
    prefill allocation (docs/slos_serve.md, "B1").

    Parameters
    ----------
    instance : Instance or AdmissionProblem
        An ``"slos-admission"`` instance, or the problem itself.

    References
    ----------
    SLOs-Serve, Sec. 3.2 (the token-budget view of Fig. 5), Sec. 3.2.2 and Algorithm 2.
    """

    def milp(self) -> MilpFormulation:
        import pulp

        prob = pulp.LpProblem("slos_b1", pulp.LpMaximize)
        x, keep = self._admission_variables(prob)
        self._objective(prob, x, pulp)
        self._memory(prob, x, keep, pulp)
        self._cumulative_budget(prob, x, keep, pulp)
        self._decode_load(prob, x, keep, pulp)
        self.variables = {"x": x, "keep_running": keep}
        logger.debug(
            "slos-b1: %d new requests, %d batches of %.4g s, %d constraints",
            len(x),
            self.process.n_batches,
            self.process.batch_duration_s,
            prob.numConstraints(),
        )
        return MilpFormulation(prob, to_schedule=lambda: self._to_schedule(self._admitted(x)))

    def _cumulative_budget(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """At each distinct deadline batch ``B`` of a prefilling row:
        ``sum_{b_r <= B} p_r x_r + sum_r x_r (G_{l_r}(B) - G_{l_r}(b_r))^+ <= B C``."""
        p, proc = self.problem, self.process
        tier = p.tier
        b = proc.deadline_batch
        prefilling = np.flatnonzero(p.remaining_prefill_tokens > 0)
        for B in np.unique(b[prefilling]):
            terms = []
            for r in range(p.n_requests):
                if b[r] > B:
                    continue
                tokens = proc.decode_demand(int(tier[r]), int(b[r]), int(B))
                if p.remaining_prefill_tokens[r] > 0:
                    tokens += int(p.remaining_prefill_tokens[r])
                if tokens:
                    terms.append(tokens * self._coef(r, x, keep))
            prob += pulp.lpSum(terms) <= int(B) * proc.batch_tokens, f"budget_b{int(B)}"

    def _decode_load(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """Per batch ``i``: ``sum_{r: b_r <= i} g_{l_r}(i) x_r <= C``, one constraint per
        segment between consecutive deadline batches and maximal slot pattern in it."""
        p, proc = self.problem, self.process
        tier, b = p.tier, proc.deadline_batch
        for seg_start, seg_end, pattern in _segment_patterns(proc, np.unique(b)):
            active = np.flatnonzero((b <= seg_start) & pattern[tier])
            if active.size == 0:
                continue
            prob += (
                pulp.lpSum(self._coef(int(r), x, keep) for r in active) <= proc.batch_tokens,
                f"decode_b{seg_start}_{seg_end}_{_mask_label(pattern)}",
            )

    def _to_schedule(self, admitted: Sequence[int]) -> Schedule:
        plan = plan_b1(self.problem, admitted, self.process)
        if plan is None:
            raise RuntimeError(
                f"the B1 solution admitting {list(admitted)} fails the batch process"
            )
        return plan_schedule(self.problem, plan)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every subset of new requests, by decreasing value; the first whose batch process
        succeeds (:func:`plan_b1`) is optimal."""
        deadline = time.perf_counter() + time_limit
        p = self.problem
        new = [int(r) for r in p.new_rows]
        values = p.value[new] if new else np.zeros(0)
        subsets = list(itertools.product((0, 1), repeat=len(new)))
        totals = np.array([float(np.dot(s, values)) for s in subsets]) if new else np.zeros(1)
        for count, k in enumerate(np.argsort(-totals, kind="stable")):
            if count % 256 == 0 and time.perf_counter() > deadline:
                raise TimeoutError(f"brute force over 2^{len(new)} subsets passed {time_limit} s")
            chosen = [r for r, pick in zip(new, subsets[k], strict=True) if pick]
            plan = plan_b1(p, chosen, self.process)
            if plan is not None:
                return float(totals[k]), plan_schedule(p, plan)
        return None


def _mask_label(pattern: np.ndarray) -> str:
    return "".join("1" if v else "0" for v in pattern)


def _segment_patterns(
    proc: BatchProcess, boundaries: np.ndarray
) -> list[tuple[int, int, np.ndarray]]:
    """Per segment ``[B_k, B_{k+1})`` of batches between deadline batches, the maximal tier
    slot patterns occurring in it (a pattern contained in another adds no constraint)."""
    cuts = sorted({int(v) for v in boundaries if 0 <= v < proc.n_batches} | {0, proc.n_batches})
    out = []
    for lo, hi in itertools.pairwise(cuts):
        patterns = {tuple(proc.slot[:, i]) for i in range(lo, hi)}
        for pat in patterns:
            dominated = any(
                other != pat and all(o >= q for o, q in zip(other, pat, strict=True))
                for other in patterns
            )
            if any(pat) and not dominated:
                out.append((lo, hi, np.array(pat, dtype=bool)))
    return out


@register_model("slos-b2")
class AdmissionB2(_AdmissionModel):
    """B2: admission with dynamic batch sizing (time-indexed 0-1 MILP over batch arcs).

    Time is cut into cells of ``delta = t0 / cells_per_batch``; a batch is an arc ``(s, e)``
    of cells with capacity ``time2bs((e - s) delta)``, and the chosen arcs form a path from 0
    to the horizon (``z_a``). A prefilling request picks a *decode start* cell ``sigma`` no
    later than its deadline cell: its prefill (``P_a`` tokens per arc, cumulative deadlines)
    is done in arcs ending by ``sigma`` and it decodes the releases of Algorithm 2's cadence
    from ``sigma delta`` on, each served by the arc holding it. An arc may not carry a request
    whose TPOT is shorter than the arc, and its iteration (from the arc's start, taking the
    time of its tokens) must end by the deadline ``d + m TPOT`` of every decode token it serves
    (the ``m``-th after the prefill). Only the latest start whose first release is at or before
    ``d`` and the deadline cell itself matter (docs/slos_serve.md, "B2").
    After the horizon the schedule goes on in batches of ``t0`` on the same cadence; they stay
    on time when one batch decoding every served request takes no longer than ``t0`` and than
    the time from a served start's releases to its token deadlines. B1's batches are the path
    of arcs of ``cells_per_batch`` cells, so the optimum is at least B1's when every TPOT is a
    multiple of ``t0``.

    Parameters
    ----------
    instance : Instance or AdmissionProblem
        An ``"slos-admission"`` instance, or the problem itself.
    cells_per_batch : int, optional
        Grid cells per ``t0`` (default: setting ``b2_cells_per_batch`` of the instance, else 2).

    References
    ----------
    SLOs-Serve, Sec. 3.2.2 (batch formation with dynamic size tuning) and Fig. 5c.
    """

    def __init__(
        self, instance: Instance | AdmissionProblem, cells_per_batch: int | None = None
    ) -> None:
        super().__init__(instance)
        if cells_per_batch is None:
            settings = instance.settings if isinstance(instance, Instance) else {}
            cells_per_batch = int(settings.get("b2_cells_per_batch", DEFAULT_CELLS_PER_BATCH))
        if (
            isinstance(cells_per_batch, bool)
            or int(cells_per_batch) != cells_per_batch
            or cells_per_batch < 1
        ):
            raise ValueError(f"cells_per_batch must be an integer >= 1, got {cells_per_batch!r}")
        self.cells_per_batch = int(cells_per_batch)
        self.grid = _b2_grid(self.problem, self.process, self.cells_per_batch)

    def milp(self) -> MilpFormulation:
        import pulp

        g = self.grid
        prob = pulp.LpProblem("slos_b2", pulp.LpMaximize)
        x, keep = self._admission_variables(prob)
        z = {a: prob.add_variable(f"z_{a[0]}_{a[1]}", cat="Binary") for a in g.arcs}
        tokens = {a: prob.add_variable(f"P_{a[0]}_{a[1]}", lowBound=0) for a in g.arcs}
        self._objective(prob, x, pulp)
        self._memory(prob, x, keep, pulp)
        start = self._start_variables(prob, x, keep, pulp)
        self._path(prob, z, pulp)
        self._arc_capacity(prob, start, z, tokens, pulp)
        self._arc_token_deadlines(prob, start, z, tokens, pulp)
        self._arc_too_long(prob, start, z, pulp)
        self._prefill_deadlines(prob, start, tokens, pulp)
        self._after_horizon(prob, x, keep, start, pulp)
        self.variables = {"x": x, "keep_running": keep, "z": z, "P": tokens, "start": start}
        logger.debug(
            "slos-b2: %d new requests, %d decode starts, %d cells of %.4g s, %d arcs, "
            "%d constraints",
            len(x),
            g.n_starts,
            g.n_cells,
            g.cell_s,
            len(g.arcs),
            prob.numConstraints(),
        )
        return MilpFormulation(prob, to_schedule=lambda: plan_schedule(self.problem, self._plan()))

    def _start_variables(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> list[Any]:
        """Per decode start ``v`` of row ``r``, its decision ``u_v``: ``sum_v u_v = x_r``.

        A row with one start uses ``x_r`` itself; a row with none cannot be served."""
        g = self.grid
        start: list[Any] = [None] * g.n_starts
        for r in range(self.problem.n_requests):
            chosen = self._coef(r, x, keep)
            options = g.starts_of(r)
            if options.size == 1:
                start[int(options[0])] = chosen
                continue
            for v in options.tolist():
                start[v] = prob.add_variable(f"u_{r}_{int(g.start_cell[v])}", cat="Binary")
            prob += pulp.lpSum(start[v] for v in options.tolist()) == chosen, f"start_{r}"
        return start

    def _path(self, prob: Any, z: Mapping[tuple[int, int], Any], pulp: Any) -> None:
        """Arcs form one path from cell 0 to cell ``H``: out(0) = 1, in(g) = out(g), in(H) = 1."""
        out_of: dict[int, list[Any]] = {}
        into: dict[int, list[Any]] = {}
        for (s, e), var in z.items():
            out_of.setdefault(s, []).append(var)
            into.setdefault(e, []).append(var)
        end = self.grid.n_cells
        prob += pulp.lpSum(out_of.get(0, [])) == 1, "path_start"
        prob += pulp.lpSum(into.get(end, [])) == 1, "path_end"
        for c in range(1, end):
            prob += pulp.lpSum(into.get(c, [])) == pulp.lpSum(out_of.get(c, [])), f"path_{c}"

    def _arc_capacity(
        self,
        prob: Any,
        start: Sequence[Any],
        z: Mapping[Any, Any],
        tokens: Mapping[Any, Any],
        pulp: Any,
    ) -> None:
        """``P_a <= cap_a z_a`` and ``P_a + sum_v rho_v(a) u_v <= cap_a + U_a (1 - z_a)``, with
        ``rho_v(a)`` the decode releases of start ``v`` in the arc and ``U_a`` the largest
        decode load the arc can get (per row, its largest ``rho_v(a)``)."""
        g = self.grid
        for a in g.arcs:
            cap = g.capacity[a[1] - a[0]]
            prob += tokens[a] <= cap * z[a], f"cap_{a[0]}_{a[1]}"
            if g.releases(a):
                carried, big = self._arc_tokens(a, start, tokens, pulp)
                prob += carried <= cap + big * (1 - z[a]), f"load_{a[0]}_{a[1]}"

    def _arc_tokens(
        self, a: tuple[int, int], start: Sequence[Any], tokens: Mapping[Any, Any], pulp: Any
    ) -> tuple[Any, int]:
        """``P_a + sum_v rho_v(a) u_v`` and ``U_a``, the largest decode load it can hold."""
        g = self.grid
        load = g.releases(a)
        per_row: dict[int, int] = {}
        for v, count in load.items():
            row = int(g.start_row[v])
            per_row[row] = max(per_row.get(row, 0), count)
        carried = tokens[a] + pulp.lpSum(count * start[v] for v, count in load.items())
        return carried, sum(per_row.values())

    def _arc_token_deadlines(
        self,
        prob: Any,
        start: Sequence[Any],
        z: Mapping[Any, Any],
        tokens: Mapping[Any, Any],
        pulp: Any,
    ) -> None:
        """Where arc ``a`` ends after the deadline ``D`` of a token it gives start ``v``, its
        iteration must end by ``D``: with ``c_{a,v} = time2bs(D - s_a delta) < cap_a``,
        ``P_a + sum_w rho_w(a) u_w <= c_{a,v} + (cap_a - c_{a,v})(1 - u_v) + U_a (1 - z_a)``.
        """
        g = self.grid
        for a in g.arcs:
            cap = int(g.capacity[a[1] - a[0]])
            limits = {v: c for v, c in g.token_limits(a).items() if 0 <= c < cap}
            if not limits:
                continue
            carried, big = self._arc_tokens(a, start, tokens, pulp)
            for v, most in limits.items():
                prob += (
                    carried <= most + (cap - most) * (1 - start[v]) + big * (1 - z[a]),
                    f"due_{a[0]}_{a[1]}_{int(g.start_row[v])}_{int(g.start_cell[v])}",
                )

    def _arc_too_long(
        self, prob: Any, start: Sequence[Any], z: Mapping[Any, Any], pulp: Any
    ) -> None:
        """For an arc that may not serve some decode starts (longer than their TPOT while they
        decode, or unable to end by the deadline of a token it gives them):
        ``sum_{v barred} u_v <= n_a (1 - z_a)``, ``n_a`` the rows of those starts."""
        g = self.grid
        for a in g.arcs:
            starts = np.array([v for v, c in g.token_limits(a).items() if c < 0], dtype="int64")
            if starts.size == 0:
                continue
            rows = len(set(g.start_row[starts].tolist()))
            prob += (
                pulp.lpSum(start[int(v)] for v in starts) <= rows * (1 - z[a]),
                f"long_{a[0]}_{a[1]}",
            )

    def _prefill_deadlines(
        self, prob: Any, start: Sequence[Any], tokens: Mapping[Any, Any], pulp: Any
    ) -> None:
        """At each distinct start cell ``c`` of a prefilling row:
        ``sum_{a: e_a <= c} P_a >= sum_{v: sigma_v <= c} p_{r_v} u_v``."""
        g, p = self.grid, self.problem
        prefill = p.remaining_prefill_tokens[g.start_row]
        prefilling = np.flatnonzero(prefill > 0)
        for cell in np.unique(g.start_cell[prefilling]):
            due = prefilling[g.start_cell[prefilling] <= cell]
            prob += (
                pulp.lpSum(tokens[a] for a in g.arcs if a[1] <= cell)
                >= pulp.lpSum(int(prefill[v]) * start[int(v)] for v in due),
                f"prefill_c{int(cell)}",
            )

    def _after_horizon(
        self, prob: Any, x: Mapping[int, Any], keep: Any, start: Sequence[Any], pulp: Any
    ) -> None:
        """For each decode start ``v`` whose after-horizon batch limit ``n_v`` is below the
        number of rows ``n``: ``sum_r x_r <= n_v + (n - n_v)(1 - u_v)`` (``x_r = 1`` for
        running rows), with ``n_v = time2bs(min(t0, w_v))`` and ``w_v`` the time from each
        release of ``v`` to its token's deadline."""
        g, p = self.grid, self.problem
        n = p.n_requests
        served = pulp.lpSum(self._coef(r, x, keep) for r in range(n))
        for v in np.flatnonzero(g.start_tail_requests < n).tolist():
            limit = int(g.start_tail_requests[v])
            prob += (
                served <= limit + (n - limit) * (1 - start[v]),
                f"tail_{int(g.start_row[v])}_{int(g.start_cell[v])}",
            )

    def _plan(self) -> AdmissionPlan:
        """The plan of the last solved :meth:`milp` (admitted set, arcs and decode starts)."""
        var = self.variables
        admitted = self._admitted(var["x"])
        path = sorted(a for a, z in var["z"].items() if (z.value() or 0.0) > 0.5)
        chosen = {}
        for v, u in enumerate(var["start"]):
            if (u.value() or 0.0) > 0.5:
                chosen[int(self.grid.start_row[v])] = int(self.grid.start_cell[v])
        plan = self.plan(admitted, path, chosen)
        if plan is None:
            raise RuntimeError(
                f"the B2 solution admitting {admitted} on arcs {path} with decode starts "
                f"{chosen} is infeasible"
            )
        return plan

    def solution_plan(self) -> AdmissionPlan:
        """The plan read off the last solved :meth:`milp` (its arcs and decode starts).

        Raises
        ------
        RuntimeError
            No solved MILP, or its solution fails the batch process (a model bug).
        """
        if not self.variables:
            raise RuntimeError("solve the B2 MILP first (slolab.solvers.solve)")
        return self._plan()

    def plan(
        self,
        admitted: Sequence[int],
        path: Sequence[tuple[int, int]],
        decode_start_cell: Mapping[int, int] | None = None,
    ) -> AdmissionPlan | None:
        """The plan of ``admitted`` on the batch arcs ``path``; None if it fails.

        ``decode_start_cell`` maps a served row to one of its decode starts (default: its
        latest). Decode tokens follow the releases from each row's start; prefill goes earliest
        start first. The plan fails when memory is exceeded, an arc carries more tokens than
        its capacity or than lets its iteration end by the deadline of a token it serves, an
        arc is longer than the TPOT of a request it decodes, a prefill misses its start, or
        more rows are served than a batch after the horizon may decode for a picked start.

        Raises
        ------
        ValueError
            A given start cell is not a decode start of its row.
        """
        g, p = self.grid, self.problem
        rows = _served_rows(p, admitted)
        if int(p.kv_tokens[rows].sum()) > p.kv_capacity_tokens:
            return None
        picked = []
        for r in rows.tolist():
            options = g.starts_of(r)
            if options.size == 0:
                return None
            if decode_start_cell is None or r not in decode_start_cell:
                picked.append(int(options[-1]))
                continue
            match = options[g.start_cell[options] == decode_start_cell[r]]
            if match.size == 0:
                raise ValueError(
                    f"cell {decode_start_cell[r]} is not a decode start of row {r}; its starts "
                    f"are {g.start_cell[options].tolist()}"
                )
            picked.append(int(match[0]))
        return self._plan_of_starts(admitted, path, np.array(picked, dtype="int64"))

    def _plan_of_starts(
        self, admitted: Sequence[int], path: Sequence[tuple[int, int]], picked: np.ndarray
    ) -> AdmissionPlan | None:
        """:meth:`plan` with the decode starts ``picked`` (one per served row, in row order)."""
        g, p = self.grid, self.problem
        rows = g.start_row[picked]
        if len(rows) > g.start_tail_requests[picked].min(initial=p.n_requests):
            return None
        index = {int(v): k for k, v in enumerate(picked.tolist())}
        decode = np.zeros((len(rows), len(path)), dtype=bool)
        capacity = g.capacity[[e - s for s, e in path]]
        for i, arc in enumerate(path):
            for v, most in g.token_limits(arc).items():
                if v in index:
                    capacity[i] = min(capacity[i], most)
            for v in g.releases(arc):
                if v in index:
                    decode[index[v], i] = True
        load = decode.sum(axis=0)
        if (capacity < 0).any() or (load > capacity).any():
            return None
        ends = np.array([e for _, e in path], dtype="int64")
        deadline = np.zeros(p.n_requests, dtype="int64")
        deadline[rows] = g.start_cell[picked]
        prefill = _fill_prefill(deadline, rows, p, capacity - load, ends)
        if prefill is None:
            return None
        starts = np.array([s for s, _ in path], dtype=float) * g.cell_s
        used = decode.any(axis=1)
        return AdmissionPlan(
            tuple(sorted(int(r) for r in admitted)),
            starts,
            ends * g.cell_s,
            prefill,
            rows[used],
            decode[used],
        )

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every subset of new requests by decreasing value and every choice of decode starts;
        for each, the best path by dynamic programming over cells. The first feasible subset is
        optimal.

        For fixed decode starts an arc is usable when its decode load fits the least of its
        capacity and the token limits the served starts set on it (:meth:`_B2Grid.token_limits`);
        a path is feasible when, at each of its cells ``c`` followed
        by the arc ``(c, e)``, the prefill capacity left on the arcs before ``c`` covers the
        prefills due by cell ``e - 1``, and at ``H`` those due by ``H``. The largest left
        capacity at a cell dominates, so one value per cell suffices.
        """
        deadline = time.perf_counter() + time_limit
        g, p = self.grid, self.problem
        new = [int(r) for r in p.new_rows]
        values = p.value[new] if new else np.zeros(0)
        subsets = list(itertools.product((0, 1), repeat=len(new)))
        totals = np.array([float(np.dot(s, values)) for s in subsets]) if new else np.zeros(1)
        releases, limit = g.arc_tables()
        arc_capacity = g.capacity[[e - s for s, e in g.arcs]]
        tried = 0
        for k in np.argsort(-totals, kind="stable"):
            chosen = [r for r, pick in zip(new, subsets[k], strict=True) if pick]
            rows = _served_rows(p, chosen)
            if int(p.kv_tokens[rows].sum()) > p.kv_capacity_tokens:
                continue
            for picked in itertools.product(*(g.starts_of(r).tolist() for r in rows.tolist())):
                tried += 1
                if tried % 256 == 0 and time.perf_counter() > deadline:
                    raise TimeoutError(
                        f"brute force over 2^{len(new)} subsets passed {time_limit} s"
                    )
                sel = np.array(picked, dtype="int64")
                if len(rows) > g.start_tail_requests[sel].min(initial=p.n_requests):
                    continue
                most = np.minimum(arc_capacity, limit[sel].min(axis=0, initial=arc_capacity.max()))
                path = self._best_path(sel, releases[sel].sum(axis=0), most)
                if path is None:
                    continue
                plan = self._plan_of_starts(chosen, path, sel)
                if plan is None:
                    raise RuntimeError(f"the path {path} found for {chosen} fails its plan")
                return float(totals[k]), plan_schedule(p, plan)
        return None

    def _best_path(
        self, picked: np.ndarray, load: np.ndarray, limit: np.ndarray
    ) -> list[tuple[int, int]] | None:
        """A feasible path for the decode starts ``picked`` (see :meth:`brute_force`)."""
        g, p = self.grid, self.problem
        prefill = p.remaining_prefill_tokens[g.start_row[picked]]
        due = np.zeros(g.n_cells + 1, dtype="int64")
        np.add.at(due, g.start_cell[picked], prefill)
        due = np.cumsum(due)
        left = np.full(g.n_cells + 1, -1, dtype="int64")
        came_from = np.full(g.n_cells + 1, -1, dtype="int64")
        left[0] = 0
        for i, (s, e) in enumerate(g.arcs):
            residual = int(limit[i]) - int(load[i])
            if residual < 0 or left[s] < 0 or left[s] < due[e - 1]:
                continue
            if left[s] + residual > left[e]:
                left[e] = left[s] + residual
                came_from[e] = s
        if left[g.n_cells] < due[g.n_cells]:
            return None
        path = []
        cell = g.n_cells
        while cell > 0:
            path.append((int(came_from[cell]), cell))
            cell = int(came_from[cell])
        return path[::-1]


@dataclass(frozen=True)
class _B2Grid:
    """Cells, arcs and decode starts of B2, with what each arc allows each start.

    A decode start ``v`` belongs to row ``start_row[v]``: the row decodes the releases of its
    tier from cell ``start_cell[v]`` on, the first being release ``start_first_release[v]``
    (index ``k``, at ``k TPOT``); its ``m``-th decode token (``m >= 1``) is due at
    ``start_deadline_s[v] + m TPOT`` (``inf`` for a decoding running row). A batch of ``t0``
    after the horizon may decode at most ``start_tail_requests[v]`` requests when ``v`` is
    served.
    """

    cell_s: float
    n_cells: int
    capacity: np.ndarray
    arcs: list[tuple[int, int]]
    timing: TimingModel
    tier_tpot_s: np.ndarray
    tier_releases: np.ndarray
    start_row: np.ndarray
    start_cell: np.ndarray
    start_tier: np.ndarray
    start_first_release: np.ndarray
    start_deadline_s: np.ndarray
    start_tail_requests: np.ndarray
    _arc_cache: dict[tuple[int, int], tuple[dict[int, int], dict[int, int]]] = field(
        default_factory=dict
    )

    @property
    def n_starts(self) -> int:
        return len(self.start_row)

    def starts_of(self, row: int) -> np.ndarray:
        """Decode starts of ``row``, earliest first (empty: the row cannot be served)."""
        return np.flatnonzero(self.start_row == row)

    def _arc(self, arc: tuple[int, int]) -> tuple[dict[int, int], dict[int, int]]:
        if arc not in self._arc_cache:
            s, e = arc
            active = self.start_cell < e
            lo = np.maximum(self.start_cell, s)
            tiers = self.start_tier
            first = self.tier_releases[tiers, lo]
            counts = np.where(active, self.tier_releases[tiers, e] - first, 0)
            tpot = self.tier_tpot_s[tiers]
            token_deadline = self.start_deadline_s + (first - self.start_first_release + 1) * tpot
            limits = {}
            for v in np.flatnonzero((counts > 0) & (e * self.cell_s > token_deadline + TIME_TOL)):
                wait_s = float(token_deadline[v]) - s * self.cell_s
                most = time2bs(self.timing, wait_s) if wait_s > 0 else 0
                limits[int(v)] = most if most >= 1 else -1
            for v in np.flatnonzero(active & (tpot < (e - s) * self.cell_s - TIME_TOL)):
                limits[int(v)] = -1
            self._arc_cache[arc] = (
                {int(v): int(counts[v]) for v in np.flatnonzero(counts)},
                limits,
            )
        return self._arc_cache[arc]

    def releases(self, arc: tuple[int, int]) -> dict[int, int]:
        """Decode starts with releases in ``arc`` (from their start cell on): start -> count."""
        return self._arc(arc)[0]

    def token_limits(self, arc: tuple[int, int]) -> dict[int, int]:
        """Starts the arc serves only with fewer tokens than its capacity: start -> the most
        tokens (prefill and decode) the arc may then carry, -1 when it may not serve the start.

        An arc longer than the start's TPOT (while it decodes) may not serve it. When the arc
        ends after the deadline ``D`` of a token it gives the start, its iteration (starting
        at ``s delta``, taking ``T(tokens)``) must end by ``D``: at most
        ``time2bs(D - s delta)`` tokens.
        """
        return self._arc(arc)[1]

    def arc_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(releases, limit)`` as (starts, arcs) arrays, arcs in :attr:`arcs` order; ``limit``
        is the arc's capacity where :meth:`token_limits` sets none."""
        counts = np.zeros((self.n_starts, len(self.arcs)), dtype="int64")
        limit = np.empty((self.n_starts, len(self.arcs)), dtype="int64")
        for i, arc in enumerate(self.arcs):
            for v, k in self.releases(arc).items():
                counts[v, i] = k
            limit[:, i] = self.capacity[arc[1] - arc[0]]
            for v, most in self.token_limits(arc).items():
                limit[v, i] = most
        return counts, limit


def _decode_starts(
    problem: AdmissionProblem, t0: float, delta: float, n_cells: int, releases: np.ndarray
) -> list[tuple[int, int, int, float, int]]:
    """``(row, cell, first release, deadline, tail requests)`` of every decode start of B2.

    A decoding running row starts at cell 0 (no token deadline). A prefilling row with
    deadline ``d`` and TPOT ``T`` may start at any cell ``sigma <= g = floor(d / delta)`` (its
    prefill done by ``sigma``); for one first release the latest such cell dominates, and a
    first release before ``k_d = floor(d / T)`` only adds load, so two cells remain: the cell
    of release ``k_d`` and ``g``. A start at cell 0 leaves no time for the prefill. Tail
    requests: how many requests a batch after the horizon may decode, ``time2bs(min(t0, w))``
    with ``w = d + T - k T`` the time from each release (``k T``, ``k`` the first) to its
    token's deadline; a start whose limit is 0 cannot be served.
    """
    out = []
    tier = problem.tier
    per_batch = time2bs(problem.timing, t0)
    for r in range(problem.n_requests):
        tpot = float(problem.tier_tpot_s[tier[r]])
        if problem.remaining_prefill_tokens[r] == 0:
            out.append((r, 0, 0, math.inf, per_batch))
            continue
        d = float(problem.prefill_deadline_s[r])
        last = int(np.clip(math.floor(d / delta + TIME_TOL), 0, n_cells))
        released = math.floor(d / tpot + TIME_TOL)
        early = int(np.clip(math.floor(released * tpot / delta + TIME_TOL), 0, last))
        by_release: dict[int, int] = {}
        for cell in (early, last):
            if cell > 0:
                first = int(releases[tier[r], cell])
                by_release[first] = max(by_release.get(first, cell), cell)
        for first, cell in sorted(by_release.items()):
            wait_s = d + tpot - first * tpot
            limit = per_batch if wait_s >= t0 - TIME_TOL else time2bs(problem.timing, wait_s)
            if limit >= 1:
                out.append((r, cell, first, d, limit))
    return out


def _b2_grid(problem: AdmissionProblem, proc: BatchProcess, cells_per_batch: int) -> _B2Grid:
    t0 = proc.batch_duration_s
    delta = t0 / cells_per_batch
    n_cells = proc.n_batches * cells_per_batch
    tier_tpot = problem.tier_tpot_s
    decoding = problem.remaining_prefill_tokens == 0
    limit_s = (
        float(problem.tpot_s[problem.running & decoding].min())
        if (problem.running & decoding).any()
        else float(tier_tpot.max())
    )
    longest = max(1, int(math.floor(limit_s / delta + TIME_TOL)))
    capacity = np.array(
        [0] + [time2bs(problem.timing, length * delta) for length in range(1, longest + 1)]
    )
    arcs = [(s, e) for s in range(n_cells) for e in range(s + 1, min(s + longest, n_cells) + 1)]
    units = np.arange(n_cells + 1)
    releases = np.stack(
        [tier_releases_before(float(t), t0, units, cells_per_batch) for t in tier_tpot]
    )
    starts = _decode_starts(problem, t0, delta, n_cells, releases)
    rows = np.array([s[0] for s in starts], dtype="int64")
    return _B2Grid(
        delta,
        n_cells,
        capacity,
        arcs,
        problem.timing,
        tier_tpot,
        releases,
        rows,
        np.array([s[1] for s in starts], dtype="int64"),
        problem.tier[rows],
        np.array([s[2] for s in starts], dtype="int64"),
        np.array([s[3] for s in starts], dtype=float),
        np.array([s[4] for s in starts], dtype="int64"),
    )
