"""lp_round: how one LP round of a cut or column loop ends (time, interrupt, a status)."""

from __future__ import annotations

import time

import highspy
import pytest
from slolab.solvers.highs import lp_round


class FakeHighs:
    """What lp_round and run_highs_for call on a ``highspy.Highs``: its run takes ``run_s``
    and ends with ``status``; a cancel ends it at once."""

    def __init__(self, run_s: float, status) -> None:
        self.run_s, self.status, self.cancelled = run_s, status, False

    def setOptionValue(self, name, value) -> None:
        pass

    def getRunTime(self) -> float:
        return 0.0

    def run(self) -> None:
        end = time.perf_counter() + self.run_s
        while time.perf_counter() < end and not self.cancelled:
            time.sleep(0.001)

    def cancelSolve(self) -> None:
        self.cancelled = True

    def getModelStatus(self):
        return self.status

    def modelStatusToString(self, code) -> str:
        return str(code)


def test_a_round_the_timer_stopped_before_any_status_is_a_time_limit():
    """HiGHS stopped by the timer before it set a status (seen under load on a 3 s compare):
    the round ended at its time, as at a time limit, not with an error."""
    fake = FakeHighs(run_s=10.0, status=highspy.HighsModelStatus.kNotset)
    assert lp_round(fake, 0.05, "test LP") is False
    assert fake.cancelled


def test_no_status_within_the_time_is_an_error():
    """Without the timer (the run returned early), no status is a failure, named."""
    fake = FakeHighs(run_s=0.0, status=highspy.HighsModelStatus.kNotset)
    with pytest.raises(RuntimeError, match="test LP: HiGHS ended with"):
        lp_round(fake, 5.0, "test LP")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (highspy.HighsModelStatus.kOptimal, True),
        (highspy.HighsModelStatus.kTimeLimit, False),
        (highspy.HighsModelStatus.kInterrupt, False),
    ],
)
def test_statuses(status, expected):
    assert lp_round(FakeHighs(run_s=0.0, status=status), 5.0, "test LP") is expected
    with pytest.raises(RuntimeError, match="Infeasible"):
        lp_round(FakeHighs(0.0, highspy.HighsModelStatus.kInfeasible), 5.0, "test LP")
