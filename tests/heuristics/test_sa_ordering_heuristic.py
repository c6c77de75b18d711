"""SA-paper simulated annealing and its baselines: parameters, hand cases, optimum, replay."""

from __future__ import annotations

from pathlib import Path

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
from slolab.heuristics.sa_ordering import (
    BASELINES,
    SAParams,
    deadline_order,
    edf_batches,
    exec_time_order,
    fcfs_batches,
    plan_g,
    plan_schedule,
    sa_order,
    shortest_first_batches,
)
from slolab.instances.records import Instance
from slolab.models.sa_ordering import OrderingProblem, SAOrderingModel
from slolab.solvers import solve


def test_default_parameters_are_the_papers() -> None:
    """T0 = 500, threshold 20, 100 moves per level, cooling 0.95: 63 temperature levels."""
    params = SAParams()
    assert (
        params.initial_temperature,
        params.final_temperature,
        params.iterations_per_temperature,
        params.cooling_rate,
    ) == (500.0, 20.0, 100, 0.95)
    # 500 * 0.95**62 = 20.8 > 20 and 500 * 0.95**63 = 19.75 <= 20: levels i = 0..62
    assert params.temperature_levels == 63


def test_parameters_validate_and_load(tmp_path: Path) -> None:
    """Bad values raise naming the field; TOML files load; unknown keys raise."""
    with pytest.raises(ValueError, match="cooling_rate"):
        SAParams(cooling_rate=1.0)
    with pytest.raises(ValueError, match="initial_temperature"):
        SAParams(initial_temperature=10.0)
    with pytest.raises(ValueError, match="iterations_per_temperature"):
        SAParams(iterations_per_temperature=0)
    with pytest.raises(ValueError, match="unknown SA parameter"):
        SAParams.from_dict({"temperature": 5})
    path = tmp_path / "sa.toml"
    path.write_text("[sa]\ninitial_temperature = 200.0\ncooling_rate = 0.9\n")
    loaded = SAParams.from_toml(path, table="sa")
    # 200 * 0.9**8 = 86.1 > 20 ... 200 * 0.9**21 = 21.9 > 20, 200 * 0.9**22 = 19.7: 22 levels
    assert loaded == SAParams(initial_temperature=200.0, cooling_rate=0.9)
    assert loaded.temperature_levels == 22


def test_baseline_orders_by_hand() -> None:
    """FCFS, EDF (e2e else TTFT deadline) and shortest-first orders of the pair."""
    data = OrderingProblem.from_instance(split_or_batch())
    # deadlines: request 0 TTFT 1.4, request 1 e2e 1.3
    assert deadline_order(data) == [1, 0]
    # e(2): request 0 3.0, request 1 1.5
    assert exec_time_order(data) == [1, 0]
    # all three put both requests in one full batch: no SLO met, G = 0
    assert fcfs_batches(data) == ((0, 1),)
    assert edf_batches(data) == ((1, 0),)
    assert shortest_first_batches(data) == ((1, 0),)
    assert [plan_g(data, f(data)) for f in BASELINES.values()] == [0.0, 0.0, 0.0]


def test_annealing_finds_the_split() -> None:
    """From the full batch (G = 0), the moves reach 1 then 0 in two batches (G = 0.2)."""
    batches, g = sa_order(split_or_batch(), seed=0)
    # 1 alone (1.25 s, met), then 0 (3.75 s, TTFT 2.5 > 1.4): G = 1 / 5
    assert batches == ((1,), (0,))
    assert g == 0.2


def test_all_met_second_start_stops_at_once() -> None:
    """When the shortest-first plan meets every SLO it is returned unchanged."""
    instance = ordering_instance([1, 2], [NAN, NAN], [NAN, NAN], [10.0, 10.0], batch_size=2)
    batches, g = sa_order(instance, SAParams(iterations_per_temperature=1), seed=5)
    # shortest first, one batch of 2: latencies 1.5 and 3.0, both <= 10
    assert batches == ((0, 1),)
    assert g == pytest.approx(2 / 4.5, rel=1e-15)


def test_same_seed_same_plan_and_replay_agrees() -> None:
    """Two runs with one seed agree; the plan replays with the same G and a clean check."""
    rng = np.random.default_rng(11)
    n = 9
    instance = ordering_instance(
        rng.integers(1, 60, n).tolist(),
        [0.6] * n,
        [0.03] * n,
        [NAN] * n,
        batch_size=3,
        prompt_tokens=rng.integers(1, 400, n).tolist(),
        timing=RANDOM_TIMING,
    )
    first = sa_order(instance, seed=7)
    assert sa_order(instance, seed=7) == first
    outcome = sim.replay(instance, plan_schedule(first[0]))
    assert sim.check(instance, outcome) == []
    assert sim.metrics.g_ratio(instance, outcome) == pytest.approx(first[1], rel=1e-9)
    # every request is planned exactly once
    assert sorted(r for batch in first[0] for r in batch) == list(range(n))


def test_seed_must_be_an_integer() -> None:
    """The seed is required and must be an integer."""
    with pytest.raises(ValueError, match="seed"):
        sa_order(split_or_batch(), seed=1.5)  # type: ignore[arg-type]


@st.composite
def random_instances(draw: st.DrawFn) -> Instance:
    """3..6 requests, B in 1..3, chat (TTFT + TPOT) or code (e2e) SLOs."""
    n = draw(st.integers(3, 6))
    b = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    return random_ordering_instance(seed, n, b)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(random_instances())
def test_heuristics_never_beat_the_optimum(instance: Instance) -> None:
    """SA and every baseline reach at most the brute-force optimum; SA is seed-deterministic."""
    optimum = solve(SAOrderingModel(instance), "brute", time_limit=30).objective
    params = SAParams(iterations_per_temperature=20)
    batches, g = sa_order(instance, params, seed=3)
    assert (batches, g) == sa_order(instance, params, seed=3)
    assert g <= optimum * (1 + 1e-12)
    assert g == plan_g(instance, batches)
    for method in BASELINES.values():
        assert plan_g(instance, method(instance)) <= optimum * (1 + 1e-12)
