"""The results guard: ``guard(figures)`` checks a paper's flattened figures against the stored
ones, as pytest-regressions' ``data_regression`` does, with one tolerance written here.

The figures are stored rounded: solver objectives and bounds to 9 significant digits, ratios to
6 decimals (``slolab.benchmarks.results``). A figure computed on another processor can differ in
its last bits and then round one unit the other way, although no decision moved (an LP's
summation order, a BLAS kernel: docs/architecture.md, "Identity checks"). So a number within one
unit of its stored last digit (``fingerprint.within_rounding``) counts as unchanged; anything else,
every string, count and verdict, must be equal, and ``--force-regen`` rewrites the stored file
on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fingerprint import within_rounding


@pytest.fixture
def guard(data_regression, request):
    """Check a dict of figures against the stored file, tolerating last-digit rounding."""

    def check(figures: dict) -> None:
        path = Path(request.node.path).with_suffix("") / f"{request.node.name}.yml"
        if path.exists() and not request.config.getoption("force_regen"):
            stored = yaml.safe_load(path.read_text()) or {}
            figures = {
                k: stored[k] if k in stored and within_rounding(v, stored[k]) else v
                for k, v in figures.items()
            }
        data_regression.check(figures)

    return check
