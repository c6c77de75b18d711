"""The time limit bounds the whole solve, building the formulation included."""

from __future__ import annotations

import json
import sys
import time

import pytest
from slolab.harness.cli import main
from slolab.instances import save_instance
from slolab.problems import get_problem
from slolab.solvers import Status, build_model, solve
from slolab.solvers.backend import BuildTimeLimitError, time_limited_build


def test_time_limit_on_a_100000_request_dispatch_scale_window_ran_past_60_s(tmp_path, capsys):
    """`slolab solve --time-limit 1` on 20,000 requests ends after about 1 s: TIME_LIMIT in the build."""
    inst = get_problem("dispatch-scale").build(n=20_000, seed=0)
    path = save_instance(inst, tmp_path / "ds.json")
    start = time.perf_counter()
    code = main(["solve", str(path), "--time-limit", "1", "--json"])
    took = time.perf_counter() - start
    rec = json.loads(capsys.readouterr().out)
    # 2 workers x 60,000 iterations x 20,000 requests: ~2.4e9 binaries per family, never built;
    # the 1 s limit stops the build, loading the file and the data take well under a second
    assert (code, rec["status"], rec["objective"]) == (0, "TIME_LIMIT", None)
    assert "while the model was built" in rec["note"]
    assert took < 6.0


def test_a_small_model_still_solves_to_optimality_under_the_build_timer():
    """A 2-request dispatch-scale window builds in well under its limit and is proved optimal."""
    inst = get_problem("dispatch-scale").build(n=2, seed=0)
    result = solve(build_model("dispatch-scale", inst), solver="highs", time_limit=30)
    assert result.status == Status.OPTIMAL
    assert "stopped_in" not in result.details
    assert 0.0 <= result.details["build_s"] < 30.0


def test_compare_time_limit_on_a_large_window_ran_past_60_s(tmp_path, capsys):
    """compare --methods highs --time-limit 1 on 20,000 requests gives a TIME_LIMIT row, no objective."""
    inst = get_problem("dispatch-scale").build(n=20_000, seed=0)
    path = save_instance(inst, tmp_path / "ds.json")
    start = time.perf_counter()
    code = main(["compare", str(path), "--methods", "highs", "--time-limit", "1", "--json"])
    took = time.perf_counter() - start
    (row,) = json.loads(capsys.readouterr().out)
    # the build is stopped at 1 s: no incumbent to replay, so no objective and no bound
    assert (code, row["status"], row["objective"], row["bound"]) == (0, "TIME_LIMIT", None, None)
    assert took < 6.0


class _RaisesWhenDropped:
    """Raises ``ValueError`` from ``__del__``: Python hands it to ``sys.unraisablehook``."""

    def __del__(self):
        raise ValueError("raised in __del__")


class _WaitsForTheTimerWhenDropped:
    """Spins in ``__del__`` until the build timer fires there."""

    def __del__(self):
        while True:
            pass


def test_the_timer_holds_while_another_unraisable_error_is_handed_on(monkeypatch):
    """A hook handling another object's ``__del__`` error (pytest's formats a traceback) is not
    interrupted by the timer's repeat firings; the build then stops at the next firing."""
    seen = []

    def hook(args):
        time.sleep(0.25)  # the timer comes due and fires repeatedly meanwhile
        seen.append(type(args.exc_value).__name__)

    monkeypatch.setattr(sys, "unraisablehook", hook)
    with pytest.raises(BuildTimeLimitError), time_limited_build(0.05):
        _RaisesWhenDropped()
        while True:
            pass
    assert seen == ["ValueError"]
    assert sys.unraisablehook is hook


def test_the_timer_drops_its_own_error_raised_in_a_destructor(monkeypatch):
    """A firing inside ``__del__`` cannot propagate: it is dropped without reaching the former
    hook, and the next firing stops the build."""
    seen = []

    def hook(args):
        seen.append(args.exc_value)

    monkeypatch.setattr(sys, "unraisablehook", hook)
    with pytest.raises(BuildTimeLimitError), time_limited_build(0.05):
        _WaitsForTheTimerWhenDropped()
        while True:
            pass
    assert seen == []
    assert sys.unraisablehook is hook
