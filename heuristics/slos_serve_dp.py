"""SLOs-Serve's per-call admission: the multi-SLO dynamic program with Algorithm 2 as PB*.

At a scheduler call the DP chooses which new requests to admit, keeping every running request
(forced admission), so that the batch process of :mod:`slolab.models.slos_admission` (B1)
meets every admitted request's prefill deadline and decode cadence, within KV memory, with the
largest total value. Requests are ordered by prefill deadline; a state is

    (i, m, pb, n) -> best value,

``i`` the last admitted request, ``m`` the memory used (units of ``memory_unit`` tokens),
``pb`` the prefill budget left at ``i``'s deadline (units of ``budget_unit`` tokens) and ``n``
the admitted requests per TPOT tier. The transition enumerates the previously admitted request
``j``:

    DP[i, m + m_i, pb + Delta^n_{j,i} - p_i, n + e_{l_i}] = max_j DP[j, m, pb, n] + v_i,

with ``Delta^n_{j,i} = PB*(t_i, n) - PB*(t_j, n)`` the prefill budget Algorithm 2 leaves in
the batches between the two deadlines. The math and how it maps onto the paper's Eqn. 2-5 is
in ``docs/slos_serve.md``.

With ``memory_unit`` dividing every new request's memory and the free memory, and
``budget_unit = 1``, the DP is exact: its value equals the B1 MILP optimum. Coarser units
round memory up and budget down (never admitting a set B1 rejects) and shrink the state space.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from slolab.models.slos_admission import (
    AdmissionPlan,
    AdmissionProblem,
    batch_process,
    plan_b1,
    plan_schedule,
)
from slolab.sim.schedule import Schedule
from slolab.timing.base import TimingModel
from slolab.timing.inverse import time2bs

if TYPE_CHECKING:
    from slolab.instances.records import Instance

__all__ = ["Algorithm2Batch", "DPDecision", "algorithm2", "dp_schedule", "pb_star", "slos_dp"]

logger = logging.getLogger("slolab")


@dataclass(frozen=True, slots=True)
class Algorithm2Batch:
    """One partial batch of Algorithm 2: the decode tokens it serves and the prefill budget left.

    Attributes
    ----------
    decode : tuple of int
        Indices (into the decoding requests given) served one decode token.
    prefill_budget : int
        ``time2bs(t0)`` minus the decode tokens.
    late : int
        Decode tokens due in the batch that did not fit (the SLOs of those requests fail).
    """

    decode: tuple[int, ...]
    prefill_budget: int
    late: int


def algorithm2(
    window_s: float,
    decoding_tpot_s: Sequence[float],
    timing: TimingModel,
    batch_duration_s: float | None = None,
) -> list[Algorithm2Batch]:
    """Algorithm 2 (batch formation) of SLOs-Serve, run literally with a priority queue.

    ``floor(window_s / t0)`` batches of duration ``t0`` (default the tightest TPOT of the
    decoding requests, line 1), each with ``time2bs(t0)`` tokens (line 7). Every request's
    ``schDDL`` starts at 0 (lines 2-3); in batch ``i`` the queue pops, earliest ``schDDL``
    first, every request whose ``schDDL`` falls before the batch ends (``schDDL < (i + 1) t0``;
    the extracted line 9 reads ``>= i t0``, which never stops popping) while budget is left,
    serves one decode token and advances ``schDDL`` by its TPOT (lines 8-14).

    Parameters
    ----------
    window_s : float
        Length ``t`` of the window (s).
    decoding_tpot_s : sequence of float
        TPOT of each decoding request.
    timing : TimingModel
        Gives ``time2bs``.
    batch_duration_s : float, optional
        ``t0``; must not exceed any TPOT given.

    Returns
    -------
    list of Algorithm2Batch

    References
    ----------
    SLOs-Serve, Algorithm 2 and Sec. 3.2.2.
    """
    tpots = [float(t) for t in decoding_tpot_s]
    if batch_duration_s is None:
        if not tpots:
            raise ValueError("batch_duration_s is needed when no request is decoding")
        batch_duration_s = min(tpots)
    t0 = float(batch_duration_s)
    if tpots and t0 > min(tpots) * (1 + 1e-12):
        raise ValueError(
            f"batch_duration_s must not exceed the tightest TPOT {min(tpots)}, got {t0}"
        )
    capacity = time2bs(timing, t0)
    queue = [(0.0, k) for k in range(len(tpots))]
    heapq.heapify(queue)
    out = []
    for i in range(int(np.floor(window_s / t0 + 1e-9))):
        budget = capacity
        served: list[int] = []
        batch_end = (i + 1) * t0
        while queue and queue[0][0] < batch_end - 1e-9 and budget > 0:
            due, k = heapq.heappop(queue)
            served.append(k)
            budget -= 1
            heapq.heappush(queue, (due + tpots[k], k))
        late = sum(1 for due, _ in queue if due < batch_end - 1e-9)
        out.append(Algorithm2Batch(tuple(served), budget, late))
    return out


def pb_star(
    window_s: float,
    tier_counts: Sequence[int],
    tier_tpot_s: Sequence[float],
    timing: TimingModel,
    batch_duration_s: float,
) -> int | None:
    """``PB*(t, n)``: prefill budget of Algorithm 2's batches over ``[0, t)`` (Eqn. 3).

    ``tier_counts[l]`` requests of TPOT ``tier_tpot_s[l]`` decode from time 0. None when some
    batch cannot serve every decode token due in it (the decode SLOs are not attained).
    """
    tpots = [float(t) for t, c in zip(tier_tpot_s, tier_counts, strict=True) for _ in range(int(c))]
    batches = algorithm2(window_s, tpots, timing, batch_duration_s)
    if any(b.late for b in batches):
        return None
    return int(sum(b.prefill_budget for b in batches))


@dataclass(frozen=True, slots=True, eq=False)
class DPDecision:
    """The DP's decision at one call.

    Attributes
    ----------
    admitted : tuple of int
        New rows admitted (sorted).
    rejected : tuple of int
        New rows declined.
    value : float
        Total value of the admitted rows (0 when infeasible).
    feasible : bool
        False when even the running requests cannot all keep their SLOs (nothing admitted).
    plan : AdmissionPlan or None
        The batches (Algorithm 2's partial batches with prefill budget given earliest deadline
        first); None when infeasible.
    runtime_s : float
        Wall time of the call (s).
    states_explored : int
        Candidate states generated by the transitions.
    states_kept : int
        States stored (after dropping dominated table entries, see :func:`slos_dp`).
    memory_unit, budget_unit : int
        Discretization used (tokens per unit).
    """

    admitted: tuple[int, ...]
    rejected: tuple[int, ...]
    value: float
    feasible: bool
    plan: AdmissionPlan | None
    runtime_s: float
    states_explored: int
    states_kept: int
    memory_unit: int
    budget_unit: int

    def to_schedule(self, problem: AdmissionProblem, complete: bool = True) -> Schedule:
        """The plan as an engine-replayable schedule (see :func:`plan_schedule`)."""
        if self.plan is None:
            raise ValueError("an infeasible decision has no schedule")
        return plan_schedule(problem, self.plan, complete=complete)


@dataclass(slots=True)
class _Layer:
    """States whose last admitted request is one node: parallel arrays."""

    mem: np.ndarray
    pb: np.ndarray
    cnt: np.ndarray
    val: np.ndarray
    pred_node: np.ndarray
    pred_idx: np.ndarray

    def __len__(self) -> int:
        return len(self.mem)


def _check_unit(name: str, unit: int) -> int:
    if isinstance(unit, bool) or int(unit) != unit or unit < 1:
        raise ValueError(f"{name} must be an integer >= 1 (tokens), got {unit!r}")
    return int(unit)


def _group_keys(columns: list[np.ndarray]) -> np.ndarray:
    """One int64 key per row for equal-column grouping (dense ranks when the radix overflows)."""
    spans = [int(c.max()) + 1 for c in columns]
    if float(np.prod(np.array(spans, dtype=float))) < 2.0**62:
        key = np.zeros(len(columns[0]), dtype="int64")
        for column, span in zip(columns, spans, strict=True):
            key = key * span + column
        return key
    return np.unique(np.column_stack(columns), axis=0, return_inverse=True)[1].ravel()


def _dominance_order(key: np.ndarray, val: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Rows by ``key`` ascending, then ``val`` and ``pb`` descending, ties in row order.

    The same permutation as ``np.lexsort((-pb, -val, key))``, computed as one stable sort of a
    single int64 key (``val`` replaced by its dense rank) when that key fits, about twice as
    fast on the large layers of a burst; otherwise the lexsort itself.
    """
    val_levels, val_rank = np.unique(val, return_inverse=True)
    n_val = len(val_levels)
    pb_span = int(pb.max()) - int(pb.min()) + 1
    key_span = int(key.max()) + 1
    if int(key.min()) < 0 or float(key_span) * n_val * pb_span >= 2.0**62:
        return np.lexsort((-pb, -val, key))
    combined = (key * n_val + (n_val - 1 - val_rank.ravel())) * pb_span + (int(pb.max()) - pb)
    return np.argsort(combined, kind="stable")


def _keep_breakpoints(layer: _Layer) -> _Layer:
    """Keep, per ``(m, n)``, the states on the (budget, value) Pareto front.

    The paper's table ``DP[i, m, pb, n]`` (best value with at least ``pb`` budget left) is
    non-increasing in ``pb``; only its breakpoints carry information. A state with the same
    ``(m, n)`` as another, no more budget and no more value is one of those dominated entries
    and is dropped (the first of equal states is kept).
    """
    if len(layer) < 2:
        return layer
    key = _group_keys([layer.mem, *layer.cnt.T])
    order = _dominance_order(key, layer.val, layer.pb)
    sorted_key = key[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = sorted_key[1:] != sorted_key[:-1]
    group = np.cumsum(new_group) - 1
    lifted = layer.pb[order] + group * (int(layer.pb.max()) + 1)
    best_before = np.empty_like(lifted)
    best_before[0] = -1
    best_before[1:] = np.maximum.accumulate(lifted)[:-1]
    keep = np.sort(order[lifted > best_before])
    return _Layer(
        layer.mem[keep],
        layer.pb[keep],
        layer.cnt[keep],
        layer.val[keep],
        layer.pred_node[keep],
        layer.pred_idx[keep],
    )


def slos_dp(problem: AdmissionProblem, memory_unit: int = 1, budget_unit: int = 1) -> DPDecision:
    """SLOs-Serve's multi-SLO dynamic program for one scheduler call.

    Nodes are the prefilling requests sorted by deadline batch (running before new on ties,
    then by row), between a start node (the decoding running requests, all at batch 0) and a
    sink at the horizon. The states of node ``i`` are the chains whose last admitted request
    is ``i``; they are computed from every allowed predecessor ``j``: the latest running
    (forced) node before ``i`` and every new node between it and ``i`` (a chain cannot skip a
    running request). A transition checks the budget left at ``i``'s deadline
    (``pb + Delta - p_i >= 0``), memory, and that every batch between the two deadlines can
    serve its decode tokens. States are kept sparse, one per reachable ``(m, pb, n)``; a state
    whose ``(m, n)`` equals another's with no more budget and no more value is dropped (it is
    a non-breakpoint entry of the paper's table). The best sink state is traced back to the
    admitted set, and its batches are rebuilt with earliest-deadline prefill allocation.

    Parameters
    ----------
    problem : AdmissionProblem
        Running (forced) and new requests, memory, timing, ``t0`` and horizon.
    memory_unit : int
        Tokens per memory unit: a new request takes ``ceil(m_i / unit)`` of the
        ``floor((M - running memory) / unit)`` free units (running memory is exact).
    budget_unit : int
        Tokens per prefill-budget unit: the budget left is rounded down to a multiple at
        every node.

    Returns
    -------
    DPDecision

    References
    ----------
    SLOs-Serve, Sec. 3.2.1 (the DP, Eqn. 2-3, forced admission of running requests, multiple
    decode SLOs as per-tier counts, reconstruction with earliest-deadline prefill), Algorithm 2
    (PB*) and Appendix C (the recurrence written over the budget).
    """
    start = time.perf_counter()
    u_mem = _check_unit("memory_unit", memory_unit)
    u_pb = _check_unit("budget_unit", budget_unit)
    proc = batch_process(problem)
    cap_tokens, n_batches = proc.batch_tokens, proc.n_batches
    slots = proc.tier_slots
    n_tiers = slots.shape[0]
    tier = problem.tier
    deadline_batch = proc.deadline_batch
    prefill = problem.remaining_prefill_tokens
    mem_units = np.where(problem.running, 0, -(-problem.kv_tokens // u_mem))
    running_kv = int(problem.kv_tokens[problem.running].sum())
    mem_cap = (problem.kv_capacity_tokens - running_kv) // u_mem

    # Slot patterns: which tiers have a decode token in each batch, for the per-batch load check.
    pattern = (proc.slot.astype("int64") << np.arange(n_tiers)[:, None]).sum(axis=0)
    masks = np.unique(pattern[pattern > 0])
    mask_bits = ((masks[None, :] >> np.arange(n_tiers)[:, None]) & 1).astype("int64")
    next_occurrence = np.full((len(masks), n_batches + 1), n_batches, dtype="int64")
    for k, mask in enumerate(masks):
        where = np.flatnonzero(pattern == mask)
        next_occurrence[k, :] = np.append(where, n_batches)[
            np.searchsorted(where, np.arange(n_batches + 1))
        ]

    # No batch can carry more decode tokens than there are requests.
    load_can_exceed = problem.n_requests > cap_tokens

    # Nodes in deadline order: start (forced), prefilling rows, sink (forced).
    decoding = problem.decoding
    rows = np.flatnonzero(prefill > 0)
    order = np.lexsort((rows, ~problem.running[rows], deadline_batch[rows]))
    node_row = np.concatenate([[-1], rows[order], [-1]])
    node_batch = np.concatenate([[0], deadline_batch[node_row[1:-1]], [n_batches]])
    node_forced = np.concatenate([[True], problem.running[node_row[1:-1]], [True]])
    n_nodes = len(node_row)

    init_cnt = np.bincount(tier[decoding], minlength=n_tiers).astype("int64")[None, :]
    layers: list[_Layer | None] = [None] * n_nodes
    if mem_cap >= 0:
        layers[0] = _Layer(
            np.zeros(1, dtype="int64"),
            np.zeros(1, dtype="int64"),
            init_cnt,
            np.zeros(1),
            np.full(1, -1, dtype="int64"),
            np.full(1, -1, dtype="int64"),
        )
    explored = 0
    kept = 1
    last_forced = 0
    for i in range(1, n_nodes):
        r = int(node_row[i])
        is_sink = r < 0
        p_i = 0 if is_sink else int(prefill[r])
        m_i = 0 if is_sink else int(mem_units[r])
        v_i = 0.0 if is_sink or problem.running[r] else float(problem.value[r])
        step = np.zeros(n_tiers, dtype="int64")
        if not is_sink:
            step[tier[r]] = 1
        parts: list[_Layer] = []
        for j in [last_forced, *range(last_forced + 1, i)]:
            pred = layers[j]
            if pred is None or len(pred) == 0:
                continue
            explored += len(pred)
            a, c = int(node_batch[j]), int(node_batch[i])
            pb_tokens = pred.pb if u_pb == 1 else pred.pb * u_pb
            budget = (
                pb_tokens + ((c - a) * cap_tokens - p_i) - pred.cnt @ (slots[:, c] - slots[:, a])
            )
            ok = budget >= 0
            if m_i:
                ok &= pred.mem <= mem_cap - m_i
            if load_can_exceed:
                occurring = next_occurrence[:, a] < c
                if occurring.any():
                    ok &= (pred.cnt @ mask_bits[:, occurring] <= cap_tokens).all(axis=1)
            idx = np.flatnonzero(ok)
            if idx.size == 0:
                continue
            if idx.size == len(pred):
                mem, left, cnt, val = pred.mem, budget, pred.cnt, pred.val
            else:
                mem, left, cnt, val = pred.mem[idx], budget[idx], pred.cnt[idx], pred.val[idx]
            from_node = np.empty(idx.size, dtype="int64")
            from_node.fill(j)
            parts.append(
                _Layer(
                    mem + m_i,
                    left if u_pb == 1 else left // u_pb,
                    cnt + step if r >= 0 else cnt,
                    val + v_i,
                    from_node,
                    idx,
                )
            )
        if not parts:
            layer = None
        elif len(parts) == 1:
            layer = parts[0]
        else:
            layer = _keep_breakpoints(
                _Layer(*(np.concatenate([getattr(p, f) for p in parts]) for f in _Layer.__slots__))
            )
        layers[i] = layer
        kept += 0 if layer is None else len(layer)
        if node_forced[i]:
            last_forced = i

    sink = layers[-1]
    new_rows = [int(r) for r in problem.new_rows]
    if sink is None or len(sink) == 0:
        logger.debug("slos_dp: the running requests cannot all keep their SLOs")
        return DPDecision(
            (),
            tuple(new_rows),
            0.0,
            False,
            None,
            time.perf_counter() - start,
            explored,
            kept,
            u_mem,
            u_pb,
        )
    admitted: list[int] = []
    node, state = n_nodes - 1, int(np.argmax(sink.val))
    while node > 0:
        on_path = layers[node]
        if on_path is None:
            raise RuntimeError(f"slos_dp lost the predecessor layer of node {node}")
        r = int(node_row[node])
        if r >= 0 and not problem.running[r]:
            admitted.append(r)
        node, state = int(on_path.pred_node[state]), int(on_path.pred_idx[state])
    admitted.sort()
    plan = plan_b1(problem, admitted, proc)
    if plan is None:
        raise RuntimeError(f"slos_dp admitted {admitted} but the batch process fails on it")
    value = float(problem.value[admitted].sum()) if admitted else 0.0
    rejected = tuple(r for r in new_rows if r not in set(admitted))
    return DPDecision(
        tuple(admitted),
        rejected,
        value,
        True,
        plan,
        time.perf_counter() - start,
        explored,
        kept,
        u_mem,
        u_pb,
    )


def dp_schedule(instance: Instance, *, seed: int) -> Schedule:
    """The DP's decision on an ``slos-admission`` instance, as a replayable schedule.

    The DP's discretization comes from the instance settings ``dp_memory_unit`` and
    ``dp_budget_unit`` (default 1: exact); ``seed`` is unused (the DP is deterministic).
    """
    problem = AdmissionProblem.from_instance(instance)
    decision = slos_dp(
        problem,
        memory_unit=int(instance.settings.get("dp_memory_unit", 1)),
        budget_unit=int(instance.settings.get("dp_budget_unit", 1)),
    )
    return decision.to_schedule(problem)
