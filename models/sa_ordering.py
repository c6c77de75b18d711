"""SA ordering: order and batch a queue of requests to maximize G = #SLO-met / sum of latencies.

N queued requests share one server that runs *static* batches (a batch holds the server until
its longest member finishes) of at most ``B`` requests, one after another. A decision is an
ordered list of batches; the order inside a batch does not matter. Member ``r`` of a batch of
size ``s`` that starts at ``t`` emits its first token at ``t + P_r(s)`` and its last at
``t + e_r(s)`` (:mod:`slolab.sim.static`); the batch ends at ``t + max_r e_r(s)`` and the next
starts at the later of that end and its members' arrivals. The objective is the SA paper's

    G = (number of requests meeting their SLO) / (sum of request latencies, s),

where a request meets its SLO when every objective it has holds: end-to-end latency
``<= e2e_slo_s``, TTFT ``<= ttft_slo_s``, mean TPOT ``<= tpot_slo_s`` (undefined, so met, for a
one-token output), each with the shared tolerance of :mod:`slolab.sim.metrics`. That is the
``ttft+mean-tpot`` definition with e2e enforced, the one :func:`slolab.sim.metrics.g_ratio`
recomputes from an engine replay.

Exact methods, all on :class:`SAOrderingModel` (registered as ``"sa-ordering"``):

- MILP (PuLP, HiGHS or CBC): a position-arc formulation (batches are arcs ``(p, s)`` covering
  positions ``p - s + 1 .. p`` of the sequence) with threshold variables for batch durations,
  solved by Dinkelbach iterations on the ratio;
- CP-SAT: an independent batch-slot formulation on integer-scaled times, solved once per
  number of met requests (``min`` total latency subject to ``>= m`` met), with a rigorous
  bound from floor-rounded times;
- brute force: every ordered partition of the requests into batches of at most ``B``.

The derivations, the dominance rules and what "exact" means for each method are in
``docs/sa_ordering.md``.

Instance encoding (``instance.problem == "sa-ordering"``): one workload row per queued
request; ``settings["batch_size"]`` is ``B``; the cluster is one server in ``"static"`` mode.
In a snapshot every arrival is 0; later arrivals are allowed (a batch never starts before its
members arrive). A workload with the column ``cached_tokens`` (a snapshot's given prefix cache,
docs/engine.md) charges each member only its uncached prompt: :meth:`OrderingProblem.from_instance`
builds the member timings ``P_r(s)``, ``e_r(s)`` with it, and every method reads only those.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Cluster, Instance, Workload, cached_prompt_tokens
from slolab.sim.metrics import ON_TIME_TOLERANCE_S
from slolab.sim.schedule import Schedule
from slolab.sim.static import member_times
from slolab.solvers.backend import PROOF_TOLERANCE
from slolab.solvers.base import CpFormulation, ExactModel, MilpFormulation, Result, Status
from slolab.solvers.registry import register_model

__all__ = [
    "PROBLEM",
    "Batches",
    "OrderingProblem",
    "PlanValue",
    "SAOrderingModel",
    "batches_of",
    "sorted_full_batches",
]

logger = logging.getLogger("slolab")

#: ``Instance.problem`` of an SA-ordering instance.
PROBLEM = "sa-ordering"
#: Relative tolerance within which a bound on G* equal to the incumbent is a proof (the
#: backends' own proof tolerance, :data:`slolab.solvers.backend.PROOF_TOLERANCE`).
RATIO_TOLERANCE = PROOF_TOLERANCE
#: The Dinkelbach subproblem's objective is written in microseconds (see docs/sa_ordering.md).
MILP_OBJECTIVE_UNITS_PER_S = 1e6
#: Largest CP-SAT time scale (ticks per second); the scale is a power of two (exact scaling).
CP_MAX_TICKS_PER_S = 2.0**40
#: CP-SAT integer times stay below this many ticks.
CP_MAX_HORIZON_TICKS = 2.0**52


Batches = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class PlanValue:
    """Value of an ordered batch plan.

    Attributes
    ----------
    met_requests : int
        Requests meeting their SLO.
    total_latency_s : float
        Sum over requests of end-to-end latency (last token minus arrival), seconds.
    """

    met_requests: int
    total_latency_s: float

    @property
    def g(self) -> float:
        """The SA paper's objective ``G = met_requests / total_latency_s`` (1/s)."""
        return self.met_requests / self.total_latency_s


def _frozen(values: Any, dtype: str) -> np.ndarray:
    arr = np.array(values, dtype=dtype)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class OrderingProblem:
    """Problem data of SA ordering, with each member's timing at every batch size.

    Row ``r`` is request ``r``. Column ``s`` of the ``(n, B + 1)`` tables is batch size ``s``
    (column 0 is unused and holds nan).

    Parameters
    ----------
    batch_size : int
        Largest batch ``B`` (>= 1).
    arrival_s, ttft_slo_s, tpot_slo_s, e2e_slo_s : float arrays (n,)
        Arrival and SLOs in seconds (nan: no such objective).
    output_tokens : int array (n,)
        Output tokens of each request.
    first_token_s : float array (n, B + 1)
        ``P_r(s)``: time from the batch start to the member's first token.
    exec_s : float array (n, B + 1)
        ``e_r(s)``: time from the batch start to the member's last token.

    Attributes
    ----------
    latest_start_s : float array (n, B + 1)
        Latest batch start at which the member meets its SLO at batch size ``s`` (``inf``:
        always met, ``-inf``: never, because its mean TPOT at that size misses the SLO).

    References
    ----------
    SLO-Aware Scheduling for Large Language Model Inferences (the "SA paper"), Sec. 3.1
    (objective G, Eqs. 2-13) and Sec. 4.2 (latency predictor, Eqs. 14-19).
    """

    batch_size: int
    arrival_s: np.ndarray
    ttft_slo_s: np.ndarray
    tpot_slo_s: np.ndarray
    e2e_slo_s: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray
    exec_s: np.ndarray

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or int(self.batch_size) != self.batch_size:
            raise ValueError(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {self.batch_size}")
        n = len(np.asarray(self.arrival_s))
        if n == 0:
            raise ValueError("an ordering problem needs at least one request")
        for name in ("arrival_s", "ttft_slo_s", "tpot_slo_s", "e2e_slo_s"):
            arr = _frozen(getattr(self, name), "float64")
            if arr.shape != (n,):
                raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
            object.__setattr__(self, name, arr)
        out = _frozen(self.output_tokens, "int64")
        if out.shape != (n,) or (out < 1).any():
            raise ValueError(f"output_tokens must be {n} integers >= 1, got {out!r}")
        object.__setattr__(self, "output_tokens", out)
        shape = (n, self.batch_size + 1)
        for name in ("first_token_s", "exec_s"):
            arr = _frozen(getattr(self, name), "float64")
            if arr.shape != shape:
                raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
            inner = arr[:, 1:]
            if not (np.isfinite(inner).all() and (inner > 0).all()):
                raise ValueError(f"{name} must be finite and > 0 for batch sizes 1..B")
            object.__setattr__(self, name, arr)
        if (self.first_token_s[:, 1:] > self.exec_s[:, 1:]).any():
            raise ValueError("first_token_s must not exceed exec_s")
        arr = self.arrival_s
        if not (np.isfinite(arr).all() and (arr >= 0).all()):
            raise ValueError("arrival_s must be finite and >= 0")
        object.__setattr__(self, "_latest", _frozen(self._latest_start(), "float64"))

    @classmethod
    def from_instance(cls, instance: Instance) -> OrderingProblem:
        """Problem data of an SA-ordering instance (timing precomputed for sizes 1..B).

        With a snapshot's given cache (the workload's ``cached_tokens``, ``k_r``), member ``r``
        prefills its ``p_r - k_r`` uncached tokens over the cached prefix, its decode steps
        read its whole context, and it holds ``p_r + o_r - k_r`` KV tokens against the capacity,
        as the engine's static mode charges it (:mod:`slolab.sim.static`).

        Raises
        ------
        ValueError
            The instance is not an SA-ordering instance on one static server, ``batch_size``
            is missing or exceeds ``cluster.max_batch_size``, or the ``B`` largest requests
            could not share the KV cache.
        """
        if instance.problem != PROBLEM:
            raise ValueError(f"instance.problem must be {PROBLEM!r}, got {instance.problem!r}")
        cluster = instance.cluster
        if cluster.mode != "static":
            raise ValueError(f"SA ordering needs cluster.mode 'static', got {cluster.mode!r}")
        if cluster.servers != 1:
            raise ValueError(
                f"SA ordering plans one server, got cluster.servers = {cluster.servers}"
            )
        if "batch_size" not in instance.settings:
            raise ValueError("instance.settings needs 'batch_size' for SA ordering")
        b = instance.settings["batch_size"]
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"settings['batch_size'] must be an integer >= 1, got {b!r}")
        b = int(b)
        if b > cluster.max_batch_size:
            raise ValueError(
                f"settings['batch_size'] = {b} exceeds cluster.max_batch_size = {cluster.max_batch_size}"
            )
        wl = instance.workload
        prompt = wl.prompt_tokens
        out = wl.output_tokens
        cached = cached_prompt_tokens(wl)
        kv_need = int(np.sort(prompt + out - cached)[::-1][:b].sum())
        if kv_need > cluster.kv_capacity_tokens:
            raise ValueError(
                f"the {b} largest requests need {kv_need} KV tokens together, more than "
                f"cluster.kv_capacity_tokens = {cluster.kv_capacity_tokens}"
            )
        n = len(wl)
        first = np.full((n, b + 1), np.nan)
        execs = np.full((n, b + 1), np.nan)
        for r in range(n):
            for s in range(1, b + 1):
                first[r, s], execs[r, s] = member_times(
                    instance.timing, s, int(prompt[r]), int(out[r]), int(cached[r])
                )
        return cls(
            batch_size=b,
            arrival_s=wl.arrival_s,
            ttft_slo_s=wl["ttft_slo_s"],
            tpot_slo_s=wl["tpot_slo_s"],
            e2e_slo_s=wl["e2e_slo_s"],
            output_tokens=out,
            first_token_s=first,
            exec_s=execs,
        )

    # -- derived data -----------------------------------------------------------------------
    @property
    def n_requests(self) -> int:
        return len(self.arrival_s)

    @property
    def latest_start_s(self) -> np.ndarray:
        return self._latest  # type: ignore[attr-defined, no-any-return]

    @property
    def snapshot(self) -> bool:
        """True when every request arrived at the same time (the paper's setting)."""
        return bool((self.arrival_s == self.arrival_s[0]).all())

    def _latest_start(self) -> np.ndarray:
        n, b = self.n_requests, self.batch_size
        tol = ON_TIME_TOLERANCE_S
        latest = np.full((n, b + 1), np.nan)
        for r in range(n):
            a = self.arrival_s[r]
            o = int(self.output_tokens[r])
            for s in range(1, b + 1):
                first, last = self.first_token_s[r, s], self.exec_s[r, s]
                value = math.inf
                if not math.isnan(self.e2e_slo_s[r]):
                    value = min(value, a + self.e2e_slo_s[r] + tol - last)
                if not math.isnan(self.ttft_slo_s[r]):
                    value = min(value, a + self.ttft_slo_s[r] + tol - first)
                tpot = self.tpot_slo_s[r]
                if o > 1 and not math.isnan(tpot) and (last - first) / (o - 1) > tpot + tol:
                    value = -math.inf
                latest[r, s] = value
        return latest

    # -- evaluation ---------------------------------------------------------------------------
    def check_batches(self, batches: Sequence[Sequence[int]]) -> Batches:
        """``batches`` as tuples after checking it is a plan: every request exactly once,
        every batch of 1..B requests. Raises ValueError naming the first problem."""
        n, b = self.n_requests, self.batch_size
        seen = [False] * n
        plan = []
        for k, batch in enumerate(batches):
            members = tuple(int(r) for r in batch)
            if not 1 <= len(members) <= b:
                raise ValueError(f"batch {k} has {len(members)} requests, expected 1..{b}")
            for r in members:
                if not 0 <= r < n:
                    raise ValueError(f"batch {k}: request {r} is out of range [0, {n})")
                if seen[r]:
                    raise ValueError(f"batch {k}: request {r} is planned twice")
                seen[r] = True
            plan.append(members)
        missing = [r for r in range(n) if not seen[r]]
        if missing:
            raise ValueError(f"requests {missing} are in no batch")
        return tuple(plan)

    def member_met(self, r: int, first_token_s: float, last_token_s: float) -> bool:
        """Whether request ``r`` meets its SLO given its first and last token times (absolute),
        computed exactly as :func:`slolab.sim.metrics.request_table` does."""
        tol = ON_TIME_TOLERANCE_S
        a = self.arrival_s[r]
        e2e = self.e2e_slo_s[r]
        if not math.isnan(e2e) and not (last_token_s - a <= e2e + tol):
            return False
        ttft = self.ttft_slo_s[r]
        if not math.isnan(ttft) and not (first_token_s - a <= ttft + tol):
            return False
        o = int(self.output_tokens[r])
        tpot = self.tpot_slo_s[r]
        if o > 1 and not math.isnan(tpot):
            return bool((last_token_s - first_token_s) / (o - 1) <= tpot + tol)
        return True

    def start_times(self, batches: Sequence[Sequence[int]]) -> list[float]:
        """Start time of each batch (s): the later of the previous end and its arrivals."""
        plan = self.check_batches(batches)
        starts = []
        end = 0.0
        for batch in plan:
            s = len(batch)
            start = max(end, max(float(self.arrival_s[r]) for r in batch))
            starts.append(start)
            end = start + max(float(self.exec_s[r, s]) for r in batch)
        return starts

    def evaluate(self, batches: Sequence[Sequence[int]]) -> PlanValue:
        """Met requests and total latency of a plan, replaying the engine's static mode.

        Batch ``k`` starts at ``max(end of k - 1, arrivals of its members)`` (the first at
        ``max(0, arrivals)``) and ends at ``start + max_r e_r(s)``; member token times are
        ``start + P_r(s)`` and ``start + e_r(s)``, as :func:`slolab.sim.replay` produces them.
        """
        plan = self.check_batches(batches)
        total = 0.0
        met = 0
        end = 0.0
        for batch in plan:
            s = len(batch)
            start = max(end, max(float(self.arrival_s[r]) for r in batch))
            longest = 0.0
            for r in batch:
                first = start + float(self.first_token_s[r, s])
                last = start + float(self.exec_s[r, s])
                total += last - float(self.arrival_s[r])
                met += self.member_met(r, first, last)
                longest = max(longest, float(self.exec_s[r, s]))
            end = start + longest
        return PlanValue(met, total)

    @property
    def meetable_requests(self) -> int:
        """Requests that meet their SLO at some batch size when their batch starts at once."""
        latest = np.max(self.latest_start_s[:, 1:], axis=1)
        return int((latest >= self.arrival_s).sum())

    def relative_arrival_s(self) -> np.ndarray:
        """Arrivals measured from the earliest one (s); all zero in a snapshot."""
        return self.arrival_s - float(self.arrival_s.min())

    def start_lower_bounds_s(self) -> np.ndarray:
        """``LB[q]``, a lower bound on the start of a batch preceded by ``q`` requests, in
        seconds after the earliest arrival.

        A batch of size ``s`` lasts at least the mean of its members' ``e_r(s)``, so each
        request occupies the server at least ``min_s e_r(s) / s``; ``LB[q]`` sums the ``q``
        smallest of these.
        """
        b = self.batch_size
        share = np.min(self.exec_s[:, 1:] / np.arange(1, b + 1), axis=1)
        return np.concatenate([[0.0], np.cumsum(np.sort(share))])

    def start_upper_bounds_s(self) -> np.ndarray:
        """``UB[q]``: no plan without needless idle time starts a batch preceded by ``q``
        requests later than the last arrival plus the ``q`` longest executions (s after the
        earliest arrival)."""
        longest = np.sort(np.max(self.exec_s[:, 1:], axis=1))[::-1]
        last = float(self.relative_arrival_s().max())
        return last + np.concatenate([[0.0], np.cumsum(longest)])

    def latency_lower_bound_s(self) -> float:
        """A lower bound on the total latency of every plan (s).

        Each request takes at least ``min_s e_r(s)``; in a snapshot, the ``i``-th request to
        start (0-based) has at least ``i - B + 1`` requests in earlier batches, so it waits at
        least ``LB[max(0, i - B + 1)]``.
        """
        own = float(np.min(self.exec_s[:, 1:], axis=1).sum())
        if not self.snapshot:
            return own
        lb = self.start_lower_bounds_s()
        n, b = self.n_requests, self.batch_size
        return own + float(sum(lb[max(0, i - b + 1)] for i in range(n)))


def batches_of(schedule: Schedule) -> Batches:
    """The ordered batches of a one-server static-batch schedule."""
    if schedule.servers != 1:
        raise ValueError(f"an SA-ordering schedule has one server, got {schedule.servers}")
    return tuple(tuple(int(r) for r, _, _ in it.entries) for it in schedule.iterations[0])


def sorted_full_batches(problem: OrderingProblem, order: Sequence[int]) -> Batches:
    """Consecutive batches of ``B`` requests along ``order`` (the last may be smaller)."""
    b = problem.batch_size
    seq = [int(r) for r in order]
    return tuple(tuple(seq[i : i + b]) for i in range(0, len(seq), b))


def ordering_instance(
    output_tokens: Sequence[int],
    ttft: Sequence[float],
    tpot: Sequence[float],
    e2e: Sequence[float],
    batch_size: int,
    arrival: Sequence[float] | None = None,
    prompt_tokens: Sequence[int] | None = None,
    *,
    timing: Any,
    name: str = "sa-ordering",
) -> Instance:
    """An SA-ordering instance on one static server from per-request lists.

    ``ttft``, ``tpot`` and ``e2e`` are the SLOs in seconds (nan: none); arrivals default to 0 (a
    snapshot), prompts to 10 tokens.
    """
    n = len(output_tokens)
    workload = Workload(
        {
            "arrival_s": np.zeros(n) if arrival is None else np.array(arrival, dtype=float),
            "prompt_tokens": np.full(n, 10) if prompt_tokens is None else np.array(prompt_tokens),
            "output_tokens": np.array(output_tokens),
            "ttft_slo_s": np.array(ttft, dtype=float),
            "tpot_slo_s": np.array(tpot, dtype=float),
            "e2e_slo_s": np.array(e2e, dtype=float),
        }
    )
    return Instance(
        name=name,
        workload=workload,
        cluster=Cluster(mode="static", max_batch_size=batch_size),
        timing=timing,
        problem=PROBLEM,
        settings={"batch_size": batch_size},
    )


def random_ordering_instance(
    seed: int,
    n: int,
    batch_size: int,
    *,
    timing: Any,
    arrivals: bool = False,
    name: str = "sa-random",
) -> Instance:
    """A small random SA-ordering instance (seeded): each request chat (TTFT 0.05-2 s, TPOT
    15-30 ms) or code (e2e 0.2-3 s) at random, 1-59 output and 1-399 prompt tokens; queued at 0
    unless ``arrivals`` (sorted uniform arrivals in [0, 1) s)."""
    rng = np.random.default_rng(seed)
    chat = rng.integers(0, 2, n) == 1
    times = np.sort(rng.uniform(0, 1.0, n)) if arrivals else np.zeros(n)
    return ordering_instance(
        rng.integers(1, 60, n).tolist(),
        np.where(chat, rng.uniform(0.05, 2.0, n), np.nan).tolist(),
        np.where(chat, rng.uniform(0.015, 0.03, n), np.nan).tolist(),
        np.where(chat, np.nan, rng.uniform(0.2, 3.0, n)).tolist(),
        batch_size,
        arrival=times.tolist(),
        prompt_tokens=rng.integers(1, 400, n).tolist(),
        timing=timing,
        name=name,
    )


def as_problem(instance: Instance | OrderingProblem) -> OrderingProblem:
    """The problem data of an SA-ordering instance (or the data itself)."""
    if isinstance(instance, OrderingProblem):
        return instance
    if isinstance(instance, Instance):
        return OrderingProblem.from_instance(instance)
    raise TypeError(f"expected an Instance or OrderingProblem, got {type(instance).__name__}")


# ---------------------------------------------------------------------------------------------
# MILP: position arcs with threshold durations
# ---------------------------------------------------------------------------------------------


class _PositionArcMilp:
    """Variables and constraint families of the position-arc MILP (docs/sa_ordering.md, Sec. 4).

    An arc ``a = (p, s)`` is a batch of ``s`` requests occupying positions ``p - s + 1 .. p``
    of the sequence (``q_a = p - s`` requests before it, ``N - p`` after it).
    """

    def __init__(
        self, problem: OrderingProblem, ratio: float | None, latency_floor_s: float, pulp: Any
    ) -> None:
        self.problem = problem
        self.pulp = pulp
        data = problem
        n, b = data.n_requests, data.batch_size
        self.n, self.b = n, b
        self.arcs = [(p, s) for p in range(1, n + 1) for s in range(1, b + 1) if p >= s]
        # global order: by execution time at full size, ties by index
        self.order = sorted(range(n), key=lambda r: (float(data.exec_s[r, b]), r))
        self.snapshot = data.snapshot
        # times are measured from the earliest arrival
        self.arrival = data.relative_arrival_s()
        self.latest = data.latest_start_s - float(data.arrival_s.min())
        self.lb = data.start_lower_bounds_s()
        self.ub = data.start_upper_bounds_s()

        if ratio is None:
            prob = pulp.LpProblem("sa_ordering_min_latency", pulp.LpMinimize)
        else:
            prob = pulp.LpProblem("sa_ordering_dinkelbach", pulp.LpMaximize)
        self.prob = prob
        self.path = {a: prob.add_variable(f"b_{a[0]}_{a[1]}", cat="Binary") for a in self.arcs}
        self.x = {
            (r, a): prob.add_variable(f"x_{r}_{a[0]}_{a[1]}", cat="Binary")
            for a in self.arcs
            for r in range(n)
        }
        self.cover = {
            (a, j): prob.add_variable(f"v_{a[0]}_{a[1]}_{j}", lowBound=0, upBound=1)
            for a in self.arcs
            for j in range(n)
        }
        self.duration = {a: prob.add_variable(f"d_{a[0]}_{a[1]}", lowBound=0) for a in self.arcs}
        self.idle = (
            {}
            if self.snapshot
            else {a: prob.add_variable(f"g_{a[0]}_{a[1]}", lowBound=0) for a in self.arcs}
        )
        self.boundary = {q: prob.add_variable(f"tau_{q}", lowBound=0) for q in range(n + 1)}
        self.met: dict[tuple[int, tuple[int, int]], Any] = {}

        self._path_flow()
        self._assignment()
        self._threshold_cover()
        self._durations()
        self._cover_rounding()
        self._boundary_times()
        if not self.snapshot:
            self._arrivals()
        self._identical_requests()
        if ratio is None:
            if self.snapshot:
                self._sorted_full_batches()
            self.prob += self.total_latency()
        else:
            self._met_deadlines()
            if self.snapshot:
                self._sorted_full_batches()
            if latency_floor_s > 0:
                self.prob += self.total_latency() >= latency_floor_s, "latency_floor"
            self._objective(ratio)

    def start(self, a: tuple[int, int]) -> Any:
        """Start time of arc ``a``: ``tau_{q_a} (+ g_a)``."""
        q = a[0] - a[1]
        if self.snapshot:
            return self.boundary[q]
        return self.boundary[q] + self.idle[a]

    def _path_flow(self) -> None:
        """The used arcs form one path from position 0 to N:
        ``sum_{a: q_a = 0} b_a = 1`` and ``sum_{a: p_a = q} b_a = sum_{a: q_a = q} b_a``."""
        lp = self.pulp.lpSum
        into: dict[int, list[Any]] = {q: [] for q in range(self.n + 1)}
        out: dict[int, list[Any]] = {q: [] for q in range(self.n + 1)}
        for (p, s), var in self.path.items():
            into[p].append(var)
            out[p - s].append(var)
        self.prob += lp(out[0]) == 1, "path_start"
        for q in range(1, self.n):
            self.prob += lp(into[q]) == lp(out[q]), f"path_{q}"

    def _assignment(self) -> None:
        """Each request in one batch, ``sum_a x_ra = 1``; a used arc holds exactly ``s``
        requests, ``sum_r x_ra = s b_a``."""
        lp = self.pulp.lpSum
        for r in range(self.n):
            self.prob += lp(self.x[r, a] for a in self.arcs) == 1, f"assign_{r}"
        for a in self.arcs:
            self.prob += (
                lp(self.x[r, a] for r in range(self.n)) == a[1] * self.path[a],
                f"fill_{a[0]}_{a[1]}",
            )

    def _threshold_cover(self) -> None:
        """``v_aj`` = 1 when arc ``a`` holds a request of rank >= ``j``:
        ``v_a0 = b_a``, ``v_aj <= v_a,j-1``, ``x_ra <= v_a,rank(r)`` and the capacity form
        ``sum_{rank(r) >= j} x_ra <= s v_aj``."""
        n = self.n
        for a in self.arcs:
            v = self.cover
            self.prob += v[a, 0] == self.path[a], f"cover0_{a[0]}_{a[1]}"
            tail: list[Any] = []
            for j in range(n - 1, -1, -1):
                r = self.order[j]
                if j > 0:
                    self.prob += v[a, j] <= v[a, j - 1], f"coverdown_{a[0]}_{a[1]}_{j}"
                self.prob += self.x[r, a] <= v[a, j], f"cover_{r}_{a[0]}_{a[1]}"
                tail.append(self.x[r, a])
                if j > 0:
                    self.prob += (
                        self.pulp.lpSum(tail) <= a[1] * v[a, j],
                        f"covercap_{a[0]}_{a[1]}_{j}",
                    )

    def _durations(self) -> None:
        """``d_a >= sum_j (f_s(j) - f_s(j - 1)) v_aj`` with ``f_s(j) = min_{rank(r) >= j} e_r(s)``;
        and ``d_a >= e_r(s) x_ra`` for the requests whose ``e_r(s)`` exceeds ``f_s(rank(r))``
        (where the size-``s`` order disagrees with the global one)."""
        data = self.problem
        n = self.n
        for a in self.arcs:
            s = a[1]
            e_sorted = np.array([data.exec_s[self.order[j], s] for j in range(n)])
            f = np.minimum.accumulate(e_sorted[::-1])[::-1]
            steps = np.diff(np.concatenate([[0.0], f]))
            self.prob += (
                self.duration[a]
                >= self.pulp.lpSum(
                    float(steps[j]) * self.cover[a, j] for j in range(n) if steps[j] > 0
                ),
                f"dur_{a[0]}_{a[1]}",
            )
            for j in range(n):
                if e_sorted[j] > f[j]:
                    r = self.order[j]
                    self.prob += (
                        self.duration[a] >= float(e_sorted[j]) * self.x[r, a],
                        f"durmember_{r}_{a[0]}_{a[1]}",
                    )

    def _cover_rounding(self) -> None:
        """At least ``ceil((N - j) / B)`` batches hold a request of rank >= ``j``:
        ``sum_a v_aj >= ceil((N - j) / B)`` (a Chvatal-Gomory rounding: each of the ``N - j``
        requests is in a batch, and a batch holds at most ``B``)."""
        for j in range(1, self.n):
            need = math.ceil((self.n - j) / self.b)
            self.prob += (
                self.pulp.lpSum(self.cover[a, j] for a in self.arcs) >= need,
                f"round_{j}",
            )

    def _boundary_times(self) -> None:
        """``tau_q = sum_{a: p_a <= q} (d_a + g_a)``: the end of the batches covering the first
        ``q`` positions (the start of the next batch, before idling). Also ``tau_q >= LB[q]``
        when a batch ends at ``q``."""
        lp = self.pulp.lpSum
        for q in range(self.n + 1):
            ended = [a for a in self.arcs if a[0] <= q]
            terms = [self.duration[a] for a in ended] + [self.idle[a] for a in ended if self.idle]
            self.prob += self.boundary[q] == lp(terms), f"tau_{q}"
            if 0 < q < self.n:
                into = [self.path[a] for a in self.arcs if a[0] == q]
                self.prob += (
                    self.boundary[q] >= float(self.lb[q]) * lp(into),
                    f"taulb_{q}",
                )

    def _arrivals(self) -> None:
        """A batch starts after its members arrive: ``tau_{q_a} + g_a >= arrival_r x_ra``."""
        for a in self.arcs:
            for r in range(self.n):
                if self.arrival[r] > 0:
                    self.prob += (
                        self.start(a) >= float(self.arrival[r]) * self.x[r, a],
                        f"arrive_{r}_{a[0]}_{a[1]}",
                    )

    def _met_deadlines(self) -> None:
        """``y_ra <= x_ra`` and ``start_a <= L_r(s) + M_ra (1 - y_ra)`` with the latest start
        ``L_r(s)`` and ``M_ra = UB[q_a] - L_r(s)``; pairs that can never meet are left out
        (``L_r(s) < LB[q_a]``), pairs that always meet use ``y_ra = x_ra``."""
        for a in self.arcs:
            p, s = a
            q = p - s
            for r in range(self.n):
                latest = float(self.latest[r, s])
                if latest < self.lb[q]:
                    continue
                if latest >= self.ub[q]:
                    self.met[r, a] = self.x[r, a]
                    continue
                y = self.prob.add_variable(f"y_{r}_{p}_{s}", cat="Binary")
                self.met[r, a] = y
                self.prob += y <= self.x[r, a], f"metin_{r}_{p}_{s}"
                self.prob += (
                    self.start(a) <= latest + float(self.ub[q] - latest) * (1 - y),
                    f"metby_{r}_{p}_{s}",
                )

    def _sorted_full_batches(self) -> None:
        """Dominance D1 on full batches (snapshot only; docs, Sec. 3): a full batch with no
        met member holds no request longer (at size ``B``) than any request of a later full
        batch. With ``h_qj`` = "a met-free full batch ending at or before position ``q`` holds
        a request of rank >= ``j``": ``h_qj >= h_q-1,j``, ``h_qj >= v_(q,B),j - mu_(q,B)`` and,
        for every full arc ``a'``, ``sum_{e_r(B) < e_(j)(B)} x_ra' <= B (1 - h_{q_a'},j)``;
        ``mu_a <= sum_r y_ra`` flags a batch with a met member (0 without an SLO term)."""
        n, b = self.n, self.b
        data = self.problem
        lp = self.pulp.lpSum
        values = [float(data.exec_s[r, b]) for r in self.order]
        # first[j]: number of requests strictly shorter than the rank-j request (at size B)
        first = [0] * n
        for j in range(1, n):
            first[j] = j if values[j] > values[j - 1] else first[j - 1]
        thresholds = [j for j in range(1, n) if first[j] == j]
        full = [(p, b) for p in range(b, n + 1)]
        has_met = {}
        for a in full:
            if self.met:
                flag = self.prob.add_variable(f"mu_{a[0]}", lowBound=0, upBound=1)
                self.prob += (
                    flag <= lp(self.met[r, a] for r in range(n) if (r, a) in self.met),
                    f"mu_{a[0]}",
                )
                has_met[a] = flag
        mark = {
            (q, j): self.prob.add_variable(f"h_{q}_{j}", lowBound=0, upBound=1)
            for q in range(b, n + 1)
            for j in thresholds
        }
        for q in range(b, n + 1):
            for j in thresholds:
                if q > b:
                    self.prob += mark[q, j] >= mark[q - 1, j], f"hup_{q}_{j}"
                a = (q, b)
                rhs = self.cover[a, j] - has_met[a] if a in has_met else self.cover[a, j]
                self.prob += mark[q, j] >= rhs, f"hset_{q}_{j}"
        for a in full:
            q = a[0] - b
            if q < b:
                continue
            shorter: list[Any] = []
            done = 0
            for j in thresholds:
                shorter.extend(self.x[self.order[t], a] for t in range(done, j))
                done = j
                self.prob += (
                    lp(shorter) <= b * (1 - mark[q, j]),
                    f"sorted_{a[0]}_{j}",
                )

    def _identical_requests(self) -> None:
        """Requests with identical data are interchangeable: the lower index is not in a later
        batch, ``sum_a p_a x_ra <= sum_a p_a x_r'a``."""
        data = self.problem
        key: dict[tuple[float, ...], list[int]] = {}
        for r in range(self.n):
            row = (
                float(data.arrival_s[r]),
                float(data.output_tokens[r]),
                *data.first_token_s[r, 1:].tolist(),
                *data.exec_s[r, 1:].tolist(),
                *data.latest_start_s[r, 1:].tolist(),
            )
            key.setdefault(row, []).append(r)
        lp = self.pulp.lpSum
        for group in key.values():
            for r, r2 in itertools.pairwise(group):
                self.prob += (
                    lp(a[0] * self.x[r, a] for a in self.arcs)
                    <= lp(a[0] * self.x[r2, a] for a in self.arcs),
                    f"identical_{r}_{r2}",
                )

    def total_latency(self) -> Any:
        """``L = sum_a (N - p_a) d_a + sum_a (N - q_a) g_a + sum_{r,a} e_r(s_a) x_ra - sum_r a_r``."""
        data = self.problem
        lp = self.pulp.lpSum
        n = self.n
        terms = [(n - p) * self.duration[(p, s)] for (p, s) in self.arcs if p < n]
        if self.idle:
            terms += [(n - (p - s)) * self.idle[(p, s)] for (p, s) in self.arcs]
        terms += [float(data.exec_s[r, a[1]]) * self.x[r, a] for (r, a) in self.x]
        return lp(terms) - float(self.arrival.sum())

    def _objective(self, ratio: float) -> None:
        """Dinkelbach step at ``lambda = ratio``: maximize ``M / lambda - L`` (in microseconds),
        or ``M`` when ``lambda = 0``."""
        met = self.pulp.lpSum(self.met.values())
        if ratio > 0:
            self.prob += MILP_OBJECTIVE_UNITS_PER_S * ((1.0 / ratio) * met - self.total_latency())
        else:
            self.prob += met

    def batches(self) -> Batches:
        """The plan read from the solved variables."""
        used = sorted(a for a in self.arcs if (self.path[a].varValue or 0.0) > 0.5)
        plan = []
        for a in used:
            members = [r for r in range(self.n) if (self.x[r, a].varValue or 0.0) > 0.5]
            plan.append(tuple(members))
        return self.problem.check_batches(plan)


# ---------------------------------------------------------------------------------------------
# CP-SAT: batch slots on integer-scaled times
# ---------------------------------------------------------------------------------------------


def _floor_ticks(seconds: float, ticks_per_s: float) -> int:
    return math.floor(seconds * ticks_per_s)


class _SlotCpModel:
    """Variables and constraint families of the batch-slot CP-SAT model (docs, Sec. 5).

    Slot ``k`` (0..N-1, in time order) holds a batch or is empty. ``u_rks`` says request ``r``
    is in slot ``k`` and the slot has size ``s``; ``v_rks`` says so and ``r`` is counted as
    met. Times are integer ticks (``ticks_per_s``, a power of two) rounded down, so the model
    is a relaxation whose optimum bounds the true one. Every enforced linear constraint has a
    single enforcement literal.
    """

    def __init__(self, problem: OrderingProblem, min_met: int, ticks_per_s: float) -> None:
        from ortools.sat.python import cp_model

        self.problem = problem
        self.ticks = ticks_per_s
        data = problem
        n, b = data.n_requests, data.batch_size
        self.n, self.b = n, b
        self.slots = n
        md = cp_model.CpModel()
        self.model = md
        self.arrival = data.relative_arrival_s()
        self.latest = data.latest_start_s - float(data.arrival_s.min())
        self.exec_t = {
            (r, s): _floor_ticks(float(data.exec_s[r, s]), ticks_per_s)
            for r in range(n)
            for s in range(1, b + 1)
        }
        self.arrive_t = [_floor_ticks(float(a), ticks_per_s) for a in self.arrival]
        self.horizon = max(self.arrive_t) + sum(
            max(self.exec_t[r, s] for s in range(1, b + 1)) for r in range(n)
        )
        keys = [(r, k, s) for r in range(n) for k in range(self.slots) for s in range(1, b + 1)]
        self.member = {key: md.new_bool_var(f"u_{key[0]}_{key[1]}_{key[2]}") for key in keys}
        self.size = {
            (k, s): md.new_bool_var(f"z_{k}_{s}") for k in range(self.slots) for s in range(b + 1)
        }
        self.duration = [md.new_int_var(0, self.horizon, f"d_{k}") for k in range(self.slots)]
        self.start = [md.new_int_var(0, self.horizon, f"t_{k}") for k in range(self.slots)]
        self.latency = [md.new_int_var(0, self.horizon, f"l_{r}") for r in range(n)]
        self.met_at: dict[tuple[int, int, int], Any] = {}
        self.met = [md.new_bool_var(f"m_{r}") for r in range(n)]

        self._slots_and_sizes()
        self._durations_and_starts()
        self._latencies()
        self._met_deadlines()
        if data.snapshot:
            self._dominance()
        md.add(sum(self.met) >= min_met)
        md.minimize(sum(self.latency))

    def _slots_and_sizes(self) -> None:
        """One (slot, size) per request, ``sum_ks u_rks = 1``; one size per slot,
        ``sum_s z_ks = 1`` with ``z_k0`` empty, and ``sum_r u_rks = s z_ks``; empty slots come
        last, ``z_k0 => z_k+1,0``."""
        md, n, b = self.model, self.n, self.b
        for r in range(n):
            md.add_exactly_one(
                self.member[r, k, s] for k in range(self.slots) for s in range(1, b + 1)
            )
        for k in range(self.slots):
            md.add_exactly_one(self.size[k, s] for s in range(b + 1))
            for s in range(1, b + 1):
                md.add(sum(self.member[r, k, s] for r in range(n)) == s * self.size[k, s])
            if k + 1 < self.slots:
                md.add_implication(self.size[k, 0], self.size[k + 1, 0])

    def _durations_and_starts(self) -> None:
        """``u_rks => d_k >= e_r(s)``; ``z_k0 => d_k = 0``; ``t_k >= t_k-1 + d_k-1``;
        ``u_rks => t_k >= a_r`` (floor-scaled ticks)."""
        md, n, b = self.model, self.n, self.b
        for k in range(self.slots):
            if k > 0:
                md.add(self.start[k] >= self.start[k - 1] + self.duration[k - 1])
            md.add(self.duration[k] == 0).only_enforce_if(self.size[k, 0])
            for r in range(n):
                for s in range(1, b + 1):
                    u = self.member[r, k, s]
                    md.add(self.duration[k] >= self.exec_t[r, s]).only_enforce_if(u)
                    if self.arrive_t[r] > 0:
                        md.add(self.start[k] >= self.arrive_t[r]).only_enforce_if(u)

    def _latencies(self) -> None:
        """``u_rks => l_r >= t_k + e_r(s) - a_r`` (arrival rounded up)."""
        md, n, b = self.model, self.n, self.b
        for r in range(n):
            a_up = math.ceil(float(self.arrival[r]) * self.ticks)
            for k in range(self.slots):
                for s in range(1, b + 1):
                    md.add(
                        self.latency[r] >= self.start[k] + self.exec_t[r, s] - a_up
                    ).only_enforce_if(self.member[r, k, s])

    def _met_deadlines(self) -> None:
        """``m_r = sum_ks v_rks`` with ``v_rks <= u_rks`` and ``v_rks => t_k <= floor(L_r(s)) + 1``
        (ticks); no ``v`` where ``r`` can never meet its SLO at size ``s``."""
        md, n, b = self.model, self.n, self.b
        for r in range(n):
            terms = []
            for s in range(1, b + 1):
                latest = float(self.latest[r, s])
                if latest < 0:
                    continue
                bound = _floor_ticks(latest, self.ticks) + 1 if latest < math.inf else None
                for k in range(self.slots):
                    u = self.member[r, k, s]
                    if bound is None or bound >= self.horizon:
                        self.met_at[r, k, s] = u
                        terms.append(u)
                        continue
                    v = md.new_bool_var(f"v_{r}_{k}_{s}")
                    md.add_implication(v, u)
                    md.add(self.start[k] <= bound).only_enforce_if(v)
                    self.met_at[r, k, s] = v
                    terms.append(v)
            md.add(self.met[r] == sum(terms))

    def _dominance(self) -> None:
        """Snapshot dominance rules (docs, Sec. 3), for a slot ``k`` with no met member:
        (D1) no later slot of the same size holds a request shorter (at that size) than one in
        ``k``; (D2) the next slot satisfies Smith's ratio rule ``s_k+1 d_k <= s_k d_k+1``
        (ticks rounded down, hence the ``s_k - 1`` slack)."""
        md, n, b = self.model, self.n, self.b
        data = self.problem
        no_met = []
        for k in range(self.slots):
            flag = md.new_bool_var(f"nomet_{k}")
            in_slot = [v for (r, kk, s), v in self.met_at.items() if kk == k]
            for v in in_slot:
                md.add_implication(flag, v.Not())
            md.add_bool_or([flag, *in_slot])
            no_met.append(flag)
        for s in range(1, b + 1):
            pairs = [
                (i, j) for i in range(n) for j in range(n) if data.exec_s[i, s] > data.exec_s[j, s]
            ]
            for k in range(self.slots):
                for k2 in range(k + 1, self.slots):
                    for i, j in pairs:
                        md.add_bool_or(
                            [
                                no_met[k].Not(),
                                self.member[i, k, s].Not(),
                                self.member[j, k2, s].Not(),
                            ]
                        )
        for k in range(self.slots - 1):
            for s in range(1, b + 1):
                for s2 in range(1, b + 1):
                    both = md.new_bool_var(f"smith_{k}_{s}_{s2}")
                    md.add_bool_or(
                        [no_met[k].Not(), self.size[k, s].Not(), self.size[k + 1, s2].Not(), both]
                    )
                    md.add(
                        s2 * self.duration[k] <= s * self.duration[k + 1] + s - 1
                    ).only_enforce_if(both)

    def batches(self, solver: Any) -> Batches:
        """The plan read from a solver holding a solution."""
        plan = []
        for k in range(self.slots):
            members = [
                r
                for r in range(self.n)
                for s in range(1, self.b + 1)
                if solver.boolean_value(self.member[r, k, s])
            ]
            if members:
                plan.append(tuple(members))
        return self.problem.check_batches(plan)


def _ticks_per_s(problem: OrderingProblem) -> float:
    """Largest power of two <= ``CP_MAX_TICKS_PER_S`` keeping the horizon under
    ``CP_MAX_HORIZON_TICKS`` ticks."""
    horizon_s = float(problem.relative_arrival_s().max()) + float(
        np.max(problem.exec_s[:, 1:], axis=1).sum()
    )
    scale = CP_MAX_TICKS_PER_S
    while scale * horizon_s * problem.n_requests > CP_MAX_HORIZON_TICKS and scale > 1.0:
        scale /= 2.0
    return scale


def _stopped(status: Status) -> Status:
    """A loop's status when one of its subproblems ended with ``status`` (not OPTIMAL)."""
    if status in (Status.TIME_LIMIT, Status.FEASIBLE):
        return status
    return Status.UNKNOWN


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------


@register_model(PROBLEM)
class SAOrderingModel(ExactModel):
    """Exact SA ordering: maximize ``G = #met / sum of latencies`` over orders and batch splits.

    Parameters
    ----------
    instance : Instance or OrderingProblem
        An SA-ordering instance (see the module docstring) or its problem data.

    Notes
    -----
    ``solve(model, "highs" | "cbc")`` runs Dinkelbach iterations on the MILP,
    ``solve(model, "cpsat")`` runs the CP-SAT model once per number of met requests, and
    ``solve(model, "brute")`` enumerates every plan (tiny instances). Every incumbent is
    re-evaluated exactly with :meth:`OrderingProblem.evaluate`. See docs/sa_ordering.md.

    References
    ----------
    SA paper, Sec. 3.1 (Eq. 13: choose the permutation and the batch index of each request to
    maximize G) and Sec. 4.3 (exhaustive search as the exact baseline).
    """

    sense = "max"

    def __init__(self, instance: Instance | OrderingProblem) -> None:
        super().__init__(instance)
        self.problem = as_problem(instance)

    # -- starting plan --------------------------------------------------------------------
    def starting_plan(self) -> tuple[Batches, PlanValue]:
        """The better of two deterministic plans: full batches in arrival order and in order of
        execution time at full size (ties: the first)."""
        data = self.problem
        b = data.batch_size
        candidates = [
            sorted_full_batches(data, range(data.n_requests)),
            sorted_full_batches(
                data, sorted(range(data.n_requests), key=lambda r: (float(data.exec_s[r, b]), r))
            ),
        ]
        values = [data.evaluate(c) for c in candidates]
        best = max(range(len(candidates)), key=lambda i: (values[i].g, -i))
        return candidates[best], values[best]

    # -- formulations -----------------------------------------------------------------------
    def milp(self, ratio: float | None = None, latency_floor_s: float = 0.0) -> MilpFormulation:
        """The Dinkelbach subproblem ``max M - ratio * L`` as a PuLP MILP.

        Parameters
        ----------
        ratio : float, optional
            ``lambda`` (1/s); default the G of :meth:`starting_plan`. The objective is written
            ``1e6 * (M / lambda - L)`` (microseconds) and reported in seconds; with
            ``ratio = 0`` it is ``M``.
        latency_floor_s : float
            A known lower bound on every plan's total latency, added as ``L >= floor`` (a
            valid cut; :meth:`latency_milp` proves one).
        """
        import pulp

        lam = self.starting_plan()[1].g if ratio is None else float(ratio)
        if not lam >= 0:
            raise ValueError(f"ratio must be >= 0, got {ratio}")
        built = _PositionArcMilp(self.problem, lam, float(latency_floor_s), pulp)
        scale = MILP_OBJECTIVE_UNITS_PER_S if lam > 0 else 1.0
        return MilpFormulation(
            problem=built.prob,
            to_schedule=lambda: self._to_schedule(built.batches()),
            objective_of=lambda v: v / scale,
        )

    def latency_milp(self) -> MilpFormulation:
        """The MILP minimizing total latency (s) with no SLO term: ``L*_0 = min L``."""
        import pulp

        built = _PositionArcMilp(self.problem, None, 0.0, pulp)
        return MilpFormulation(
            problem=built.prob, to_schedule=lambda: self._to_schedule(built.batches())
        )

    def cpsat(self, min_met: int = 0) -> CpFormulation:
        """The CP-SAT subproblem: minimize total latency with at least ``min_met`` met requests.

        Times are integer ticks (``2**k`` per second, rounded down); the objective is reported
        in seconds (ticks / scale), a lower bound on the true total latency of the plan.
        """
        if not 0 <= min_met <= self.problem.n_requests:
            raise ValueError(f"min_met must be in [0, {self.problem.n_requests}], got {min_met}")
        scale = _ticks_per_s(self.problem)
        built = _SlotCpModel(self.problem, min_met, scale)
        return CpFormulation(
            model=built.model,
            to_schedule=lambda solver: self._to_schedule(built.batches(solver)),
            objective_of=lambda v: v / scale,
        )

    def _to_schedule(self, batches: Sequence[Sequence[int]]) -> Schedule:
        """A static-batch schedule running ``batches`` in order on the one server."""
        return Schedule.static_batches(self.problem.check_batches(batches))

    # -- exhaustive search -----------------------------------------------------------------
    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Best G over every ordered partition of the requests into batches of 1..B.

        Order inside a batch does not matter, so each batch is enumerated as a set
        (``itertools.combinations``); every plan is visited exactly once. Raises
        :class:`TimeoutError` when ``time_limit`` seconds pass.
        """
        data = self.problem
        n, b = data.n_requests, data.batch_size
        deadline = time.perf_counter() + time_limit
        arrival = [float(v) for v in data.arrival_s]
        first_t = data.first_token_s.tolist()
        exec_t = data.exec_s.tolist()
        best_g = -1.0
        best_plan: list[tuple[int, ...]] = []
        plan: list[tuple[int, ...]] = []
        visited = 0

        def search(remaining: tuple[int, ...], end: float, met: int, total: float) -> None:
            nonlocal best_g, best_plan, visited
            if not remaining:
                visited += 1
                if visited % 1024 == 0 and time.perf_counter() > deadline:
                    raise TimeoutError(f"brute force passed its time limit of {time_limit} s")
                g = met / total
                if g > best_g:
                    best_g = g
                    best_plan = list(plan)
                return
            for s in range(1, min(b, len(remaining)) + 1):
                for batch in itertools.combinations(remaining, s):
                    start = max(end, max(arrival[r] for r in batch))
                    longest = 0.0
                    add_met = 0
                    add_total = 0.0
                    for r in batch:
                        first = start + first_t[r][s]
                        last = start + exec_t[r][s]
                        add_total += last - arrival[r]
                        add_met += data.member_met(r, first, last)
                        longest = max(longest, exec_t[r][s])
                    rest = tuple(r for r in remaining if r not in batch)
                    plan.append(batch)
                    search(rest, start + longest, met + add_met, total + add_total)
                    plan.pop()

        search(tuple(range(n)), 0.0, 0, 0.0)
        value = data.evaluate(best_plan)
        return value.g, self._to_schedule(best_plan)

    # -- solve loops ----------------------------------------------------------------------------
    def improvement(self, raw: Any, value: PlanValue) -> tuple[Batches, PlanValue] | None:
        """The plan of a backend's solution and its exact value, when its G beats ``value``'s
        (by more than 1e-12 relative, or any G > 0 over G = 0); None otherwise."""
        if raw.schedule is None:
            return None
        plan = batches_of(raw.schedule)
        cand = self.problem.evaluate(plan)
        if cand.g > value.g * (1.0 + 1e-12) or (value.g == 0 and cand.g > 0):
            return plan, cand
        return None

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        """Dinkelbach on MILP backends, enumeration by met count on CP-SAT; brute force as is."""
        if backend.formulation == "milp":
            return self._dinkelbach(backend, time_limit)
        if backend.formulation == "cpsat":
            return self._by_met_count(backend, time_limit)
        return None

    def _result(
        self,
        status: Status,
        plan: Batches,
        value: PlanValue,
        bound: float | None,
        backend: Any,
        start: float,
        **details: Any,
    ) -> Result:
        if bound is not None and bound < value.g:
            bound = value.g
        return Result(
            status=status,
            objective=value.g,
            bound=bound,
            runtime_s=time.perf_counter() - start,
            backend=backend.name,
            model=self.name,
            sense=self.sense,
            schedule=self._to_schedule(plan),
            details={
                "met_requests": value.met_requests,
                "total_latency_s": value.total_latency_s,
                **details,
            },
        )

    def _dinkelbach(self, backend: Any, time_limit: float) -> Result:
        """Minimum latency first, then Dinkelbach iterations.

        Step 0 solves ``L*_0 = min L`` (no SLO term): it gives a plan, a proved floor on every
        plan's latency and ``G* <= (meetable requests) / L*_0``. Then, from the best plan so
        far, ``lambda_{k+1} = G(x_k)`` with ``x_k`` maximizing ``M - lambda_k L`` subject to
        ``L >= L*_0``, until the subproblem's proved maximum is 0. Bound after a step:
        ``G* <= lambda (1 + U / L_lb)`` from the bound ``U`` on ``M / lambda - L`` (s).
        """
        start = time.perf_counter()
        deadline = start + time_limit
        data = self.problem
        plan, value = self.starting_plan()
        latency_lb = data.latency_lower_bound_s()
        meetable = data.meetable_requests
        steps = 0

        def finish(status: Status, bound: float | None) -> Result:
            return self._result(
                status,
                plan,
                value,
                bound,
                backend,
                start,
                iterations=steps,
                latency_floor_s=latency_lb,
            )

        def adopt(raw: Any) -> bool:
            nonlocal plan, value
            better = self.improvement(raw, value)
            if better is not None:
                plan, value = better
            return better is not None

        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return finish(Status.TIME_LIMIT, meetable / latency_lb)
        raw = backend.solve_formulation(self.latency_milp(), remaining)
        steps += 1
        adopt(raw)
        if raw.bound is not None:
            latency_lb = max(latency_lb, raw.bound)
        if raw.status != Status.OPTIMAL:
            return finish(_stopped(raw.status), meetable / latency_lb)
        if meetable / latency_lb <= value.g * (1.0 + RATIO_TOLERANCE):
            return finish(Status.OPTIMAL, meetable / latency_lb)
        while True:
            lam = value.g
            # the cut sits a hair below the proved floor, inside solver tolerances
            form = self.milp(lam, latency_floor_s=latency_lb * (1.0 - 1e-9) - 1e-9)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return finish(Status.TIME_LIMIT, meetable / latency_lb)
            raw = backend.solve_formulation(form, remaining)
            steps += 1
            logger.debug(
                "sa-ordering dinkelbach step %d at lambda=%.12g: %s, %s, %s",
                steps,
                lam,
                raw.status.value,
                raw.objective,
                raw.bound,
            )
            bound = self._dinkelbach_bound(lam, raw.bound, latency_lb, meetable / latency_lb)
            improved = adopt(raw)
            if raw.status != Status.OPTIMAL:
                return finish(_stopped(raw.status), bound)
            if not improved:
                proved = bound is not None and bound <= value.g * (1.0 + RATIO_TOLERANCE)
                return finish(Status.OPTIMAL if proved else Status.FEASIBLE, bound)

    @staticmethod
    def _dinkelbach_bound(
        lam: float, sub_bound: float | None, latency_lb: float, upper_all: float
    ) -> float | None:
        """Upper bound on G* from a bound on ``max M / lambda - L`` (s) (``max M`` at 0)."""
        if sub_bound is None:
            return upper_all
        if lam == 0:
            return min(upper_all, max(sub_bound, 0.0) / latency_lb)
        return min(upper_all, lam * (1.0 + max(sub_bound, 0.0) / latency_lb))

    def _by_met_count(self, backend: Any, time_limit: float) -> Result:
        """For m = 0, 1, ...: minimize total latency subject to >= m met (CP-SAT, relaxed
        floor-rounded times), evaluate each optimum exactly, and stop when no larger m can
        beat the incumbent: ``G* <= max_m m / L_lb(m)``."""
        start = time.perf_counter()
        deadline = start + time_limit
        data = self.problem
        plan, value = self.starting_plan()
        latency_lb = data.latency_lower_bound_s()
        can_meet = data.meetable_requests
        bound_done = 0.0  # max over settled ranges of m of m / L_lb(m)
        m = 0
        solves = 0
        while True:
            tail_bound = can_meet / latency_lb
            if m > can_meet or (m > 0 and tail_bound <= value.g * (1.0 + RATIO_TOLERANCE)):
                bound = max(bound_done, value.g if m > can_meet else tail_bound)
                proved = bound <= value.g * (1.0 + RATIO_TOLERANCE)
                status = Status.OPTIMAL if proved else Status.FEASIBLE
                return self._result(status, plan, value, bound, backend, start, solves=solves)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                bound = max(bound_done, tail_bound)
                return self._result(
                    Status.TIME_LIMIT, plan, value, bound, backend, start, solves=solves
                )
            form = self.cpsat(m)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                bound = max(bound_done, tail_bound)
                return self._result(
                    Status.TIME_LIMIT, plan, value, bound, backend, start, solves=solves
                )
            raw = backend.solve_formulation(form, remaining)
            solves += 1
            logger.debug(
                "sa-ordering min latency with >= %d met: %s, %s, %s",
                m,
                raw.status.value,
                raw.objective,
                raw.bound,
            )
            if raw.status == Status.INFEASIBLE:
                m = can_meet + 1
                continue
            if raw.schedule is not None:
                cand_plan = batches_of(raw.schedule)
                cand = data.evaluate(cand_plan)
                if cand.g > value.g:
                    plan, value = cand_plan, cand
            if raw.bound is not None:
                latency_lb = max(latency_lb, raw.bound)
            if raw.status != Status.OPTIMAL:
                bound = max(bound_done, can_meet / latency_lb)
                return self._result(
                    _stopped(raw.status), plan, value, bound, backend, start, solves=solves
                )
            reached = cand.met_requests if raw.schedule is not None else m
            top = max(m, reached)
            if m > 0 or reached > 0:
                bound_done = max(bound_done, top / latency_lb)
            m = top + 1
