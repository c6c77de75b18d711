"""SLOs-Serve multi-SLO DP: Algorithm 2 / PB*, hand-solved calls, DP == B1, discretization."""

from __future__ import annotations

import math

import pytest
import slolab.models.slos_admission as slos_model
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics.slos_serve_dp import algorithm2, pb_star, slos_dp
from slolab.models.slos_admission import (
    AdmissionB1,
    AdmissionProblem,
    batch_process,
    plan_violations,
)
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

# 0.01 s per iteration + 0.4 ms per token: time2bs(0.05) = (0.05 - 0.01) / 4e-4 = 100 tokens.
TIMING = LinearTiming(0.01, {"prefill_tokens": 4e-4, "decode_tokens": 4e-4}, name="round")


def competing_pair() -> AdmissionProblem:
    """A running decoder (TPOT 0.05 s) and new A (120 tokens, value 3), B (80 tokens, value 2),
    both due at 0.1 s with TPOT 0.05 s."""
    return AdmissionProblem(
        running=[True, False, False],
        remaining_prefill_tokens=[0, 120, 80],
        prefill_deadline_s=[math.nan, 0.1, 0.1],
        tpot_s=[0.05, 0.05, 0.05],
        kv_tokens=[100, 200, 200],
        value=[0.0, 3.0, 2.0],
        output_tokens=[5, 4, 4],
        kv_capacity_tokens=10_000,
        timing=TIMING,
    )


def random_problem(seed: int, tiers: tuple[float, ...] = (0.05, 0.1, 0.075)) -> AdmissionProblem:
    """A small random call: 1-7 new and 0-4 running requests."""
    return slos_model.random_problem(
        seed, timing=TIMING, new_range=(1, 8), running_range=(0, 5), tiers=tiers
    )


def test_algorithm2_hand_example():
    """Two requests of TPOT 0.05 s and one of 0.1 s over 0.2 s: decode 3, 2, 3, 2 tokens."""
    batches = algorithm2(0.2, [0.05, 0.05, 0.1], TIMING)
    # t0 = 0.05 s: 4 batches of 100 tokens; the 0.1 s request is served every other batch
    assert [b.decode for b in batches] == [(0, 1, 2), (0, 1), (0, 1, 2), (0, 1)]
    assert [b.prefill_budget for b in batches] == [97, 98, 97, 98]
    # PB* = 97 + 98 + 97 + 98 = 390
    assert pb_star(0.2, [2, 1], [0.05, 0.1], TIMING, 0.05) == 390


def test_algorithm2_reports_tokens_that_do_not_fit():
    """101 requests of TPOT 0.05 s need 101 tokens per batch of 100: PB* is infeasible."""
    batches = algorithm2(0.1, [0.05] * 101, TIMING)
    # 100 served per batch: 101 due in batch 0 leaves 1 late, 101 + 1 due in batch 1 leaves 2
    assert [len(b.decode) for b in batches] == [100, 100]
    assert [b.late for b in batches] == [1, 2]
    assert pb_star(0.1, [101], [0.05], TIMING, 0.05) is None


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    counts=st.lists(st.integers(0, 6), min_size=3, max_size=3),
    start=st.integers(0, 8),
    length=st.integers(0, 8),
)
def test_pb_star_matches_the_cadence_counts(counts, start, length):
    """PB* over batches [a, c) from Algorithm 2 equals (c - a) C - sum_l n_l (G_l(c) - G_l(a))."""
    tiers = [0.05, 0.075, 0.1]
    problem = AdmissionProblem(
        running=[True] * 3,
        remaining_prefill_tokens=[0] * 3,
        prefill_deadline_s=[math.nan] * 3,
        tpot_s=tiers,
        kv_tokens=[1] * 3,
        value=[0.0] * 3,
        output_tokens=[1] * 3,
        kv_capacity_tokens=3,
        timing=TIMING,
        horizon_s=0.05 * 16,
    )
    proc = batch_process(problem)
    a, c = start, start + length
    closed = (c - a) * proc.batch_tokens - sum(
        n * (proc.tier_slots[k, c] - proc.tier_slots[k, a]) for k, n in enumerate(counts)
    )
    literal_c = pb_star(c * 0.05, counts, tiers, TIMING, 0.05)
    literal_a = pb_star(a * 0.05, counts, tiers, TIMING, 0.05)
    assert literal_c - literal_a == closed


def test_dp_hand_solved_one_of_two_fits():
    """Budget by 0.1 s is 2 * 100 - 2 decode tokens = 198 < 120 + 80: admit A (value 3)."""
    decision = slos_dp(competing_pair())
    # A alone: 120 <= 198 -> value 3 beats B alone (value 2); both need 200
    assert decision.admitted == (1,)
    assert decision.rejected == (2,)
    assert decision.value == pytest.approx(3.0)
    assert decision.feasible
    assert plan_violations(competing_pair(), decision.plan) == []


def test_dp_hand_solved_long_batch_pair_matches_b1():
    """A (210 tokens by 0.1 s) does not fit 2 batches of 100; B (10 tokens by 0.3 s) does."""
    problem = AdmissionProblem(
        running=[False, False],
        remaining_prefill_tokens=[210, 10],
        prefill_deadline_s=[0.1, 0.3],
        tpot_s=[0.1, 0.05],
        kv_tokens=[100, 100],
        value=[2.0, 1.0],
        output_tokens=[5, 4],
        kv_capacity_tokens=10_000,
        timing=TIMING,
    )
    decision = slos_dp(problem)
    # 210 > 200 rejects A; B alone -> value 1 (B2 would take both, value 3)
    assert decision.admitted == (1,)
    assert decision.value == pytest.approx(1.0)


def test_dp_memory_bound():
    """With 300 tokens of memory and the decoder holding 100, only one 200-token request fits."""
    problem = AdmissionProblem(
        running=[True, False, False],
        remaining_prefill_tokens=[0, 50, 60],
        prefill_deadline_s=[math.nan, 0.5, 0.5],
        tpot_s=[0.05, 0.05, 0.05],
        kv_tokens=[100, 200, 200],
        value=[0.0, 3.0, 4.0],
        output_tokens=[5, 4, 4],
        kv_capacity_tokens=300,
        timing=TIMING,
    )
    decision = slos_dp(problem)
    # 100 + 200 = 300 <= 300 but 100 + 400 > 300: the value-4 request is admitted
    assert decision.admitted == (2,)
    assert decision.value == pytest.approx(4.0)


def test_dp_infeasible_running_admits_nothing():
    """A running prefill of 250 tokens due at 0.1 s cannot keep its SLO: infeasible, no plan."""
    problem = AdmissionProblem(
        running=[True, False],
        remaining_prefill_tokens=[250, 10],
        prefill_deadline_s=[0.1, 0.5],
        tpot_s=[0.05, 0.05],
        kv_tokens=[10, 10],
        value=[0.0, 1.0],
        output_tokens=[2, 2],
        kv_capacity_tokens=100,
        timing=TIMING,
    )
    decision = slos_dp(problem)
    # 250 > 2 * 100 tokens by 0.1 s
    assert not decision.feasible
    assert decision.admitted == ()
    assert decision.rejected == (1,)
    assert decision.plan is None


def test_dp_is_deterministic_and_counts_states():
    """Two runs give the same decision; states and runtime are reported."""
    problem = random_problem(11)
    first, second = slos_dp(problem, memory_unit=64), slos_dp(problem, memory_unit=64)
    assert (first.admitted, first.value, first.states_explored) == (
        second.admitted,
        second.value,
        second.states_explored,
    )
    assert first.states_explored >= 1
    assert first.runtime_s >= 0.0


def test_units_must_be_positive_integers():
    """A zero memory unit is rejected with the field name."""
    with pytest.raises(ValueError, match="memory_unit must be an integer >= 1"):
        slos_dp(competing_pair(), memory_unit=0)


def _b1_optimum(problem: AdmissionProblem) -> float | None:
    result = solve(AdmissionB1(problem), solver="highs", time_limit=60)
    if result.status == Status.INFEASIBLE:
        return None
    assert result.status == Status.OPTIMAL
    return result.objective


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_dp_equals_b1_with_lossless_units(seed):
    """Memory in units of 64 (every size a multiple) and budget in tokens: DP value == B1."""
    problem = random_problem(seed)
    decision = slos_dp(problem, memory_unit=64, budget_unit=1)
    optimum = _b1_optimum(problem)
    assert decision.feasible == (optimum is not None)
    if optimum is not None:
        assert decision.value == pytest.approx(optimum)
        assert plan_violations(problem, decision.plan) == []


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_dp_with_coarse_units_never_exceeds_b1(seed):
    """Memory rounded up to 100 tokens and budget down to 16: DP <= B1 and its plan is clean."""
    problem = random_problem(seed)
    decision = slos_dp(problem, memory_unit=100, budget_unit=16)
    optimum = _b1_optimum(problem)
    if decision.feasible:
        assert optimum is not None
        assert decision.value <= optimum + 1e-9
        assert plan_violations(problem, decision.plan) == []
