"""A primal from the time-indexed network: plans out of the paths its column generation priced
(docs/sa_ordering.md Sec. 6, "A primal from the network").

Three sources of plans, each re-evaluated exactly with :meth:`OrderingProblem.evaluate` (the
grid rounds batch ends down, so its claims may be optimistic; the value kept is never the
grid's):

1. every priced path that repeats no request is a plan (its batches in path order);
2. a *restricted arc MILP* over the distinct arcs ``(members, q, start tick)`` of the priced
   paths: a binary per arc, one unit of flow from ``(0, 0)`` conserved at every node ``(q,
   tick)`` with ``0 < q < N`` (the sinks ``(N, .)`` take it), every request covered by exactly
   one chosen arc, minimizing the master's path cost ``sum cost(arc)`` at the ratio
   ``lambda`` (``d_S (N - q - s) + sum e_r(s) - |claimed| / lambda``). A solution is a path
   from ``(0, 0)`` to a sink covering each request once: a plan. Dinkelbach steps: from the
   best G found so far, each round's plans are evaluated and the next round runs at the best
   true G, until a round improves nothing or its share of the time is up. Every integer
   solution HiGHS reports (the improving-solution callback) is evaluated, not only the last;
3. the *position MILP* over the same batches: each arc as a position column ``(members, end =
   q + s, claimed)`` in the column method's restricted MILP
   (:func:`slolab.models.sa_columns.restricted_milp`), where a batch is tied to its position
   but not to a grid time, so pieces of different paths chain, and the chosen path is timed
   exactly (its claims checked against its true starts); Dinkelbach rounds as above.

References
----------
W. Dinkelbach, "On nonlinear fractional programming", Management Science 13(7), 1967 (the
ratio steps); the restricted master MILP over priced columns is the price-and-branch primal
of Sec. 6 ("restricted MILP") with arcs of the time-indexed network as its columns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from slolab.models.sa_columns import Column, ColumnMaster, restricted_milp
from slolab.models.sa_ordering import Batches, OrderingProblem, PlanValue
from slolab.models.sa_ti_pricing import TiColumn

__all__ = ["TiPrimal", "arc_plan", "path_plan", "position_round", "time_indexed_primal"]

#: A round improves when the true G found exceeds the round's ratio by this share.
IMPROVE_TOL = 1e-9
#: Share of the primal's time the arc MILP may take (the position MILP has the rest).
ARC_SHARE = 0.25
#: A position round gets half the time left unless that is below this (then all of it; s).
POSITION_ROUND_S = 10.0


@dataclass(slots=True)
class TiPrimal:
    """What :func:`time_indexed_primal` found: the best plan and its exact value (None when
    no plan was seen), the distinct plans evaluated, the priced paths that repeat no request,
    the arc MILP's size (binaries, rows) and its rounds (ratio, HiGHS status, objective,
    solutions reported, best true G after the round, seconds)."""

    plan: Batches | None = None
    value: PlanValue | None = None
    evaluated: int = 0
    from_paths: int = 0
    arcs: int = 0
    rows: int = 0
    rounds: list[dict[str, Any]] = field(default_factory=list)
    runtime_s: float = 0.0

    @property
    def g(self) -> float:
        """The best plan's exact G (0 when none was found)."""
        return self.value.g if self.value is not None else 0.0


def path_plan(path: tuple[TiColumn, ...], n: int) -> Batches | None:
    """The plan of a priced path when it covers each of the ``n`` requests exactly once (its
    batches in path order), else None."""
    members = [r for col in path for r in col.members]
    if len(members) != n or len(set(members)) != n:
        return None
    return tuple(col.members for col in path)


def arc_plan(arcs: list[TiColumn], chosen: np.ndarray, n: int) -> Batches | None:
    """The plan of an arc MILP solution (``chosen``: per arc, its value): the arcs valued above
    one half, in order of ``q``, when they chain from ``(0, 0)`` (each starting at the previous
    one's end) and cover each request once; None otherwise."""
    picked = sorted((arcs[i] for i in np.flatnonzero(chosen > 0.5)), key=lambda c: c.q)
    q, tick = 0, 0
    for col in picked:
        if (col.q, col.tick) != (q, tick):
            return None
        q, tick = q + len(col.members), col.end_tick
    plan = tuple(col.members for col in picked)
    members = [r for batch in plan for r in batch]
    if q != n or len(set(members)) != n:
        return None
    return plan


class _ArcMilp:
    """The restricted arc MILP over ``arcs`` (see the module docstring) in HiGHS, one thread,
    seeded; costs set per ratio."""

    def __init__(self, problem: OrderingProblem, arcs: list[TiColumn], seed: int) -> None:
        import highspy

        self.n = n = problem.n_requests
        self.arcs = arcs
        execs = problem.exec_s
        self.latency = np.array(
            [
                float(
                    execs[list(c.members), len(c.members)].max() * (n - c.q - len(c.members))
                    + execs[list(c.members), len(c.members)].sum()
                )
                for c in arcs
            ]
        )
        self.claims = np.array([len(c.claimed) for c in arcs], dtype=float)
        # rows: requests 0 .. n - 1 (== 1), then the source (== 1), then each inner node (== 0)
        nodes: dict[tuple[int, int], int] = {}
        for c in arcs:
            for q, tick in ((c.q, c.tick), (c.q + len(c.members), c.end_tick)):
                if 0 < q < n:
                    nodes.setdefault((q, tick), n + 1 + len(nodes))
        self.rows = n + 1 + len(nodes)
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for c in arcs:
            starts.append(len(idx))
            idx += list(c.members)
            val += [1.0] * len(c.members)
            if c.q == 0:
                idx.append(n)
                val.append(1.0)
            else:
                idx.append(nodes[(c.q, c.tick)])
                val.append(-1.0)
            end = c.q + len(c.members)
            if end < n:
                idx.append(nodes[(end, c.end_tick)])
                val.append(1.0)
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", int(seed))
        lower = np.zeros(self.rows)
        lower[: n + 1] = 1.0
        empty = np.zeros(0, dtype=np.int32)
        h.addRows(self.rows, lower, lower.copy(), 0, empty, empty, np.zeros(0))
        m = len(arcs)
        h.addCols(
            m,
            np.zeros(m),
            np.zeros(m),
            np.ones(m),
            len(idx),
            np.asarray(starts, dtype=np.int32),
            np.asarray(idx, dtype=np.int32),
            np.asarray(val, dtype=float),
        )
        h.changeColsIntegrality(
            m, np.arange(m, dtype=np.int32), np.full(m, highspy.HighsVarType.kInteger)
        )
        self.highs = h
        self.found: list[np.ndarray] = []
        h.cbMipImprovingSolution.subscribe(
            lambda e: self.found.append(np.array(e.data_out.mip_solution, dtype=float))
        )
        self.index = {(c.members, c.q, c.tick): i for i, c in enumerate(arcs)}

    def start_from(self, plan: Batches) -> None:
        """Give HiGHS the arcs of ``plan``'s path as a start, when all are in the MILP."""
        import highspy

        chosen = np.zeros(len(self.arcs))
        q, tick = 0, 0
        for batch in plan:
            i = self.index.get((tuple(sorted(batch)), q, tick))
            if i is None:
                return
            chosen[i] = 1.0
            q, tick = q + len(batch), self.arcs[i].end_tick
        sol = highspy.HighsSolution()
        sol.col_value = chosen.tolist()
        sol.value_valid = True
        self.highs.setSolution(sol)

    def run(self, ratio: float, time_limit: float) -> tuple[str, float, list[np.ndarray]]:
        """Solve at ``lambda = ratio`` within ``time_limit`` s: HiGHS's status, objective
        (``min sum cost``, s; nan without a solution) and every solution it reported."""
        m = len(self.arcs)
        self.highs.changeColsCost(
            m, np.arange(m, dtype=np.int32), self.latency - self.claims / ratio
        )
        self.highs.setOptionValue("time_limit", max(time_limit, 1e-3))
        self.found = []
        self.highs.run()
        status = self.highs.modelStatusToString(self.highs.getModelStatus())
        info = self.highs.getInfo()
        solutions = list(self.found)
        objective = float("nan")
        if info.primal_solution_status == 2:  # kSolutionStatusFeasible
            objective = float(info.objective_function_value)
            solutions.append(np.asarray(self.highs.getSolution().col_value, dtype=float))
        return status, objective, solutions


def position_round(
    problem: OrderingProblem,
    arcs: list[TiColumn],
    ratio: float,
    time_limit: float,
    plan: Batches | None = None,
) -> tuple[str, float, Batches | None]:
    """One round of the position MILP at ``lambda = ratio`` within ``time_limit`` s: the
    batches of ``arcs`` as position columns ``(members, end = q + s, claimed)`` (their claims
    dropped where they cannot hold at their position) and the columns of ``plan`` (claiming
    its truly met members) in :func:`slolab.models.sa_columns.restricted_milp`, which times
    the chosen path exactly (no grid); HiGHS's status, the objective (s; nan without a
    solution) and the plan (None without one)."""
    import highspy
    import pulp

    master = ColumnMaster(problem, ratio)
    if plan is not None:
        master.add_plan(plan)
    columns = list(master.columns)
    for c in dict.fromkeys(
        Column(c.members, c.q + len(c.members), tuple(sorted(c.claimed))) for c in arcs
    ):
        columns.append(c if master.valid(c) else Column(c.members, c.end, ()))
    columns = sorted(set(columns), key=lambda c: (c.end, c.members, c.met))
    prob, read_plan = restricted_milp(master, columns, pulp)
    solver = pulp.HiGHS(msg=False, timeLimit=max(time_limit, 1e-3), threads=1)
    solver.createAndConfigureSolver(prob)
    solver.buildSolverModel(prob)
    if plan is not None:
        # the plan as a start: its columns chosen, each arc's sigma its batch's start (s)
        chosen = set(master.columns)
        start = {f"z_{i}": 1.0 for i, col in enumerate(columns) if col in chosen}
        t = 0.0
        for col in sorted(chosen, key=lambda c: c.end):
            if col.start >= 1:
                start[f"sigma_{col.end}_{col.size}"] = t
            t += master.duration(col)
        sol = highspy.HighsSolution()
        sol.col_value = [start.get(v.name, 0.0) for v in prob.variables()]
        sol.value_valid = True
        prob.solverModel.setSolution(sol)
    solver.callSolver(prob)
    prob.assignStatus(*solver.findSolutionValues(prob))
    highs = getattr(prob, "solverModel", None)
    status = (
        highs.modelStatusToString(highs.getModelStatus())
        if highs is not None
        else pulp.LpStatus[prob.status]
    )
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return status, float("nan"), None
    return status, float(pulp.value(prob.objective)), read_plan()


def time_indexed_primal(
    problem: OrderingProblem,
    paths: list[tuple[TiColumn, ...]],
    time_limit: float,
    plan: Batches | None = None,
    seed: int = 0,
    arc_share: float = ARC_SHARE,
) -> TiPrimal:
    """The best plan from the priced ``paths`` of the time-indexed network (module
    docstring): ``plan`` (a known plan, optional) and every path repeating no request,
    evaluated exactly; then, within ``time_limit`` seconds, the restricted arc MILP over the
    paths' arcs in Dinkelbach rounds from the best G so far (HiGHS, one thread, ``seed``) for
    ``arc_share`` of the time, and the position MILP (:func:`position_round`) over the same
    batches in the rest, each of its rounds at the best G so far with half the time left (the
    last with all of it). Every plan found is evaluated with
    :meth:`OrderingProblem.evaluate`; the G reported is that value's."""
    if not 0.0 <= arc_share <= 1.0:
        raise ValueError(f"arc_share must be in [0, 1], got {arc_share}")
    start = time.perf_counter()
    deadline = start + time_limit
    n = problem.n_requests
    result = TiPrimal()
    seen: set[Batches] = set()

    def consider(batches: Batches) -> None:
        key = tuple(tuple(sorted(int(r) for r in b)) for b in batches)
        if key in seen:
            return
        seen.add(key)
        value = problem.evaluate(key)
        result.evaluated += 1
        if result.value is None or value.g > result.value.g:
            result.plan, result.value = key, value

    def record(kind: str, ratio: float, status: str, objective: float, found: int, began: float):
        result.rounds.append(
            {
                "milp": kind,
                "ratio": ratio,
                "status": status,
                "objective": objective,
                "solutions": found,
                "g": result.g,
                "seconds": time.perf_counter() - began,
            }
        )

    if plan is not None:
        consider(plan)
    for path in paths:
        got = path_plan(path, n)
        if got is not None:
            result.from_paths += 1
            consider(got)
    arcs = list(dict.fromkeys(col for path in paths for col in path))
    if not arcs:
        result.runtime_s = time.perf_counter() - start
        return result
    arc_until = start + arc_share * time_limit
    if time.perf_counter() < arc_until:
        milp = _ArcMilp(problem, arcs, seed)
        result.arcs, result.rows = len(arcs), milp.rows
        ratio = result.g if result.g > 0 else 1.0
        while time.perf_counter() < arc_until:
            began = time.perf_counter()
            if result.plan is not None:
                milp.start_from(result.plan)
            status, objective, solutions = milp.run(ratio, arc_until - began)
            for chosen in solutions:
                got = arc_plan(arcs, chosen, n)
                if got is not None:
                    consider(got)
            record("arc", ratio, status, objective, len(solutions), began)
            if status != "Optimal" or not result.g > ratio * (1.0 + IMPROVE_TOL):
                break
            ratio = result.g
    while result.g > 0 and time.perf_counter() < deadline - 1.0:
        began = time.perf_counter()
        ratio = result.g
        left = deadline - began
        status, objective, got = position_round(
            problem, arcs, ratio, left if left < 2 * POSITION_ROUND_S else left / 2, result.plan
        )
        if got is not None:
            consider(got)
        record("position", ratio, status, objective, int(got is not None), began)
        if not result.g > ratio * (1.0 + IMPROVE_TOL):
            break
    result.runtime_s = time.perf_counter() - start
    return result
