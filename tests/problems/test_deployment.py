"""The deployment problem: MILP against enumeration, the plan checker, the heuristics."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from slolab.heuristics.deployment import (
    best_single,
    greedy_cost_per_capacity,
    single_configuration_plans,
)
from slolab.models.deployment import (
    DeploymentData,
    DeploymentPlan,
    plan_cost,
    plan_violations,
    replica_bounds,
    solve_brute_force,
    solve_milp,
)
from slolab.solvers.base import Status

# two configurations, two classes: a cheap one good at short requests, a dear one at long
SMALL = DeploymentData(
    configurations=("cheap", "dear"),
    prices=(1.0, 3.0),
    classes=("short", "long"),
    rates=(10.0, 4.0),
    capacity=((4.0, 1.0), (20.0, 5.0)),
)


def test_small_optimum_mixes_configurations() -> None:
    """The hand-solved instance: 2 cheap + 1 dear at 5 $/h beats either configuration alone."""
    result = solve_milp(SMALL)
    # cheap alone: 10/4 + 4/1 = 6.5 -> 7 servers, 7 $/h; dear alone: 10/20 + 4/5 = 1.3 -> 2,
    # 6 $/h; mixed: long on dear (0.8 of a server) and 0.2 * 20 = 4 req/s of short beside it,
    # the other 6 req/s on cheap (1.5 -> 2): 2 * 1 + 1 * 3 = 5 $/h
    assert result.status == Status.OPTIMAL
    assert result.cost == pytest.approx(5.0)
    assert result.plan is not None and result.plan.replicas == (2, 1)
    assert plan_violations(SMALL, result.plan) == []
    brute = solve_brute_force(SMALL)
    assert brute.status == Status.OPTIMAL and brute.cost == pytest.approx(5.0)


def test_heuristics_on_the_small_instance() -> None:
    """best single = dear x2 (6 $/h); greedy puts long on dear, then short in its spare."""
    single = best_single(SMALL)
    assert single is not None and single.replicas == (0, 2)
    assert plan_cost(SMALL, single) == pytest.approx(6.0)
    # greedy: long first (cheapest need min(1 * 4, 3 * 0.8) = 2.4 > short's min(2.5, 1.5));
    # long on dear costs +3 (1 server) against cheap's +4; short on cheap +3 (3 servers), on
    # dear 0.8 + 0.5 = 1.3 -> 2 servers, +3 too; the tie goes to the lower cost per capacity,
    # dear's 3/20 = 0.15 < cheap's 1/4: 2 x dear = 6 $/h
    greedy = greedy_cost_per_capacity(SMALL)
    assert greedy.replicas == (0, 2)
    assert plan_violations(SMALL, greedy) == []
    plans = single_configuration_plans(SMALL)
    assert {c: p.replicas for c, p in plans.items()} == {0: (7, 0), 1: (0, 2)}


def test_checker_rejects_bad_plans() -> None:
    """Each broken rule is named: too few servers, a class not fully sent, negative and
    fractional counts, traffic sent where capacity is 0."""
    good = DeploymentPlan((2, 1), ((0.6, 0.4), (0.0, 1.0)))
    assert plan_violations(SMALL, good) == []
    short_of_servers = DeploymentPlan((1, 1), ((0.6, 0.4), (0.0, 1.0)))
    # cheap carries 0.6 * 10 / 4 = 1.5 servers on 1
    assert plan_violations(SMALL, short_of_servers) == [
        "cheap carries a load of 1.5 servers on 1 replicas"
    ]
    half_sent = DeploymentPlan((2, 1), ((0.5, 0.4), (0.0, 1.0)))
    assert plan_violations(SMALL, half_sent) == ["short's fractions sum to 0.9, not 1"]
    negative = DeploymentPlan((-1, 3), ((0.0, 1.0), (0.0, 1.0)))
    assert plan_violations(SMALL, negative) == [
        "replicas[0] (cheap) is negative: -1",
        "cheap carries a load of 0 servers on -1 replicas",
    ]
    fractional = DeploymentPlan((2.5, 1), ((0.6, 0.4), (0.0, 1.0)))  # type: ignore[arg-type]
    assert plan_violations(SMALL, fractional) == ["replicas[0] (cheap) is not an integer: 2.5"]
    blocked = DeploymentData(("a", "b"), (1.0, 1.0), ("k",), (1.0,), ((0.0,), (2.0,)))
    sent = DeploymentPlan((5, 1), ((0.5, 0.5),))
    assert plan_violations(blocked, sent) == [
        "k sends 0.5 of its traffic to a, which cannot serve it (capacity 0)",
        "a carries a load of inf servers on 5 replicas",
    ]


def test_data_refuses_a_class_no_configuration_serves() -> None:
    """A class that arrives with capacity 0 everywhere is an error naming it."""
    with pytest.raises(ValueError, match="class 'k' arrives at 1 req/s and no configuration"):
        DeploymentData(("a",), (1.0,), ("k",), (1.0,), ((0.0,),))


def test_lower_bounds_are_kept() -> None:
    """A lower bound of 2 dear servers makes dear alone (6 $/h) the optimum."""
    result = solve_milp(SMALL, lower=(0, 2))
    # 2 dear carry 1.3 servers of load: nothing on cheap needed
    assert result.status == Status.OPTIMAL and result.plan is not None
    assert result.plan.replicas == (0, 2) and result.cost == pytest.approx(6.0)
    assert replica_bounds(SMALL, (0, 2)) == ((0, 2), (7, 2))


@st.composite
def instances(draw: st.DrawFn) -> DeploymentData:
    return draw(tables(draw(st.integers(1, 3)), draw(st.integers(1, 3))))


@st.composite
def tables(draw: st.DrawFn, n_conf: int, n_class: int) -> DeploymentData:
    """Random prices, rates and capacities of ``n_conf`` configurations and ``n_class``
    classes, every class served by some configuration."""
    prices = tuple(draw(st.sampled_from([1.0, 1.5, 2.0, 3.5, 5.0])) for _ in range(n_conf))
    rates = tuple(draw(st.sampled_from([0.5, 1.0, 2.0, 3.0, 5.0])) for _ in range(n_class))
    capacity = [
        [draw(st.sampled_from([0.0, 0.7, 1.0, 2.5, 4.0, 6.0])) for _ in range(n_class)]
        for _ in range(n_conf)
    ]
    for k in range(n_class):  # every class served somewhere
        if not any(row[k] > 0 for row in capacity):
            capacity[draw(st.integers(0, n_conf - 1))][k] = 1.0
    return DeploymentData(
        tuple(f"c{c}" for c in range(n_conf)),
        prices,
        tuple(f"k{k}" for k in range(n_class)),
        rates,
        tuple(tuple(row) for row in capacity),
    )


@seed(33)
@settings(max_examples=40, deadline=None)
@given(instances())
def test_milp_equals_brute_force(data: DeploymentData) -> None:
    """HiGHS and enumeration agree on the optimal cost; both plans pass the checker; every
    heuristic costs at least the optimum."""
    milp = solve_milp(data)
    brute = solve_brute_force(data)
    assert milp.status == Status.OPTIMAL and brute.status == Status.OPTIMAL
    assert milp.plan is not None and brute.plan is not None
    assert plan_violations(data, milp.plan) == []
    assert plan_violations(data, brute.plan) == []
    assert milp.cost == pytest.approx(brute.cost, abs=1e-9)
    greedy = greedy_cost_per_capacity(data)
    assert plan_violations(data, greedy) == []
    assert plan_cost(data, greedy) >= milp.cost - 1e-9
    single = best_single(data)
    if single is not None:
        assert plan_violations(data, single) == []
        assert plan_cost(data, single) >= milp.cost - 1e-9
    assert math.isfinite(milp.runtime_s) and milp.runtime_s >= 0
