"""How the capacity probes of both planners draw their arrivals (the class's own pattern)."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.instances.records import Cluster, Instance, Workload
from slolab.problems.deployment_capacity import MAX_THINNED_REQUESTS, probe_arrivals
from slolab.timing.base import LinearTiming


def bursty() -> Instance:
    """Four requests: three together at 0 s, one at 1 s."""
    wl = Workload(
        {
            "arrival_s": [0.0, 0.0, 0.0, 1.0],
            "prompt_tokens": [10, 20, 30, 40],
            "output_tokens": [2, 2, 2, 2],
        }
    )
    return Instance("bursty", wl, Cluster(), LinearTiming(0.01, {}))


def test_one_server_of_two_gets_every_other_request():
    """At half the class's rate, a server sees every second request: one of a three-burst."""
    members = np.arange(4)
    found, position = probe_arrivals(bursty(), members, 8, 1.5, 0, "trace")
    # the stream repeats the four requests every 1 + 1/3 s (span 1 s, mean gap (3 / 1)^-1):
    # its rate is 3 req/s; at 1.5 req/s the share is 2, so requests 1, 3, 5, ... of a stream
    # of 16 are kept: copy j at 4j/3 contributes its second (t = 4j/3) and fourth (4j/3 + 1)
    expected = [0.0, 1.0, 4 / 3, 7 / 3, 8 / 3, 11 / 3, 4.0, 5.0]
    np.testing.assert_allclose(found.arrival_s, expected, rtol=1e-12)
    assert position.tolist() == [1, 3, 1, 3, 1, 3, 1, 3]
    # the kept requests keep their sizes: members 1 and 3 have 20 and 40 prompt tokens
    assert found.prompt_tokens.tolist() == [20, 40] * 4


def test_above_the_class_rate_a_burst_stays_a_burst():
    """At twice the class's rate the stream's time is halved; the three-burst is kept."""
    found, position = probe_arrivals(bursty(), np.arange(4), 8, 6.0, 0, "trace")
    # 3 req/s -> 6 req/s: every time halved, [0, 0, 0, 1, 4/3, 4/3, 4/3, 7/3] / 2
    expected = np.array([0.0, 0.0, 0.0, 1.0, 4 / 3, 4 / 3, 4 / 3, 7 / 3]) / 2
    np.testing.assert_allclose(found.arrival_s, expected, rtol=1e-12)
    assert position.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_poisson_arrivals_are_seeded():
    """Poisson arrivals at 2 req/s are the same for one seed and differ for another."""
    a, _ = probe_arrivals(bursty(), np.arange(4), 8, 2.0, 1, "poisson")
    b, _ = probe_arrivals(bursty(), np.arange(4), 8, 2.0, 1, "poisson")
    c, _ = probe_arrivals(bursty(), np.arange(4), 8, 2.0, 2, "poisson")
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_unknown_arrivals_are_refused():
    """An unknown arrival model names the known ones."""
    with pytest.raises(ValueError, match="arrivals must be one of trace, poisson"):
        probe_arrivals(bursty(), np.arange(4), 8, 2.0, 0, "gamma")


def test_far_below_the_class_rate_one_request_is_left():
    """A share beyond the most requests a stream is cut from leaves one request, not an empty
    probe; just within it, the thinned cut holds what it can."""
    rate = 3.0 / (2 * MAX_THINNED_REQUESTS)  # the stream's 3 req/s, a share of 400,000
    found, position = probe_arrivals(bursty(), np.arange(4), 8, rate, 0, "trace")
    assert len(found) == 1 and position.tolist() == [(MAX_THINNED_REQUESTS - 1) % 4]
    found, _ = probe_arrivals(bursty(), np.arange(4), 8, 3.0 / 50_000, 0, "trace")
    assert len(found) == MAX_THINNED_REQUESTS // 50_000
