"""ProServe's exact models: tdg-batch (one iteration) and tdg-horizon (a window), on hand cases
and seeded random batteries (MILP == CP-SAT == brute force; exact >= heuristics); the
tdg-horizon bound (time-bucketed LP): optimum <= bound <= ideal, strictly below on a loaded
window; its chain family (completion-leader rows): optimum <= chain <= bucket, strictly
tighter on a hand window; its start rows: optimum <= with <= without, strictly tighter on a hand
window."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.heuristics.proserve import SlideBatching, SlideBatchingParams, one_iteration_schedule
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models.proserve import TdgBatch, TdgHorizon, proserve_timing
from slolab.models.tdg_bound import TdgHorizonBound
from slolab.sim import check, metrics, replay
from slolab.solvers import Status, build_model, solve
from slolab.timing import LinearTiming
from tdg_horizon_cases import TIMING, agreed_optimum, drawn_rows, horizon_instance, two_prompts


def batch_instance(
    arrival, prompt, output, ttft, tpot, priority, running, remaining, generated, *, now, budget
) -> Instance:
    """A tdg-batch snapshot from per-request lists (w_prefill 3, w_decode 1)."""
    wl = Workload(
        {
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft_slo_s": ttft,
            "tpot_slo_s": tpot,
            "priority": priority,
            "running": running,
            "remaining_prefill_tokens": remaining,
            "generated_tokens": generated,
        }
    )
    settings_ = {"scheduling_time_s": now, "latency_budget_s": budget, "eta_s": budget}
    settings_.update({"w_prefill": 3.0, "w_decode": 1.0})
    return Instance(
        "hand", wl, Cluster(servers=1, kv_capacity_tokens=10_000), TIMING, "tdg-batch", settings_
    )


def hand_batch() -> Instance:
    """r0 decoding (slack 0.1 s, gain 2), r1 decoding (slack 0.02 s, gain 1), r2 waiting with 20
    prompt tokens (slack 0.05 s, gain 3); budget 0.05 s."""
    return batch_instance(
        arrival=[0.0, 0.5, 0.9],
        prompt=[5, 5, 20],
        output=[10, 10, 5],
        ttft=[0.5, 0.4, 0.15],
        tpot=[0.2, 0.06, 0.1],
        priority=[2.0, 1.0, 1.0],
        running=[True, True, False],
        remaining=[0, 0, 20],
        generated=[3, 2, 0],
        now=1.0,
        budget=0.05,
    )


def test_tdg_batch_hand_optimum_every_backend():
    """The knapsack optimum is r0 + r2 (gain 5) on MILP, CP-SAT and brute force; it replays."""
    inst = hand_batch()
    # deadlines: r0 0 + 0.5 + 3 * 0.2 = 1.1; r1 0.5 + 0.4 + 2 * 0.06 = 1.02; r2 0.9 + 0.15 = 1.05
    # r0 + r2: T = 0.01 + 0.002 + 0.020 = 0.032 <= 0.05 and both meet (1.032 <= 1.05, 1.1)
    # r1 needs T <= 0.02: r1 + r0 = 0.014 earns 1 + 2 = 3 < 5; r1 + r2 = 0.032 misses r1
    for solver in ("highs", "cpsat", "brute"):
        res = solve(build_model("tdg-batch", inst), solver=solver, time_limit=20)
        assert res.status == Status.OPTIMAL
        assert res.objective == pytest.approx(5.0)
        out = replay(inst, res.schedule)
        assert metrics.tdg_emitted(inst, out) == pytest.approx(5.0)
        assert check(inst, out) == []


def test_slide_batching_hand_order_and_choice():
    """SlideBatching: budget 0.05 s, r1 URGENT, order r1, r2, r0; all three fit; TDG 5."""
    inst = hand_batch()
    policy = SlideBatching(SlideBatchingParams(eta_s=0.05))
    schedule = one_iteration_schedule(inst, policy)
    # exec: r0, r1 0.002 s, r2 0.020 s; phi_a = 0.05 / (0.05 - 0.01) * 0.024 = 0.03
    # remain 0.1, 0.02, 0.05: only r1 (0.02 < 0.03) is URGENT; NORMAL by remain: r2, r0
    entries = schedule.iterations[0][0].entries
    assert entries == ((2, "prefill", 20), (1, "decode", 1), (0, "decode", 1))
    out = replay(inst, schedule)
    # T = 0.01 + 0.004 + 0.020 = 0.034: r1 (due 1.02) is late; r0 (2) and r2 (3) earn 5
    assert metrics.tdg_emitted(inst, out) == pytest.approx(5.0)


def test_partial_chunk_never_helps_one_iteration():
    """Brute force over every chunk size finds the whole-remainder optimum of the MILP."""
    inst = batch_instance(
        arrival=[0.0, 0.0],
        prompt=[4, 3],
        output=[3, 3],
        ttft=[0.02, 0.5],
        tpot=[0.01, 0.01],
        priority=[1.0, 2.0],
        running=[False, True],
        remaining=[4, 0],
        generated=[0, 1],
        now=0.0,
        budget=0.03,
    )
    # r0 whole (4 tokens) alone: 0.014 <= 0.02, gain 3; with r1's decode 0.016, gain 3 + 2 = 5
    brute = solve(TdgBatch(inst), solver="brute", time_limit=20)
    milp = solve(TdgBatch(inst), solver="highs", time_limit=20)
    assert brute.objective == pytest.approx(5.0) == milp.objective


def test_tdg_batch_rejects_attention_timing():
    """The exact models refuse a timing model that charges prefill attention (quadratic)."""
    inst = hand_batch()
    quadratic = LinearTiming(0.01, {"prefill_tokens": 1e-3, "prefill_attention_work": 1e-9})
    with pytest.raises(ValueError, match="quadratic"):
        TdgBatch(Instance("q", inst.workload, inst.cluster, quadratic, "tdg-batch", inst.settings))


@st.composite
def random_batch(draw) -> Instance:
    """A snapshot of 2-4 requests with prompts of at most 4 tokens left."""
    n = draw(st.integers(2, 4))
    rows = []
    for _ in range(n):
        decoding = draw(st.booleans())
        prompt = draw(st.integers(1, 4))
        output = draw(st.integers(2, 4))
        rows.append(
            {
                "prompt": prompt,
                "output": output,
                "running": decoding,
                "remaining": 0 if decoding else prompt,
                "generated": draw(st.integers(1, output - 1)) if decoding else 0,
                "ttft": draw(st.sampled_from([0.005, 0.012, 0.02, 0.03])),
                "tpot": draw(st.sampled_from([0.003, 0.006])),
                "priority": draw(st.sampled_from([1.0, 2.0])),
            }
        )
    return batch_instance(
        arrival=[0.0] * n,
        prompt=[r["prompt"] for r in rows],
        output=[r["output"] for r in rows],
        ttft=[r["ttft"] for r in rows],
        tpot=[r["tpot"] for r in rows],
        priority=[r["priority"] for r in rows],
        running=[r["running"] for r in rows],
        remaining=[r["remaining"] for r in rows],
        generated=[r["generated"] for r in rows],
        now=0.001,
        budget=draw(st.sampled_from([0.015, 0.02, 0.03])),
    )


@settings(max_examples=25, deadline=None, derandomize=True)
@given(random_batch())
def test_tdg_batch_battery_milp_cpsat_brute_agree(inst):
    """Random snapshots: MILP == CP-SAT == brute force, replays equal, checker clean, and the
    optimum is at least SlideBatching's choice when that choice keeps to the budget."""
    values = agreed_optimum(TdgBatch, inst, metrics.tdg_emitted)
    schedule = one_iteration_schedule(inst, SlideBatching(SlideBatchingParams(eta_s=0.015)))
    out = replay(inst, schedule)
    if out.n_iterations and out.it_end[0] - out.it_start[0] <= inst.settings["latency_budget_s"]:
        assert metrics.tdg_emitted(inst, out) <= values[0] + 1e-9


# -- tdg-horizon -------------------------------------------------------------------------------


def test_tdg_horizon_hand_optimum():
    """Two requests at 0: prefill both at once (both first tokens on time) beats any order: 9."""
    inst = horizon_instance(
        arrival=[0.0, 0.0],
        prompt=[2, 2],
        output=[2, 1],
        ttft=[0.02, 0.015],
        tpot=[0.005, 0.005],
        priority=[1.0, 2.0],
    )
    # together: T = 0.01 + 0.004 = 0.014 <= 0.015, 0.02: 3 * 1 + 3 * 2 = 9; r0's decode then
    # ends 0.014 + 0.012 = 0.026 > 0.025 (late); r0 first: r1 at 0.024 > 0.015 (late), 3 + 1
    for solver in ("highs", "cpsat", "brute"):
        res = solve(TdgHorizon(inst), solver=solver, time_limit=30)
        assert res.status == Status.OPTIMAL
        assert res.objective == pytest.approx(9.0)
        out = replay(inst, res.schedule)
        assert metrics.tdg(inst, out) == pytest.approx(9.0)
        assert check(inst, out) == []


@st.composite
def random_window(draw) -> Instance:
    """Two requests with prompts of 1-2 tokens and outputs of 1-2 tokens, three iterations."""
    rows = [
        {
            "arrival": draw(st.sampled_from([0.0, 0.005, 0.012])),
            "prompt": draw(st.integers(1, 2)),
            "output": draw(st.integers(1, 2)),
            "ttft": draw(st.sampled_from([0.012, 0.02, 0.03])),
            "tpot": draw(st.sampled_from([0.005, 0.012])),
            "priority": draw(st.sampled_from([1.0, 2.0])),
        }
        for _ in range(2)
    ]
    rows.sort(key=lambda r: r["arrival"])
    return horizon_instance(
        arrival=[r["arrival"] for r in rows],
        prompt=[r["prompt"] for r in rows],
        output=[r["output"] for r in rows],
        ttft=[r["ttft"] for r in rows],
        tpot=[r["tpot"] for r in rows],
        priority=[r["priority"] for r in rows],
        k=3,
    )


@settings(max_examples=20, deadline=None, derandomize=True)
@given(random_window())
def test_tdg_horizon_battery_milp_cpsat_brute_agree(inst):
    """Random windows (K = 3): MILP == CP-SAT == brute force; replays equal; checker clean."""
    agreed_optimum(TdgHorizon, inst, metrics.tdg)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(random_window())
def test_tdg_horizon_exact_at_least_every_heuristic(inst):
    """With the default K (outputs + requests) the optimum is >= every online policy."""
    inst = Instance(
        inst.name,
        inst.workload,
        inst.cluster,
        inst.timing,
        inst.problem,
        {"w_prefill": 3.0, "w_decode": 1.0},
    )
    methods = ["highs", "slide-batching", "vllm-fcfs", "sarathi-fcfs", "sarathi-priority"]
    frame = compare(inst, methods + ["fairbatching", "weighted-vtc"], time_limit=30)
    exact = frame.set_index("method").loc["highs"]
    assert exact["status"] == "OPTIMAL"
    assert (frame["objective"] <= exact["objective"] + 1e-9).all()
    assert (frame["violations"] == 0).all()


def test_proserve_timing_is_affine_without_attention():
    """The ProServe timing: intercept 4.35 ms, 19.07 us per token, no attention term."""
    t = proserve_timing()
    intercept, coef = t.affine()
    assert intercept == pytest.approx(0.0043462501, rel=1e-6)
    assert t.coefficients["prefill_tokens"] == pytest.approx(1.90687e-05, rel=1e-4)
    assert "prefill_attention_work" not in t.coefficients
    # a 1,000-token prefill alone: 4.346 ms + 19.07 ms = 23.41 ms
    assert t.time_of(prefill_tokens=1000, num_prefill_seqs=1) == pytest.approx(0.023415, rel=1e-3)
    assert np.all(coef >= 0)


def test_bound_strictly_below_ideal_on_a_loaded_window():
    """Two 10-token prompts at 0 with TTFT 25 ms: one first token fits; the LP bound is 7.5 < 9."""
    inst = two_prompts()
    # alone: 10 + 10 = 20 ms <= 25; together 10 + 20 = 30 ms > 25; one after the other: 20, 40 ms
    # so the optimum is the priority-2 first token: 3 * 2 = 6 of an ideal 3 + 6 = 9
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    assert exact.objective == pytest.approx(6.0)
    bound = solve(TdgHorizonBound(inst, family="bucket"), solver="highs", time_limit=30)
    assert bound.status == Status.OPTIMAL
    # capacity of [0, 25 ms]: 10 ms g_a + 10 ms g_b + 10 ms (one iteration) <= 25 ms, so the LP
    # takes g_b = 1 and g_a = 0.5: 6 + 3 * 0.5 = 7.5
    assert bound.bound == pytest.approx(7.5, abs=1e-4)
    assert bound.details["ideal"] == pytest.approx(9.0)


def test_release_cuts_strictly_tighter_on_a_loaded_window():
    """A at 0, B and C at 50 ms (TTFT 25 ms): the release cuts give 8, the plain LP 9."""
    inst = horizon_instance(
        [0.0, 0.05, 0.05], [10, 10, 10], [1, 1, 1], [0.1, 0.025, 0.025], [0.01] * 3, [1.0] * 3
    )
    # B and C need 10 + 10 ms each after 50 ms: together 10 + 20 = 30 > 25, so only one of
    # them; A runs in [0, 20]: the optimum is two first tokens, 3 + 3 = 6 of an ideal 9
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    assert exact.objective == pytest.approx(6.0)
    # plain LP: the one fluid iteration of A (by b_j, counted from 0) also emits B's and C's
    # tokens, so [50, 75 ms] holds only their 20 ms of work: every first token, 9
    plain = solve(
        TdgHorizonBound(inst, release_cuts=False, family="bucket"), solver="highs", time_limit=30
    )
    assert plain.bound == pytest.approx(9.0, abs=1e-4)
    # release cuts: B's and C's tokens need iterations inside (50, 75 ms], at least
    # max(phi_B, phi_C) of them: 10 x + 10 x + 10 x <= 25 at phi_B = phi_C = x = 5 / 6, so
    # 3 + 3 * 5 / 3 = 8
    cut = solve(TdgHorizonBound(inst, family="bucket"), solver="highs", time_limit=30)
    assert cut.status == Status.OPTIMAL
    assert cut.bound == pytest.approx(8.0, abs=1e-4)


def proved_optimum(inst: Instance) -> float:
    """The exact MILP's optimum of a small window, proved OPTIMAL."""
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=60)
    assert exact.status == Status.OPTIMAL
    return exact.objective


def proved_bound(inst: Instance, **options):
    """The tdg-horizon bound of a small window with every phase finished (OPTIMAL)."""
    bound = solve(TdgHorizonBound(inst, **options), solver="highs", time_limit=30)
    assert bound.status == Status.OPTIMAL
    return bound


@st.composite
def loaded_window(draw) -> Instance:
    """Two or three requests, prompts of 1-12 tokens, outputs of 1-3 tokens, tight TTFTs."""
    n = draw(st.integers(2, 3))
    return drawn_rows(
        draw,
        n,
        [0.0, 0.004, 0.012],
        (1, 12),
        (1, 3),
        [0.012, 0.02, 0.03, 0.05],
        [0.008, 0.012, 0.03],
    )


@settings(max_examples=15, deadline=None, derandomize=True)
@given(loaded_window())
def test_bound_battery_never_below_optimum_never_above_ideal(inst):
    """Random small windows proved OPTIMAL by the MILP: optimum <= bound <= ideal."""
    optimum = proved_optimum(inst)
    bound = proved_bound(inst)
    assert optimum <= bound.bound + 1e-9
    assert bound.bound <= bound.details["ideal"] + 1e-9
    # the release cuts only add rows: never looser than the plain bucket LP
    plain = solve(TdgHorizonBound(inst, release_cuts=False), solver="highs", time_limit=30)
    assert bound.bound <= plain.bound + 1e-6


def test_chain_strictly_tighter_than_bucket_on_two_prompts():
    """Two 10-token prompts at 0, TTFT 25 ms: bucket LP 7.5, chain LP 6.75, integral 6."""
    inst = two_prompts()
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    # one first token only (alone 10 + 10 = 20 ms, together 10 + 20 = 30 > 25): 3 * 2 = 6
    assert exact.objective == pytest.approx(6.0)
    bucket = solve(TdgHorizonBound(inst, family="bucket"), solver="highs", time_limit=30)
    # one fluid iteration for both: 10 g_a + 10 g_b + 10 <= 25, g_b = 1, g_a = 0.5: 6 + 1.5
    assert bucket.bound == pytest.approx(7.5, abs=1e-4)
    chain = solve(
        TdgHorizonBound(inst, family="chain", integral=False), solver="highs", time_limit=30
    )
    assert chain.status == Status.OPTIMAL
    # they cannot share an iteration (0 + 10 + 10 + 10 = 30 > 25), so each on-time first token
    # leads its own inside (0, 25 ms]: 10 g_a + 10 g_b + 10 (g_a + g_b) <= 25, g_a + g_b <= 1.25;
    # g_b = 1, g_a = 0.25: 6 + 3 * 0.25 = 6.75
    assert chain.bound == pytest.approx(6.75, abs=1e-4)
    assert chain.details["families"]["bucket"] == pytest.approx(7.5, abs=1e-4)
    assert chain.details["tightest"] == "chain"
    # integral first tokens and leaders: g_a + g_b <= 1.25 leaves one: the optimum, 6
    whole = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert whole.status == Status.OPTIMAL
    assert whole.bound == pytest.approx(6.0, abs=1e-4)
    assert whole.details["tightest"] == "chain-integral"


def test_chain_shares_an_iteration_when_it_can():
    """Two 5-token prompts at 0, TTFT 25 ms share one iteration: every bound is the ideal 9."""
    inst = horizon_instance([0.0, 0.0], [5, 5], [1, 1], [0.025, 0.025], [0.01, 0.01], [1.0, 2.0])
    # together 10 + 5 + 5 = 20 <= 25 ms: both first tokens, 3 + 6 = 9 = the ideal
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.objective == pytest.approx(9.0)
    chain = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert chain.bound == pytest.approx(9.0, abs=1e-4)


def drawn_window(draw, arrivals, prompts, ttfts) -> Instance:
    """Two to four requests drawn from the given arrivals, prompt range and TTFTs, one or two
    output tokens, TPOTs of 12 or 30 ms, priorities 1 or 2."""
    n = draw(st.integers(2, 4))
    return drawn_rows(draw, n, arrivals, prompts, (1, 2), ttfts, [0.012, 0.03])


@st.composite
def contended_window(draw) -> Instance:
    """Two to four requests, prompts of 1-12 tokens, one or two output tokens, tight TTFTs."""
    return drawn_window(draw, [0.0, 0.004, 0.012], (1, 12), [0.012, 0.02, 0.03, 0.05])


@settings(max_examples=20, deadline=None, derandomize=True)
@given(contended_window())
def test_chain_battery_between_optimum_and_bucket(inst):
    """Random contended windows proved OPTIMAL: optimum <= chain <= bucket <= ideal."""
    optimum = proved_optimum(inst)
    chain = proved_bound(inst)
    bucket = proved_bound(inst, family="bucket")
    assert optimum <= chain.bound + 1e-6
    assert chain.bound <= bucket.bound + 1e-6
    assert bucket.bound <= bucket.details["ideal"] + 1e-6
    # the chain LP (before the integral phase) lies between the two as well
    lp = chain.details["families"]["chain"]
    assert optimum <= lp + 1e-6 <= bucket.bound + 2e-6


def test_start_rows_strictly_tighter_on_a_late_leader():
    """A at 0 (TTFT 35 ms), B at 5 ms (TTFT 29 ms): chain bound 9, with start rows 6 = optimum."""
    inst = horizon_instance([0.0, 0.005], [10, 10], [1, 1], [0.035, 0.029], [0.01] * 2, [1.0, 2.0])
    # deadlines 35 (A) and 34 ms (B). Shared from 5 ms: 5 + 10 + 10 + 10 = 35 > 34; B alone from
    # 5 ms ends at 25, A after it at 45 > 35; A alone from 0 ends at 20, B after it at 40 > 34:
    # one first token, the priority-2 one: 3 * 2 = 6 of an ideal 9
    exact = solve(TdgHorizon(inst), solver="highs", time_limit=30)
    assert exact.status == Status.OPTIMAL
    assert exact.objective == pytest.approx(6.0)
    # without start rows: A's prompt runs fluidly in [0, 5 ms] and the rest of both prompts in
    # one iteration led by B inside (5, 34 ms]: 5 + 10 + 5 + 10 = 30 <= 34, both on time: 9
    former = solve(TdgHorizonBound(inst, start_rows=False), solver="highs", time_limit=30)
    assert former.status == Status.OPTIMAL
    assert former.bound == pytest.approx(9.0, abs=1e-4)
    # start row (s = 0, u = 5 ms, e = 34 ms; c = max(0, 5 - 0 - 10) = 0): B's prompt, its
    # leader iteration's overhead and A's prompt if A joins B fit in (5, 34 ms]:
    # 10 g_B + 10 x_BB + 10 x_AB <= 29, so with integral leaders A cannot join B, and A leading
    # its own iteration too needs 10 + 10 + 2 x 10 = 40 > 35 ms: one first token, 6
    bound = solve(TdgHorizonBound(inst), solver="highs", time_limit=30)
    assert bound.status == Status.OPTIMAL
    assert bound.bound == pytest.approx(6.0, abs=1e-4)
    assert bound.details["tightest"] == "chain-integral"
    assert sum(level["mip"].get("start_cuts", 0) for level in bound.details["levels"]) >= 1


@st.composite
def staggered_window(draw) -> Instance:
    """Two to four requests at 0 and 5 ms (less than an iteration's 10 ms overhead apart),
    prompts of 6-12 tokens, TTFTs of 25-40 ms."""
    return drawn_window(draw, [0.0, 0.005], (6, 12), [0.025, 0.029, 0.035, 0.04])


def window_of(*requests) -> Instance:
    """A window from (arrival, prompt, output, ttft, tpot, priority) tuples."""
    return horizon_instance(*(list(column) for column in zip(*requests, strict=True)))


# windows of the same ranges where the start rows were seen to cut (numpy draws, seed 2):
# optimum 14, 6 and 15, former bound 20.08, 9 and 18
@example(
    window_of(
        (0.0, 8, 2, 0.04, 0.03, 2.0),
        (0.0, 11, 2, 0.029, 0.012, 1.0),
        (0.005, 7, 1, 0.025, 0.03, 2.0),
        (0.005, 9, 1, 0.04, 0.012, 2.0),
    )
)
@example(
    window_of(
        (0.0, 11, 1, 0.04, 0.03, 1.0),
        (0.0, 12, 1, 0.025, 0.012, 2.0),
        (0.005, 10, 1, 0.029, 0.03, 2.0),
    )
)
@example(
    window_of(
        (0.0, 7, 1, 0.04, 0.03, 2.0),
        (0.005, 7, 2, 0.029, 0.03, 1.0),
        (0.005, 7, 2, 0.029, 0.03, 2.0),
    )
)
@settings(max_examples=30, deadline=None, derandomize=True)
@given(staggered_window())
def test_start_rows_battery_between_optimum_and_former_bound(inst):
    """Random staggered windows proved OPTIMAL: optimum <= bound with start rows <= without."""
    optimum = proved_optimum(inst)
    bound = proved_bound(inst)
    former = proved_bound(inst, start_rows=False)
    assert optimum <= bound.bound + 1e-6
    assert bound.bound <= former.bound + 1e-6
    # the start rows enter the integral phase only: the LP rounds are the former ones
    assert bound.details["families"]["chain"] == former.details["families"]["chain"]
