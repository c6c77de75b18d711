"""The disaggregated deployment MILP against hand arithmetic and against its enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.heuristics.deployment_pd import pd_best_pair, pd_greedy
from slolab.models.deployment import DeploymentData
from slolab.models.deployment_pd import (
    PDData,
    PDPlan,
    link_loads,
    pd_plan_cost,
    pd_plan_violations,
    solve_pd_brute_force,
    solve_pd_milp,
)
from slolab.solvers.base import Status

CLASSES = ("short", "long")
RATES = (10.0, 2.0)


def hand_data(link_a: float = 10e9) -> PDData:
    """Prefill A ($4: 20 and 4 req/s, a link of ``link_a`` B/s) and B ($2: 5 and 1 req/s,
    100 GB/s); decode C ($3: 10 and 2 req/s) and D ($1: 2 and 1 req/s); 1 GB and 4 GB of KV
    per request; the whole link plannable (u = 1)."""
    prefill = DeploymentData(("A", "B"), (4.0, 2.0), CLASSES, RATES, ((20.0, 4.0), (5.0, 1.0)))
    decode = DeploymentData(("C", "D"), (3.0, 1.0), CLASSES, RATES, ((10.0, 2.0), (2.0, 1.0)))
    return PDData(prefill, decode, (1e9, 4e9), (link_a, 100e9), link_utilization=1.0)


def test_link_doubles_the_prefill_side():
    """The 10 GB/s link makes the prefill side cost $8 instead of $4; decode costs $5."""
    data = hand_data()
    found = solve_pd_milp(data)
    # prefill, compute only: 1 x A carries 10/20 + 2/4 = 1.0 server -> $4; with the link, A's
    # links need (10 x 1e9 + 2 x 4e9) / 10e9 = 1.8 servers -> 2 x A = $8; 1 A + 1 B ($6) is
    # infeasible (A's link allows x0 + 0.8 x1 <= 1, B's compute needs x0 + x1 >= 1.5), and 3 B
    # ($6) carry 3 of the 4 servers of compute B needs alone
    # decode: C takes the short class (1 server), D the long one (2/1 = 2 servers): 3 + 2 = $5
    # (1 C + 1 D = $4 would need 5a + 2b <= 1 with a + b >= 1)
    assert found.status == Status.OPTIMAL
    assert found.cost == pytest.approx(8.0 + 5.0)
    assert pd_plan_violations(data, found.plan) == []
    roomy = solve_pd_milp(hand_data(link_a=1e12))
    # 1 x A ($4) + the same decode side ($5)
    assert roomy.cost == pytest.approx(4.0 + 5.0)


def test_enumeration_agrees_on_the_hand_instance():
    """The enumeration proves the same $13 and its plan passes the checker."""
    data = hand_data()
    brute = solve_pd_brute_force(data)
    assert brute.status == Status.OPTIMAL
    # the same arithmetic as above: $8 + $5
    assert brute.cost == pytest.approx(13.0)
    assert pd_plan_violations(data, brute.plan) == []


def test_greedy_and_best_pair_on_the_hand_instance():
    """Greedy finds the $13 optimum; the best single pair (A, C) costs $14."""
    data = hand_data()
    greedy = pd_greedy(data)
    # prefill: short first; A and B both rise $4 (A: max(0.5, 1.0) -> 1; B: max(2, 0.1) -> 2),
    # tie to the lower price per capacity (A: 4/20 < B: 2/5); long: A -> max(1.0, 1.8) -> 2,
    # +$4, B -> 2 servers +$4, tie to A (4/4 < 2/1): 2 x A = $8
    # decode: short on C ($3 against 5 x D = $5), long on D (2 servers, +$2 against C's +$3)
    assert greedy.prefill.replicas == (2, 0) and greedy.decode.replicas == (1, 2)
    assert pd_plan_cost(data, greedy) == pytest.approx(13.0)
    assert pd_plan_violations(data, greedy) == []
    pair = pd_best_pair(data)
    # A alone: 2 servers ($8), B alone 4 ($8): tie, A first; C alone: 1 + 1 = 2 ($6), D alone
    # 5 + 2 = 7 ($7): C -> $8 + $6 = $14
    assert pd_plan_cost(data, pair) == pytest.approx(14.0)
    assert pd_plan_violations(data, pair) == []


def test_link_loads_of_a_plan():
    """A's links carry 1.8 servers when every class is prefilled on A."""
    data = hand_data()
    plan = pd_greedy(data)
    # (10 req/s x 1 GB + 2 req/s x 4 GB) / 10 GB/s = 1.8; B carries nothing
    assert link_loads(data, plan) == pytest.approx((1.8, 0.0))


def test_checker_flags_an_overloaded_link():
    """One A server cannot carry 1.8 servers of link load."""
    data = hand_data()
    plan = pd_greedy(data)
    one = PDPlan(type(plan.prefill)((1, 0), plan.prefill.fractions), plan.decode)
    found = pd_plan_violations(data, one)
    # compute 1.0 fits one A server, the link (1.8) does not
    assert found == ["prefill: A's links carry a load of 1.8 servers on 1 replicas"]


def random_data(seed: int) -> PDData:
    """Two or three configurations per side, two or three classes, capacities and links drawn."""
    rng = np.random.default_rng(seed)
    n_class = int(rng.integers(2, 4))
    classes = tuple(f"k{k}" for k in range(n_class))
    rates = tuple(float(v) for v in rng.uniform(0.5, 6.0, n_class))

    def side(tag: str) -> DeploymentData:
        n_conf = int(rng.integers(2, 4))
        capacity = rng.uniform(0.5, 8.0, (n_conf, n_class))
        capacity[rng.random((n_conf, n_class)) < 0.2] = 0.0
        capacity[0] = np.maximum(capacity[0], 0.5)  # some configuration serves every class
        return DeploymentData(
            tuple(f"{tag}{c}" for c in range(n_conf)),
            tuple(float(v) for v in rng.uniform(1.0, 9.0, n_conf)),
            classes,
            rates,
            tuple(tuple(float(v) for v in row) for row in capacity),
        )

    prefill, decode = side("p"), side("d")
    kv = tuple(float(v) for v in rng.uniform(0.1e9, 2e9, n_class))
    links = tuple(float(v) for v in rng.uniform(2e9, 20e9, len(prefill.configurations)))
    return PDData(prefill, decode, kv, links)


@pytest.mark.parametrize("seed", range(8))
def test_milp_and_enumeration_agree_on_seeded_instances(seed):
    """Both formulations prove the same optimum; both plans and the greedy's pass the checker,
    and the greedy and best pair cost no less."""
    data = random_data(seed)
    milp, brute = solve_pd_milp(data), solve_pd_brute_force(data)
    assert milp.status == brute.status == Status.OPTIMAL
    assert milp.cost == pytest.approx(brute.cost, rel=1e-9)
    assert pd_plan_violations(data, milp.plan) == []
    assert pd_plan_violations(data, brute.plan) == []
    greedy = pd_greedy(data)
    assert pd_plan_violations(data, greedy) == []
    assert pd_plan_cost(data, greedy) >= milp.cost - 1e-9
    pair = pd_best_pair(data)
    assert pair is not None and pd_plan_cost(data, pair) >= milp.cost - 1e-9


def test_lower_bounds_hold_in_both_formulations():
    """A lower bound of 2 decode servers of C raises the optimum by C's $3 over D's share."""
    data = hand_data()
    milp = solve_pd_milp(data, lower_decode=(2, 0))
    brute = solve_pd_brute_force(data, lower_decode=(2, 0))
    # 2 x C carry both classes (1 + 1 = 2 servers): decode $6, prefill $8 -> $14
    assert milp.cost == pytest.approx(14.0) and brute.cost == pytest.approx(14.0)


def test_zero_link_bandwidth_is_refused():
    """A link of 0 B/s is one line naming the configuration."""
    data = hand_data()
    with pytest.raises(ValueError, match=r"link_bandwidth\[0\] \(A\) must be > 0 B/s, got 0.0"):
        PDData(data.prefill, data.decode, data.kv_bytes, (0.0, 1e9))
