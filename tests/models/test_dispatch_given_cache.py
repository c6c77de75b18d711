"""dispatch-scale (HyperFlexis) with a snapshot's given prefix cache: the exact models charge
each prefill its uncached tokens, their attention over the cached prefix, and every decode the
whole context, as the engine does (hand cases, a seeded battery: MILP == CP-SAT == exhaustive
search, replay equality, checker clean, bound above the optimum, heuristics clean), an
all-zero column decides as no column, and the builder cuts Mooncake windows with the cache."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dispatch_scale_cases import solved, window
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.compare import compare
from slolab.instances.records import Workload, cached_prompt_tokens
from slolab.models.dispatch_bounds import relaxation_bound
from slolab.models.dispatch_lns import lives_window, lns, online_decision
from slolab.models.dispatch_scale import DispatchScale, ScaleWindow, decision_schedule
from slolab.problems import build_instance
from slolab.problems.dispatch_scale import LNS_STARTS, online_start
from slolab.sim import check, replay
from slolab.solvers import Status, solve
from slolab.timing import LinearTiming

SOLVERS = ("highs", "cpsat", "brute")
# ROUND plus 1 us per unit of prefill attention work and 10 us per KV token a decode reads
ATTENTION = LinearTiming(
    0.010,
    {
        "prefill_tokens": 1e-3,
        "prefill_attention_work": 1e-6,
        "decode_tokens": 2e-3,
        "decode_kv_tokens": 1e-5,
    },
    name="round-attention",
)


def test_cached_prefix_prefill_and_whole_context_decode_by_hand():
    """One 100-token prompt, 96 of it cached, two output tokens: the prefill computes 4 tokens
    over the 96 cached, the decode reads all 101."""
    inst = window([0.0], [100], [2], [0.05], [0.05], max_servers=1, timing=ATTENTION, cached=[96])
    for solver in SOLVERS:
        res, out = solved(DispatchScale(inst), solver)
        # prefill: 0.010 + 4 x 0.001 + 4 (96 + 5/2) x 1e-6 = 0.014394;
        # decode: 0.010 + 0.002 + 101 x 1e-5 = 0.01301, ends 0.027404
        np.testing.assert_allclose(out.tokens_of(0), [0.014394, 0.027404], rtol=1e-12)
        # J = 1 - 0.5 x 0.027404 = 0.986298
        assert res.objective == pytest.approx(0.986298, abs=1e-12)
    # without the cache: prefill 0.010 + 0.100 + 5050 x 1e-6 = 0.11505 > 0.05, missed; the
    # worker still serves it: 0.11505 + 0.01301 = 0.12806, J = -0.5 x 0.12806 = -0.06403
    bare = window([0.0], [100], [2], [0.05], [0.05], max_servers=1, timing=ATTENTION)
    assert solved(DispatchScale(bare), "brute")[0].objective == pytest.approx(-0.06403, abs=1e-12)


def test_the_cache_turns_two_prefills_into_one_batch_by_hand():
    """Two 100-token prompts at 0, TTFT 0.13, one worker: with 96 tokens of B cached both meet
    in one batch; without, only one meets."""
    args = ([0.0, 0.0], [100, 100], [1, 1], [0.13, 0.13], [0.0, 0.0])
    cached = window(*args, max_servers=1, cached=[0, 96])
    res, out = solved(DispatchScale(cached), "brute")
    # one batch of 100 + 4 tokens: 0.010 + 0.104 = 0.114 <= 0.13, both met (B then A would
    # end at 0.014 + 0.110 = 0.124), J = 1 - 0.5 x 0.114 = 0.943
    assert res.objective == pytest.approx(0.943, abs=1e-12)
    np.testing.assert_allclose(out.first_token_s, [0.114, 0.114], rtol=1e-12)
    for solver in ("highs", "cpsat"):
        assert solved(DispatchScale(cached), solver)[0].objective == pytest.approx(0.943)
    # without: a batch takes 0.210 (both miss); one after the other 0.110 then 0.220, one
    # met: J = 0.5 - 0.5 x 0.220 = 0.39
    bare = window(*args, max_servers=1)
    assert solved(DispatchScale(bare), "brute")[0].objective == pytest.approx(0.39, abs=1e-12)


@st.composite
def cached_window(draw):
    """2-3 requests, 1-2 initial workers of 2, outputs of 1-2 tokens, each prompt's cached
    prefix 0 to prompt - 1 tokens; the attention timing."""
    n = draw(st.integers(2, 3))
    arrival = sorted(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    prompt = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    cached = [draw(st.integers(0, p - 1)) for p in prompt]
    return window(
        [a / 100 for a in arrival],
        prompt,
        draw(st.lists(st.integers(1, 2), min_size=n, max_size=n)),
        draw(st.lists(st.sampled_from([0.02, 0.04, 0.08, 0.2]), min_size=n, max_size=n)),
        draw(st.lists(st.sampled_from([0.005, 0.02]), min_size=n, max_size=n)),
        servers=draw(st.integers(1, 2)),
        max_servers=2,
        startup_s=draw(st.sampled_from([0.05, 0.15])),
        weight=draw(st.sampled_from([0.0, 0.5, 3.0])),
        slot_s=0.1,
        timing=ATTENTION,
        cached=cached,
    )


HEURISTICS = ["hyperflexis", "hyperflexis-scaling", "round-robin"]


@settings(max_examples=8, deadline=None, derandomize=True)
@given(cached_window())
def test_battery_exact_models_agree_and_bound_the_heuristics(inst):
    """Random windows with random cached prefixes: MILP, CP-SAT and exhaustive search OPTIMAL
    and equal, each replayed to its objective checker-clean; the relaxation bound at least
    the optimum; every heuristic checker-clean and at most the optimum."""
    values = [solved(DispatchScale(inst), s)[0].objective for s in SOLVERS]
    assert values[1] == pytest.approx(values[0], abs=1e-9)
    assert values[2] == pytest.approx(values[0], abs=1e-9)
    for integral in (False, True):
        assert values[0] <= relaxation_bound(inst, buckets=8, integral=integral).bound + 1e-9
    frame = compare(inst, HEURISTICS, time_limit=30)
    assert (frame.violations == 0).all()
    assert (frame.objective <= values[0] + 1e-9).all()


@settings(max_examples=4, deadline=None, derandomize=True)
@given(cached_window())
def test_an_all_zero_column_decides_as_no_column(inst):
    """The column of zeros: the same optimum and the same schedule as without the column."""
    zeros = inst.workload.with_columns(cached_tokens=np.zeros(len(inst.workload), np.int64))
    bare_wl = Workload({c: inst.workload[c] for c in inst.workload.columns if c != "cached_tokens"})
    for solver in ("highs", "brute"):
        with_zeros = solve(DispatchScale(dataclasses.replace(inst, workload=zeros)), solver=solver)
        bare = solve(DispatchScale(dataclasses.replace(inst, workload=bare_wl)), solver=solver)
        assert with_zeros.objective == bare.objective
        assert with_zeros.schedule == bare.schedule


def test_builder_gives_a_mooncake_window_its_cache():
    """``cache=True`` on a Mooncake window: the rows keep their lengths, the cached prefixes
    are whole 512-token blocks below each prompt, and the exact optimum replays clean."""
    plain = build_instance("dispatch-scale", trace="mooncake_conversation", n=3, seed=1)
    inst = build_instance("dispatch-scale", trace="mooncake_conversation", n=3, seed=1, cache=True)
    np.testing.assert_array_equal(plain.workload.prompt_tokens, inst.workload.prompt_tokens)
    cached = cached_prompt_tokens(inst.workload)
    # seed 1 cuts rows with prompts 8339, 924, 2079: 15, 1 and 2 blocks of them cached
    assert cached.tolist() == [7680, 512, 1024]
    assert inst.settings["cache"] is True and "cache" not in plain.settings
    res = solve(DispatchScale(inst), solver="brute", time_limit=60)
    assert res.status == Status.OPTIMAL
    out = replay(inst, res.schedule)
    assert check(inst, out) == []
    assert DispatchScale(inst).evaluate(res.schedule) == pytest.approx(res.objective, abs=1e-12)
    # HyperFlexis's run reads back as a decision: its prefill entries are the uncached tokens
    decision = online_decision(ScaleWindow.of(inst), inst, online_start("hyperflexis"), seed=0)
    assert decision is not None
    schedule = decision_schedule(ScaleWindow.of(inst), decision)
    assert res.objective >= DispatchScale(inst).evaluate(schedule) - 1e-12


def test_builder_refuses_a_cache_without_block_ids():
    """The task mixes and a trace without hash_ids have no cache to replay: one-line errors."""
    with pytest.raises(ValueError, match="cache needs a trace with prompt block ids"):
        build_instance("dispatch-scale", n=3, seed=0, cache=True)
    with pytest.raises(ValueError, match="needs the workload's hash_ids column"):
        build_instance("dispatch-scale", trace="azure_code_2023", n=3, seed=0, cache=True)


def test_lns_on_a_cached_mooncake_window_replays_within_the_bound():
    """The search on a cached Mooncake window (12 requests, real outputs capped at 8) replays
    to its objective checker-clean, at least its start, at most the relaxation bound."""
    inst = build_instance(
        "dispatch-scale",
        trace="mooncake_conversation",
        n=12,
        seed=2,
        cache=True,
        max_output_tokens=8,
        servers=1,
        max_servers=3,
        rate=2.0,
    )
    found = lns(inst, seed=0, time_limit=1.0, starts=LNS_STARTS)
    schedule = decision_schedule(lives_window(ScaleWindow.of(inst), found.decision), found.decision)
    out = replay(inst, schedule)
    assert check(inst, out) == []
    assert DispatchScale(inst).evaluate(schedule) == pytest.approx(found.objective, abs=1e-12)
    assert found.start_objective - 1e-12 <= found.objective <= relaxation_bound(inst).bound + 1e-9
