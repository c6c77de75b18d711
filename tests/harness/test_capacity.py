"""Tests for the capacity search (bracketing + bisection over an attainment probe)."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.solvers.capacity import CapacityResult, capacity, smallest_count


def step_attainment(threshold: float):
    """Attainment 1.0 up to ``threshold`` (inclusive), 0.5 above it."""

    def probe(rate: float) -> float:
        return 1.0 if rate <= threshold else 0.5

    return probe


def test_step_threshold_probe_sequence_by_hand():
    """A step at 7.3 from rate 1 gives the hand-traced probes and capacity 7.25."""
    result = capacity(step_attainment(7.3), target=0.9, start_rate=1.0, progress=False)
    # Doubling: 1, 2, 4 meet, 8 misses -> bracket (4, 8), relative width 4/8 = 0.5.
    # Bisection: 6 meets (6, 8) 0.25; 7 meets (7, 8) 0.125; 7.5 misses (7, 7.5) 0.0667;
    # 7.25 meets (7.25, 7.5) 0.0333; 7.375 misses (7.25, 7.375) 0.125 / 7.375 = 0.01695 <= 0.02.
    rates = [rate for rate, _ in result.probes]
    assert rates == [1.0, 2.0, 4.0, 8.0, 6.0, 7.0, 7.5, 7.25, 7.375]
    assert result.capacity == 7.25
    assert result.bracket == (7.25, 7.375)
    assert result.n_probes == 9
    # |7.3 - 7.25| / 7.3 = 0.00685 <= rel_tol 0.02.
    assert abs(7.3 - result.capacity) / 7.3 <= 0.02
    assert result.monotone is True
    assert result.converged is True
    assert (result.capped_high, result.capped_low) == (False, False)


def test_logistic_attainment_within_tolerance_and_probe_bound():
    """A smooth logistic crossing 0.9 at 12 - 1.5 ln 9 = 8.7042 is found within 2%."""

    def probe(rate: float) -> float:
        return 1.0 / (1.0 + math.exp((rate - 12.0) / 1.5))

    result = capacity(probe, target=0.9, start_rate=1.0, rel_tol=0.02, progress=False)
    # 1 / (1 + e^x) = 0.9  <=>  e^x = 1/9  <=>  x = -ln 9 = -2.19722; rate = 12 - 1.5 * 2.19722.
    threshold = 12.0 - 1.5 * math.log(9.0)
    assert threshold == pytest.approx(8.70417, abs=1e-5)
    assert result.capacity <= threshold
    assert (threshold - result.capacity) / threshold <= 0.02
    # Bound: bracketing floor(log2(8.7042 / 1)) + 2 = 3 + 2 = 5 probes (1, 2, 4, 8 meet,
    # 16 misses); bisection at most ceil(log2(1 / 0.02)) = ceil(5.64) = 6 -> 11 in all.
    assert result.probes[:5] == tuple((rate, probe(rate)) for rate in (1.0, 2.0, 4.0, 8.0, 16.0))
    assert result.n_probes <= 11
    assert result.monotone is True


def test_downward_bracketing_halves_until_target_met():
    """Starting above a step at 0.3 halves 1 -> 0.5 -> 0.25, then bisects (0.25, 0.5)."""
    result = capacity(step_attainment(0.3), start_rate=1.0, rel_tol=0.05, progress=False)
    # 1 misses, 0.5 misses, 0.25 meets -> bracket (0.25, 0.5), width 0.5.
    # 0.375 misses (0.25, 0.375) 0.333; 0.3125 misses (0.25, 0.3125) 0.2;
    # 0.28125 meets (0.28125, 0.3125) 0.1; 0.296875 meets (0.296875, 0.3125) 0.05 <= 0.05.
    rates = [rate for rate, _ in result.probes]
    assert rates == [1.0, 0.5, 0.25, 0.375, 0.3125, 0.28125, 0.296875]
    assert result.capacity == 0.296875
    assert result.bracket == (0.296875, 0.3125)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    threshold=st.floats(min_value=0.01, max_value=900.0),
    start_rate=st.sampled_from([0.1, 1.0, 3.0, 50.0]),
    rel_tol=st.sampled_from([0.01, 0.02, 0.05, 0.1]),
)
def test_step_threshold_property(threshold, start_rate, rel_tol):
    """For any step threshold the capacity is within rel_tol below it, in the probe bound."""
    result = capacity(
        step_attainment(threshold),
        start_rate=start_rate,
        min_rate=1e-3,
        max_rate=1e4,
        rel_tol=rel_tol,
        progress=False,
    )
    # lo <= T < hi and (hi - lo) / hi <= rel_tol imply (T - lo) / T < (hi - lo) / hi.
    assert result.capacity <= threshold < result.bracket[1]
    assert (threshold - result.capacity) / threshold <= rel_tol
    if threshold >= start_rate:
        bracketing = math.floor(math.log2(threshold / start_rate)) + 2
    else:
        bracketing = math.ceil(math.log2(start_rate / threshold)) + 1
    assert result.n_probes <= bracketing + math.ceil(math.log2(1.0 / rel_tol))
    assert result.stop_reason == "tolerance"


def test_non_monotone_attainment_flags_and_still_meets_target():
    """Attainment rising from 0.92 (rate 1) to 0.97 (rate 2) sets monotone=False."""

    def probe(rate: float) -> float:
        if rate <= 1.5:
            return 0.92
        return 0.97 if rate <= 3.0 else 0.0

    result = capacity(probe, target=0.9, start_rate=1.0, progress=False)
    # 1 -> 0.92, 2 -> 0.97 (higher rate, higher attainment: contradiction), 4 -> 0 misses;
    # bisection 3 meets, then 3.5, 3.25, 3.125, 3.0625, 3.03125 miss:
    # (3.03125 - 3) / 3.03125 = 0.0103 <= 0.02.
    assert result.monotone is False
    assert result.capacity == 3.0
    assert probe(result.capacity) == 0.97
    assert result.n_probes == 9
    tolerant = capacity(probe, target=0.9, start_rate=1.0, monotone_tol=0.1, progress=False)
    # The rise 0.97 - 0.92 = 0.05 is within monotone_tol 0.1.
    assert tolerant.monotone is True


def test_target_met_at_maximum_is_capped_high():
    """Attainment 1 everywhere stops at max_rate 16 after probes 1, 2, 4, 8, 16."""
    result = capacity(lambda rate: 1.0, start_rate=1.0, max_rate=16.0, progress=False)
    assert [rate for rate, _ in result.probes] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert result.capacity == 16.0
    assert result.capped_high is True
    assert result.capped_low is False
    assert result.bracket == (16.0, math.inf)
    assert result.stop_reason == "max_rate"
    assert result.converged is False


def test_target_missed_at_minimum_is_capped_low():
    """Attainment 0 everywhere stops at min_rate 0.125 with capacity 0.0."""
    result = capacity(lambda rate: 0.0, start_rate=1.0, min_rate=0.125, progress=False)
    # 1 -> 0.5 -> 0.25 -> 0.125, all missing: 4 probes.
    assert [rate for rate, _ in result.probes] == [1.0, 0.5, 0.25, 0.125]
    assert result.capacity == 0.0
    assert result.capped_low is True
    assert result.capped_high is False
    assert result.bracket == (0.0, 0.125)


def test_probe_budget_exhausted_reports_max_probes():
    """With max_probes=6 the 7.3 step stops after 1, 2, 4, 8, 6, 7 at bracket (7, 8)."""
    result = capacity(step_attainment(7.3), max_probes=6, progress=False)
    assert [rate for rate, _ in result.probes] == [1.0, 2.0, 4.0, 8.0, 6.0, 7.0]
    assert result.capacity == 7.0
    assert result.bracket == (7.0, 8.0)
    assert result.stop_reason == "max_probes"
    assert result.converged is False


@pytest.mark.parametrize("target", [0.0, -0.1, 1.5, math.nan])
def test_bad_target_raises(target):
    """A target outside (0, 1] is rejected with a message naming it."""
    with pytest.raises(ValueError, match="target must be an attainment in"):
        capacity(lambda rate: 1.0, target=target, progress=False)


def test_target_one_is_allowed():
    """target=1.0 is valid: a step of 1.0 up to 2.5 gives capacity within 2% of 2.5."""
    result = capacity(step_attainment(2.5), target=1.0, progress=False)
    # 1, 2 meet, 4 misses; 3 misses, 2.5 meets, 2.75, 2.625, 2.5625 miss: 0.0625/2.5625 = 0.0244;
    # 2.53125 misses: 0.03125 / 2.53125 = 0.0123 <= 0.02.
    assert result.capacity == 2.5
    assert result.bracket == (2.5, 2.53125)


def test_probe_out_of_range_raises():
    """An attainment of 1.2 is not a fraction: the error names the rate and value."""
    with pytest.raises(ValueError, match=r"probe\(1.0\) returned attainment 1.2"):
        capacity(lambda rate: 1.2, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_rate": 0.0}, "start_rate must be"),
        ({"min_rate": 2.0}, "min_rate must be"),
        ({"max_rate": 0.5}, "max_rate must be"),
        ({"rel_tol": 0.0}, "rel_tol must be"),
        ({"max_probes": 0}, "max_probes must be"),
    ],
)
def test_bad_search_limits_raise(kwargs, message):
    """Invalid search limits raise with the parameter named."""
    with pytest.raises(ValueError, match=message):
        capacity(lambda rate: 1.0, progress=False, **kwargs)


def test_to_dict_is_strict_json_and_round_trips():
    """to_dict survives strict JSON (inf bracket end as None) and from_dict inverts it."""
    result = capacity(lambda rate: 1.0, max_rate=4.0, progress=False)
    text = json.dumps(result.to_dict(), allow_nan=False)
    data = json.loads(text)
    # Probes 1, 2, 4 all meet the target; no miss, so the bracket's upper end is unknown.
    assert data["bracket"] == [4.0, None]
    assert data["probes"] == [[1.0, 1.0], [2.0, 1.0], [4.0, 1.0]]
    assert CapacityResult.from_dict(data) == result


def test_to_record_is_flat_scalars():
    """to_record holds only scalars, with probes as JSON text."""
    result = capacity(step_attainment(7.3), progress=False)
    record = result.to_record()
    assert all(isinstance(value, bool | int | float | str) for value in record.values())
    assert record["capacity"] == 7.25
    assert record["bracket_hi"] == 7.375
    # 9 probes, the first is (1.0, 1.0).
    assert record["n_probes"] == 9
    assert json.loads(record["probes"])[0] == [1.0, 1.0]


def test_result_validation_names_field():
    """A CapacityResult whose n_probes disagrees with its probes is rejected."""
    with pytest.raises(ValueError, match=r"n_probes must equal len\(probes\) = 1, got 2"):
        CapacityResult(
            capacity=1.0,
            target=0.9,
            bracket=(1.0, 2.0),
            probes=((1.0, 1.0),),
            n_probes=2,
            monotone=True,
            capped_high=False,
            capped_low=False,
            rel_tol=0.02,
            stop_reason="tolerance",
        )


def step_in_count(threshold: int):
    """Attainment 0.95 from ``threshold`` servers on, 0.5 below."""

    def probe(count: int) -> float:
        return 0.95 if count >= threshold else 0.5

    return probe


def test_smallest_count_probe_sequence_by_hand():
    """A step at 11 servers in 1..32: doubling 1, 2, 4, 8, 16, then bisection 12, 10, 11."""
    result = smallest_count(step_in_count(11), target=0.9, lo=1, hi=32)
    # 1, 2, 4, 8 miss, 16 meets -> bracket (8, 16); 12 meets (8, 12); 10 misses (10, 12);
    # 11 meets (10, 11): 11 = 10 + 1, stop.
    assert [count for count, _ in result.probes] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert result.count == 11
    assert result.stop_reason == "met" and result.monotone
    # The curve is the probes by count.
    assert [count for count, _ in result.curve] == [1, 2, 4, 8, 10, 11, 12, 16]


def test_smallest_count_edges():
    """Met at lo takes one probe; missed at hi gives None after probing hi."""
    at_lo = smallest_count(step_in_count(3), lo=3, hi=40)
    assert at_lo.count == 3 and at_lo.probes == ((3, 0.95),)
    missed = smallest_count(step_in_count(50), lo=3, hi=40)
    # 3, 6, 12, 24, then 40 (48 capped at hi): all miss.
    assert [count for count, _ in missed.probes] == [3, 6, 12, 24, 40]
    assert missed.count is None and missed.stop_reason == "missed_at_max"
    with pytest.raises(ValueError, match="need 1 <= lo <= hi"):
        smallest_count(step_in_count(3), lo=5, hi=4)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    threshold=st.integers(min_value=1, max_value=70),
    lo=st.integers(min_value=1, max_value=8),
    span=st.integers(min_value=0, max_value=60),
)
def test_smallest_count_finds_any_step(threshold, lo, span):
    """On a step curve the result is the threshold (clipped to lo) or None beyond hi."""
    hi = lo + span
    result = smallest_count(step_in_count(threshold), lo=lo, hi=hi)
    expected = max(threshold, lo) if threshold <= hi else None
    assert result.count == expected
    # Bracketing <= ceil(log2(hi / lo)) + 1 probes, bisection <= ceil(log2(hi - lo + 1)).
    assert len(result.probes) <= math.ceil(math.log2(hi / lo)) + 1 + math.ceil(
        math.log2(hi - lo + 1)
    )


def test_smallest_count_non_monotone_flag_and_scan():
    """A dip at 6 after meeting at 5: bisection lands on 7, scan finds 5; a seen dip is flagged."""
    curve = {5: 0.92, 6: 0.85}

    def probe(count: int) -> float:
        return curve.get(count, 0.95 if count >= 7 else 0.5)

    bisected = smallest_count(probe, lo=1, hi=16)
    # 1, 2, 4 miss, 8 meets; 6 misses (dip), 7 meets: 7 = 6 + 1. 5 (which meets) is never probed.
    assert [count for count, _ in bisected.probes] == [1, 2, 4, 8, 6, 7]
    assert bisected.count == 7 and bisected.monotone is True
    scanned = smallest_count(probe, lo=1, hi=16, scan=True)
    assert [count for count, _ in scanned.probes] == [1, 2, 3, 4, 5]
    assert scanned.count == 5 and scanned.scan
    # Probing 5 (0.92) and then 6 (0.85) shows attainment falling with one more server.
    both = smallest_count(lambda count: curve[count], lo=5, hi=6, target=0.99, scan=True)
    assert both.count is None and both.monotone is False
