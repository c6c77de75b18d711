"""Shipped instances are reproducible from their specs and consistent with the manifest."""

import pytest
from slolab.harness.shipped import SPECS, spec
from slolab.instances import load_manifest, load_shipped

SHIPPED = [e["name"] for e in load_manifest()]


def test_every_spec_is_shipped():
    """Each instance spec has a manifest entry and a file (the manifest is not empty)."""
    assert sorted(SHIPPED) == sorted(s.name for s in SPECS)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_instance_rebuilds_exactly(name):
    """Rebuilding an instance from its spec gives the shipped file's contents exactly."""
    shipped = load_shipped(name)
    rebuilt = spec(name).build()
    assert shipped.workload.equals(rebuilt.workload)
    assert shipped.cluster == rebuilt.cluster
    assert shipped.timing == rebuilt.timing
    assert dict(shipped.settings) == dict(rebuilt.settings)
    assert shipped.problem == rebuilt.problem


@pytest.mark.parametrize("entry", load_manifest(), ids=lambda e: e["name"])
def test_known_optima_are_proved_or_bracketed(entry):
    """An exact-problem entry records an OPTIMAL optimum, or an incumbent with a bound above it."""
    known = entry["known"]
    if entry["problem"] == "serving":
        assert "note" in known
        return
    assert known["status"] in ("OPTIMAL", "TIME_LIMIT", "FEASIBLE")
    if known["status"] == "OPTIMAL":
        assert known["optimum"] == known["incumbent"]
        assert known["bound"] >= known["optimum"] * (1 - 1e-6)
    else:
        assert "optimum" not in known
        assert known["bound"] >= known["incumbent"]
