"""SA ordering claim-capacity cuts at tree nodes: valid in the subtree, priced exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sa_ordering_cases import random_ordering_instance, tight_ordering_instance
from slolab.models.sa_bp import Decisions, _Master, best_columns, branch_and_price
from slolab.models.sa_columns import Column, ColumnMaster, claim_capacity
from slolab.models.sa_node_cuts import NodeCutFamily, claimable_latest
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel
from slolab.solvers import solve
from test_sa_bp import allowed_columns, every_plan, min_f, random_decisions, root_master

pytest.importorskip("pyscipopt")


def node_decisions(seed: int, n: int) -> Decisions:
    """:func:`random_decisions` plus, on some seeds, a forbidden arc, an excluded pair and an
    unclaimed pair."""
    rng = np.random.default_rng(1000 + seed)
    decisions = random_decisions(seed, n)
    if seed % 2 == 0:
        decisions = decisions.with_forbidden({(int(rng.integers(1, n + 1)), 1)})
        decisions = decisions.with_excluded(int(rng.integers(n)), (int(rng.integers(2, n + 1)), 2))
        decisions = decisions.with_unclaimed(int(rng.integers(n)), (int(rng.integers(3, n)), 3))
    return decisions


def subtree_claims(master: ColumnMaster, decisions: Decisions) -> list[set[int]]:
    """For every plan of 1-3 request batches that the node allows with its largest claims
    (each batch claiming its met members but the missed and the unclaimed there) and, at a
    ratio with start ceilings, whose ``F`` is at most 0: the set it claims."""
    problem = master.problem
    out = []
    for plan in every_plan(tuple(range(master.n)), 3):
        value = problem.evaluate(plan)
        if value.total_latency_s - master.reward * value.met_requests > 1e-9:
            continue
        cols = []
        start, end = 0.0, 0
        for batch in plan:
            s = len(batch)
            end += s
            never = decisions.missed | {r for r, a in decisions.unclaimed if a == (end, s)}
            met = [r for r in batch if master.latest[r, s] >= start and r not in never]
            cols.append(Column(tuple(sorted(batch)), end, tuple(sorted(met))))
            start += max(float(master.exec[r, s]) for r in batch)
        if all(decisions.allows(c) and master.valid(c) for c in cols):
            out.append({r for c in cols for r in c.met})
    return out


@pytest.mark.parametrize("bounded", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_node_capacity_bounds_every_plan_of_the_subtree(seed: int, bounded: bool) -> None:
    """On random and tight 6-request snapshots (B = 3) under random node decisions, every
    plan of the subtree (with ``F <= 0`` where the start ceilings assume it) claims at most
    ``K_node(R)`` of every horizon set and of random sets (brute force over every plan)."""
    maker = tight_ordering_instance if seed % 2 else random_ordering_instance
    instance = maker(seed, 6, 3)
    problem = OrderingProblem.from_instance(instance)
    optimum = solve(SAOrderingModel(instance), "brute", time_limit=30).objective
    master = ColumnMaster(problem, 0.97 * optimum, bounds=bounded)
    decisions = node_decisions(seed, problem.n_requests)
    latest = claimable_latest(master, decisions)
    family = NodeCutFamily(master)
    horizon = latest.max(axis=1)
    can = horizon > -np.inf
    sets = [tuple(np.flatnonzero(can & (horizon <= h)).tolist()) for h in set(horizon[can])]
    rng = np.random.default_rng(seed)
    sets += [tuple(sorted(rng.choice(6, size=k, replace=False).tolist())) for k in (2, 3, 4)]
    claims = subtree_claims(master, decisions)
    for members in sets:
        members = tuple(r for r in members if can[r])
        if not members:
            continue
        limit = family.capacity(members, latest)
        most = max((len(c.intersection(members)) for c in claims), default=0)
        assert most <= limit, (members, limit, most, decisions)


def test_node_capacity_is_below_the_root_one_somewhere() -> None:
    """The battery above is not vacuous: on some of its snapshots and sets the node's
    capacity is below the one of the same set without decisions."""
    lower = 0
    for seed in range(12):
        maker = tight_ordering_instance if seed % 2 else random_ordering_instance
        problem = OrderingProblem.from_instance(maker(seed, 6, 3))
        master = ColumnMaster(problem, 0.05)
        free = claimable_latest(master, Decisions())
        node = claimable_latest(master, node_decisions(seed, problem.n_requests))
        execs = master.exec[:, 1:4]
        for k in range(2, 7):
            for members in itertools.combinations(range(6), k):
                rows = list(members)
                if (node[rows] > -np.inf).any(axis=1).all():
                    root = claim_capacity(execs[rows], free[rows], 3)
                    lower += claim_capacity(execs[rows], node[rows], 3) < root
    # counted over the 12 snapshots: a positive count, the node sets are tighter
    assert lower > 0


def test_claimable_latest_of_the_decisions() -> None:
    """Request 0 missed: never claimable; request 1 ending after position 5 of 6: only in the
    last batch, at sizes 1-3 it must start at node 5, 4 or 3, whose floor is above some of
    its latest starts; a request with no decision keeps its latest start wherever it is at
    least the floor of position 0 (the ceilings are all above every latest start here)."""
    problem = OrderingProblem.from_instance(random_ordering_instance(3, 6, 3))
    master = ColumnMaster(problem, 0.05)
    decisions = Decisions().with_missed(0).with_ends_after(1, 5)
    latest = claimable_latest(master, decisions)
    assert (latest[0] == -np.inf).all()
    for s in (1, 2, 3):
        late = master.latest[1, s]
        expected = late if late >= master.lb[6 - s] else -np.inf
        assert latest[1, s - 1] == (min(late, master.ub[6 - s]) if expected > -np.inf else -np.inf)
    free = master.latest[2, 1:4]
    assert latest[2] == pytest.approx(np.where(free >= 0.0, free, -np.inf))


@pytest.mark.parametrize("seed", range(6))
def test_pricing_with_node_cut_duals_is_exact(seed: int) -> None:
    """With a nonzero dual on node-cut rows (a claim shift per request), pricing's column at
    every arc is of the smallest reduced cost among the node's allowed columns (brute
    force), the shift counted once per claimed member."""
    problem, master, _ = root_master(seed, 0.97)
    duals, _ = master._duals()
    decisions = random_decisions(seed, problem.n_requests)
    rng = np.random.default_rng(seed)
    shift = -rng.uniform(0.0, 2.0, problem.n_requests)
    every = allowed_columns(master, decisions)
    best = best_columns(master, duals, decisions, shift)
    for arc in {(c.end, c.size) for c in every}:
        col, _ = best[arc]

        def rc(c: Column) -> float:
            return master.reduced_cost(c, duals) - float(shift[list(c.met)].sum())

        brute = min(rc(c) for c in every if (c.end, c.size) == arc)
        assert decisions.allows(col)
        assert rc(col) == pytest.approx(brute, abs=1e-6)


@pytest.mark.parametrize("seed", [9, 15, 18, 50, 55])
def test_node_cuts_keep_branch_and_price_exact(seed: int) -> None:
    """On the fractional roots of the branch-and-price tests, with node cuts the proved min F
    still equals brute force's, and two runs give the same tree (determinism)."""
    problem, master, _ = root_master(seed, 0.97)
    exact = min_f(problem, master.ratio)
    runs = [
        branch_and_price(master, list(master.columns), 1e20, 30.0, seed=0, node_cuts=True)
        for _ in range(2)
    ]
    for step in runs:
        assert step.finished
        assert step.f_lower == pytest.approx(exact, abs=1e-9)
    assert runs[0].details["nodes"] == runs[1].details["nodes"]
    assert runs[0].details["node_cuts"] == runs[1].details["node_cuts"]


def test_pricer_reads_the_node_cut_duals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 55 imposes a node cut; some pricing round at that node reads a nonzero dual of
    its row (so the pricer sees it), and every column then priced enters the row."""
    problem, master, _ = root_master(55, 0.97)
    seen: list[np.ndarray] = []
    original = _Master.node_duals

    def record(self: _Master, farkas: bool) -> np.ndarray:
        out = original(self, farkas)
        seen.append(out)
        return out

    monkeypatch.setattr(_Master, "node_duals", record)
    step = branch_and_price(master, list(master.columns), 1e20, 30.0, seed=0, node_cuts=True)
    assert step.details["node_cuts"] >= 1
    assert any(np.abs(d).max() > 1e-9 for d in seen if d.size)
    assert step.f_lower == pytest.approx(min_f(problem, master.ratio), abs=1e-9)


def test_node_cut_family_caches_capacities() -> None:
    """The same set under the same claimable latest starts is computed once."""
    problem = OrderingProblem.from_instance(tight_ordering_instance(1, 6, 3))
    master = ColumnMaster(problem, 0.05)
    family = NodeCutFamily(master)
    latest = claimable_latest(master, Decisions())
    members = tuple(int(r) for r in np.flatnonzero(latest.max(axis=1) > -np.inf))
    first = family.capacity(members, latest)
    assert family.capacity(members, latest) == first
    assert len(family._cache) == 1
