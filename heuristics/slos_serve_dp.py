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
import pandas as pd
from slolab.models.slos_admission import (
    AdmissionPlan,
    AdmissionProblem,
    BatchProcess,
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
    and is dropped (the first of equal states is kept). The kept states stay in row order.

    Ranked by value (descending), then budget (descending), then row, within its group, a
    state is kept when its budget exceeds that of every state ranked before it. With few
    distinct values (a DP's values are counts of admitted requests) and at least
    ``_TABLE_MIN_ROWS`` states this is decided without sorting (:func:`_front_by_table`);
    otherwise by the sort itself (faster on small layers: 32 against 54 us at 50 rows, 111
    against 98 us at 1,000, 314 against 183 us at 3,000).
    """
    if len(layer) < 2:
        return layer
    key = _group_keys([layer.mem, *layer.cnt.T])
    keep = _front_by_table(key, layer.val, layer.pb) if len(layer) >= _TABLE_MIN_ROWS else None
    if keep is None:
        keep = _front_by_sort(key, layer.val, layer.pb)
    return _Layer(
        layer.mem[keep],
        layer.pb[keep],
        layer.cnt[keep],
        layer.val[keep],
        layer.pred_node[keep],
        layer.pred_idx[keep],
    )


def _front_by_sort(key: np.ndarray, val: np.ndarray, pb: np.ndarray) -> np.ndarray:
    """Rows kept by :func:`_keep_breakpoints`, ascending, from the ranking sort (``pb >= 0``)."""
    order = _dominance_order(key, val, pb)
    sorted_key = key[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = sorted_key[1:] != sorted_key[:-1]
    group = np.cumsum(new_group) - 1
    lifted = pb[order] + group * (int(pb.max()) + 1)
    best_before = np.empty_like(lifted)
    best_before[0] = -1
    best_before[1:] = np.maximum.accumulate(lifted)[:-1]
    return np.sort(order[lifted > best_before])


#: Most (group, value) cells, per row, for which :func:`_front_by_table` builds its table.
_TABLE_CELLS_PER_ROW = 4
#: Fewest states for which :func:`_keep_breakpoints` prunes by the table.
_TABLE_MIN_ROWS = 1_000


def _front_by_table(key: np.ndarray, val: np.ndarray, pb: np.ndarray) -> np.ndarray | None:
    """Rows kept by :func:`_keep_breakpoints`, ascending, from per-(group, value) maxima.

    A state ranked after a state of higher value with at least its budget, or after one of
    its own value with more budget or the same budget and an earlier row, is dropped. So it
    is kept exactly when its budget is the largest among its group's states of equal value,
    it is the first row with that budget there, and it exceeds the largest budget among its
    group's states of higher value. Groups and values are numbered by hashing (linear time);
    None when the table of (group, value) cells would exceed ``_TABLE_CELLS_PER_ROW`` cells
    per row.
    """
    n = len(key)
    group, group_keys = pd.factorize(key)
    val_code, levels = pd.factorize(val)
    n_groups, n_levels = len(group_keys), len(levels)
    if n_groups * n_levels > _TABLE_CELLS_PER_ROW * n + 1024:
        return None
    # rank 0 for the highest value
    rank = n_levels - 1 - np.unique(levels, return_inverse=True)[1].ravel()
    cell = group * n_levels + rank[val_code]
    none = int(pb.min()) - 1
    best = np.full(n_groups * n_levels, none, dtype=pb.dtype)
    np.maximum.at(best, cell, pb)
    higher = np.full((n_groups, n_levels), none, dtype=pb.dtype)
    higher[:, 1:] = np.maximum.accumulate(best.reshape(n_groups, n_levels), axis=1)[:, :-1]
    candidate = np.flatnonzero((pb == best[cell]) & (pb > higher.ravel()[cell]))
    first = np.full(n_groups * n_levels, n, dtype="int64")
    np.minimum.at(first, cell[candidate], candidate)
    return candidate[first[cell[candidate]] == candidate]


class _Window:
    """The states of the allowed predecessors of the next node, in node then row order.

    Every layer from the latest forced node on, concatenated once (capacity doubles), with
    each state's budget normalized to batch 0 and the first batch its decode load overflows,
    so that a node's transitions from all its predecessors are one vectorized pass over
    exactly the rows the per-predecessor loop would visit, in the same order.
    """

    _FIELDS = ("normalized", "first_overload", "cached", "mem", "val", "node", "idx")

    def __init__(self, n_tiers: int, cap_tokens: int, rows: int = 256) -> None:
        self.cap_tokens = cap_tokens
        self.size = 0
        self.cached_rows = 0
        self.cached_batch = -1
        self.cached = np.empty(rows, dtype="int64")
        self.cnt = np.empty((rows, n_tiers), dtype="int64")
        self.normalized = np.empty(rows, dtype="int64")
        self.first_overload = np.empty(rows, dtype="int64")
        self.mem = np.empty(rows, dtype="int64")
        self.val = np.empty(rows)
        self.node = np.empty(rows, dtype="int64")
        self.idx = np.empty(rows, dtype="int64")

    def __len__(self) -> int:
        return self.size

    def clear(self) -> None:
        self.size = 0
        self.cached_rows = 0

    def at_batch(self, batch: int, slots: np.ndarray) -> np.ndarray:
        """Per state, its normalized budget less its decode tokens before ``batch``.

        A state whose decode load overflows a batch before ``batch`` gets ``-1 - batch * cap``
        instead, so that no node of that batch can follow it. Kept from one call to the next
        while the batch is the same (nodes come in deadline order, many share a batch).
        """
        if batch != self.cached_batch:
            self.cached_batch, self.cached_rows = batch, 0
        if self.cached_rows < self.size:
            rows = slice(self.cached_rows, self.size)
            fresh = self.normalized[rows] - self.cnt[rows] @ slots[:, batch]
            fresh[self.first_overload[rows] < batch] = -1 - batch * self.cap_tokens
            self.cached[rows] = fresh
            self.cached_rows = self.size
        return self.cached[: self.size]

    def append(
        self, node: int, layer: _Layer, normalized: np.ndarray, first_overload: np.ndarray
    ) -> None:
        n, end = len(layer), self.size + len(layer)
        if end > len(self.mem):
            grown = max(end, 2 * len(self.mem))
            self.cnt = _grown(self.cnt, grown, self.size)
            for name in self._FIELDS:
                setattr(self, name, _grown(getattr(self, name), grown, self.size))
        self.cnt[self.size : end] = layer.cnt
        self.normalized[self.size : end] = normalized
        self.first_overload[self.size : end] = first_overload
        self.mem[self.size : end] = layer.mem
        self.val[self.size : end] = layer.val
        self.node[self.size : end] = node
        self.idx[self.size : end] = np.arange(n)
        self.size = end


def _grown(array: np.ndarray, rows: int, used: int) -> np.ndarray:
    out = np.empty((rows, *array.shape[1:]), dtype=array.dtype)
    out[:used] = array[:used]
    return out


def _node_layer(
    window: _Window,
    batch: int,
    *,
    p_i: int,
    m_i: int,
    v_i: float,
    tier_i: int,
    cap_tokens: int,
    mem_cap: int,
    slots: np.ndarray,
    budget_unit: int,
) -> _Layer | None:
    """A node's states: every window state that can admit it, dominated ones dropped.

    The node has deadline batch ``c = batch``, ``p_i`` prefill tokens, ``m_i`` memory units,
    value ``v_i`` and TPOT tier ``tier_i`` (-1 for the sink). A state of predecessor ``j``
    (deadline batch ``a``) moves to it when
    the budget left, ``pb + (c - a) cap - p_i - cnt @ (slots[:, c] - slots[:, a])``, is
    non-negative, its memory leaves ``m_i`` free and no batch in ``[a, c)`` carries more
    decode tokens than ``cap``. The states that move are those of every predecessor in turn,
    so when they come from more than one predecessor the dominated ones are dropped
    (:func:`_keep_breakpoints`); from one, they are kept as they are.
    """
    n = len(window)
    if n == 0:
        return None
    reduced = window.at_batch(batch, slots)
    gain = batch * cap_tokens - p_i
    ok = reduced >= -gain
    if m_i:
        ok &= window.mem[:n] <= mem_cap - m_i
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None
    from_node = window.node[rows]
    left = reduced[rows] + gain
    moved_cnt = window.cnt[rows]
    if tier_i >= 0:
        moved_cnt[:, tier_i] += 1
    layer = _Layer(
        window.mem[rows] + m_i,
        left if budget_unit == 1 else left // budget_unit,
        moved_cnt,
        window.val[rows] + v_i,
        from_node,
        window.idx[rows],
    )
    if from_node[0] == from_node[-1]:
        return layer
    return _keep_breakpoints(layer)


def _slot_patterns(proc: BatchProcess) -> tuple[np.ndarray, np.ndarray]:
    """Which tiers have a decode token in a batch, for the per-batch load check.

    Returns ``mask_bits`` (tiers x patterns: 1 where the pattern has a token of the tier) and
    ``next_occurrence`` (patterns x ``n_batches + 1``: the first batch at or after ``b`` with
    the pattern, ``n_batches`` when none).
    """
    n_tiers, n_batches = proc.slot.shape[0], proc.n_batches
    pattern = (proc.slot.astype("int64") << np.arange(n_tiers)[:, None]).sum(axis=0)
    masks = np.unique(pattern[pattern > 0])
    mask_bits = ((masks[None, :] >> np.arange(n_tiers)[:, None]) & 1).astype("int64")
    next_occurrence = np.full((len(masks), n_batches + 1), n_batches, dtype="int64")
    for k, mask in enumerate(masks):
        where = np.flatnonzero(pattern == mask)
        next_occurrence[k, :] = np.append(where, n_batches)[
            np.searchsorted(where, np.arange(n_batches + 1))
        ]
    return mask_bits, next_occurrence


def _dp_layers(
    problem: AdmissionProblem, proc: BatchProcess, u_mem: int, u_pb: int
) -> tuple[list[_Layer | None], np.ndarray, int, int]:
    """Every node's states (None where no chain reaches it), the node rows (-1 for the start
    and the sink), and the states explored and kept, as :func:`slos_dp` reports them."""
    cap_tokens, n_batches = proc.batch_tokens, proc.n_batches
    slots = proc.tier_slots
    n_tiers = slots.shape[0]
    tier = problem.tier
    deadline_batch = proc.deadline_batch
    prefill = problem.remaining_prefill_tokens
    mem_units = np.where(problem.running, 0, -(-problem.kv_tokens // u_mem))
    running_kv = int(problem.kv_tokens[problem.running].sum())
    mem_cap = (problem.kv_capacity_tokens - running_kv) // u_mem

    mask_bits, next_occurrence = _slot_patterns(proc)

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
    window = _Window(n_tiers, cap_tokens)
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
    for i in range(n_nodes):
        r = int(node_row[i])
        if i:
            explored += len(window)
            layers[i] = _node_layer(
                window,
                int(node_batch[i]),
                p_i=0 if r < 0 else int(prefill[r]),
                m_i=0 if r < 0 else int(mem_units[r]),
                v_i=0.0 if r < 0 or problem.running[r] else float(problem.value[r]),
                tier_i=-1 if r < 0 else int(tier[r]),
                cap_tokens=cap_tokens,
                mem_cap=mem_cap,
                slots=slots,
                budget_unit=u_pb,
            )
        layer = layers[i]
        kept += 0 if layer is None or not i else len(layer)
        if node_forced[i]:
            window.clear()
        if layer is not None:
            a = int(node_batch[i])
            # The budget left at a later node's deadline batch c is the budget at this node's
            # batch a plus the tokens of batches a..c-1 less their decode tokens, i.e. this
            # normalized budget plus c * cap_tokens - cnt @ slots[:, c].
            normalized = layer.pb * u_pb - a * cap_tokens + layer.cnt @ slots[:, a]
            first_overload = np.full(len(layer), n_batches, dtype="int64")
            if load_can_exceed:
                overloaded = layer.cnt @ mask_bits > cap_tokens
                first_overload = np.where(overloaded, next_occurrence[:, a], n_batches).min(
                    axis=1, initial=n_batches
                )
            window.append(i, layer, normalized, first_overload)

    return layers, node_row, explored, kept


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
    layers, node_row, explored, kept = _dp_layers(problem, proc, u_mem, u_pb)
    n_nodes = len(node_row)
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
