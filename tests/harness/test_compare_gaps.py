"""Gap intervals of compare rows (harness.compare.with_gaps)."""

import math

import pandas as pd
from slolab.harness.compare import with_gaps


def _frame(objective: float) -> pd.DataFrame:
    """A heuristic row and an exact row with optimum in [0.4, 0.5] (incumbent 0.4, bound 0.5)."""
    return pd.DataFrame(
        {
            "method": ["heuristic", "lns"],
            "kind": ["heuristic", "exact"],
            "status": ["", "TIME_LIMIT"],
            "objective": [objective, 0.4],
            "bound": [math.nan, 0.5],
            "sense": ["max", "max"],
        }
    )


def test_negative_objective_gap_interval_had_lo_above_hi():
    """A negative objective (attainment minus cost) keeps gap_lo <= gap_hi."""
    row = with_gaps(_frame(-0.2)).iloc[0]
    # 1 - (-0.2) / 0.4 = 1.5 and 1 - (-0.2) / 0.5 = 1.4: the interval is [1.4, 1.5]
    assert math.isclose(row["gap_lo"], 1.4)
    assert math.isclose(row["gap_hi"], 1.5)


def test_positive_objective_gap_interval_unchanged():
    """A positive objective: gap in [1 - v / lo, 1 - v / hi]."""
    row = with_gaps(_frame(0.3)).iloc[0]
    # 1 - 0.3 / 0.4 = 0.25 and 1 - 0.3 / 0.5 = 0.4
    assert math.isclose(row["gap_lo"], 0.25)
    assert math.isclose(row["gap_hi"], 0.4)
