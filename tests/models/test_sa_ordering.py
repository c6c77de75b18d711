"""SA-ordering exact models: problem data, hand-solved plans, MILP == CP-SAT == brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sa_ordering_cases import (
    NAN,
    RANDOM_TIMING,
    ordering_instance,
    random_ordering_instance,
    split_or_batch,
)
from slolab import sim
from slolab.instances.records import Cluster, Instance
from slolab.models.sa_ordering import (
    OrderingProblem,
    PlanValue,
    SAOrderingModel,
    batches_of,
)
from slolab.solvers import Status, available_models, build_model, solve


def defer_the_strict() -> Instance:
    """Three code requests, B = 1: e = 5, 2.5, 2.5 s with e2e SLOs 5.5, 3 and 5.5 s."""
    return ordering_instance([4, 2, 2], [NAN] * 3, [NAN] * 3, [5.5, 3.0, 5.5], batch_size=1)


def test_member_timing_from_the_static_batch_model() -> None:
    """Precomputed first-token and execution times follow the quarter timing."""
    data = OrderingProblem.from_instance(split_or_batch())
    # request 0 (2 tokens): e(1) = 1.25 * 2 = 2.5, e(2) = 1.5 * 2 = 3; P(1) = 1.25, P(2) = 1.5
    assert data.exec_s[0, 1:].tolist() == [2.5, 3.0]
    assert data.first_token_s[0, 1:].tolist() == [1.25, 1.5]
    # request 1 (1 token): e(1) = 1.25, e(2) = 1.5
    assert data.exec_s[1, 1:].tolist() == [1.25, 1.5]


def test_latest_start_per_batch_size() -> None:
    """Latest starts: TTFT bound, TPOT exclusion and e2e bound, with the 1e-9 s tolerance."""
    latest = OrderingProblem.from_instance(split_or_batch()).latest_start_s
    # request 0, s = 1: TTFT 1.4 - P 1.25 = 0.15; TPOT 1.25 <= 1.3
    assert latest[0, 1] == pytest.approx(0.15 + 1e-9, abs=1e-15)
    # request 0, s = 2: TPOT 1.5 > 1.3, never met
    assert latest[0, 2] == -math.inf
    # request 1: e2e 1.3 - e 1.25 = 0.05 at s = 1; 1.3 - 1.5 < 0 at s = 2
    assert latest[1, 1] == pytest.approx(0.05 + 1e-9, abs=1e-15)
    assert latest[1, 2] == pytest.approx(-0.2 + 1e-9, abs=1e-15)


def test_evaluate_the_three_plans_of_two_requests() -> None:
    """G of every plan of the split-or-batch pair, by hand."""
    data = OrderingProblem.from_instance(split_or_batch())
    # together: latencies 3 and 1.5; TPOT 1.5 > 1.3 and e2e 1.5 > 1.3: none met
    assert data.evaluate([(0, 1)]) == PlanValue(0, 4.5)
    # 0 then 1: 2.5 (TTFT 1.25, TPOT 1.25: met) and 2.5 + 1.25 = 3.75 (late)
    assert data.evaluate([(0,), (1,)]) == PlanValue(1, 6.25)
    # 1 then 0: 1.25 (met) and 1.25 + 2.5 = 3.75 (TTFT 2.5 > 1.4: late); G = 1 / 5
    value = data.evaluate([(1,), (0,)])
    assert value == PlanValue(1, 5.0)
    assert value.g == 0.2


@pytest.mark.parametrize("solver", ["brute", "highs", "cbc", "cpsat"])
def test_split_or_batch_optimum(solver: str) -> None:
    """Every backend finds 1 then 0 in two batches, G = 1 / (1.25 + 3.75) = 0.2."""
    result = solve(SAOrderingModel(split_or_batch()), solver, time_limit=20)
    assert result.status == Status.OPTIMAL
    # G = 1 met / 5.0 s
    assert result.objective == pytest.approx(0.2, rel=1e-12)
    assert batches_of(result.schedule) == ((1,), (0,))


@pytest.mark.parametrize("solver", ["brute", "highs", "cbc", "cpsat"])
def test_deferring_the_strict_long_request(solver: str) -> None:
    """Order 1, 2, 0 meets two SLOs: latencies 2.5, 5, 10 and G = 2 / 17.5."""
    result = solve(SAOrderingModel(defer_the_strict()), solver, time_limit=20)
    assert result.status == Status.OPTIMAL
    # 1 (2.5 <= 3 met), 2 (5 <= 5.5 met), 0 (10 > 5.5): G = 2 / 17.5
    assert result.objective == pytest.approx(2 / 17.5, rel=1e-12)
    assert batches_of(result.schedule) == ((1,), (2,), (0,))


def test_later_arrival_delays_its_batch() -> None:
    """A batch waits for its members: request 1 arrives at 2 s, so batch (1,) starts at 2.5."""
    instance = ordering_instance([2, 1], [NAN, NAN], [NAN, NAN], [3.0, 1.0], 2, arrival=[0.0, 2.0])
    data = OrderingProblem.from_instance(instance)
    # (0,) runs 0 .. 2.5; (1,) starts at max(2.5, 2) = 2.5, ends 3.75: latency 1.75 > 1
    assert data.start_times([(0,), (1,)]) == [0.0, 2.5]
    assert data.evaluate([(0,), (1,)]) == PlanValue(1, 2.5 + 1.75)
    # (1,) first waits for its arrival: 2 .. 3.25 (latency 1.25 > 1); (0,) 3.25 .. 5.75
    assert data.evaluate([(1,), (0,)]) == PlanValue(0, 1.25 + 5.75)
    # together at 2: 2 .. 5; latencies 5 (> 3) and 1.5 (> 1)
    result = solve(SAOrderingModel(instance), "highs", time_limit=20)
    # the best plan is 0 then 1: G = 1 / 4.25
    assert result.objective == pytest.approx(1 / 4.25, rel=1e-12)


def test_replayed_optimum_matches_the_model_objective() -> None:
    """The engine replays the optimal plan; g_ratio equals the model's G and the checker is clean."""
    instance = defer_the_strict()
    result = solve(SAOrderingModel(instance), "highs", time_limit=20)
    outcome = sim.replay(instance, result.schedule)
    assert sim.check(instance, outcome) == []
    # the engine's G is the model's 2 / 17.5
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(result.objective, rel=1e-9)


def test_registered_in_the_model_registry() -> None:
    """The model is registered as 'sa-ordering' and offers MILP, CP-SAT and brute force."""
    assert "sa-ordering" in available_models()
    model = build_model("sa-ordering", split_or_batch())
    assert isinstance(model, SAOrderingModel)
    assert model.supports() == frozenset({"milp", "cpsat", "brute"})


def test_bad_instances_are_rejected() -> None:
    """Wrong problem, wrong mode, missing batch size and a KV-overflowing batch raise."""
    good = split_or_batch()
    for change, message in [
        ({"problem": "serving"}, "instance.problem"),
        ({"cluster": Cluster(mode="colocated", max_batch_size=2)}, "static"),
        ({"settings": {}}, "batch_size"),
        ({"settings": {"batch_size": 3}}, "max_batch_size"),
        ({"cluster": Cluster(mode="static", max_batch_size=2, kv_capacity_tokens=20)}, "KV"),
    ]:
        fields = {
            "name": good.name,
            "workload": good.workload,
            "cluster": good.cluster,
            "timing": good.timing,
            "problem": good.problem,
            "settings": good.settings,
        }
        fields.update(change)
        with pytest.raises(ValueError, match=message):
            OrderingProblem.from_instance(Instance(**fields))


def test_bad_plans_are_rejected() -> None:
    """A plan must hold every request once in batches of 1..B."""
    data = OrderingProblem.from_instance(split_or_batch())
    with pytest.raises(ValueError, match="planned twice"):
        data.evaluate([(0,), (0, 1)])
    with pytest.raises(ValueError, match="in no batch"):
        data.evaluate([(0,)])
    with pytest.raises(ValueError, match="expected 1..2"):
        data.evaluate([()])


def test_time_limit_reports_incumbent_and_bound() -> None:
    """A run cut short is TIME_LIMIT with an incumbent below its bound; brute force times out."""
    rng = np.random.default_rng(3)
    n = 14
    instance = ordering_instance(
        rng.integers(1, 60, n).tolist(),
        [0.5] * n,
        [0.05] * n,
        [NAN] * n,
        batch_size=3,
        prompt_tokens=rng.integers(1, 400, n).tolist(),
        timing=RANDOM_TIMING,
    )
    model = SAOrderingModel(instance)
    result = solve(model, "highs", time_limit=0.05)
    assert result.status == Status.TIME_LIMIT
    lo, hi = result.optimum_interval
    # the incumbent is the starting plan or better, and the bound is above it
    assert lo == result.objective and lo >= model.starting_plan()[1].g
    assert hi >= lo
    brute = solve(model, "brute", time_limit=0.05)
    assert brute.status == Status.TIME_LIMIT and brute.objective is None


@st.composite
def random_instances(draw: st.DrawFn) -> Instance:
    """3..6 requests, B in 1..3, chat (TTFT + TPOT) or code (e2e) SLOs; some with arrivals."""
    n = draw(st.integers(3, 6))
    b = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    return random_ordering_instance(seed, n, b, arrivals=draw(st.booleans()))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(random_instances())
def test_milp_cpsat_and_brute_force_agree(instance: Instance) -> None:
    """HiGHS, CBC, CP-SAT and brute force prove the same G* (1e-9 relative) and it replays."""
    model = SAOrderingModel(instance)
    brute = solve(model, "brute", time_limit=30)
    assert brute.status == Status.OPTIMAL
    for solver in ("highs", "cbc", "cpsat"):
        result = solve(model, solver, time_limit=30)
        assert result.status == Status.OPTIMAL, solver
        assert result.objective == pytest.approx(brute.objective, rel=1e-9), solver
        assert result.bound >= result.objective
    outcome = sim.replay(instance, brute.schedule)
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(brute.objective, rel=1e-9)
