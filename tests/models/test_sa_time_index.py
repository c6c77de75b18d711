"""The time-indexed batch network for SA ordering (``slolab.models.sa_time_index``): pricing
against every column listed; a plan's path costs at most its F; on seeded snapshots the
bound is at least brute force's G*."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from sa_ordering_cases import listed_paths, random_ordering_instance
from slolab.models.sa_columns import latency_floor
from slolab.models.sa_ordering import SAOrderingModel, as_problem
from slolab.models.sa_time_index import (
    TimeIndexedMaster,
    ng_neighbourhoods,
    ratio_bound,
    time_indexed_bound,
)
from slolab.solvers import Status, solve


def test_pricing_is_the_least_reduced_cost_of_every_path():
    """Random duals on a 4-request snapshot (B = 2): the least reduced cost the pricing's
    programme reports equals the least over every path listed (every sequence of batches whose
    sizes add up to N, repeats allowed), and the best path it returns has that reduced cost."""
    problem = as_problem(random_ordering_instance(4, 4, 2))
    master = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05)
    rng = np.random.default_rng(0)
    n = problem.n_requests
    duals = rng.normal(0, 1.0, n + 1)
    paths, best = master.price(duals, most=5)

    def reduced(path):
        members = [r for c in path for r in c.members]
        return sum(master.cost(c) for c in path) - duals[members].sum() - duals[n]

    def listed(q, tick):
        if q == n:
            yield ()
            return
        for s in range(1, min(problem.batch_size, n - q) + 1):
            for members in itertools.combinations(range(n), s):
                col = master.column(members, q, tick)
                for rest in listed(q + s, col.end_tick):
                    yield (col, *rest)

    least = min(reduced(path) for path in listed(0, 0))
    assert best == pytest.approx(least, abs=1e-9)
    assert paths and reduced(paths[0]) == pytest.approx(least, abs=1e-9)


def test_plan_path_costs_at_most_its_f():
    """A plan's path on the grid claims at least its met members, and its LP cost is at most
    the plan's L - M / lambda (starts rounded down, claims checked at those starts)."""
    inst = random_ordering_instance(8, 6, 3)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    for step in (0.01, 0.2):
        master = TimeIndexedMaster(problem, ratio=value.g, step_s=step)
        cost = sum(master.cost(c) for c in master.plan_path(plan))
        # F of the plan at lambda = G is 0
        assert cost <= value.total_latency_s - value.met_requests / value.g + 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_bound_is_at_least_brute_force(seed):
    """Seeded 6-request snapshots (B = 3): brute force's G* <= the time-indexed bound; on the
    first three, G* <= the bound with ng memory 3 <= the bound without, and at the starting
    plan's ratio the converged Lagrangian bound on min F with memory is at least the one
    without."""
    inst = random_ordering_instance(seed, 6, 3)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    assert exact.status == Status.OPTIMAL
    plan, value = model.starting_plan()
    floor = latency_floor(problem, plan, time.perf_counter() + 30)
    got = time_indexed_bound(problem, plan, value.g, floor, 30, step_s=0.02)
    assert exact.objective <= got.bound * (1 + 1e-9)
    # two phases: the first is the run without memory (it ends well within its share), the
    # second only adds ratios, so G* <= its bound <= the bound without memory
    warm = time_indexed_bound(
        problem, plan, value.g, floor, 30, step_s=0.02, ng_size=3, ng_warm=0.5
    )
    first = [t for t in warm.tried if not t["ng"]]
    assert [t["ratio"] for t in first] == [t["ratio"] for t in got.tried]
    assert len(warm.tried) > len(first)
    assert exact.objective <= warm.bound * (1 + 1e-9)
    assert warm.bound <= got.bound
    if seed >= 3:
        return
    ng = time_indexed_bound(problem, plan, value.g, floor, 30, step_s=0.02, ng_size=3)
    assert ng.fallbacks == 0
    assert exact.objective <= ng.bound * (1 + 1e-9)
    assert ng.bound <= got.bound * (1 + 1e-9)
    lower = []
    for size in (0, 3):
        master = TimeIndexedMaster(problem, value.g, step_s=0.02, ng_size=size)
        lb, converged = master.generate(plan, time.perf_counter() + 30)
        assert converged
        lower.append(lb)
    # both stop within PRICE_TOL (1 + |LP|) of their LP
    assert lower[1] >= lower[0] - 1e-6 * (1 + abs(lower[0]))


def _ng_feasible(master, path):
    """The memory rule written out: a batch may not meet the memory; after batch ``S`` with
    leader ``j`` the memory is ``(M ∪ S) ∩ NG(j)``."""
    memory: set[int] = set()
    for col in path:
        members, s = set(col.members), len(col.members)
        if members & memory:
            return False
        leader = max(col.members, key=lambda r: (master.execs[r, s], r))
        memory = (memory | members) & set(np.flatnonzero(master.ng_member[leader]).tolist())
    return True


@pytest.mark.parametrize(("seed", "n", "b"), [(1, 5, 2), (2, 5, 3)])
def test_admits_is_the_memory_rule(seed, n, b):
    """On every listed path of two 5-request snapshots, ``admits`` (which the second phase of
    ``ng_warm`` filters the first phase's paths with) agrees with the memory rule written out,
    with ng_size 1, 2 and N; without memory it admits every path, with N the elementary ones."""
    problem = as_problem(random_ordering_instance(seed, n, b))
    plain = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05)
    paths = list(listed_paths(plain))
    assert all(plain.admits(p) for p in paths)
    for size in (1, 2, n):
        master = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05, ng_size=size)
        assert [master.admits(p) for p in paths] == [_ng_feasible(master, p) for p in paths]
    elementary = [len({r for c in p for r in c.members}) == n for p in paths]
    assert [master.admits(p) for p in paths] == elementary
    # some listed paths repeat a request, so at N the rule refuses some
    assert not all(elementary)


def test_ratio_bound_by_hand():
    """The bound on G from a lower bound LB on min F at one ratio, by hand."""
    # LB < 0: 0.5 (1 + 2 / 10) = 0.6, with or without a cap on M
    assert ratio_bound(0.5, -2.0, 10.0) == pytest.approx(0.6)
    assert ratio_bound(0.5, -2.0, 10.0, 4) == pytest.approx(0.6)
    # LB >= 0: lambda, or lambda / (1 + lambda LB / N) = 0.5 / (1 + 0.5 * 2 / 4) = 0.4
    assert ratio_bound(0.5, 2.0, 10.0) == 0.5
    assert ratio_bound(0.5, 2.0, 10.0, 4) == pytest.approx(0.4)


@pytest.mark.parametrize("seed", range(4))
def test_ratio_bound_above_the_optimum_is_at_least_brute_force(seed):
    """Seeded 6-request snapshots: at a ratio 10% above brute force's G*, the converged LP's
    Lagrangian bound on min F is positive (without memory and with memory 3), and the bound it
    gives with M <= N, lambda / (1 + lambda LB / N), is below the ratio and at least G*."""
    inst = random_ordering_instance(seed, 6, 3)
    problem = as_problem(inst)
    model = SAOrderingModel(inst)
    exact = solve(model, "brute", time_limit=60)
    plan, _ = model.starting_plan()
    ratio = 1.1 * exact.objective
    for size in (0, 3):
        master = TimeIndexedMaster(problem, ratio, step_s=0.02, ng_size=size)
        lb, converged = master.generate(plan, time.perf_counter() + 30)
        assert converged and lb > 0
        got = ratio_bound(ratio, lb, 1.0, problem.n_requests)
        assert exact.objective <= got * (1 + 1e-9) < ratio


def test_ng_warm_is_validated():
    """ng_warm outside [0, 1] is refused, naming the value."""
    inst = random_ordering_instance(0, 6, 3)
    problem = as_problem(inst)
    plan, value = SAOrderingModel(inst).starting_plan()
    with pytest.raises(ValueError, match="ng_warm must be in"):
        time_indexed_bound(problem, plan, value.g, 1.0, 1.0, ng_size=3, ng_warm=1.5)


def test_ng_neighbourhoods_are_nearest_in_execution_order():
    """NG(r) is r and its nearest in the order of e_r(B), ties to the earlier one."""
    got = ng_neighbourhoods(np.array([3.0, 1.0, 2.0, 5.0]), 2)
    # order by execution time: r1 (1.0), r2 (2.0), r0 (3.0), r3 (5.0); r0's neighbours r2 and
    # r3 are both one step away, the earlier (r2) wins; r2's are r1 and r0, r1 wins
    assert [np.flatnonzero(row).tolist() for row in got] == [[0, 2], [1, 2], [1, 2], [0, 3]]
    assert not ng_neighbourhoods(np.array([3.0, 1.0]), 0).any()


@pytest.mark.parametrize(("seed", "n", "b"), [(1, 5, 2), (2, 5, 3)])
def test_ng_pricing_is_the_least_over_ng_feasible_paths(seed, n, b):
    """Random duals on 5-request snapshots: with ng_size 1, 2 and N the ng programme's least
    reduced cost equals the least over the listed paths the memory rule admits, its best path
    is one of them with that cost, also when a round tries it first (``exact_first``); at
    ng_size = N those are the elementary paths (the plans); ng_size = 0 is the programme
    without memory (the least over every path), and so is the backward pass from (0, 0)."""
    problem = as_problem(random_ordering_instance(seed, n, b))
    plain = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05)
    paths = list(listed_paths(plain))
    rng = np.random.default_rng(seed)
    for _ in range(2):
        duals = rng.normal(1.0, 1.0, n + 1)

        def reduced(path, duals=duals):
            members = [r for c in path for r in c.members]
            return sum(plain.cost(c) for c in path) - duals[members].sum() - duals[n]

        rc = np.array([reduced(p) for p in paths])
        assert plain.price(duals)[1] == pytest.approx(rc.min(), abs=1e-9)
        # the backward pass (the completion bound of the ng programme) from (0, 0) less sigma
        # is the same least
        done = plain.completion(plain._arcs(duals))
        assert done[0, 0] - duals[n] == pytest.approx(rc.min(), abs=1e-9)
        for size in (1, 2, n):
            master = TimeIndexedMaster(problem, ratio=1.0, step_s=0.05, ng_size=size)
            admitted = np.array([_ng_feasible(master, p) for p in paths])
            best_paths, least = master.price_ng(duals, most=3)
            # these duals price every ng-feasible path below 0, so the value is exact
            assert rc[admitted].min() < 0
            assert least == pytest.approx(rc[admitted].min(), abs=1e-9)
            assert _ng_feasible(master, best_paths[0])
            assert reduced(best_paths[0]) == pytest.approx(least, abs=1e-9)
            # the round price() runs (a quick search first) adds ng-feasible paths only
            assert all(_ng_feasible(master, p) for p in master.price(duals)[0])
            assert master.ng_fallbacks == 0
            # with the exact programme first (least without memory above its floor) the
            # round's value is that least, its paths ng-feasible
            first = TimeIndexedMaster(
                problem, ratio=1.0, step_s=0.05, ng_size=size, exact_first=10_000
            )
            first.exact_floor = -math.inf
            got_paths, got = first.price(duals)
            assert got == pytest.approx(least, abs=1e-9)
            assert got_paths and all(_ng_feasible(first, p) for p in got_paths)
        elementary = np.array([len({r for c in p for r in c.members}) == n for p in paths])
        assert least == pytest.approx(rc[elementary].min(), abs=1e-9)


def test_ng_pricing_is_at_least_the_plain_one():
    """Random duals on an 8-request snapshot (B = 3): the ng programme's least reduced cost is
    at least the one without memory (its paths are some of the paths)."""
    problem = as_problem(random_ordering_instance(5, 8, 3))
    plain = TimeIndexedMaster(problem, ratio=0.5, step_s=0.05)
    rng = np.random.default_rng(5)
    for _ in range(4):
        duals = rng.normal(1.0, 1.5, problem.n_requests + 1)
        base = plain.price(duals)[1]
        for size in (2, 4):
            master = TimeIndexedMaster(problem, ratio=0.5, step_s=0.05, ng_size=size)
            assert master.price_ng(duals)[1] >= base - 1e-9
