"""Methods contributed by the paper problems (heuristics that output schedules)."""

from __future__ import annotations

from slolab.harness.methods import Method


def methods() -> list[Method]:
    """Every paper-problem heuristic, registered under ``problem/name``."""
    return []
