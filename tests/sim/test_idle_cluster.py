"""The idle-cluster invariant: alone on a server, every co-located policy meets what it could.

Each registered policy runs cuts of real traces with arrivals so sparse that no two requests
overlap (spaced by more than the longest lone service, from the oracle), with one long prompt
in the middle of each cut that a server can hold but that no idle server meets. It must meet exactly
the requests :func:`slolab.sim.idle.idle_met` says an idle server could meet. A policy whose
paper caps its chunks by design is held to the oracle at that cap instead, on every request
(:data:`CAPPED`): the requests it is exempt on are those the cap alone makes it miss. A policy
whose design makes a request wait a bounded time for a server (PolyServe's controller tick) is
held between the oracle started that late and the oracle started at once. A variant kept to
measure a replaced reading of its paper names, per trace, how many it misses
(:data:`FORMER_READINGS`).
"""

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from slolab.heuristics.policies import make_scheduler, policy_names
from slolab.problems.serving import serving_instance
from slolab.sim import check, metrics
from slolab.sim.idle import idle_met, idle_schedule
from slolab.timing import time2bs

#: (trace, requests kept) of each cut: of the first 2,000 requests, those whose first token
#: alone is nearest their TTFT SLO (Mooncake's long prompts; the Azure traces' longest).
CUTS = (("mooncake_conversation", 40), ("azure_conv_2023", 30), ("azure_code_2023", 30))
SERVERS = 2
#: The prompt (tokens) of the request added in the middle of each cut, a copy of the request
#: there with its prompt this long: that of the request a Mooncake-like trace's PolyServe run
#: held for good (docs/polyserve.md, "A request no tier admits"). It fits a server's 200,000
#: KV tokens with its output (at most 381 tokens in the cuts) but not the 190,000 PolyServe's
#: admission fills, and its lone prefill misses its TTFT: no policy may let it hold back the
#: requests behind it.
LONG_PROMPT = 191_374


@dataclass(frozen=True)
class CappedByDesign:
    """A policy whose paper fixes its chunk cap: why, the paper's sentence, and the cap."""

    reason: str
    sentence: str
    cap: Any  # (instance, scheduler) -> tokens per chunk, one or one per request
    #: (instance, scheduler) -> the longest a request can wait, by design, before a server
    #: takes it (None: it starts at its arrival); a request then starts anywhere in
    #: [arrival, arrival + delay], so the policy meets at least what an idle server meets
    #: when it starts ``delay`` late and at most what it meets starting at once
    delay: Any = None


def _own_budget(instance, scheduler):
    return scheduler.policy.token_budget


def _server_cap(instance, scheduler):
    return scheduler.on(instance).cluster.max_batch_tokens


def _controller_tick(instance, scheduler):
    return scheduler.scaler.params.tick_s


def _tightest_running_tpot_budget(instance, scheduler):
    # alone, the tightest TPOT among running requests is the request's own (a request with
    # no TPOT SLO: the tightest in the workload, as the policy takes it with nothing admitted)
    tpot = np.asarray(instance.workload["tpot_slo_s"], dtype=float)
    own = np.where(np.isnan(tpot), np.nanmin(tpot), tpot)
    cap = instance.cluster.max_batch_tokens
    return np.array([min(time2bs(instance.timing, float(t)), cap) for t in own])


SARATHI = (
    "a Sarathi token budget per iteration, the largest batch within the tightest TPOT SLO",
    "For Sarathi-Serve, we configure the batch size to the maximum size without violating "
    "the tightest decode SLO. (SLOs-Serve, Sec. 6)",
    _own_budget,
)
#: Policies that chunk below the server's cap by their paper's design, even alone.
CAPPED = {
    **{
        name: CappedByDesign(*SARATHI)
        for name in (
            "sarathi",
            "sarathi-fcfs",
            "sarathi-priority",
            "edf",
            "fairbatching",
            "weighted-vtc",
            "minimal",
            "random",
        )
    },
    "chunk": CappedByDesign(
        "PolyServe's CO-Chunk baseline: a static token budget",
        "CO-Chunk: A chunked scheduler in a co-located setup, statically configured with a "
        "maximum token budget. (PolyServe, Sec. 6)",
        _own_budget,
    ),
    "slos-serve": CappedByDesign(
        "every batch carries time2bs(tightest running TPOT) tokens, the request's own alone",
        "First, the tightest TPOT SLO among running requests is determined (line 1), which "
        "sets the latency for all scheduled batches. (SLOs-Serve, Sec. 3.2.2, Algorithm 2)",
        _tightest_running_tpot_budget,
    ),
    "polyserve": CappedByDesign(
        "a request pends until the controller's next look (tick_s, 5 ms) gives its empty "
        "tier a server from the idle pool; alone, it then prefills in the server's largest "
        "chunks (no request decodes, so no TPOT bounds the iteration)",
        "When requests start pending for one SLO tier and the idle pool is not empty, "
        "PolyServe will assign the serving instance to the SLO. (PolyServe, Sec. 4.3)",
        _server_cap,
        _controller_tick,
    ),
}
#: Variants kept to measure a reading of a paper that a fix replaced: (policy, trace) -> the
#: number of the oracle's requests it misses there, and why. Elsewhere it is held to the oracle.
FORMER_READINGS = {
    ("polyserve-always-tpot", "mooncake_conversation"): (
        14,
        "PolyServe's former co-located rule, every iteration within the TPOT even with no "
        "request decoding (Sec. 4.7: 'to attain TPOT, the prefill is chunked into more "
        "pieces'): alone, its admission refuses every long prompt of the cut on time and "
        "places it after its TTFT (docs/polyserve.md, the prompt alone on an idle server)",
    ),
}
#: Registered policies that are not co-located (they need another cluster mode).
NOT_COLOCATED = {"static-fcfs": "policy 'static-fcfs' does not run on a colocated cluster"}


@functools.cache
def sparse_cut(trace: str, keep: int):
    """``keep`` requests of ``trace`` nearest their TTFT alone, and at position ``keep // 2``
    a copy of the request there with a :data:`LONG_PROMPT`-token prompt, spaced so none
    overlap."""
    # caching off: the copy with the long prompt would carry its original's few block ids
    # (tests/sim/test_prefix_cache.py holds the oracle with a cache to the engine)
    inst = serving_instance(
        trace,
        seed=0,
        servers=SERVERS,
        limit=2000,
        slos="polyserve+proserve",
        prefix_cache="off",
    )
    wl = inst.workload
    lone_ttft = idle_schedule(inst).first_token_s - wl.arrival_s
    slack = np.abs(np.nan_to_num(wl["ttft_slo_s"], nan=np.inf) - lone_ttft)
    rows = np.sort(np.argsort(slack, kind="stable")[:keep])
    rows = np.insert(rows, keep // 2, rows[keep // 2])
    cols = {c: wl[c][rows] for c in wl.columns}
    cols["prompt_tokens"][keep // 2] = LONG_PROMPT
    cut = dataclasses.replace(inst, workload=wl.derived(cols, source=f"{trace} cut"))
    gap = idle_schedule(cut).longest_service_s(cut) + 1.0
    cols = {c: cut.workload[c] for c in cut.workload.columns}
    cols["arrival_s"] = gap * np.arange(keep + 1)
    return dataclasses.replace(cut, workload=cut.workload.derived(cols, source=f"{trace} sparse"))


def _run(name: str, trace: str, keep: int):
    inst = sparse_cut(trace, keep)
    scheduler = make_scheduler(name, inst, servers=SERVERS)
    out = scheduler.run(inst, seed=0, record_iterations=True)
    ran = scheduler.on(inst)
    assert check(ran, out) == []
    return inst, scheduler, metrics.met(ran, out)


def idle_met_after(inst, delay_s: float, cap) -> np.ndarray:
    """Which requests an idle server meets when each starts ``delay_s`` after its arrival
    (deadlines still from the arrival)."""
    wl = inst.workload
    cols = {c: wl[c] for c in wl.columns}
    cols["arrival_s"] = wl.arrival_s + delay_s
    late = dataclasses.replace(inst, workload=wl.derived(cols, source=f"{wl.source} +{delay_s}s"))
    return idle_schedule(late, cap).met(inst)


def _colocated_cases():
    cases = []
    for name in policy_names():
        if name in NOT_COLOCATED:
            continue
        for trace, keep in CUTS:
            cases.append(pytest.param(name, trace, keep, id=f"{name}-{trace}"))
    return cases


@pytest.mark.parametrize(("name", "trace", "keep"), _colocated_cases())
def test_a_lone_request_is_met_exactly_when_an_idle_server_meets_it(name, trace, keep):
    """The policy meets exactly the oracle's requests (at its paper's cap, if it has one)."""
    inst, scheduler, met = _run(name, trace, keep)
    oracle = idle_met(inst)
    if (name, trace) in FORMER_READINGS:
        missed, _why = FORMER_READINGS[name, trace]
        assert not (met & ~oracle).any(), "met a request an idle server misses"
        assert int((oracle & ~met).sum()) == missed
    elif name in CAPPED:
        design = CAPPED[name]
        cap = design.cap(inst, scheduler)
        capped = idle_met(inst, max_chunk_tokens=cap)
        # the cap only ever slows a prefill: it makes requests miss, never meet
        assert not (capped & ~oracle).any()
        if design.delay is None:
            exempt = oracle & ~capped
            np.testing.assert_array_equal(met, capped)
        else:
            late = idle_met_after(inst, design.delay(inst, scheduler), cap)
            exempt = oracle & ~late
            assert not (met & ~capped).any(), "met a request an idle server misses"
            assert not (late & ~met).any(), "missed one an idle server meets even started late"
        np.testing.assert_array_equal(met[~exempt], oracle[~exempt])
    else:
        np.testing.assert_array_equal(met, oracle)


def test_the_cuts_hold_requests_the_oracle_meets_and_misses():
    """The Mooncake cut is not trivial: the oracle meets 14 of its 41 requests, not all, and
    not the long prompt, which a server can hold."""
    inst = sparse_cut("mooncake_conversation", 40)
    # gaps exceed every lone service, so no two requests ever share a server's time
    spans = idle_schedule(inst).last_token_s - inst.workload.arrival_s
    assert spans.max() < np.diff(inst.workload.arrival_s).min()
    met = idle_met(inst)
    assert (len(met), int(met.sum())) == (41, 14)
    # the long prompt is request 20 (40 // 2): 191,374 + 381 output = 191,755 KV tokens fit
    # the 200,000 a server holds, above the 190,000 (95 %) PolyServe's admission fills
    wl = inst.workload
    assert (int(wl.prompt_tokens[20]), int(wl.output_tokens[20])) == (191_374, 381)
    assert inst.cluster.kv_capacity_tokens == 200_000 and not met[20]


def test_the_sarathi_budget_exempts_the_mooncake_requests_it_slows():
    """At its 820-token budget Sarathi's cap makes all 14 idle-feasible Mooncake ones miss."""
    inst, scheduler, met = _run("sarathi", "mooncake_conversation", 40)
    assert scheduler.policy.token_budget == 820
    oracle = idle_met(inst)
    exempt = oracle & ~idle_met(inst, max_chunk_tokens=820)
    assert (int(oracle.sum()), int(exempt.sum()), int(met.sum())) == (14, 14, 0)


@pytest.mark.parametrize("name", sorted(NOT_COLOCATED))
def test_a_policy_named_not_colocated_indeed_refuses_the_colocated_mode(name):
    """The exclusion cannot go stale: the policy fails on a co-located cluster."""
    inst = sparse_cut("azure_conv_2023", 30)
    with pytest.raises(ValueError, match=NOT_COLOCATED[name]):
        make_scheduler(name, inst, servers=SERVERS)
