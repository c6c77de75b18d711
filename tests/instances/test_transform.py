"""Workload transformations, checked by hand arithmetic."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.instances import (
    Workload,
    draw_arrivals,
    first_n,
    mean_rate,
    read_azure,
    retime,
    retime_poisson,
    sample,
    scale_rate,
    trace_path,
    window,
)


def small() -> Workload:
    """Five requests at 0, 1, 3, 6, 10 s with a string column riding along."""
    return Workload(
        {
            "arrival_s": [0.0, 1.0, 3.0, 6.0, 10.0],
            "prompt_tokens": [10, 20, 30, 40, 50],
            "output_tokens": [1, 2, 3, 4, 5],
            "task": np.array(["a", "b", "c", "d", "e"]),
        },
        source="small",
    )


def test_window_rezeroed_to_start_or_first():
    """[2, 7) keeps the requests at 3 and 6 s: 1 and 4 s from the start, 0 and 3 s from the first."""
    w = window(small(), 2.0, 7.0)
    assert w.arrival_s.tolist() == [1.0, 4.0]
    assert w.prompt_tokens.tolist() == [30, 40]
    assert w["task"].tolist() == ["c", "d"]
    assert window(small(), 2.0, 7.0, rezero="first").arrival_s.tolist() == [0.0, 3.0]
    assert w.source == "small | window [2.0, 7.0) s"


def test_window_bounds_are_half_open_and_checked():
    """[1, 6) holds 1 and 3 s but not 6 s; an empty window and start >= end raise."""
    assert window(small(), 1.0, 6.0).arrival_s.tolist() == [0.0, 2.0]
    with pytest.raises(ValueError, match=r"no request arrives in \[11.0, 12.0\) s"):
        window(small(), 11.0, 12.0)
    with pytest.raises(ValueError, match="finite start_s < end_s"):
        window(small(), 5.0, 5.0)


def test_first_n_keeps_times():
    """The first 3 requests keep their times 0, 1, 3 s; n beyond the length raises."""
    assert first_n(small(), 3).arrival_s.tolist() == [0.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="asked for the first 6 requests, it has 5"):
        first_n(small(), 6)


def test_mean_rate_and_scale_rate():
    """4 gaps over 10 s = 0.4 req/s; scaled to 2 req/s every gap shrinks by 0.4 / 2 = 0.2."""
    assert mean_rate(small()) == 0.4
    w = scale_rate(small(), 2.0)
    # 0, 1, 3, 6, 10 s x 0.2 = 0, 0.2, 0.6, 1.2, 2.0 s
    np.testing.assert_allclose(w.arrival_s, [0.0, 0.2, 0.6, 1.2, 2.0], rtol=0, atol=1e-15)
    assert mean_rate(w) == pytest.approx(2.0, rel=1e-15)


def test_scale_rate_keeps_the_first_arrival_and_burstiness():
    """A window starting at 1 s scaled 10x: first arrival stays, gap CV unchanged."""
    w = window(small(), 0.5, 11.0)
    # arrivals 0.5, 2.5, 5.5, 9.5 s; 3 gaps over 9 s = 1/3 req/s; to 10/3 req/s: gaps x 0.1
    scaled = scale_rate(w, 10.0 / 3.0)
    np.testing.assert_allclose(scaled.arrival_s, [0.5, 0.7, 1.0, 1.4], rtol=1e-14)
    gaps, new_gaps = np.diff(w.arrival_s), np.diff(scaled.arrival_s)
    assert new_gaps.std() / new_gaps.mean() == pytest.approx(gaps.std() / gaps.mean(), rel=1e-12)


def test_scale_rate_on_the_real_trace():
    """Azure conv 2023 at 5.53014 req/s compressed to 20 req/s spans 19,365 / 20 s."""
    w = read_azure(trace_path("azure_conv_2023"))
    scaled = scale_rate(w, 20.0)
    # 19,365 gaps at a mean of 1/20 s = 968.25 s
    assert scaled.arrival_s[-1] == pytest.approx(968.25, rel=1e-12)
    assert len(scaled) == 19_366


def test_mean_rate_needs_two_spread_requests():
    """One request, or all at the same time, has no mean rate."""
    one = first_n(small(), 1)
    with pytest.raises(ValueError, match="needs >= 2 requests"):
        mean_rate(one)
    with pytest.raises(ValueError, match="rate must be a finite number > 0"):
        scale_rate(small(), 0.0)


def test_retime_poisson_is_seeded_and_keeps_rows():
    """Same seed, same times; the first arrives at 0; rows keep their order and columns."""
    a = retime_poisson(small(), rate=5.0, seed=3)
    b = retime_poisson(small(), rate=5.0, seed=3)
    c = retime_poisson(small(), rate=5.0, seed=4)
    assert a.equals(b)
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    assert a.arrival_s[0] == 0.0
    assert a["task"].tolist() == ["a", "b", "c", "d", "e"]
    # the gaps are numpy's exponential draws with scale 1/5 from default_rng(3)
    expected = np.random.default_rng(3).exponential(0.2, size=4)
    np.testing.assert_allclose(np.diff(a.arrival_s), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="needs an integer seed"):
        retime_poisson(small(), rate=5.0, seed=None)  # type: ignore[arg-type]


def test_retime_uniform_and_gamma():
    """Uniform at 4 req/s: 0, 0.25, ..., 1 s; gamma needs cv."""
    assert retime(small(), "uniform", 4.0).arrival_s.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError, match="needs cv > 0"):
        retime(small(), "gamma", 4.0, seed=0)
    with pytest.raises(ValueError, match="unknown arrival process 'bursty'"):
        draw_arrivals(3, "bursty", 1.0, seed=0)


def test_sample_is_seeded_sorted_and_keeps_times():
    """k = 3 of 5 without replacement: rows from numpy's choice, in arrival order, times kept."""
    s = sample(small(), 3, seed=11)
    rows = np.sort(np.random.default_rng(11).choice(5, size=3, replace=False))
    assert s.arrival_s.tolist() == [[0.0, 1.0, 3.0, 6.0, 10.0][i] for i in rows]
    assert s.equals(sample(small(), 3, seed=11))
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 5\]"):
        sample(small(), 6, seed=0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    gaps=st.lists(st.floats(0.001, 100.0), min_size=2, max_size=30),
    rate=st.floats(0.01, 1000.0),
)
def test_scale_rate_hits_any_target(gaps, rate):
    """For any positive gaps, the scaled workload's mean rate is the target (to rounding)."""
    arrivals = np.concatenate([[0.0], np.cumsum(gaps)])
    n = len(arrivals)
    w = Workload({"arrival_s": arrivals, "prompt_tokens": [1] * n, "output_tokens": [1] * n})
    assert math.isclose(mean_rate(scale_rate(w, rate)), rate, rel_tol=1e-9)
