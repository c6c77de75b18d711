"""dispatch-scale at trace scale: the relaxation bound (hand cases, a seeded battery against
proved optima, strictly below the ideal on a loaded window), the large-neighbourhood search
(replayed, checker clean, at least its start, within the bound, Ctrl-C keeps the incumbent) and
the methods ``bound`` and ``lns`` in compare and on the command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dispatch_scale_cases import azure_window, window
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.cli import main
from slolab.harness.compare import compare
from slolab.instances import load_instance, read_workload, resolve_trace
from slolab.models import dispatch_bounds, dispatch_lns
from slolab.models.dispatch_bounds import (
    DispatchBound,
    _build,
    _request_profile,
    ideal_bound,
    relaxation_bound,
    safe_dual_bound,
)
from slolab.models.dispatch_lns import lives_window, lns
from slolab.models.dispatch_scale import DispatchScale, ScaleWindow, decision_schedule
from slolab.problems import build_instance
from slolab.problems.dispatch_scale import LNS_STARTS, LOADS, request_work_s
from slolab.sim import check, replay
from slolab.solvers import Status, solve


def test_one_request_bound_is_the_optimum_by_hand():
    """One prompt of 10 tokens, one output token, price 0.5: the optimum serves it at once in
    0.010 + 10 x 0.001 = 0.020 s, J = 1 - 0.5 x 0.020 = 0.99; the bound counts the prompt's
    0.010 s of work and one iteration's 0.010 s, so it is 0.99 too."""
    inst = window([0.0], [10], [1], [0.05], [0.05], max_servers=1)
    found = relaxation_bound(inst)
    assert found.bound == pytest.approx(0.99, abs=1e-9)
    assert found.ideal == 1.0
    res = solve(DispatchScale(inst), solver="brute", time_limit=30)
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(0.99, abs=1e-12)


def test_unmeetable_request_still_costs_its_prompt():
    """A TTFT of 5 ms below the 20 ms prefill: no request can meet, the ideal bound is 0, and
    the prompt is still served, so the bound is the price of its work, -0.5 x 10 x 0.001 =
    -0.005; the optimum serves it alone in 0.020 s, -0.5 x 0.020 = -0.010."""
    inst = window([0.0], [10], [1], [0.005], [0.05], max_servers=1)
    assert ideal_bound(ScaleWindow.of(inst)) == 0.0
    assert relaxation_bound(inst).bound == pytest.approx(-0.005, abs=1e-12)
    res = solve(DispatchScale(inst), solver="brute", time_limit=30)
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(-0.010, abs=1e-12)


def test_missed_prompt_rows_tighten_the_bound_by_its_work():
    """One request that meets alone (J share 1/2, its 0.020 s iteration at 0.5 per
    worker-second: 0.5 - 0.010 = 0.49 without the missed prompt) and one at 0.5 s that cannot
    meet: its 0.010 s of prompt work costs at least 0.5 x 0.010 = 0.005 more, so the bound is
    at most 0.485 and still at least the proved optimum."""
    inst = window([0.0, 0.5], [10, 10], [1, 1], [0.05, 0.005], [0.05, 0.05], max_servers=1)
    found = relaxation_bound(inst)
    assert found.bound <= 0.485 + 1e-9
    res = solve(DispatchScale(inst), solver="brute", time_limit=30)
    assert res.status == Status.OPTIMAL
    assert res.objective <= found.bound + 1e-9


@st.composite
def random_window(draw):
    """2-4 requests, 1-2 initial workers of 2, outputs of 1-3 tokens, seeded values."""
    n = draw(st.integers(2, 4))
    arrival = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    prompt = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))
    ttft = draw(st.lists(st.sampled_from([0.02, 0.04, 0.08, 0.2]), min_size=n, max_size=n))
    tpot = draw(st.lists(st.sampled_from([0.012, 0.02, 0.05]), min_size=n, max_size=n))
    return window(
        [a / 100 for a in arrival],
        prompt,
        output,
        ttft,
        tpot,
        servers=draw(st.integers(1, 2)),
        max_servers=2,
        startup_s=draw(st.sampled_from([0.05, 0.15])),
        weight=draw(st.sampled_from([0.0, 0.5, 3.0])),
        slot_s=0.1,
    )


@settings(max_examples=25, deadline=None, derandomize=True)
@given(random_window(), st.sampled_from([4, 16, 64]))
def test_battery_bound_above_the_proved_optimum_and_below_the_ideal(inst, buckets):
    """Random windows: the LP and the binary relaxation lie between the exhaustive search's
    proved optimum and the ideal bound."""
    res = solve(DispatchScale(inst), solver="brute", time_limit=60)
    assert res.status == Status.OPTIMAL
    ideal = ideal_bound(ScaleWindow.of(inst))
    for integral in (False, True):
        found = relaxation_bound(inst, buckets=buckets, coarse_buckets=4, integral=integral)
        assert res.objective <= found.bound + 1e-9
        assert found.bound <= ideal + 1e-12
        # every grid's LP bounds the optimum on its own, the coarse one included
        for level in found.levels:
            assert level.bound is not None and res.objective <= level.bound + 1e-9


@settings(max_examples=6, deadline=None, derandomize=True)
@given(st.integers(0, 2**16))
def test_battery_preset_windows(seed):
    """Builder windows (Eqs. 1-2 preset, 3-4 requests, tight SLOs): bound >= HiGHS's proved
    optimum."""
    inst = build_instance("dispatch-scale", n=3 + seed % 2, seed=seed, slo_scale=0.25, rate=10.0)
    res = solve(DispatchScale(inst), solver="brute", time_limit=60)
    assert res.status == Status.OPTIMAL
    found = relaxation_bound(inst)
    assert res.objective <= found.bound + 1e-9 <= ideal_bound(ScaleWindow.of(inst)) + 1e-9


def test_bound_strictly_tightens_the_ideal_on_a_loaded_window():
    """Ten 50-token prompts arriving together with a 0.1 s TTFT on one worker that never
    scales, no price: the ideal is 1 (each meets alone in 0.060 s); the relaxation counts the
    worker's 0.1 s."""
    inst = window(
        [0.0] * 10, [50] * 10, [1] * 10, [0.1] * 10, [0.05] * 10, max_servers=1, weight=0.0
    )
    found = relaxation_bound(inst)
    assert found.ideal == 1.0
    # LP: every m_r = k / 10, each prompt 0.050 s of work, the overhead at least 0.010 / 0.050
    # of one request's work in the bucket: k 0.050 + 0.2 x 0.050 k / 10 <= 0.1, k = 0.1 / 0.051
    assert found.bound == pytest.approx(0.1 / 0.051 / 10, abs=1e-6)
    # binary m_r: k 0.050 + 0.010 <= 0.1 leaves k = 1 (the optimum's value)
    assert relaxation_bound(inst, integral=True).bound == pytest.approx(0.1, abs=1e-6)
    res = solve(DispatchScale(inst), solver="highs", time_limit=60)
    # the exact optimum: two prompts in one 0.010 + 0.100 s iteration miss 0.1; one at a time
    # meets 1 (0.060 s), so J = 0.1
    assert res.objective == pytest.approx(0.1, abs=1e-9)
    assert res.objective <= found.bound


def test_interval_rows_tighten_a_coarse_grid_by_hand():
    """A 1-token request at 0 due at 1 s and two 100-token prompts at 0.3 s due at 0.42 s
    on one worker, no price. On 2 buckets (ends 0, the start-up delay 0.2 and 1.0) the grid
    lets both prompts be done anywhere in [0.2, 1.0], so the LP meets all three; the
    interval [0.3, 0.42] holds 0.12 s of the one worker, which bounds the prompts' work."""
    inst = window(
        [0.0, 0.3, 0.3],
        [1, 100, 100],
        [1, 1, 1],
        [1.0, 0.12, 0.12],
        [0.05] * 3,
        max_servers=1,
        weight=0.0,
    )
    without = relaxation_bound(inst, buckets=2, coarse_buckets=None, interval_rounds=0)
    assert without.bound == pytest.approx(1.0, abs=1e-6)
    found = relaxation_bound(inst, buckets=2, coarse_buckets=None)
    assert found.levels[0].interval_rows == 1
    # 0.100 m_1 + 0.100 m_2 <= 0.12: m_1 + m_2 <= 1.2, so J <= (1 + 1.2) / 3
    assert found.bound == pytest.approx(2.2 / 3, abs=1e-6)
    res = solve(DispatchScale(inst), solver="brute", time_limit=30)
    # the optimum: the short request and one prompt (0.010 + 0.100 s from 0.3) meet, the
    # other prompt ends at 0.52 at the earliest
    assert res.status == Status.OPTIMAL
    assert res.objective == pytest.approx(2 / 3, abs=1e-12)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(random_window(), st.sampled_from([2, 4, 16]))
def test_battery_interval_rows_keep_the_bound_above_the_proved_optimum(inst, buckets):
    """Random windows: with the interval rows the bound is at most the one without and never
    below the exhaustive search's proved optimum."""
    res = solve(DispatchScale(inst), solver="brute", time_limit=60)
    assert res.status == Status.OPTIMAL
    found = relaxation_bound(inst, buckets=buckets, coarse_buckets=None)
    without = relaxation_bound(inst, buckets=buckets, coarse_buckets=None, interval_rounds=0)
    assert res.objective <= found.bound + 1e-9
    assert found.bound <= without.bound + 1e-9


def test_interval_rows_strictly_tighten_a_loaded_trace_window():
    """200 Azure code requests at high load on 16 buckets: the interval rows lower the bound
    by more than 0.002 (0.8286 to 0.8255 when measured), and the rows are counted."""
    inst = azure_window("azure_code_2023", 200)
    without = relaxation_bound(inst, buckets=16, coarse_buckets=None, interval_rounds=0)
    found = relaxation_bound(inst, buckets=16, coarse_buckets=None)
    assert found.levels[0].interval_rows > 0 and without.levels[0].interval_rows == 0
    assert found.bound < without.bound - 0.002
    assert found.status == "optimal"


def test_no_interval_rounds_is_the_grid_lp_alone(trace_window):
    """interval_rounds=0 solves the grid's LP as built, nothing added: the same safe bound as
    the LP solved directly."""
    data = ScaleWindow.of(trace_window)
    meets = [r for r in range(data.n) if data.can_meet(r)]
    profiles = [_request_profile(data, r) if r in meets else None for r in range(data.n)]
    value, _, _ = dispatch_bounds._solve_lp(_build(data, meets, profiles, 16), 30.0, 1, "ipm")
    found = relaxation_bound(trace_window, buckets=16, coarse_buckets=None, interval_rounds=0)
    assert found.levels[0].constraints == _build(data, meets, profiles, 16).matrix.shape[0]
    assert found.bound == min(value, found.ideal)


@pytest.fixture(scope="module")
def trace_window():
    """30 consecutive Azure conv requests (:func:`azure_window`)."""
    return azure_window("azure_conv_2023", 30)


def test_coarse_grid_alone_tightens_the_ideal_and_the_fine_grid_keeps_the_least(trace_window):
    """On the 30-request trace window the coarse LP (16 buckets) alone is below the ideal
    bound, and the default run (coarse, then 64 buckets) reports the least of its levels."""
    coarse = relaxation_bound(trace_window, buckets=16, coarse_buckets=None)
    assert coarse.status == "optimal" and len(coarse.levels) == 1
    assert coarse.bound < coarse.ideal - 0.01
    both = relaxation_bound(trace_window)
    assert [level.status for level in both.levels] == ["optimal", "optimal"]
    assert both.levels[0].buckets < both.levels[1].buckets
    assert both.levels[0].bound == pytest.approx(coarse.bound, abs=1e-9)
    assert both.bound == pytest.approx(min(level.bound for level in both.levels), abs=1e-12)


def test_refined_grids_keep_the_least_bound(trace_window):
    """A finer grid after the coarse and fine ones: three levels solved, the least kept, no
    bound above the fine grid's alone."""
    found = relaxation_bound(trace_window, refined_buckets=(128,))
    assert [level.status for level in found.levels] == ["optimal"] * 3
    assert found.levels[1].buckets < found.levels[2].buckets
    assert found.bound == pytest.approx(min(level.bound for level in found.levels), abs=1e-12)
    assert found.bound <= relaxation_bound(trace_window).bound + 1e-12


def test_fine_lp_stopped_keeps_the_coarse_bound(trace_window, monkeypatch):
    """When the fine LP stops at its time limit the coarse LP's bound is reported (status
    coarse, FEASIBLE for the bound model), not the ideal one."""
    real = dispatch_bounds._solve_lp

    def coarse_only(lp, time_limit, threads, method):
        if lp.buckets > 20:
            return None, None, "time limit"
        return real(lp, time_limit, threads, method)

    monkeypatch.setattr(dispatch_bounds, "_solve_lp", coarse_only)
    found = relaxation_bound(trace_window)
    assert found.status == "coarse"
    assert [level.status for level in found.levels] == ["optimal", "time limit"]
    assert found.bound == pytest.approx(found.levels[0].bound, abs=1e-12)
    assert found.bound < found.ideal
    res = solve(DispatchBound(trace_window), solver="highs", time_limit=30)
    assert res.status == Status.FEASIBLE and res.bound == pytest.approx(found.bound, abs=1e-12)


def test_safe_dual_bound_holds_for_any_multipliers(trace_window):
    """Weak duality on the box: the optimal duals give the LP optimum (within 1e-6), random
    and zero multipliers values never below it; zero multipliers give the box's bound, the
    most every m_r can add, (1/n) x (requests that meet alone)."""
    data = ScaleWindow.of(trace_window)
    meets = [r for r in range(data.n) if data.can_meet(r)]
    profiles = [_request_profile(data, r) if r in meets else None for r in range(data.n)]
    lp = _build(data, meets, profiles, 16)
    value, x, status = dispatch_bounds._solve_lp(lp, 30.0, 1, "simplex")
    assert status == "optimal" and value is not None and x is not None
    primal = -float(lp.cost @ x)
    assert value == pytest.approx(primal, abs=1e-6)
    assert value >= primal - 1e-9
    # zero multipliers: min over the box of c x = -(1/n) per met request (costs are >= 0),
    # plus the 1e-9 margin
    assert safe_dual_bound(lp, np.zeros(lp.matrix.shape[0])) == pytest.approx(
        len(meets) / data.n + 1e-9, abs=1e-12
    )
    rng = np.random.default_rng(0)
    for scale in (1e-3, 1e-1, 1.0):
        y = rng.normal(0.0, scale, lp.matrix.shape[0])
        assert safe_dual_bound(lp, y) >= primal - 1e-9


def test_builder_keeps_real_outputs_and_sets_the_load(trace_window):
    """max_output_tokens 0 keeps the trace's outputs; the rate puts 0.9 of 4 workers' work on
    the stream: rate x mean work = 0.9 x 4 = 3.6."""
    inst = trace_window
    assert inst.settings["load"] == "high"
    stream = read_workload(resolve_trace("azure_conv_2023"), rate=1.0, seed=1)
    work = request_work_s(inst.timing, stream.prompt_tokens, stream.output_tokens)
    assert inst.settings["rate"] * float(work.mean()) == pytest.approx(LOADS["high"] * 4)
    rows = inst.workload.source.split("rows ")[1].split("..")
    start = int(rows[0])
    np.testing.assert_array_equal(
        inst.workload.output_tokens, stream.output_tokens[start : start + 30]
    )
    assert int(inst.workload.output_tokens.max()) > 3


def test_lns_replays_clean_within_its_start_and_the_bound(trace_window):
    """The search's incumbent replays to its objective with a clean checker, at least its
    start (the best online run), at most the relaxation bound."""
    inst = trace_window
    found = lns(inst, seed=0, time_limit=2.0, starts=LNS_STARTS)
    data = ScaleWindow.of(inst)
    schedule = decision_schedule(lives_window(data, found.decision), found.decision)
    out = replay(inst, schedule)
    assert check(inst, out) == []
    assert DispatchScale(inst).evaluate(schedule) == pytest.approx(found.objective, abs=1e-12)
    assert found.objective >= found.start_objective - 1e-12
    assert found.objective <= relaxation_bound(inst).bound + 1e-9
    assert found.runtime_s < 2.0 + 30.0  # the moves stop at the limit (a move is well under 1 s)


def test_resumed_worker_builds_equal_builds_from_the_start():
    """Seeded member sets of a 40-request Azure code window (arrivals over about 9 s), each
    changed by 1-3 of the later half's requests joining or leaving: the greedy worker resumed from its saved states gives the same iterations,
    requests met, end and missed requests as a build from the start (60 cases)."""
    data = ScaleWindow.of(azure_window("azure_code_2023", 40))
    tables = dispatch_lns._Tables(data)
    rng = np.random.default_rng(1)
    resumed_from_a_state = 0
    for _ in range(20):
        members = sorted(rng.choice(data.n, size=data.n // 2, replace=False).tolist())
        ready = float(rng.choice([0.0, 0.5]))
        old = dispatch_lns._greedy(tables, members, ready)
        for _ in range(3):
            # requests of the later half (arrival order), so that most builds resume late
            later = np.argsort(data.arrival_s, kind="stable")[data.n // 2 :]
            changed = rng.choice(later, size=int(rng.integers(1, 4)), replace=False).tolist()
            new = sorted(set(members) ^ set(changed))
            first = min(tables.arrival[r] for r in changed)
            full = dispatch_lns._greedy(tables, new, ready)
            resumed = dispatch_lns._greedy(tables, new, ready, None, (old, first))
            assert resumed.comps == full.comps
            assert (resumed.met, resumed.end_s, resumed.late) == (full.met, full.end_s, full.late)
            resumed_from_a_state += any(first > snap.seen_s + 1e-12 for snap in old.snaps[1:])
    # the check has teeth: most cases (all 60 with this seed) resume past the first saved
    # state, where a build that missed a pass's look-ahead would differ
    assert resumed_from_a_state >= 30


def test_insertion_start_replays_to_its_score(trace_window):
    """The insertion start, built by resumed appends, scores (per worker) what the engine
    replays, with a clean checker, and serves every request."""
    data = ScaleWindow.of(trace_window)
    state = dispatch_lns._insertion_start(data, dispatch_lns._Tables(data), math.inf)
    assert state is not None
    assert sorted(r for w in state.workers for r in w.members) == list(range(data.n))
    decision = state.decision()
    schedule = decision_schedule(lives_window(data, decision), decision)
    assert check(trace_window, replay(trace_window, schedule)) == []
    assert DispatchScale(trace_window).evaluate(schedule) == pytest.approx(state.total(), abs=1e-9)


@pytest.mark.parametrize(("lazy", "lookahead_s"), dispatch_lns.POOLED_VARIANTS)
def test_pooled_start_replays_to_its_score(lazy, lookahead_s):
    """The pooled start on a 60-request Azure code window at high load (arrivals in bursts):
    every request served once, at most 4 lives on at once, the engine's replay scores what
    the start claims, with a clean checker."""
    inst = azure_window("azure_code_2023", 60)
    data = ScaleWindow.of(inst)
    state = dispatch_lns._pooled_start(
        data, dispatch_lns._Tables(data), math.inf, lazy=lazy, lookahead_s=lookahead_s
    )
    assert state is not None
    assert sorted(r for w in state.workers for r in w.members) == list(range(data.n))
    assert state.concurrency(state.workers) <= data.max_servers
    decision = state.decision()
    schedule = decision_schedule(lives_window(data, decision), decision)
    assert check(inst, replay(inst, schedule)) == []
    assert DispatchScale(inst).evaluate(schedule) == pytest.approx(state.total(), abs=1e-9)


def test_pooled_search_replays_to_its_score_and_keeps_its_start():
    """The search on the prompts the pooled start gives up (seeded, 3 s) on the 60-request
    code window: at least the plain pooled start, and the engine replays its claimed J with
    a clean checker."""
    inst = azure_window("azure_code_2023", 60)
    data = ScaleWindow.of(inst)
    tables = dispatch_lns._Tables(data)
    plain = dispatch_lns._pooled_start(data, tables, math.inf)
    assert plain is not None
    searched = dispatch_lns._pooled_search(
        data, tables, (False, 0.0), 3.0, np.random.default_rng(0)
    )
    found = searched.incumbent
    assert found is not None and searched.iterations >= 1
    assert 0 <= searched.improvements <= searched.iterations
    assert searched.objective == found.total()
    assert found.total() >= plain.total() - 1e-12
    decision = found.decision()
    schedule = decision_schedule(lives_window(data, decision), decision)
    assert check(inst, replay(inst, schedule)) == []
    assert DispatchScale(inst).evaluate(schedule) == pytest.approx(found.total(), abs=1e-9)


def test_triage_gives_up_the_longest_prompt_first():
    """Three prompts due at 1.0 s taking 0.6, 0.3 and 0.3 s alone, one life free at 0: in
    deadline order 0.6 + 0.3 = 0.9 s meets, the third would end at 1.2 s, so the longest
    scheduled up to it (0.6 s) is given up and 0.3 + 0.3 = 0.6 s meets."""

    class Tab:
        arrival = [0.0, 0.0, 0.0]
        alone = [0.6, 0.3, 0.3]
        first_due = [1.0, 1.0, 1.0]

    assert dispatch_lns._triage(Tab(), [0, 1, 2], [0.0]) == [0]  # type: ignore[arg-type]
    # with a second life free at 0 all three meet: 0.6 on one, 0.3 + 0.3 on the other
    assert dispatch_lns._triage(Tab(), [0, 1, 2], [0.0, 0.0]) == []  # type: ignore[arg-type]


def test_lns_keeps_the_incumbent_on_ctrl_c(trace_window, monkeypatch):
    """A KeyboardInterrupt during the moves ends the search with the incumbent, replayed."""
    calls = {"n": 0}
    real = dispatch_lns._move

    def interrupting(state, rng):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(state, rng)

    monkeypatch.setattr(dispatch_lns, "_move", interrupting)
    found = lns(trace_window, seed=0, time_limit=60.0, starts=LNS_STARTS)
    assert found.interrupted
    assert found.moves_tried == 6  # the sixth call raised
    assert found.objective >= found.start_objective - 1e-12


def test_compare_gives_an_interval_from_bound_and_lns(trace_window):
    """compare with bound, lns and two heuristics: the bound row has no schedule, lns is
    replayed clean, every heuristic's gap is an ordered interval inside [0, 1)."""
    frame = compare(trace_window, ["bound", "lns", "hyperflexis", "round-robin"], time_limit=4.0)
    rows = {r.method: r for r in frame.itertuples()}
    assert rows["bound"].kind == "bound" and rows["bound"].status == "OPTIMAL"
    assert rows["lns"].kind == "heuristic" and rows["lns"].violations == 0
    lo, hi = rows["lns"].optimum_lo, rows["lns"].optimum_hi
    assert lo == pytest.approx(rows["lns"].objective)
    assert hi == pytest.approx(rows["bound"].bound)
    assert lo <= hi
    for name in ("hyperflexis", "round-robin"):
        assert 0.0 <= rows[name].gap_lo <= rows[name].gap_hi < 1.0


def test_bound_model_runs_on_highs_only(trace_window):
    """The bound-only model reports its LP optimum as bound; another backend is refused."""
    res = solve(DispatchBound(trace_window), solver="highs", time_limit=5)
    assert res.schedule is None and res.bound == res.objective
    # the refusal names the model, the backend asked for and the ones it runs on
    with pytest.raises(
        ValueError, match="'dispatch-bound' does not run on 'cbc'; it runs on: highs"
    ):
        solve(DispatchBound(trace_window), solver="cbc", time_limit=30)


def test_cli_build_and_compare(tmp_path, capsys):
    """instance build --max-output-tokens 0 --load high, then compare --methods bound,lns."""
    path = tmp_path / "w.json"
    code = main(
        ["instance", "build", "--problem", "dispatch-scale", "--trace", "azure_code_2023"]
        + ["--n", "20", "--load", "medium", "--max-output-tokens", "0", "--servers", "2"]
        + ["--max-servers", "3", "--cost-weight", "0.002", "-o", str(path)]
    )
    assert code == 0
    assert load_instance(path).settings["load"] == "medium"
    capsys.readouterr()
    code = main(
        ["compare", str(path), "--methods", "bound,lns,hyperflexis", "--time-limit", "3", "--json"]
    )
    assert code == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["lns"]["objective"] <= rows["bound"]["bound"] + 1e-9
    assert rows["hyperflexis"]["objective"] <= rows["bound"]["bound"] + 1e-9
    bad = tmp_path / "bad.json"
    args = ["instance", "build", "--problem", "dispatch-scale", "--load", "extreme"]
    assert main([*args, "-o", str(bad)]) == 2
    assert "load" in capsys.readouterr().err
    assert not bad.exists()
