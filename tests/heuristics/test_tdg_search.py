"""The tdg-horizon search (method ``lns``) and windows with the trace's own output lengths."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.harness.compare import compare
from slolab.heuristics import tdg_search
from slolab.instances import read_trace, resolve_trace
from slolab.instances.records import Instance
from slolab.problems.tdg_horizon import horizon_window
from slolab.sim import check, metrics, replay


@pytest.fixture(scope="module")
def code_window():
    """Ten consecutive Azure code requests at high load, with their real output lengths."""
    return horizon_window("azure_code_2023", n=10, seed=0, load="high", max_output_tokens=0)


def test_zero_max_output_tokens_keeps_the_trace_outputs(code_window):
    """--max-output-tokens 0 keeps every request's output length as the trace gives it."""
    wl = read_trace(resolve_trace("azure_code_2023"))
    rows = code_window.workload.source.split("rows ")[1].split("..")
    start, end = int(rows[0]), int(rows[1])
    assert np.array_equal(code_window.workload.output_tokens, wl.output_tokens[start : end + 1])
    # the default cut keeps at most 4 tokens
    cut = horizon_window("azure_code_2023", n=10, seed=0, load="high")
    assert cut.workload.output_tokens.max() == 4


def test_negative_max_output_tokens_is_refused():
    """A negative cut names the field and the meaning of 0."""
    with pytest.raises(ValueError, match="max_output_tokens must be >= 1, or 0"):
        horizon_window("azure_code_2023", n=3, seed=0, max_output_tokens=-1)


def test_lns_at_least_the_best_policy_replayed_and_checker_clean(code_window):
    """lns starts from the best online policy, so it is never worse; its schedule replays to
    the value it reports and passes the checker."""
    schedule, report = tdg_search.steered_search(code_window, seed=0, time_limit=3.0, quiet=True)
    out = replay(code_window, schedule)
    assert metrics.tdg(code_window, out) == pytest.approx(report.tdg, rel=1e-12)
    assert check(code_window, out) == []
    assert report.tdg >= report.start_tdg
    starts = {
        p: tdg_search._run(code_window, p, code_window, 0)[0] for p in tdg_search.START_POLICIES
    }
    assert report.start_tdg == pytest.approx(max(starts.values()), rel=1e-12)
    # the registered online policies score their own runs as the harness's rows do
    frame = compare(code_window, ["slide-batching", "sarathi-fcfs"], time_limit=5)
    rows = frame.set_index("method")["objective"]
    assert rows["slide-batching"] == pytest.approx(starts["slide-batching"], rel=1e-12)
    assert rows["sarathi-fcfs"] == pytest.approx(starts["sarathi-fcfs"], rel=1e-12)
    # one step is one simulation of ten requests (well under a second): the limit holds
    assert report.runtime_s < 3.0 + 2.0


def test_lns_same_seed_same_result(code_window):
    """Two searches with the same seed and 6 steps end at the same value and schedule."""
    runs = [
        tdg_search.steered_search(code_window, seed=3, time_limit=60, max_steps=6, quiet=True)
        for _ in range(2)
    ]
    assert runs[0][1].steps == runs[1][1].steps == 6
    assert runs[0][1].tdg == runs[1][1].tdg
    assert runs[0][0] == runs[1][0]


def test_lns_keeps_the_incumbent_on_ctrl_c(code_window, monkeypatch):
    """Ctrl-C during the search returns the incumbent (the best start policy), flagged."""
    calls = {"n": 0}
    real = tdg_search._run

    def interrupted_after_start(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > len(tdg_search.START_POLICIES):
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tdg_search, "_run", interrupted_after_start)
    schedule, report = tdg_search.steered_search(code_window, seed=0, time_limit=30.0, quiet=True)
    assert report.interrupted
    assert report.tdg == report.start_tdg
    assert metrics.tdg(code_window, replay(code_window, schedule)) == pytest.approx(report.tdg)


def test_lns_and_bound_methods_give_an_interval(code_window):
    """compare with bound and lns: the interval [lns, bound] holds every policy's TDG."""
    frame = compare(code_window, ["bound", "lns", "slide-batching"], time_limit=3)
    rows = frame.set_index("method")
    assert rows.loc["bound", "kind"] == "bound"
    assert rows.loc["lns", "kind"] == "heuristic"
    assert rows.loc["lns", "violations"] == 0
    assert rows.loc["slide-batching", "objective"] <= rows.loc["lns", "objective"] + 1e-9
    assert rows.loc["lns", "objective"] <= rows.loc["bound", "bound"] + 1e-9
    assert frame["optimum_hi"].iloc[0] == pytest.approx(rows.loc["bound", "bound"])


def hand_window(prompt, ttft, priority, arrival=None, output=None) -> Instance:
    """Prompts (at 0 unless ``arrival`` says) with one output token each (unless ``output``
    says); 10 ms per iteration and 1 ms per prompt token."""
    from slolab.instances.records import Cluster, Workload
    from slolab.timing import LinearTiming

    n = len(prompt)
    wl = Workload(
        {
            "arrival_s": [0.0] * n if arrival is None else arrival,
            "prompt_tokens": prompt,
            "output_tokens": [1] * n if output is None else output,
            "ttft_slo_s": ttft,
            "tpot_slo_s": [0.01] * n,
            "priority": priority,
        }
    )
    timing = LinearTiming(0.01, {"prefill_tokens": 1e-3}, name="round")
    settings = {"w_prefill": 3.0, "w_decode": 1.0}
    return Instance(
        "w", wl, Cluster(servers=1, kv_capacity_tokens=1000), timing, "tdg-horizon", settings
    )


def test_deadline_admission_hand_case():
    """Moore-Hodgson keeps the priority-2 short prompt and the long one, drops the other: 9."""
    from slolab.sim import run

    inst = hand_window([30, 10, 10], [0.2, 0.025, 0.025], [1.0, 2.0, 1.0])
    out = run(inst, tdg_search.DeadlineAdmission(), seed=0)
    # deadline order r1, r2 (25 ms), r0 (200 ms); r1 alone ends at 10 + 10 = 20 ms, r2 after it at
    # 40 ms > 25: drop the kept prompt of least gain per second (r2: 3 / 20 ms < r1: 6 / 20 ms);
    # r0 then ends at 20 + 10 + 30 = 60 ms <= 200; r2 runs last (80 ms, late): 6 + 3 = 9
    assert metrics.tdg(inst, out) == pytest.approx(9.0)
    assert check(inst, out) == []


def test_deadline_packing_shares_one_iteration():
    """Two 10-token prompts at 0 (TTFT 30 and 50 ms): packed, both first tokens at 30 ms."""
    from slolab.sim import run

    inst = hand_window([10, 10], [0.03, 0.05], [1.0, 1.0])
    alone = run(inst, tdg_search.DeadlineAdmission(), seed=0)
    # one prompt per iteration: 10 + 10 = 20 ms, then 20 + 20 = 40 ms
    assert alone.first_token_s == pytest.approx([0.02, 0.04])
    packed = run(inst, tdg_search.DeadlineAdmission(pack=True), seed=0)
    # both in one iteration: 10 + 20 = 30 ms <= 30 ms (the earlier deadline), one t_c saved
    assert packed.first_token_s == pytest.approx([0.03, 0.03])
    assert metrics.tdg(inst, packed) == pytest.approx(6.0)
    assert check(inst, packed) == []


def test_deadline_packing_fills_to_the_earliest_deadline():
    """A 10-token prompt (TTFT 25 ms) and a 30-token one: the second gets a 5-token chunk."""
    from slolab.sim import run

    inst = hand_window([10, 30], [0.025, 0.2], [1.0, 1.0])
    packed = run(inst, tdg_search.DeadlineAdmission(pack=True), seed=0, record_iterations=True)
    # iteration 1: prompt 0 whole (10 ms) plus 25 - 10 - 10 = 5 tokens of prompt 1, ends at
    # 25 ms; iteration 2: the 25 tokens left, 25 + 10 + 25 = 60 ms
    assert packed.first_token_s == pytest.approx([0.025, 0.06])
    assert check(inst, packed) == []


def test_deadline_packing_waits_for_an_urgent_arrival():
    """A 30-token prompt at 0 (TTFT 200 ms) and a 10-token one at 5 ms (TTFT 27 ms): packing
    runs the first alone until 40 ms and loses the second's first token (3); waiting until 5 ms
    packs both into one iteration and keeps both (6), the proved optimum."""
    from slolab.models.proserve import TdgHorizon
    from slolab.sim import run
    from slolab.solvers import Status, solve

    inst = hand_window([30, 10], [0.2, 0.027], [1.0, 1.0], arrival=[0.0, 0.005])
    packed = run(inst, tdg_search.DeadlineAdmission(pack=True), seed=0, record_iterations=True)
    # 0-40 ms: prompt 0 whole; prompt 1 (latest start 32 - 20 = 12 ms) starts at 40: late
    assert packed.first_token_s == pytest.approx([0.04, 0.06])
    assert metrics.tdg(inst, packed) == pytest.approx(3.0)
    waited = run(
        inst, tdg_search.DeadlineAdmission(pack=True, wait=True), seed=0, record_iterations=True
    )
    # idle until 5 ms, then prompt 1 whole and a chunk of prompt 0 filling to 32 ms: 5 + 10 +
    # 10 + 7 tokens; the rest of prompt 0 after it (23 tokens: 32 + 10 + 23 = 65 ms)
    assert waited.it_start[0] == pytest.approx(0.005)
    assert waited.first_token_s[1] <= 0.032 + 1e-9
    assert waited.first_token_s[0] <= 0.2
    assert metrics.tdg(inst, waited) == pytest.approx(6.0)
    assert check(inst, waited) == []
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    assert metrics.tdg(inst, waited) == pytest.approx(exact.objective)
    # by name, as lns starts it
    assert tdg_search._run(inst, "deadline-packing-wait/0", inst, 0)[0] == pytest.approx(6.0)


def test_deadline_packing_waits_with_decodes_only():
    """C (10 tokens at 0, 3 output tokens), A (30 at 15 ms, TTFT 300 ms), B (10 at 25 ms, TTFT
    30 ms): at 20 ms A's prefill would run to 60 ms past B's latest start (35 ms); the waiting
    variant runs C's decode alone (20-30 ms), then packs B whole and a chunk of A (30-55 ms)."""
    from slolab.sim import run

    inst = hand_window(
        [10, 30, 10], [0.1, 0.3, 0.03], [1.0] * 3, arrival=[0.0, 0.015, 0.025], output=[3, 1, 1]
    )
    packed = run(inst, tdg_search.DeadlineAdmission(pack=True), seed=0, record_iterations=True)
    assert packed.first_token_s[2] > 0.055  # B after A's 20-60 ms iteration: late
    waited = run(
        inst, tdg_search.DeadlineAdmission(pack=True, wait=True), seed=0, record_iterations=True
    )
    a, b = waited.entry_offsets[1], waited.entry_offsets[2]
    assert waited.it_start[1] == pytest.approx(0.02)
    assert waited.it_end[1] == pytest.approx(0.03)
    assert list(waited.entry_request[a:b]) == [0]
    assert list(waited.entry_phase[a:b]) == [1]  # C's decode alone
    assert waited.first_token_s[2] <= 0.055 + 1e-9
    assert metrics.tdg(inst, waited) > metrics.tdg(inst, packed)
    assert check(inst, waited) == []


def test_deadline_packing_does_not_wait_without_an_urgent_arrival():
    """With the second prompt's TTFT at 200 ms nothing is urgent: the waiting variant runs
    exactly as packing does."""
    from slolab.sim import run

    inst = hand_window([30, 10], [0.2, 0.2], [1.0, 1.0], arrival=[0.0, 0.005])
    packed = run(inst, tdg_search.DeadlineAdmission(pack=True), seed=0, record_iterations=True)
    waited = run(
        inst, tdg_search.DeadlineAdmission(pack=True, wait=True), seed=0, record_iterations=True
    )
    assert np.array_equal(waited.it_start, packed.it_start)
    assert np.array_equal(waited.first_token_s, packed.first_token_s)
    assert packed.it_start[0] == 0.0


def test_lns_without_slice_moves_is_the_former_search(code_window):
    """Without slice_after, lns takes the same steps as before the slice move existed: seed 3,
    40 steps, the value and schedule the former code gave (recorded from it)."""
    from fingerprint import assert_matches, fingerprint, schedule_parts

    schedule, report = tdg_search.steered_search(
        code_window, seed=3, time_limit=600, max_steps=40, quiet=True
    )
    # the former steered_search on this window, seed 3, 40 steps: deadline-admission/1024,
    # 2 improvements, TDG 1486.6836792790448
    assert report.tdg == pytest.approx(1486.6836792790448, rel=1e-12)
    assert report.start_policy == "deadline-admission/1024"
    assert (report.improvements, report.slices) == (2, 0)
    # the schedule's entries exactly; its iterations' earliest starts (65.4 s summed) and the
    # TDG within tests/fingerprint.py's tolerance
    recorded = [
        "2160a78543d429cf",
        [[65.4066816057963, 103.320873622482, 65.4066816057963], 1486.68367927904],
    ]
    assert_matches(fingerprint(schedule_parts(schedule), report.tdg), recorded, "lns seed 3")


def test_lns_slice_moves_after_a_stall_replay_clean(code_window):
    """With slice_after, the exact slice moves start from the steering's incumbent: the result
    is at least it, replays to the reported value and is checker-clean."""
    schedule, report = tdg_search.steered_search(
        code_window, seed=0, time_limit=3.0, max_steps=20, slice_after=5, quiet=True
    )
    out = replay(code_window, schedule)
    assert metrics.tdg(code_window, out) == pytest.approx(report.tdg, rel=1e-12)
    assert report.tdg >= report.steered_tdg - 1e-9
    assert report.steered_tdg >= report.start_tdg
    assert report.slices_optimal <= report.slices
    assert check(code_window, out) == []


def test_lns_master_step_never_below_the_plain_search(code_window):
    """With master_limit, the steering takes the same steps (same seed) and the integer
    master's steerings only replace its incumbent by a higher run: at least the plain lns,
    replays to the reported value, checker-clean."""
    plain_schedule, plain = tdg_search.steered_search(
        code_window, seed=2, time_limit=600, max_steps=30, quiet=True
    )
    schedule, report = tdg_search.steered_search(
        code_window, seed=2, time_limit=600, max_steps=30, quiet=True, master_limit=8.0
    )
    assert report.steered_tdg == plain.tdg
    assert report.tdg >= plain.tdg
    assert report.master_candidates == 3 * (tdg_search.MASTER_POLICIES + 1)
    assert report.master_tdg >= plain.tdg - 1e-6  # the MILP starts from the incumbent
    if not report.master_kept:
        assert schedule == plain_schedule
    out = replay(code_window, schedule)
    assert metrics.tdg(code_window, out) == pytest.approx(report.tdg, rel=1e-12)
    assert check(code_window, out) == []


def test_master_steerings_give_up_and_plan():
    """The plan's steerings: a given-up first token gets the give-up TTFT factor, a kept one
    its planned completion (clipped) or a higher priority; a request without a plan, 1."""
    inst = horizon_window("azure_code_2023", n=3, seed=0, load="high", max_output_tokens=0)
    wl = inst.workload
    kept = np.array([True, False, False])
    given_up = np.array([False, True, False])
    completion = np.asarray(wl.arrival_s, dtype=float) + 0.25 * np.asarray(wl["ttft_slo_s"])
    got = tdg_search.master_steerings(inst, kept, given_up, completion)
    assert np.array_equal(got["give-up"][1], [1.0, tdg_search.GIVE_UP_TTFT_FACTOR, 1.0])
    assert np.allclose(got["planned"][1], [0.5, tdg_search.GIVE_UP_TTFT_FACTOR, 1.0])
    assert np.array_equal(got["kept-first"][0], [tdg_search.KEPT_PRIORITY_FACTOR, 1.0, 1.0])
    assert np.array_equal(got["give-up"][0], [1.0, 1.0, 1.0])
