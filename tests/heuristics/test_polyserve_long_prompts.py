"""Co-located PolyServe's admission on long prompts: the prefill it predicts pays the prefill
attention the batch former charges, so a request placed before its first-token deadline meets
it; where no prefill attention is charged the decisions are the former ones."""

import dataclasses

import numpy as np
import pytest
from fingerprint import assert_matches, fingerprint, load_recording
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics.policies import make_scheduler
from slolab.heuristics.polyserve import (
    PolyServeParams,
    Profile,
    chunk_attention_work,
    polyserve_scheduler,
    prefill_attention_s,
)
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check
from slolab.timing import LinearTiming, preset
from test_polyserve_held_index import LINE, bursty

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token + 0.1 us per unit of attention work
ATTENTION = LinearTiming(
    0.010,
    {
        "prefill_tokens": 1e-4,
        "decode_tokens": 1e-4,
        "decode_kv_tokens": 1e-6,
        "prefill_attention_work": 1e-7,
    },
    name="attention",
)


def long_prompts(seed: int, n: int = 40) -> Instance:
    """``n`` Poisson arrivals at 1 req/s, prompts of 2,000 to 24,000 tokens (the Mooncake
    trace's range), TTFT 0.5/1/2 s, TPOT tiers 30/50/100 ms, on a fleet of 2 servers under the
    llama2-7b-h100 preset (prefill attention 1.5e-9 s per unit of work)."""
    rng = np.random.default_rng(seed)
    workload = Workload(
        {
            "arrival_s": np.cumsum(rng.exponential(1.0, n)),
            "prompt_tokens": rng.integers(2000, 24000, n),
            "output_tokens": rng.integers(5, 200, n),
            "ttft_slo_s": rng.choice([0.5, 1.0, 2.0], n),
            "tpot_slo_s": rng.choice([0.03, 0.05, 0.1], n),
        }
    )
    cluster = Cluster(
        servers=2, kv_capacity_tokens=200_000, max_batch_size=256, max_batch_tokens=2048
    )
    return Instance("long", workload, cluster, preset("llama2-7b-h100"))


def test_requests_placed_before_their_deadline_meet_their_ttft_on_long_prompts():
    """4 seeds x 40 long prompts on 2 servers: every request co-located PolyServe places before
    its first-token deadline (admitted on its predicted TTFT, not as lost) meets its TTFT.
    Before the admission charged prefill attention, 14 of the 145 placed on time missed it."""
    placed_on_time = 0
    for seed in range(4):
        sched = make_scheduler("polyserve", long_prompts(seed), mode="colocated", servers=2)
        out = sched.run(sched.instance, seed=seed)
        assert check(sched.instance, out) == []
        wl = sched.instance.workload
        deadline = wl.arrival_s + np.asarray(wl["ttft_slo_s"], dtype=float)
        on_time = out.routed_s <= deadline
        late_first = out.first_token_s > deadline + 1e-9
        assert not (on_time & late_first).any()
        placed_on_time += int(on_time.sum())
    # most requests are placed on time (125 with every iteration within the TPOT, 130 with a
    # prompt alone prefilled as the server allows): the property is not met by refusing
    assert placed_on_time == 130


#: Digests of the outcomes (every recorded array and scaling event) of the code before the
#: co-located admission charged prefill attention: it charges none with chunk_timing="profile"
#: (the paper-literal batch former), disaggregated (no co-located admission) and under a timing
#: model without prefill attention, so these runs must not change. The co-located ones run with
#: every iteration within the TPOT (``ALWAYS``), the rule of that code. ``no-attention`` was
#: recorded again when a request no server can hold (its 50,000-token prompt) stopped counting
#: as held in its tier for good: the same 119 finished and 49 met, its tier's server drained
#: once idle (6 scaling events, not 5), 48.79 server-seconds instead of 57.13.
ALWAYS = PolyServeParams(tpot_bound="always")
#: Recorded from the code before the admission charged prefill attention (its SHA-256 digests,
#: checked here first), as fingerprints (tests/fingerprint.py) in
#: ``test_polyserve_long_prompts.json``: decisions exactly, times within 1e-10.
FORMER = load_recording(__file__)


def _former_case(case: str, seed: int) -> tuple[Instance, object]:
    """The instance and scheduler of one case of :data:`FORMER`."""
    if case == "no-attention":
        base = Instance(
            "bursts",
            bursty(seed),
            Cluster(servers=4, kv_capacity_tokens=20_000, max_batch_size=64, max_batch_tokens=4096),
            LINE,
        )
        return base, polyserve_scheduler(base, mode="colocated", servers=4, params=ALWAYS)
    base = long_prompts(seed)
    if case == "profile":
        params = PolyServeParams(chunk_timing="profile", tpot_bound="always")
        return base, polyserve_scheduler(base, mode="colocated", servers=2, params=params)
    sched = polyserve_scheduler(base, mode="disaggregated", servers=2)
    # the KV transfers all in parallel, as recorded (they queue on each prefill server's link
    # by default since)
    cluster = dataclasses.replace(sched.instance.cluster, kv_transfer_queued=False)
    return base, dataclasses.replace(
        sched, instance=dataclasses.replace(sched.instance, cluster=cluster)
    )


@pytest.mark.parametrize("case", sorted(FORMER))
def test_runs_without_prefill_attention_charged_keep_the_former_decisions(case):
    """Paper-literal chunk timing, disaggregated, and a model without prefill attention: the
    same decisions and times as before the admission charged prefill attention."""
    _, sched = _former_case(case, seed=1)
    out = sched.run(sched.instance, seed=1, record_iterations=True)
    assert check(sched.instance, out) == []
    fields = [(f.name, getattr(out, f.name)) for f in dataclasses.fields(out)]
    arrays = [(name, value) for name, value in fields if isinstance(value, np.ndarray)]
    assert_matches(fingerprint(arrays, out.scale_events), FORMER[case], case)


def test_prefill_attention_seconds_per_unit_of_work():
    """The largest attention coefficient of the model's lines; 0 for a model without one."""
    assert prefill_attention_s(ATTENTION) == pytest.approx(1e-7, rel=1e-12)
    assert prefill_attention_s(LINE) == 0.0
    assert prefill_attention_s(preset("llama2-7b-h100")) == pytest.approx(1.5146e-9, rel=1e-3)


def test_chunk_attention_work_by_hand():
    """Prompts of at most 10 tokens: 4 tokens ending one, 7 + 8 + 9 + 10 = 34; 10 tokens, one
    whole prompt, 55; 13 tokens, a whole prompt and the last 3 of another, 55 + 27 = 82."""
    assert chunk_attention_work(4, 10) == 34.0
    assert chunk_attention_work(10, 10) == 55.0
    assert chunk_attention_work(13, 10) == 82.0
    assert chunk_attention_work(0, 10) == 0.0


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.integers(1, 9).flatmap(
        lambda longest: st.tuples(
            st.just(longest), st.lists(st.integers(1, longest), min_size=1, max_size=6)
        )
    )
)
def test_chunk_attention_work_bounds_every_window_of_a_queue(case):
    """Brute force over every window of ``c`` consecutive prompt tokens of a queue of prompts
    of at most ``longest`` tokens: the largest sum of positions is at most
    chunk_attention_work(c, longest), with equality when every prompt has ``longest`` tokens."""
    longest, lengths = case
    positions = np.concatenate([np.arange(1, n + 1) for n in lengths])
    full = np.tile(np.arange(1, longest + 1), len(lengths))
    for c in range(1, len(positions) + 1):
        best = max(int(positions[i : i + c].sum()) for i in range(len(positions) - c + 1))
        assert best <= chunk_attention_work(c, longest)
        tight = max(int(full[i : i + c].sum()) for i in range(len(full) - c + 1))
        assert tight == chunk_attention_work(c, longest)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    kv=st.floats(0.0, 50_000.0),
    budget=st.floats(0.012, 0.2),
    batch=st.integers(1, 64),
    longest=st.integers(1, 30_000),
)
def test_max_chunk_is_the_largest_chunk_within_the_budget(kv, budget, batch, longest):
    """Profile.max_chunk against a scan of every chunk: the largest ``c`` whose profile time at
    ``batch + c`` tokens plus the attention of chunk_attention_work(c, longest) fits; with no
    attention charged it is max_tokens - batch."""
    prof = _profile()
    alpha = prefill_attention_s(ATTENTION)
    got = prof.max_chunk(kv, budget, batch, alpha, longest)

    def fits(c: int) -> bool:
        return prof.time(batch + c, kv) + alpha * chunk_attention_work(c, longest) <= budget

    scan = max((c for c in range(1, 2000) if fits(c)), default=None)
    if scan is None:
        assert got < 1
    else:
        assert got == scan
    assert prof.max_chunk(kv, budget, batch, 0.0, longest) == prof.max_tokens(kv, budget) - batch


_PROFILES: dict[str, Profile] = {}


def _profile() -> Profile:
    """The profile of :data:`ATTENTION` (built once: the table has 223 x 65 points)."""
    if "attention" not in _PROFILES:
        _PROFILES["attention"] = Profile(ATTENTION, kv_capacity_tokens=40_000)
    return _PROFILES["attention"]
