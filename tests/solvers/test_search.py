"""The search driver: stopping rules, the incumbent rule, Ctrl-C keeping the incumbent, the
progress bar and --quiet, the replay of the result, the report and the start tables."""

from __future__ import annotations

import io
import json
import math
import time

import pytest
from slolab.solvers import search as search_module
from slolab.solvers.search import (
    ALWAYS_A_START,
    DISPATCH_LNS_STARTS,
    TDG_HORIZON_STARTS,
    WITHIN_TIME,
    Exhausted,
    FirstOf,
    MaxIterations,
    MaxRuntime,
    NoImprovement,
    Progress,
    Search,
    SearchResult,
    StartPolicies,
    best_of,
    improves,
    interruptible,
)


def counting_step(values):
    """A step that offers ``values`` in turn and keeps each one the incumbent rule takes."""
    it = iter(values)

    def step(search: Search[int]) -> None:
        value = next(it)
        if improves(value, search.objective):
            search.keep(value, value)

    return step


def test_improves_needs_more_than_the_relative_tolerance():
    """1 + 1e-12 does not beat 1 (the margin is 1e-12 x max(1, 1)); 1 + 3e-12 does; at 1000
    the margin is 1e-9, so 1000 + 5e-10 does not beat 1000."""
    assert not improves(1.0 + 1e-12, 1.0)
    assert improves(1.0 + 3e-12, 1.0)
    assert not improves(1000.0 + 5e-10, 1000.0)
    assert improves(1000.0 + 2e-9, 1000.0)
    # below 1 in size the margin stays 1e-12: -0.5 + 2e-12 beats -0.5
    assert improves(-0.5 + 2e-12, -0.5)
    assert not improves(2.0, 2.0)
    # minimisation: smaller beats larger by the same margin
    assert improves(1.0 - 3e-12, 1.0, "min") and not improves(1.0 - 1e-12, 1.0, "min")
    # no incumbent yet: any finite value beats -inf (max) or +inf (min)
    assert improves(-1e300, -math.inf) and improves(1e300, math.inf, "min")
    with pytest.raises(ValueError, match="sense must be 'max' or 'min'"):
        improves(1.0, 0.0, "up")


def test_best_of_keeps_the_first_of_equal_candidates():
    """(a, 1), (b, 2), (c, 2 + 1e-13), (d, 1.5): b is best; c is within the margin of b."""
    assert best_of([("a", 1.0), ("b", 2.0), ("c", 2.0 + 1e-13), ("d", 1.5)]) == ("b", 2.0)
    assert best_of([("a", 1.0), ("b", 0.5)], "min") == ("b", 0.5)
    with pytest.raises(ValueError, match="at least one"):
        best_of([])


def test_max_iterations_stops_after_that_many_steps():
    """MaxIterations(4) over offers 1, 3, 2, 5, 9: four steps run, 1 -> 3 -> 5 kept (2 does not
    beat 3), 9 is never offered."""
    found = Search(MaxIterations(4), quiet=True).run(0, 0.0, counting_step([1, 3, 2, 5, 9]))
    assert (found.iterations, found.improvements) == (4, 3)
    assert (found.incumbent, found.objective) == (5, 5.0)
    assert found.stop_reason == "iterations" and not found.interrupted
    assert found.wall_s >= 0.0


def test_no_improvement_stops_after_k_steps_that_keep_nothing():
    """NoImprovement(2) over offers 1, 0, 2, 0, 0, 7: 1 kept, 0 stalls one, 2 kept, then two
    zeros stall two in a row and the search stops before 7 (5 steps)."""
    found = Search(FirstOf(NoImprovement(2), MaxIterations(100)), quiet=True).run(
        0, 0.0, counting_step([1, 0, 2, 0, 0, 7])
    )
    assert found.iterations == 5
    assert found.objective == 2.0
    assert found.stop_reason == "no improvement"


def test_max_runtime_counts_from_when_the_time_box_began():
    """A time box begun 10 s ago with MaxRuntime(5): no step runs; with MaxRuntime(60) the
    iteration cap stops it; the rule itself compares elapsed seconds with its limit."""
    past = time.perf_counter() - 10.0
    late = Search(MaxRuntime(5.0), quiet=True, started=past).run(0, 0.0, counting_step([1]))
    assert (late.iterations, late.stop_reason) == (0, "time limit")
    assert late.incumbent == 0
    box = Search(FirstOf(MaxRuntime(60.0), MaxIterations(2)), quiet=True, started=past)
    assert 49.0 < box.remaining_s() <= 50.0
    assert box.run(0, 0.0, counting_step([1, 2, 3])).stop_reason == "iterations"
    assert MaxRuntime(2.0)(Progress(0, 0, 0, 2.0)) and not MaxRuntime(2.0)(Progress(0, 0, 0, 1.9))


def test_first_of_names_the_rule_that_fired_and_takes_the_tightest_time_box():
    """FirstOf(MaxRuntime(10), MaxIterations(2), None): stops at 2 iterations, time box 10 s."""
    rule = FirstOf(MaxRuntime(10.0), MaxIterations(2), None)
    assert rule.limit_s == 10.0 and len(rule.rules) == 2
    assert not rule(Progress(1, 0, 1, 0.0))
    assert rule(Progress(2, 0, 2, 0.0)) and rule.reason == "iterations"
    assert FirstOf(MaxIterations(1)).limit_s == math.inf


def test_stop_rules_refuse_bad_arguments():
    """Negative seconds or iterations, NoImprovement(0) and FirstOf with no rule are refused."""
    with pytest.raises(ValueError, match="seconds must be >= 0"):
        MaxRuntime(-1.0)
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        MaxIterations(-1)
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        NoImprovement(0)
    with pytest.raises(ValueError, match="at least one stopping rule"):
        FirstOf(None)


def test_exhausted_ends_the_search_without_counting_a_step():
    """A step that raises Exhausted on its third call: two steps counted, reason exhausted."""
    calls = {"n": 0}

    def step(search: Search[int]) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise Exhausted
        search.keep(calls["n"], float(calls["n"]))

    found = Search(MaxIterations(10), quiet=True).run(0, 0.0, step)
    assert (found.iterations, found.objective, found.stop_reason) == (2, 2.0, "exhausted")


def test_ctrl_c_in_an_inner_move_keeps_the_incumbent():
    """A KeyboardInterrupt raised inside a step's inner exact move (after two kept moves)
    ends the search with the incumbent of the second move, marked interrupted."""

    def inner_exact_move(k: int) -> float:
        if k == 3:
            raise KeyboardInterrupt
        return 10.0 * k

    calls = {"n": 0}

    def step(search: Search[str]) -> None:
        calls["n"] += 1
        value = inner_exact_move(calls["n"])
        if improves(value, search.objective):
            search.keep(f"move {calls['n']}", value)

    found = Search(MaxIterations(100), quiet=True).run("start", 0.0, step)
    assert found.interrupted and found.stop_reason == "interrupted"
    assert (found.incumbent, found.objective) == ("move 2", 20.0)
    assert (found.iterations, found.improvements) == (2, 2)


def test_replay_is_called_once_and_its_value_is_the_objective():
    """The replay runs once, at the end, on the final incumbent; a value within the incumbent
    rule's tolerance (1e-12 x 30 here) is the result's objective."""
    seen = []

    def replay(incumbent: float) -> float:
        seen.append(incumbent)
        return incumbent + 2e-11

    found = Search(MaxIterations(3), quiet=True, replay=replay).run(
        0, 0.0, counting_step([10.0, 20.0, 30.0])
    )
    assert seen == [30.0]
    assert found.objective == 30.0 + 2e-11 != 30.0


def test_replay_that_disagrees_raises():
    """A replay off by more than the incumbent rule's tolerance is an error, on a finished
    search and on one Ctrl-C ended before its loop."""
    search = Search(MaxIterations(2), quiet=True, replay=lambda inc: inc + 1e-9, desc="s")
    with pytest.raises(RuntimeError, match="s: the incumbent's objective 2.0 replays to"):
        search.run(0.0, 0.0, counting_step([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="replays to"):
        search.interrupted_before(5.0, 5.0)
    found = Search(MaxIterations(2), quiet=True, replay=float).interrupted_before(5, 5.0)
    assert (found.interrupted, found.stop_reason, found.iterations) == (True, "interrupted", 0)


def test_extended_keeps_the_drivers_fields_and_sets_the_searchs_own():
    """A search's report subclass takes the driver's result, fields replaced or added."""
    import dataclasses

    @dataclasses.dataclass(frozen=True, slots=True)
    class Report(SearchResult[str]):
        extra: int = 0

    base = SearchResult("x", 1.0, 4, 2, "iterations", False, 0.5)
    report = base.extended(Report, start="p", starts_tried=3, extra=7, wall_s=9.0)
    assert isinstance(report, Report)
    assert (report.incumbent, report.objective, report.iterations, report.improvements) == (
        "x",
        1.0,
        4,
        2,
    )
    assert (report.start, report.starts_tried, report.extra, report.wall_s) == ("p", 3, 7, 9.0)
    assert math.isnan(base.start_objective) and base.starts_tried == 0


def test_start_tables_follow_their_rule():
    """Out of time at once: an always-a-start table still runs its first policy, a
    within-time table none; with time, both run every policy in order."""
    never = lambda: False  # noqa: E731
    always = lambda: True  # noqa: E731
    tdg, dispatch = TDG_HORIZON_STARTS, DISPATCH_LNS_STARTS
    assert (tdg.rule, dispatch.rule) == (ALWAYS_A_START, WITHIN_TIME)
    assert list(tdg.tried(tdg.names, always)) == [tdg.names[0]]
    assert list(dispatch.tried(dispatch.names, always)) == []
    assert list(tdg.tried(tdg.names, never)) == list(tdg.names)
    assert list(dispatch.tried(dispatch.names, never)) == list(dispatch.names)
    # out of time after two checks: the first two of the within-time table, three of the other
    for table, ran in ((dispatch, 2), (tdg, 3)):
        checks = iter([False, False, True, True])
        assert len(list(table.tried(range(10), lambda it=checks: next(it)))) == ran
    with pytest.raises(ValueError, match="rule must be"):
        StartPolicies("s", ("a",), "sometimes")
    with pytest.raises(ValueError, match="needs at least one policy"):
        StartPolicies("s", (), ALWAYS_A_START)


def test_interruptible_records_ctrl_c_and_lets_other_errors_through():
    """interruptible() swallows KeyboardInterrupt into its flag, not other exceptions."""
    with interruptible() as stopped:
        raise KeyboardInterrupt
    assert stopped and stopped.interrupted
    with interruptible() as calm:
        pass
    assert not calm
    with pytest.raises(ValueError), interruptible():
        raise ValueError("not an interrupt")


class Terminal(io.StringIO):
    """A text stream that says it is a terminal (tqdm draws on it)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_draws_no_bar(monkeypatch, quiet):
    """On a terminal the driver draws its bar (label and objective shown); quiet draws nothing."""
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    monkeypatch.setattr(search_module, "PROGRESS_EVERY_S", 0.0)
    Search(MaxIterations(3), desc="probe", objective_name="J", quiet=quiet).run(
        0, 0.0, counting_step([1, 2, 3])
    )
    drawn = screen.getvalue()
    if quiet:
        assert drawn == ""
    else:
        assert "probe" in drawn and "J 3" in drawn


def test_cli_quiet_solve_of_dispatch_lns_draws_no_bar(tmp_path, capsys, monkeypatch):
    """slolab solve --model dispatch-lns --quiet on a terminal: no bar on stderr; without
    --quiet the search's bar is the only one (no solve bar around it)."""
    from slolab.harness.cli import main

    path = tmp_path / "w.json"
    assert (
        main(["instance", "build", "--problem", "dispatch-scale", "--n", "6", "-o", str(path)]) == 0
    )
    capsys.readouterr()
    args = ["solve", str(path), "--model", "dispatch-lns", "--time-limit", "1"]
    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    assert main([*args, "--quiet"]) == 0
    assert screen.getvalue() == ""
    loud = Terminal()
    monkeypatch.setattr("sys.stderr", loud)
    assert main(args) == 0
    assert "lns " in loud.getvalue() and "solve highs" not in loud.getvalue()
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == "dispatch-lns"


def test_ctrl_c_in_dispatch_lns_exact_move_keeps_the_incumbent(monkeypatch):
    """A KeyboardInterrupt inside the second exact sub-window solve of dispatch-lns: the search
    returns its incumbent, interrupted, replayed to its objective, at least its start."""
    from slolab.models import dispatch_lns
    from slolab.models.dispatch_scale import DispatchScale, ScaleWindow, decision_schedule
    from slolab.problems import build_instance
    from slolab.sim import check, replay

    lives_window = dispatch_lns.lives_window

    inst = build_instance("dispatch-scale", n=12, seed=1)
    calls = {"n": 0}
    real = dispatch_lns.solve_subwindow

    def interrupted_solve(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(dispatch_lns, "solve_subwindow", interrupted_solve)
    found = dispatch_lns.lns(inst, seed=7, time_limit=60.0, quiet=True)
    assert found.interrupted and found.stop_reason == "interrupted"
    # EXACT_EVERY = 3 other moves before each exact one: exact moves after the 3rd and the
    # 6th other move; the second is interrupted inside its solve and not counted as tried
    assert calls["n"] == 2
    assert (found.moves_tried, found.exact_tried) == (6, 1)
    assert found.objective >= found.start_objective - 1e-12
    data = ScaleWindow.of(inst)
    schedule = decision_schedule(lives_window(data, found.decision), found.decision)
    out = replay(inst, schedule)
    assert check(inst, out) == []
    assert DispatchScale(inst).evaluate(schedule) == found.objective


def test_ctrl_c_in_a_slice_milp_keeps_the_incumbent(monkeypatch):
    """A KeyboardInterrupt inside the third slice MILP of the tdg-horizon slice search: its
    incumbent (the run after the slices kept so far) is returned, interrupted."""
    import slolab.solvers
    from slolab.heuristics import tdg_search
    from slolab.problems.tdg_horizon import horizon_window
    from slolab.sim import metrics, replay

    inst = horizon_window("azure_code_2023", n=16, seed=0, load="high", max_output_tokens=0)
    schedule, _ = tdg_search.steered_search(inst, seed=0, time_limit=60.0, max_steps=5, quiet=True)
    calls = {"n": 0}
    real = slolab.solvers.solve

    def interrupted_solve(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(slolab.solvers, "solve", interrupted_solve)
    out, report = tdg_search.slice_search(
        inst, replay(inst, schedule), seed=0, time_limit=60.0, quiet=True
    )
    assert report.interrupted and report.slices == 3
    assert metrics.tdg(inst, out) == report.tdg >= report.start_tdg


def test_compare_silences_the_searches_bars(monkeypatch):
    """compare without its own bar runs lns of dispatch-scale and tdg-horizon and the model
    dispatch-lns on a terminal: nothing is drawn on stderr, and each lns row is a heuristic."""
    from slolab.harness.compare import compare
    from slolab.problems import build_instance
    from slolab.problems.tdg_horizon import horizon_window

    screen = Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    monkeypatch.setattr(search_module, "PROGRESS_EVERY_S", 0.0)
    window = build_instance("dispatch-scale", n=6, seed=0)
    rows = compare(window, ["lns", "dispatch-lns:highs"], time_limit=1.0).set_index("method")
    assert (
        rows.loc["lns", "kind"] == "heuristic" and rows.loc["dispatch-lns:highs", "kind"] == "exact"
    )
    horizon = horizon_window("azure_code_2023", n=8, seed=0, load="high", max_output_tokens=0)
    assert compare(horizon, ["lns"], time_limit=1.0)["kind"].tolist() == ["heuristic"]
    assert screen.getvalue() == ""
