"""SA ordering by branch-and-price on SCIP (PySCIPOpt): the column master with a pricer plugin.

A fourth exact method for :mod:`slolab.models.sa_ordering`, for snapshots. It solves the
Dinkelbach subproblem ``min F = L - M / lambda`` (seconds) of the column method
(:mod:`slolab.models.sa_columns`, docs/sa_ordering.md Sec. 6) by branch-and-price instead of
reduced-cost enumeration: the column master is SCIP's LP, the columns come from a
:class:`pyscipopt.Pricer` that runs the column method's exact pricing, and a branching rule
splits the tree in a way the pricing can follow (docs/sa_ordering.md Sec. 6, "Branch-and-price"):

0. on a request ``r`` with ``y_r = sum_{c: r in T_c} lambda_c`` fractional: ``r`` never claimed
   met, or claimed by every column that holds it;
1. once every ``y_r`` is integral, on a request's position
   ``z_rp = sum_{c: r in S_c, p_c <= p} lambda_c`` that is fractional: ``r`` only in batches
   ending by ``p``, or only in batches ending after ``p`` (``position``: here by default,
   ``"first"`` before level 0, None nowhere);
2. once every ``z_rp`` is integral, on an arc ``a = (p, s)`` whose flow
   ``f_a = sum_{c at a} lambda_c`` is fractional: ``f_a = 0`` (the pricer skips arc ``a``) or
   ``f_a = 1`` (it skips every other arc that overlaps positions ``p - s + 1 .. p``);
3. when every arc flow is integral, on a pair (request ``r``, arc ``a`` of the path) with
   ``x_ra = sum_{c at a, r in c} lambda_c`` fractional: ``r`` never at ``a``, or ``r`` at ``a``
   (never elsewhere, and every column at ``a`` holds it);
4. when the ``x`` are integral too, on a claim ``y_ra = sum_{c at a, r in T_c} lambda_c``
   that is fractional: ``r`` never claimed at ``a``, or every column at ``a`` claims ``r``.

With flows, members and claims integral, every column in the LP solution at an arc has the same
members and claims, so the LP solution is integral: the rule is complete.

SCIP takes the open node of the smallest LP bound next and never dives (``best_first``;
measured in docs/sa_ordering.md Sec. 9: narrower bounds, the same incumbents).

Each decision is a set of forbidden arcs, requests or (request, arc) pairs (a position
decision excludes its request from every arc ending on the wrong side of ``p``), so the
pricing stays the same sorted-prefix computation (a forbidden request gets an infinite value,
a required one a large negative shift) and stays exact at every node; a propagator fixes the existing columns a
node forbids, and a node whose LP has no solution is priced by its Farkas ray. Each Dinkelbach step is one SCIP run with the objective limit ``-tol``: it ends with a
plan of ``F < 0`` (a better G) or proves ``min F >= -tol`` (the incumbent is optimal).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from slolab.models.sa_columns import (
    ClaimCut,
    Column,
    ColumnMaster,
    SAOrderingColumns,
    latency_floor,
    met_limit,
    ratio_bound,
    seeded_master,
)
from slolab.models.sa_node_cuts import NodeCutFamily
from slolab.models.sa_ordering import PROBLEM, RATIO_TOLERANCE, Batches, PlanValue, batches_of
from slolab.solvers.backend import run_interruptibly
from slolab.solvers.base import Result, Status
from slolab.solvers.registry import register_model
from slolab.solvers.scip_price import price_model

__all__ = [
    "Decisions",
    "SAOrderingBranchPrice",
    "best_columns",
    "blind_split",
    "branch_and_price",
    "position_shares",
]

logger = logging.getLogger("slolab")

#: A column enters SCIP's master when its reduced cost is below ``-PRICING_TOLERANCE`` (s).
PRICING_TOLERANCE = 1e-6
#: Arc flows and request shares within this of 0 or 1 count as integral.
INTEGRALITY_TOLERANCE = 1e-6
#: Shift (s) that makes a request required at an arc cheaper than any column without it.
REQUIRED_SHIFT = 1e7
#: Share of the time limit the column method may use first (warm start: its incumbent and bound).
WARM_START_SHARE = 0.3
#: Share of the time limit kept (with the warm start) for a last restricted MILP over every
#: column known, when SCIP stops at its time limit: the column method's incumbent heuristic.
FINAL_MILP_SHARE = 0.2

#: With ``tree_milp``: seconds of SCIP between two restricted MILPs inside the tree, and the
#: time limit of each, as shares of the solve's time limit.
TREE_MILP_PERIOD_SHARE = 0.15
TREE_MILP_SHARE = 0.05

#: Most rounds of node cuts (violated ones imposed, the LP solved again) at one node.
NODE_CUT_ROUNDS = 5

#: Where the position level enters the branching order (module docstring): before the
#: met-request level (``"first"``), right after it (``"after-met"``), or nowhere (None).
POSITION_LEVELS = ("first", "after-met", None)
DEFAULT_POSITION = "after-met"
#: Which fractional ``z_rp`` the position level splits: the most fractional one, or the median
#: position of the request whose batch ends are the most spread.
POSITION_PICKS = ("fractional", "spread")
DEFAULT_POSITION_PICK = "fractional"

Arc = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Decisions:
    """Branching decisions of a node: forbidden arcs ``(p, s)``, requests fixed to one arc
    (``fixed``: pairs ``(r, arc)``), excluded (request, arc) pairs, and (request, arc) pairs
    whose request is claimed met (``claimed``) or never claimed (``unclaimed``) there; requests
    claimed met by every column that holds them (``met``) or by none (``missed``)."""

    forbidden: frozenset[Arc] = frozenset()
    fixed: tuple[tuple[int, Arc], ...] = ()
    excluded: frozenset[tuple[int, Arc]] = frozenset()
    claimed: frozenset[tuple[int, Arc]] = frozenset()
    unclaimed: frozenset[tuple[int, Arc]] = frozenset()
    met: frozenset[int] = frozenset()
    missed: frozenset[int] = frozenset()
    ends_by: frozenset[tuple[int, int]] = frozenset()
    ends_after: frozenset[tuple[int, int]] = frozenset()
    _fixed_map: dict[int, Arc] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._fixed_map.update(dict(self.fixed))

    def fixed_arc(self, request: int) -> Arc | None:
        """The arc request ``request`` is fixed to, or None."""
        return self._fixed_map.get(request)

    def required(self, arc: Arc) -> list[int]:
        """Requests every column at ``arc`` must hold."""
        return [r for r, a in self.fixed if a == arc] + [r for r, a in self.claimed if a == arc]

    def banned_at(self, end: int) -> frozenset[int]:
        """Requests the position decisions keep out of every arc ending at position ``end``:
        ``r`` ending by ``p < end``, or ending after ``p >= end``."""
        if not self.ends_by and not self.ends_after:
            return frozenset()
        return frozenset(r for r, p in self.ends_by if end > p) | frozenset(
            r for r, p in self.ends_after if end <= p
        )

    def allows(self, col: Column) -> bool:
        """Whether column ``col`` is allowed at this node."""
        arc = (col.end, col.size)
        if arc in self.forbidden:
            return False
        if not self.banned_at(col.end).isdisjoint(col.members):
            return False
        for r in col.members:
            if (r, arc) in self.excluded or self._fixed_map.get(r, arc) != arc:
                return False
        members, met = set(col.members), set(col.met)
        if any(r in met for r in self.missed) or any(
            r in members and r not in met for r in self.met
        ):
            return False
        if any(r in met for r, a in self.unclaimed if a == arc):
            return False
        if not all(r in met for r, a in self.claimed if a == arc):
            return False
        return all(r in members for r in self.required(arc))

    def special_arcs(self) -> set[Arc]:
        """Arcs whose pricing differs from the generic one (a decision on one request)."""
        pairs = [*self.fixed, *self.excluded, *self.claimed, *self.unclaimed]
        return {a for _, a in pairs}

    def _with(self, **changes: Any) -> Decisions:
        fields: dict[str, Any] = {
            "forbidden": self.forbidden,
            "fixed": self.fixed,
            "excluded": self.excluded,
            "claimed": self.claimed,
            "unclaimed": self.unclaimed,
            "met": self.met,
            "missed": self.missed,
            "ends_by": self.ends_by,
            "ends_after": self.ends_after,
        }
        fields.update(changes)
        return Decisions(**fields)

    def with_forbidden(self, arcs: set[Arc]) -> Decisions:
        return self._with(forbidden=self.forbidden | arcs)

    def with_fixed(self, request: int, arc: Arc) -> Decisions:
        return self._with(fixed=(*self.fixed, (request, arc)))

    def with_excluded(self, request: int, arc: Arc) -> Decisions:
        return self._with(excluded=self.excluded | {(request, arc)})

    def with_claimed(self, request: int, arc: Arc) -> Decisions:
        return self._with(claimed=self.claimed | {(request, arc)})

    def with_unclaimed(self, request: int, arc: Arc) -> Decisions:
        return self._with(unclaimed=self.unclaimed | {(request, arc)})

    def with_met(self, request: int) -> Decisions:
        return self._with(met=self.met | {request})

    def with_missed(self, request: int) -> Decisions:
        return self._with(missed=self.missed | {request})

    def with_ends_by(self, request: int, position: int) -> Decisions:
        return self._with(ends_by=self.ends_by | {(request, position)})

    def with_ends_after(self, request: int, position: int) -> Decisions:
        return self._with(ends_after=self.ends_after | {(request, position)})


def _check_position(position: str | None, pick: str) -> None:
    if position not in POSITION_LEVELS:
        raise ValueError(f"position must be one of {POSITION_LEVELS}, got {position!r}")
    if pick not in POSITION_PICKS:
        raise ValueError(f"position_pick must be one of {POSITION_PICKS}, got {pick!r}")


def overlapping_arcs(arcs: list[Arc], arc: Arc) -> set[Arc]:
    """Every arc of ``arcs`` other than ``arc`` that covers one of its positions."""
    p, s = arc
    q = p - s
    return {(p2, s2) for p2, s2 in arcs if (p2, s2) != arc and p2 - s2 < p and p2 > q}


def best_columns(
    m: ColumnMaster,
    duals: np.ndarray,
    decisions: Decisions,
    claim_shift: np.ndarray | None = None,
) -> dict[Arc, tuple[Column, float]]:
    """Pricing under a node's decisions: for every arc they do not forbid, the column of
    smallest reduced cost among those they allow (when the arc allows any) and that cost as
    the pricing table gives it (exact at arcs without a per-arc decision; at the others the
    shifts of :data:`REQUIRED_SHIFT` are in it). ``claim_shift[r]`` (s) is added to the
    reward of a claim of ``r`` (the duals of rows outside ``m``: the node cuts' rows)."""
    # a request always met costs REQUIRED_SHIFT more in any column and gains it back when
    # claimed; a request never met is never eligible
    met = sorted(decisions.met)
    bonus = np.zeros(m.n) if claim_shift is None else np.asarray(claim_shift, dtype=float).copy()
    bonus[met] += REQUIRED_SHIFT
    base = duals.copy()
    base[[m.row_assign + r for r in met]] -= REQUIRED_SHIFT
    missed = sorted(decisions.missed)
    generic = base.copy()
    for r, _ in decisions.fixed:
        generic[m.row_assign + r] = -math.inf
    special = decisions.special_arcs()
    out: dict[Arc, tuple[Column, float]] = {}
    # arcs whose ends share the requests the position decisions ban share one table
    banned_tables: dict[tuple[int, frozenset[int]], dict[str, Any]] = {}
    for table in m.pricing_tables(generic, unclaimed=missed, bonus=bonus):
        s = table["s"]
        for p in range(s, m.n + 1):
            arc = (p, s)
            if arc in decisions.forbidden or arc in special:
                continue
            banned = decisions.banned_at(p)
            local_table = table
            if banned:
                if (s, banned) not in banned_tables:
                    local = generic.copy()
                    local[[m.row_assign + r for r in banned]] = -math.inf
                    (banned_tables[s, banned],) = m.pricing_tables(
                        local, sizes=[s], unclaimed=missed, bonus=bonus
                    )
                local_table = banned_tables[s, banned]
            out[arc] = m.price_arc(local_table, generic, p)
    for arc in sorted(special - decisions.forbidden):
        p, s = arc
        local = base.copy()
        required = set(decisions.required(arc))
        banned = decisions.banned_at(p)
        for r in range(m.n):
            fixed = decisions.fixed_arc(r)
            if (
                (r, arc) in decisions.excluded
                or (fixed is not None and fixed != arc)
                or r in banned
            ):
                local[m.row_assign + r] = -math.inf
            elif r in required:
                local[m.row_assign + r] += REQUIRED_SHIFT
        local_bonus = bonus.copy()
        for r, a in decisions.claimed:
            if a == arc:
                local_bonus[r] += REQUIRED_SHIFT
        never = missed + [r for r, a in decisions.unclaimed if a == arc]
        (table,) = m.pricing_tables(local, sizes=[s], unclaimed=never, bonus=local_bonus)
        out[arc] = m.price_arc(table, local, p)
    return out


def _scip() -> Any:
    import pyscipopt

    return pyscipopt


class _Master:
    """The column master of one Dinkelbach step as a SCIP model (rows as in
    :class:`ColumnMaster`); a node whose LP has no solution is priced by its Farkas ray."""

    def __init__(
        self,
        master: ColumnMaster,
        columns: list[Column],
        seed: int,
        met_first: bool = True,
        position: str | None = DEFAULT_POSITION,
        position_pick: str = DEFAULT_POSITION_PICK,
        best_first: bool = True,
        node_cuts: bool = False,
        primal: Callable[[list[Column]], Batches | None] | None = None,
        primal_period: float = math.inf,
    ) -> None:
        scip_mod = _scip()
        self.master = master
        # the primal inside the tree (docs Sec. 6, "A primal inside the tree"): every
        # primal_period seconds, primal(columns) over the master's columns; a better plan
        # stops SCIP so that Dinkelbach restarts from it
        self.primal = primal
        self.primal_period = float(primal_period)
        self.next_primal = time.perf_counter() + self.primal_period
        self.primal_plan: Batches | None = None
        n = master.n
        self.all_arcs = [(p, s) for p in range(1, n + 1) for s in range(1, min(master.b, p) + 1)]
        # best_first: best bound first, no plunging: the node of the smallest LP bound is next
        model = price_model("sa_ordering_bp", seed, best_first)
        self.model = model
        # node cuts (docs Sec. 6, "Cuts at tree nodes"): one global row per set R,
        # sum_c |T_c ∩ R| lambda_c + w_R <= |R|, whose slack w_R gets the local lower bound
        # |R| - K_node(R) at the nodes where that cut is violated
        self.node_family = NodeCutFamily(master) if node_cuts else None
        self.node_rows: list[Any] = []
        self.node_sets: list[frozenset[int]] = []
        self.node_slacks: list[Any] = []
        self.node_index: dict[tuple[int, ...], int] = {}
        self.node_rounds: dict[int, int] = {}
        # every row starts with a variable fixed at 0, so that no row is empty
        zero = model.addVar("zero", lb=0.0, ub=0.0)
        self.rows: list[Any] = [None] * master.n_rows
        for r in range(n):
            self.rows[master.row_assign + r] = model.addCons(
                zero == 1.0, f"assign_{r}", modifiable=True
            )
        for q in range(n):
            rhs = 1.0 if q == 0 else 0.0
            self.rows[master.row_flow + q] = model.addCons(
                zero == rhs, f"flow_{q}", modifiable=True
            )
        ub = master.ub
        sigma = {
            a: model.addVar(f"sigma_{a[0]}_{a[1]}", lb=0.0, ub=float(ub[a[0] - a[1]]))
            for a in master.arcs
        }
        for q in range(1, n):
            out = [sigma[a] for a in master.arcs if a[0] - a[1] == q]
            into = [sigma[a] for a in master.arcs if a[0] == q]
            self.rows[master.row_time + q - 1] = model.addCons(
                zero + scip_mod.quicksum(out) - scip_mod.quicksum(into) == 0.0,
                f"time_{q}",
                modifiable=True,
            )
        for a in master.arcs:
            self.rows[master.claim_row[a]] = model.addCons(
                sigma[a] <= 0.0, f"claim_{a[0]}_{a[1]}", modifiable=True
            )
            self.rows[master.floor_row[a]] = model.addCons(
                sigma[a] >= 0.0, f"floor_{a[0]}_{a[1]}", modifiable=True
            )
        for i, (row, cut) in enumerate(zip(master.cut_rows, master.cuts, strict=True)):
            self.rows[row] = model.addCons(
                zero <= float(cut.limit), f"claim_capacity_{i}", modifiable=True
            )
        self.columns: list[Column] = []
        self.vars: list[Any] = []
        self.index: dict[Column, int] = {}
        for col in columns:
            self._add(col, priced=False)
        self.decisions: dict[int, Decisions] = {}
        self.closed: list[Batches] = []
        self.met_first = met_first
        _check_position(position, position_pick)
        self.position = position
        self.position_pick = position_pick
        self.counters = {
            "priced": 0,
            "pricing_rounds": 0,
            "closed_nodes": 0,
            "blind_splits": 0,
            "node_cuts": 0,
            "node_cut_rows": 0,
            "node_cut_checks": 0,
            "node_cut_s": 0.0,
            "tree_milps": 0,
            "tree_milp_s": 0.0,
        }

    def entries(self, col: Column) -> list[tuple[int, float]]:
        """``(row, coefficient)`` of ``col`` in the master (the rows of :class:`ColumnMaster`)."""
        m = self.master
        out = [(m.row_assign + r, 1.0) for r in col.members]
        out.append((m.row_flow + col.start, 1.0))
        if col.end < m.n:
            out.append((m.row_flow + col.end, -1.0))
        idx, val = m.time_entries(col)
        out += list(zip(idx, val, strict=True))
        idx, val = m.cut_entries(col)
        out += list(zip(idx, val, strict=True))
        return out

    def _add(self, col: Column, priced: bool) -> None:
        var = self.model.addVar(
            f"col_{len(self.columns)}", vtype="B", obj=self.master.cost(col), pricedVar=priced
        )
        for row, coef in self.entries(col):
            self.model.addConsCoeff(self.rows[row], var, coef)
        for cons, members in zip(self.node_rows, self.node_sets, strict=True):
            count = len(members.intersection(col.met))
            if count:
                self.model.addConsCoeff(cons, var, float(count))
        self.index[col] = len(self.columns)
        self.columns.append(col)
        self.vars.append(var)

    def transform(self) -> None:
        """Swap the stored constraints and variables for SCIP's transformed ones."""
        self.rows = [self.model.getTransformedCons(c) for c in self.rows]
        self.vars = [self.model.getTransformedVar(v) for v in self.vars]

    def node_decisions(self) -> Decisions:
        node = self.model.getCurrentNode()
        return self.decisions.get(node.getNumber(), Decisions()) if node else Decisions()

    # -- pricing -----------------------------------------------------------------------------
    def duals(self, farkas: bool) -> np.ndarray:
        if farkas:
            return np.array([self.model.getDualfarkasLinear(c) for c in self.rows])
        return np.array([self.model.getDualsolLinear(c) for c in self.rows])

    def node_duals(self, farkas: bool) -> np.ndarray:
        """The duals (or Farkas values) of the node cuts' rows, in the order of creation."""
        get = self.model.getDualfarkasLinear if farkas else self.model.getDualsolLinear
        return np.array([get(c) for c in self.node_rows])

    def claim_shift(self, node_duals: np.ndarray) -> np.ndarray:
        """Per request, the sum of the node cuts' duals over the rows holding it: what a
        claim of it adds to the reward in a reduced cost."""
        out = np.zeros(self.master.n)
        for members, mu in zip(self.node_sets, node_duals, strict=True):
            out[sorted(members)] += float(mu)
        return out

    def price(self, farkas: bool = False) -> int:
        """Add every column the node allows whose reduced cost (from SCIP's duals; with
        ``farkas``, its Farkas value: the costs left out) is below ``-PRICING_TOLERANCE``: the
        best of each arc. Returns how many entered."""
        m = self.master
        m.cost_scale = 0.0 if farkas else 1.0
        try:
            return self._price(self.duals(farkas), self.node_duals(farkas))
        finally:
            m.cost_scale = 1.0

    def reduced_cost(self, col: Column, duals: np.ndarray, node_duals: np.ndarray) -> float:
        """``rc_c`` from the column itself, the node cuts' rows included."""
        rc = self.master.reduced_cost(col, duals)
        for members, mu in zip(self.node_sets, node_duals, strict=True):
            rc -= len(members.intersection(col.met)) * float(mu)
        return rc

    def _price(self, duals: np.ndarray, node_duals: np.ndarray) -> int:
        m = self.master
        decisions = self.node_decisions()
        self.counters["pricing_rounds"] += 1
        special = decisions.special_arcs()
        shift = self.claim_shift(node_duals) if self.node_rows else None
        candidates = [
            col
            for arc, (col, best) in best_columns(m, duals, decisions, shift).items()
            if arc in special or best < -PRICING_TOLERANCE
        ]
        added = 0
        for col in candidates:
            if col in self.index or not decisions.allows(col) or not m.valid(col):
                continue
            if self.reduced_cost(col, duals, node_duals) < -PRICING_TOLERANCE:
                self._add(col, priced=True)
                added += 1
        self.counters["priced"] += added
        return added

    # -- branching ---------------------------------------------------------------------------
    def lp_values(self) -> list[tuple[Column, float]]:
        return [
            (col, float(var.getLPSol()))
            for col, var in zip(self.columns, self.vars, strict=True)
            if var.getLPSol() > INTEGRALITY_TOLERANCE
        ]

    def branch(self) -> str:
        """Branch at the focus node (module docstring): ``"branched"`` or ``"closed"``."""
        self.run_primal()
        values = self.lp_values()
        decisions = self.node_decisions()
        if self.node_family is not None and self.separate_node_cuts(values, decisions):
            return "reduced"
        if self.position == "first" and self._branch_position(values, decisions):
            return "branched"
        if self.met_first:
            claimed: dict[int, float] = {}
            for col, v in values:
                for r in col.met:
                    claimed[r] = claimed.get(r, 0.0) + v
            request = _most_fractional(claimed)
            if request is not None:
                self._children(decisions.with_missed(request), decisions.with_met(request))
                return "branched"
        if self.position == "after-met" and self._branch_position(values, decisions):
            return "branched"
        flow: dict[Arc, float] = {}
        for col, v in values:
            flow[col.end, col.size] = flow.get((col.end, col.size), 0.0) + v
        split = _most_fractional(flow)
        if split is not None:
            self._children(
                decisions.with_forbidden({split}),
                decisions.with_forbidden(overlapping_arcs(self.all_arcs, split)),
            )
            return "branched"
        share = _pair_sums(values, lambda col: col.members)
        pair = _most_fractional(share)
        if pair is not None:
            r, arc = pair
            self._children(decisions.with_excluded(r, arc), decisions.with_fixed(r, arc))
            return "branched"
        pair = _most_fractional(_pair_sums(values, lambda col: col.met))
        if pair is not None:
            r, arc = pair
            self._children(decisions.with_unclaimed(r, arc), decisions.with_claimed(r, arc))
            return "branched"
        # flows, members and claims integral: the LP solution is one plan up to rounding
        path = sorted(a for a, v in flow.items() if v > 0.5)
        members: dict[Arc, set[int]] = {a: set() for a in path}
        for (r, arc), v in share.items():
            if v > 0.5 and arc in members:
                members[arc].add(r)
        plan = tuple(tuple(sorted(members[a])) for a in path)
        if sum(len(b) for b in plan) == self.master.n and all(plan):
            self.closed.append(plan)
        self.counters["closed_nodes"] += 1
        return "closed"

    def run_primal(self) -> None:
        """When ``primal_period`` seconds have passed since the last try: the primal over
        every column of the master; a plan it returns (a better G than the step's incumbent)
        is kept in ``primal_plan`` and SCIP is asked to stop."""
        if self.primal is None or self.primal_plan is not None:
            return
        if time.perf_counter() < self.next_primal:
            return
        self.counters["tree_milps"] += 1
        started = time.perf_counter()
        plan = self.primal(list(self.columns))
        ended = time.perf_counter()
        self.counters["tree_milp_s"] += ended - started
        self.next_primal = ended + self.primal_period
        if plan is not None:
            self.primal_plan = plan
            self.model.interruptSolve()

    def separate_node_cuts(self, values: list[tuple[Column, float]], decisions: Decisions) -> bool:
        """Impose at the focus node the claim-capacity cuts of its decisions that its LP
        solution violates (:class:`~slolab.models.sa_node_cuts.NodeCutFamily`), at most
        :data:`NODE_CUT_ROUNDS` times per node: True when one was imposed (the LP is then
        solved again, with pricing)."""
        assert self.node_family is not None
        node = self.model.getCurrentNode()
        number = node.getNumber() if node else 0
        if self.node_rounds.get(number, 0) >= NODE_CUT_ROUNDS:
            return False
        self.node_rounds[number] = self.node_rounds.get(number, 0) + 1
        self.counters["node_cut_checks"] += 1
        started = time.perf_counter()
        claimed = np.zeros(self.master.n)
        for col, v in values:
            claimed[list(col.met)] += v
        imposed = False
        found = self.node_family.violated(decisions, claimed)
        self.counters["node_cut_s"] += time.perf_counter() - started
        for members, limit in found:
            slack = self.node_slacks[self._node_row(members)]
            need = float(len(members) - limit)
            if slack.getLbLocal() < need - 0.5:
                self.model.chgVarLb(slack, need)
                imposed = True
                self.counters["node_cuts"] += 1
        return imposed

    def _node_row(self, members: tuple[int, ...]) -> int:
        """The index of the node-cut row of ``members``, made (with the entries of every
        column already in the master) when new."""
        if members in self.node_index:
            return self.node_index[members]
        size = float(len(members))
        i = len(self.node_rows)
        slack = self.model.addVar(f"node_cut_slack_{i}", lb=0.0, ub=size, obj=0.0)
        cons = self.model.addCons(slack <= size, f"node_cut_{i}", modifiable=True)
        sets = frozenset(members)
        for col, var in zip(self.columns, self.vars, strict=True):
            count = len(sets.intersection(col.met))
            if count:
                self.model.addConsCoeff(cons, var, float(count))
        self.node_rows.append(cons)
        self.node_sets.append(sets)
        self.node_slacks.append(slack)
        self.node_index[members] = i
        self.counters["node_cut_rows"] += 1
        return i

    def _branch_position(self, values: list[tuple[Column, float]], decisions: Decisions) -> bool:
        """Branch on a fractional ``z_rp`` (:func:`position_shares`; the most fractional one,
        or with ``position_pick="spread"`` the median position of the request whose batch
        ends are the most spread): ``r`` ends by ``p`` or after ``p``. False when every
        ``z_rp`` is integral."""
        shares = position_shares(values, self.master.n)
        if self.position_pick == "spread":
            pair = _widest_position(shares, self.master.n)
        else:
            pair = _most_fractional(shares)
        if pair is None:
            return False
        r, p = pair
        self._children(decisions.with_ends_by(r, p), decisions.with_ends_after(r, p))
        return True

    def branch_without_lp(self) -> bool:
        """Branch at a focus node whose LP was not solved (:func:`blind_split`); False when
        the node's decisions leave nothing to split."""
        split = blind_split(self.node_decisions(), self.master.n)
        if split is None:
            return False
        self.counters["blind_splits"] += 1
        self._children(*split)
        return True

    def _children(self, first: Decisions, second: Decisions) -> None:
        estimate = self.model.getLocalEstimate()
        for decisions in (first, second):
            child = self.model.createChild(0.0, estimate)
            self.decisions[child.getNumber()] = decisions

    def fix_forbidden(self) -> bool:
        """Fix to 0 every existing column the focus node forbids; True when one was fixed."""
        decisions = self.node_decisions()
        if decisions == Decisions():
            return False
        changed = False
        for col, var in zip(self.columns, self.vars, strict=True):
            if var.getUbLocal() > 0.5 and not decisions.allows(col):
                self.model.chgVarUb(var, 0.0)
                changed = True
        return changed

    def best_plan(self) -> Batches | None:
        """The plan of SCIP's best solution (None without one)."""
        if self.model.getNSols() == 0:
            return None
        sol = self.model.getBestSol()
        used = [
            col
            for col, var in zip(self.columns, self.vars, strict=True)
            if self.model.getSolVal(sol, var) > 0.5
        ]
        if sum(c.size for c in used) != self.master.n:
            return None
        return tuple(c.members for c in sorted(used, key=lambda c: c.end))


def _pair_sums(
    values: list[tuple[Column, float]], requests: Callable[[Column], tuple[int, ...]]
) -> dict[tuple[int, Arc], float]:
    """``sum_{c at a, r in requests(c)} lambda_c`` for every (request, arc) pair."""
    out: dict[tuple[int, Arc], float] = {}
    for col, v in values:
        for r in requests(col):
            key = (r, (col.end, col.size))
            out[key] = out.get(key, 0.0) + v
    return out


def blind_split(decisions: Decisions, n: int) -> tuple[Decisions, Decisions] | None:
    """A split that needs no LP values, for a node whose LP was not solved: the first request
    neither met nor missed (missed / met), else the first ``(r, p)`` with no position decision
    (ends by ``p`` / after ``p``); None when every one is decided, which fixes each request's
    batch end, hence the batches and, with the met decisions, the claims: one plan at most.
    Every plan satisfies one child, as at the levels of :meth:`_Master.branch`."""
    for r in range(n):
        if r not in decisions.met and r not in decisions.missed:
            return decisions.with_missed(r), decisions.with_met(r)
    for r in range(n):
        for p in range(1, n):
            if (r, p) not in decisions.ends_by and (r, p) not in decisions.ends_after:
                return decisions.with_ends_by(r, p), decisions.with_ends_after(r, p)
    return None


def position_shares(values: list[tuple[Column, float]], n: int) -> dict[tuple[int, int], float]:
    """``z_rp = sum_{c: r in S_c, p_c <= p} lambda_c`` (the share of request ``r`` in batches
    ending by position ``p``) for ``p = 1 .. n - 1``, every request held by some column."""
    ends = np.zeros((n, n + 1))
    for col, v in values:
        ends[list(col.members), col.end] += v
    z = np.cumsum(ends, axis=1)
    held = np.flatnonzero(ends.sum(axis=1) > 0)
    return {(int(r), p): float(z[r, p]) for r in held for p in range(1, n)}


def _widest_position(shares: dict[tuple[int, int], float], n: int) -> tuple[int, int] | None:
    """Of the requests with a fractional ``z_rp``, the one whose batch ends spread the most
    (mean absolute deviation of the end position; ties: the smallest request), at the
    position whose ``z_rp`` is closest to one half; None when every ``z_rp`` is integral."""
    best: tuple[float, int, int] | None = None
    for r in sorted({r for r, _ in shares}):
        z = np.array([0.0] + [shares[r, p] for p in range(1, n)] + [1.0])
        weights = np.diff(z)
        positions = np.arange(1, n + 1)
        mean = float(weights @ positions) / max(float(weights.sum()), 1e-12)
        spread = float(weights @ np.abs(positions - mean))
        fractional = [p for p in range(1, n) if min(z[p], 1.0 - z[p]) > INTEGRALITY_TOLERANCE]
        if not fractional:
            continue
        p = min(fractional, key=lambda q: (abs(z[q] - 0.5), q))
        if best is None or spread > best[0] + 1e-12:
            best = (spread, r, p)
    return None if best is None else (best[1], best[2])


def _most_fractional(values: dict[Any, float]) -> Any:
    """The key whose value is farthest from an integer (ties: the smallest key), or None."""
    best, best_key = INTEGRALITY_TOLERANCE, None
    for key in sorted(values):
        v = values[key]
        frac = min(v - math.floor(v), math.ceil(v) - v)
        if frac > best + 1e-12:
            best, best_key = frac, key
    return best_key


def _plugins(master: _Master) -> tuple[Any, Any, Any]:
    scip_mod = _scip()
    result = scip_mod.SCIP_RESULT

    class Pricer(scip_mod.Pricer):  # type: ignore[misc,name-defined]
        def pricerinit(self) -> None:
            master.transform()

        def pricerredcost(self) -> dict[str, Any]:
            master.price()
            return {"result": result.SUCCESS}

        def pricerfarkas(self) -> dict[str, Any]:
            master.price(farkas=True)
            return {"result": result.SUCCESS}

    class Branching(scip_mod.Branchrule):  # type: ignore[misc,name-defined]
        def branchexeclp(self, allowaddcons: bool) -> dict[str, Any]:
            outcome = master.branch()
            codes = {"branched": result.BRANCHED, "reduced": result.REDUCEDDOM}
            return {"result": codes.get(outcome, result.CUTOFF)}

        def branchexecps(self, allowaddcons: bool) -> dict[str, Any]:
            # SCIP branches on the pseudo solution when a node's LP was not solved
            branched = master.branch_without_lp()
            return {"result": result.BRANCHED if branched else result.DIDNOTRUN}

    class Fixing(scip_mod.Prop):  # type: ignore[misc,name-defined]
        def propexec(self, proptiming: Any) -> dict[str, Any]:
            changed = master.fix_forbidden()
            return {"result": result.REDUCEDDOM if changed else result.DIDNOTFIND}

    return Pricer(), Branching(), Fixing()


@dataclass
class StepOutcome:
    """One Dinkelbach step on SCIP: the best plan it found (or None), a lower bound on
    ``min F`` at its ``lambda`` (s; ``-inf`` when unknown), whether the step finished, and the
    counters."""

    plans: list[Batches]
    f_lower: float
    finished: bool
    columns: list[Column]
    details: dict[str, Any]


def branch_and_price(
    master: ColumnMaster,
    columns: list[Column],
    objective_limit: float,
    time_limit: float,
    seed: int,
    met_first: bool = True,
    position: str | None = DEFAULT_POSITION,
    position_pick: str = DEFAULT_POSITION_PICK,
    best_first: bool = True,
    node_cuts: bool = False,
    primal: Callable[[list[Column]], Batches | None] | None = None,
    primal_period: float = math.inf,
) -> StepOutcome:
    """Minimize ``F`` at ``master.ratio`` by branch-and-price on SCIP, keeping only plans with
    ``F < objective_limit`` (s).

    ``columns`` seed the master. Honours ``time_limit`` (s, SCIP's own limit); Ctrl-C stops
    SCIP and re-raises KeyboardInterrupt. ``f_lower`` is SCIP's proved bound, or
    ``objective_limit`` when SCIP proves no plan goes below it. A node whose LP solution is
    integral in flows, members and claims but not in ``lambda`` (rounding only) is closed with
    its plan among ``plans``; its exact ``F`` enters ``f_lower``. ``node_cuts`` separates at
    every node the claim-capacity cuts of its decisions (:class:`_Master`,
    :meth:`_Master.separate_node_cuts`). ``primal(columns)``, tried every ``primal_period``
    seconds at branching, returns a plan better than the incumbent or None; a plan stops
    SCIP (the outcome is then unfinished, with that plan among ``plans`` and SCIP's bound).
    """
    scip_mod = _scip()
    bp = _Master(
        master,
        columns,
        seed,
        met_first,
        position,
        position_pick,
        best_first,
        node_cuts,
        primal,
        primal_period,
    )
    model = bp.model
    pricer, branching, fixing = _plugins(bp)
    model.includePricer(pricer, "columns", "exact batch-column pricing", priority=1, delay=True)
    model.includeBranchrule(
        branching, "levels", "met, position, arc flow, member, claim", 1_000_000, -1, 1.0
    )
    model.includeProp(
        fixing,
        "decisions",
        "fix columns a node forbids",
        0,
        0,
        scip_mod.SCIP_PROPTIMING.BEFORELP,
        priority=1_000_000,
        freq=1,
        delay=False,
    )
    model.setObjlimit(objective_limit)
    model.setParam("limits/time", max(time_limit, 1e-3))
    run_interruptibly(model.optimize, model.interruptSolve)
    status = model.getStatus()
    if status == "userinterrupt" and bp.primal_plan is None:
        raise KeyboardInterrupt
    plans = list(bp.closed)
    found = bp.best_plan()
    if found is not None:
        plans.append(found)
    if bp.primal_plan is not None:
        plans.append(bp.primal_plan)
    details = {
        **bp.counters,
        "nodes": model.getNNodes(),
        "scip_status": status,
        "root_bound": model.getDualboundRoot(),
        "columns": len(bp.columns),
        "primal_stop": bp.primal_plan is not None,
    }
    closed = [master.problem.evaluate(plan) for plan in bp.closed]
    closed_f = min(
        (v.total_latency_s - master.reward * v.met_requests for v in closed), default=math.inf
    )
    if status == "infeasible":
        return StepOutcome(plans, min(objective_limit, closed_f), True, bp.columns, details)
    if status == "optimal":
        return StepOutcome(plans, min(model.getDualbound(), closed_f), True, bp.columns, details)
    bound = model.getDualbound()
    f_lower = bound if math.isfinite(bound) else -math.inf
    return StepOutcome(plans, min(f_lower, objective_limit, closed_f), False, bp.columns, details)


@register_model(f"{PROBLEM}-bp")
class SAOrderingBranchPrice(SAOrderingColumns):
    """SA ordering solved by branch-and-price on SCIP (snapshots; module docstring, docs
    Sec. 6).

    ``solve(model, "highs" | "cbc")`` first runs the column method (column generation,
    enumeration, restricted MILP on the chosen backend) from the better of the deterministic
    starting plans and the SA paper's annealing (seed 0), for 30% of the time limit: its proof
    ends the run, otherwise its incumbent and bound are the warm start. Then each Dinkelbach
    step is a branch-and-price run on SCIP (PySCIPOpt), seeded with the columns of the root LP
    and of every earlier step; the result's backend is then ``"scip"``. The LP of each step
    separates the claim-capacity cuts (``cuts=False``: none), which become rows of SCIP's
    master. ``bounds=False`` leaves out the start-time bounds (:func:`~slolab.models.sa_columns.start_bounds`), which
    every node's LP carries otherwise. With the warm start, :data:`FINAL_MILP_SHARE` of the limit is kept for a restricted
    MILP over every column known when SCIP stops at its time limit (it may improve the
    incumbent; the bound is SCIP's).
    ``position`` places the branching level on a request's position (module docstring: after
    the met-request level by default, ``"first"`` before it, None leaves it out) and
    ``position_pick`` chooses its split (``"fractional"``: the most fractional ``z_rp``;
    ``"spread"``: the request whose batch ends spread the most). By default SCIP takes the open
    node of the smallest LP bound next, never diving (``best_first=False``: SCIP's own node
    selection, which dives). ``node_cuts=True`` separates the claim-capacity cuts of each
    node's decisions in the tree (:mod:`slolab.models.sa_node_cuts`; docs Sec. 6, "Cuts at
    tree nodes"). ``tree_milp=True`` (with the warm start) runs the restricted MILP over
    SCIP's columns inside the tree every :data:`TREE_MILP_PERIOD_SHARE` of the limit, for
    :data:`TREE_MILP_SHARE` of it; a better plan restarts Dinkelbach from it (docs Sec. 6,
    "A primal inside the tree").
    ``warm_start=False`` starts SCIP from the deterministic plans alone (no annealing, no column
    method), which leaves all the work to SCIP. Instances with different arrivals fall back to
    the position-arc MILP; CP-SAT and brute force are the parent's.

    ``anneal(problem, seed=...) -> (plan, ...)`` is the SA paper's annealing, handed in by the
    problem's declaration (:mod:`slolab.problems.sa_ordering`, as the models sit below the
    heuristics); without it the warm start's starting plan is the deterministic plans' best.
    """

    name = f"{PROBLEM}-bp"

    def __init__(
        self,
        instance: Any,
        warm_start: bool = True,
        cuts: bool = True,
        anneal: Callable[..., tuple[Batches, Any]] | None = None,
        bounds: bool = True,
        position: str | None = DEFAULT_POSITION,
        position_pick: str = DEFAULT_POSITION_PICK,
        best_first: bool = True,
        node_cuts: bool = False,
        tree_milp: bool = False,
    ) -> None:
        super().__init__(instance, cuts=cuts, bounds=bounds)
        self.best_first = bool(best_first)
        self.node_cuts = bool(node_cuts)
        self.tree_milp = bool(tree_milp)
        _check_position(position, position_pick)
        self.position_pick = position_pick
        self.use_warm_start = bool(warm_start)
        self.anneal = anneal
        self.position = position

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        if backend.formulation == "milp" and self.problem.snapshot:
            return self._branch_and_price(backend, time_limit, int(getattr(backend, "seed", 0)))
        return super().solve_with(backend, time_limit, **params)

    def starting_plan(self) -> tuple[Batches, PlanValue]:
        """With the warm start: the better of the deterministic starting plans and the SA
        paper's annealing (seed 0, when handed in); without: the deterministic plans alone."""
        plan, value = super().starting_plan()
        if not self.use_warm_start or self.anneal is None:
            return plan, value
        annealed, _ = self.anneal(self.problem, seed=0)
        other = self.problem.evaluate(annealed)
        if other.g > value.g * (1.0 + 1e-12):
            return annealed, other
        return plan, value

    def _branch_and_price(self, backend: Any, time_limit: float, seed: int) -> Result:
        start = time.perf_counter()
        deadline = start + time_limit
        data = self.problem
        counters: dict[str, Any] = {"iterations": 0, "scip_runs": 0, "nodes": 0, "columns": 0}
        bound = math.inf
        if self.use_warm_start:
            # the column method first: its incumbent, its bound, and sometimes its proof
            first = self._columns(backend, WARM_START_SHARE * time_limit)
            counters["warm_start_status"] = first.status.value
            if first.bound is not None:
                bound = first.bound
            assert first.schedule is not None  # the column method always keeps a plan
            plan = batches_of(first.schedule)
            value = data.evaluate(plan)
            if first.status == Status.OPTIMAL:
                counters["proved_by"] = "columns"
                return self._result(
                    Status.OPTIMAL, plan, value, first.bound, backend, start, **counters
                )
        else:
            plan, value = self.starting_plan()

        class _Scip:
            name = "scip"

        def finish(status: Status, bound: float | None) -> Result:
            return self._result(status, plan, value, bound, _Scip, start, **counters)

        def in_tree(master: ColumnMaster, until: float) -> Callable[[list[Column]], Batches | None]:
            """The primal inside the tree: the restricted MILP over ``columns`` at the
            step's ``lambda`` for :data:`TREE_MILP_SHARE` of the limit (never past ``until``,
            a perf_counter time); its plan when its exact G beats the incumbent's."""

            def primal(columns: list[Column]) -> Batches | None:
                limit = min(TREE_MILP_SHARE * time_limit, until - time.perf_counter())
                if limit <= 0:
                    return None
                pool = sorted(set(columns), key=lambda c: (c.end, c.members, c.met))
                raw = backend.solve_formulation(self._restricted(master, pool), limit)
                better = self.improvement(raw, value)
                return None if better is None else better[0]

            return primal

        def adopt(candidate: Batches) -> bool:
            nonlocal plan, value
            cand = data.evaluate(candidate)
            if cand.g > value.g * (1.0 + 1e-12) or (value.g == 0 and cand.g > 0):
                plan, value = candidate, cand
                return True
            return False

        if value.met_requests == 0:
            other = self.plan_meeting_one()
            if other is None:
                return finish(Status.OPTIMAL, 0.0)
            plan, value = other, data.evaluate(other)
        latency_lb = latency_floor(data, plan, deadline)
        bound = min(bound, data.meetable_requests / latency_lb)
        if bound <= value.g * (1.0 + RATIO_TOLERANCE):
            return finish(Status.OPTIMAL, bound)
        tolerance = 0.5 * RATIO_TOLERANCE * latency_lb
        known: set[Column] = set()
        pool = self.cut_pool()
        cuts: list[ClaimCut] = []
        while True:
            counters["iterations"] += 1
            lam = value.g
            master = seeded_master(
                data, lam, plan, known, cuts, self.use_bounds, met_limit(data, pool)
            )
            _, lb, _, converged = master.separate(pool, deadline)
            cuts = list(master.cuts)
            counters["cuts"] = len(cuts)
            known.update(master.columns)
            bound = min(bound, ratio_bound(lam, lb, latency_lb))
            counters.setdefault("root_bound", bound)
            if converged and -lb <= tolerance:
                return finish(Status.OPTIMAL, bound)
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return finish(Status.TIME_LIMIT, bound)
            reserve = FINAL_MILP_SHARE * time_limit if self.use_warm_start else 0.0
            if remaining <= 2.0 * reserve:
                reserve = 0.0
            logger.info(
                "branch-and-price on SCIP at lambda = %.6g (bound %.6g, %d columns)",
                lam,
                bound,
                len(known),
            )
            step = branch_and_price(
                master,
                sorted(known, key=lambda c: (c.end, c.members, c.met)),
                -tolerance,
                remaining - reserve,
                seed,
                position=self.position,
                position_pick=self.position_pick,
                best_first=self.best_first,
                node_cuts=self.node_cuts,
                primal=in_tree(master, deadline - reserve) if self.tree_milp and reserve else None,
                primal_period=TREE_MILP_PERIOD_SHARE * time_limit,
            )
            counters["scip_runs"] += 1
            counters["nodes"] += int(step.details["nodes"])
            counters["columns"] = max(counters["columns"], int(step.details["columns"]))
            for key in ("closed_nodes", "blind_splits", "node_cuts", "node_cut_rows", "tree_milps"):
                counters[key] = counters.get(key, 0) + int(step.details[key])
            for key in ("node_cut_checks", "node_cut_s", "tree_milp_s"):
                counters[key] = counters.get(key, 0) + step.details[key]
            known.update(step.columns)
            if step.details["primal_stop"] and math.isfinite(step.f_lower):
                # SCIP stopped for the primal's plan: its bound at this lambda still holds
                bound = min(bound, ratio_bound(lam, step.f_lower, latency_lb))
            if any([adopt(p) for p in step.plans]):
                continue
            if step.finished:
                bound = min(bound, ratio_bound(lam, step.f_lower, latency_lb))
                proved = bound <= value.g * (1.0 + RATIO_TOLERANCE)
                return finish(Status.OPTIMAL if proved else Status.FEASIBLE, bound)
            if math.isfinite(step.f_lower):
                bound = min(bound, ratio_bound(lam, step.f_lower, latency_lb))
            left = deadline - time.perf_counter()
            if reserve > 0 and left > 0:
                # SCIP stopped at its limit: the reserve goes to a restricted MILP over every
                # column known (the bound above holds whatever plan this finds)
                columns = sorted(known, key=lambda c: (c.end, c.members, c.met))
                raw = backend.solve_formulation(self._restricted(master, columns), left)
                better = self.improvement(raw, value)
                counters["final_milp"] = "improved" if better is not None else raw.status.value
                if better is not None:
                    plan, value = better
            return finish(Status.TIME_LIMIT, bound)
