"""The identity rule (tests/fingerprint.py): a fingerprint compares what a run decided, so it
passes when every recorded float is perturbed in its last bits (as another processor's vector
width, BLAS kernel or LP pivoting would) and fails when one decision changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from fingerprint import REL, Fingerprint, fingerprint

#: The Outcome arrays the engine identity battery reads (tests/sim/test_engine_split_identity.py)
FIELDS = (
    "token_times",
    "server",
    "rejected",
    "first_scheduled_s",
    "prefill_done_s",
    "preemptions",
    "busy_s",
    "it_server",
    "it_start",
    "it_end",
    "it_features",
    "entry_request",
    "entry_tokens",
)


def last_bits(value):
    """``value`` with every float re-read through 15 significant digits and moved one ulp up."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        reread = np.array([float(f"{x:.15g}") for x in value.ravel()]).reshape(value.shape)
        return np.nextafter(reread, np.inf)
    if isinstance(value, float):
        return float(np.nextafter(float(f"{value:.15g}"), np.inf))
    if isinstance(value, tuple):
        return tuple(last_bits(v) for v in value)
    return value


@pytest.fixture(scope="module")
def outcome():
    """Sarathi on 300 Azure conversation requests at 15 req/s on two servers."""
    from slolab.harness.serving import ServingSetup

    setup = ServingSetup("azure_conv_2023", seed=3, servers=2, limit=300, policy="sarathi")
    instance, sched = setup.prepare(setup.instance(15.0))
    return sched.run(instance, seed=3, record_iterations=True)


def parts(outcome) -> tuple:
    return tuple(getattr(outcome, name) for name in FIELDS) + (float(outcome.end_s),)


def test_last_bit_perturbation_keeps_the_fingerprint(outcome):
    """Every float of a 300-request run one ulp off after a 15-digit round trip: the same
    decisions and figures within REL, although the bytes differ."""
    recorded = fingerprint(*parts(outcome)).record()
    moved = last_bits(parts(outcome))
    assert moved[0].tobytes() != outcome.token_times.tobytes()
    found = fingerprint(*moved)
    assert found.decisions == recorded[0]
    assert found.differences(recorded) == []


def test_a_changed_server_changes_the_decisions(outcome):
    """Request 7 placed on the other server: the decisions differ, the figures do not."""
    recorded = fingerprint(*parts(outcome)).record()
    server = outcome.server.copy()
    server[7] = 1 - server[7]
    changed = dataclasses.replace(outcome, server=server)
    found = fingerprint(*parts(changed))
    assert found.differences(recorded) == [f"decisions {found.decisions} != {recorded[0]}"]


def test_a_token_moved_by_a_millisecond_changes_the_figures(outcome):
    """One token emitted 1 ms later (less than one iteration: a decision's consequence on a
    time): the sum of the token times moves by 1e-3 s, above REL (1e-10) of their magnitude
    (1.18e6 s summed over the run's tokens, so 1.2e-4 s)."""
    recorded = fingerprint(*parts(outcome)).record()
    times = outcome.token_times.copy()
    first = int(np.flatnonzero(np.isfinite(times))[0])
    times[first] += 1e-3
    found = fingerprint(*parts(dataclasses.replace(outcome, token_times=times)))
    # token_times is float part 0; its magnitude times REL is the tolerance
    assert recorded[1][0][2] * REL < 1e-3
    assert found.decisions == recorded[0]
    found_parts = [d.split(":")[1].split()[0] for d in found.differences(recorded)]
    assert found_parts == ["sum", "weighted", "magnitude"]


def test_a_token_never_emitted_changes_the_decisions(outcome):
    """A token's time set to inf (never emitted): where the floats are infinite is a decision."""
    recorded = fingerprint(*parts(outcome)).record()
    times = outcome.token_times.copy()
    times[int(np.flatnonzero(np.isfinite(times))[0])] = np.inf
    found = fingerprint(*parts(dataclasses.replace(outcome, token_times=times)))
    assert found.decisions != recorded[0]


def test_two_floats_trading_places_move_the_weighted_sum():
    """(1.0, 2.0) against (2.0, 1.0): the same sum 3 and magnitude 3; weights 1 and 1 + 1/101
    give 1 + 2 * (102/101) against 2 + 102/101, differing by 1/101."""
    a = fingerprint(np.array([1.0, 2.0]))
    b = fingerprint(np.array([2.0, 1.0]))
    assert a.decisions == b.decisions
    assert a.figures[0][0] == b.figures[0][0] == 3.0
    assert abs(a.figures[0][1] - b.figures[0][1]) == pytest.approx(1 / 101)
    assert a.differences(b.record()) != []


def test_record_round_trips_and_unknown_types_are_refused():
    """A record reads back as a match; an object without a rule is refused by name."""
    found = fingerprint({"b": [1, 2.5], "a": ("x", None, True)}, np.arange(3))
    assert isinstance(found, Fingerprint) and found.matches(found.record())
    # one float scalar, 2.5: sum 2.5, weight 1 at position 0, magnitude 2.5
    assert found.record()[1] == [2.5]
    with pytest.raises(TypeError, match="no rule for object"):
        fingerprint(object())
