"""The results guard's tolerance (tests/results/conftest.py): a figure one unit off in its
stored last digit (another processor's rounding) passes, a moved figure, count or verdict
does not."""

from __future__ import annotations

from fingerprint import within_rounding


def test_a_figure_rounded_the_other_way_is_unchanged():
    """0.535865637 (9 digits) against 0.535865638 (the true 0.5358656375 rounded up on another
    processor): 1e-9 apart, within one unit; a ratio 0.533009 against 0.533010: 1e-6 apart."""
    assert within_rounding(0.535865638, 0.535865637)
    assert within_rounding(0.533010, 0.533009)
    # a cost of 3306.14 to 9 digits is 3306.14000: one unit is 1e-5, within 1.01e-8 * 3306.14
    assert within_rounding(3306.14001, 3306.14)


def test_a_moved_figure_count_or_verdict_is_a_change():
    """Two units in the 6th decimal, a count, a status and a verdict are not tolerated."""
    assert not within_rounding(0.533011, 0.533009)
    assert not within_rounding(3306.2, 3306.14)
    assert not within_rounding(7, 8)
    assert not within_rounding("OPTIMAL", "TIME_LIMIT")
    assert not within_rounding(True, False)
