"""`capacity --workers N`: probes run ahead in parallel (the doubling ladder, then the next
bisection levels), and the search's answer is the one-at-a-time search's."""

import math
from concurrent.futures import ThreadPoolExecutor

import pytest
from slolab.harness.serving import ServingSetup, capacity_search
from slolab.solvers.capacity import capacity


def step(threshold: float):
    """Attainment 0.95 up to ``threshold``, 0.5 above it."""
    return lambda rate: 0.95 if rate <= threshold else 0.5


def bumpy(rate: float) -> float:
    """Non-monotone: meets below 3, misses in (3, 5], meets again in (5, 6], misses above."""
    return 0.95 if rate <= 3 or 5 < rate <= 6 else 0.5


CASES = [step(7.3), step(0.3), step(1e-5), step(5000.0), bumpy]


@pytest.mark.parametrize("workers", [2, 3, 7])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_parallel_search_gives_the_sequential_answer(workers, case):
    """Capacity, bracket, stop reason and monotone flag equal the sequential search's."""
    probe = CASES[case]
    one = capacity(probe, progress=False, floor_first=True, max_probes=200)
    with ThreadPoolExecutor(workers) as pool:
        many = capacity(
            probe, progress=False, floor_first=True, max_probes=200, workers=workers, executor=pool
        )
    assert (many.capacity, many.bracket, many.stop_reason) == (
        one.capacity,
        one.bracket,
        one.stop_reason,
    )
    # every sequential probe was made by the parallel search too, with the same verdict
    assert set(one.probes) <= set(many.probes)


def test_three_workers_probe_the_next_two_bisection_levels_at_once():
    """Bracket (8, 16) after the ladder: one round probes 12, then 10 and 14 (breadth first)."""
    with ThreadPoolExecutor(3) as pool:
        found = capacity(step(11.0), progress=False, workers=3, executor=pool, rel_tol=0.2)
    rates = [rate for rate, _ in found.probes]
    # ladder from 1 in threes: (2, 4, 8), then (16, 32, 64): 16 misses -> bracket (8, 16)
    assert rates[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    # round: mid 12, then 10 and 14; the walk: 12 misses (8, 12), 10 meets (10, 12), width
    # 2 / 12 = 0.167 <= 0.2: done
    assert rates[7:] == [12.0, 10.0, 14.0]
    assert found.capacity == 10.0 and found.bracket == (10.0, 12.0)


def test_bad_workers_raise():
    """A worker count must be a positive integer."""
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        capacity(step(1.0), progress=False, workers=0)


def test_capacity_search_with_two_processes_matches_one():
    """Two worker processes on a small Sarathi set-up: the same capacity and bracket."""
    setup = ServingSetup("azure_conv_2023", policy="sarathi", servers=2, limit=80)
    one, _ = capacity_search(setup, rel_tol=0.1)
    two, _ = capacity_search(setup, rel_tol=0.1, workers=2)
    assert two.capacity == one.capacity and two.bracket == one.bracket
    assert not math.isinf(one.bracket[1])
