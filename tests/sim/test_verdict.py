"""Early verdicts: a run stops once its attainment verdict is certain, and that verdict is the
full run's, on seeded batteries across policies and attainment definitions."""

import dataclasses

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup, capacity_search
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import metrics
from slolab.sim.metrics import DEFINITIONS
from slolab.sim.verdict import AttainmentWatch
from slolab.timing.base import LinearTiming
from verdict_stubs import ListedVerdicts

ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


def _two_requests() -> Instance:
    workload = Workload(
        {
            "arrival_s": [0.0, 0.0],
            "prompt_tokens": [10, 10],
            "output_tokens": [3, 2],
            "ttft_slo_s": [1.0, 1.0],
            "tpot_slo_s": [0.1, 0.1],
        }
    )
    return Instance("two", workload, Cluster(servers=1), ROUND)


def test_settled_counts_by_hand():
    """Request 0 has a late second token (missed); request 1 is finished on time (met)."""
    watch = AttainmentWatch(_two_requests(), "deadline", 0.5)
    # deadlines: request 0 tokens at 1.0, 1.1, 1.2; request 1 at 1.0, 1.1 (0 + 1 + (k-1) 0.1)
    times = np.array([0.5, 1.15, np.inf, 0.5, 0.6])
    settled = watch.count(times, np.zeros(2, dtype=bool), floor_s=1.15)
    # token (0, 2) at 1.15 > 1.1: missed; request 1 finished with both tokens on time: met
    assert (settled.met, settled.missed, settled.counted) == (1, 1, 2)
    assert (settled.lower, settled.upper) == (0.5, 0.5)


def test_unemitted_token_past_its_deadline_is_missed():
    """A token not out by now can only come later: past its deadline, the request has missed."""
    watch = AttainmentWatch(_two_requests(), "ttft+mean-tpot", 0.9)
    times = np.array([np.inf, np.inf, np.inf, 0.5, np.inf])
    settled = watch.count(times, np.zeros(2, dtype=bool), floor_s=1.2)
    # request 0: first token at >= 1.2 > TTFT 1.0, missed; request 1: mean TPOT >= (1.2 - 0.5)
    # / 1 = 0.7 > 0.1, missed
    assert (settled.met, settled.missed) == (0, 2)
    # at 0.55 nothing is settled: request 0's first token may still be on time (0.55 <= 1.0),
    # request 1's mean TPOT may be (0.55 - 0.5) / 1 = 0.05 <= 0.1
    assert watch.count(times, np.zeros(2, dtype=bool), floor_s=0.55).missed == 0


POLICIES = ["sarathi", "vllm", "slos-serve", "hyperflexis", "polyserve", "static-fcfs", "edf"]


def _with_e2e(instance: Instance) -> Instance:
    """Every other request also gets an end-to-end SLO: 4 s plus 30 ms per output token."""
    wl = instance.workload
    e2e = np.where(np.arange(len(wl)) % 2 == 0, 4.0 + 0.03 * wl.output_tokens, np.nan)
    return dataclasses.replace(instance, workload=wl.with_columns(e2e_slo_s=e2e))


def _run(setup: ServingSetup, rate: float, stop=None):
    instance, sched = setup.prepare(_with_e2e(setup.instance(rate)))
    outcome = sched.run(
        instance, seed=setup.seed, record_iterations=False, stop=stop and stop(instance)
    )
    return instance, outcome


@pytest.mark.parametrize("policy", POLICIES)
def test_early_verdict_is_the_full_runs_across_definitions(policy):
    """At two rates, every definition and two targets, the stopped run's verdict and bound
    agree with the full run; the final counts equal the metrics' met requests exactly."""
    mode = "static" if policy == "static-fcfs" else "colocated"
    setup = ServingSetup("azure_conv_2023", policy=policy, servers=2, limit=120, mode=mode, seed=3)
    stopped = 0
    for rate in (2.0, 16.0):
        instance, outcome = _run(setup, rate)
        for definition in DEFINITIONS:
            full = metrics.attainment(instance, outcome, definition)
            final = AttainmentWatch(instance, definition, 0.9).count(
                outcome.token_times, outcome.rejected, np.inf
            )
            met = metrics.met(instance, outcome, definition)
            # at the end every request is settled, and met ones are exactly the metrics' ones
            assert final.met == int(met.sum())
            assert final.met + final.missed == final.counted
            for target in (0.5, 0.9):
                watches: list[AttainmentWatch] = []

                def make(inst, definition=definition, target=target, watches=watches):
                    watches.append(AttainmentWatch(inst, definition, target, every=25))
                    return watches[-1]

                _, short = _run(setup, rate, stop=make)
                watch = watches[0]
                assert short.info["stopped_early"] == (watch.verdict is not None)
                if watch.verdict is None:
                    continue
                stopped += 1
                assert (watch.verdict == "meets") == (full >= target)
                assert watch.settled is not None
                assert watch.settled.lower <= full <= watch.settled.upper
    # the battery exercises early stops (not only runs to the end)
    assert stopped >= 4


def test_capacity_search_early_gives_the_full_search():
    """The same probes' rates, verdicts and capacity with and without early stops."""
    setup = ServingSetup("azure_conv_2023", policy="sarathi", servers=2, limit=150)
    full, _ = capacity_search(setup, rel_tol=0.1, early=False)
    fast, _ = capacity_search(setup, rel_tol=0.1, early=True)
    assert fast.capacity == full.capacity and fast.bracket == full.bracket
    assert [r for r, _ in fast.probes] == [r for r, _ in full.probes]
    meets = [a >= 0.9 for _, a in full.probes]
    assert [a >= 0.9 for _, a in fast.probes] == meets
    assert full.n_early == 0 and fast.n_early >= 1


def test_ramped_stop_asks_at_doubling_gaps_and_stops_on_either_verdict():
    """Called every 1600 // 16 = 100 events, the watch is asked at calls 1, 3, 7, 15, 31, 47."""
    from slolab.sim.verdict import RampedStop

    watch = ListedVerdicts(1600, [None] * 5 + ["meets"])
    stop = RampedStop(watch)
    # gaps of 1, 2, 4, 8, 16 calls, then 16 calls (1600 events) for good
    said = [stop(call) for call in range(1, 48)]
    assert stop.every == 100 and watch.asked == [1, 3, 7, 15, 31, 47]
    assert said.index(True) == 46 and said.count(True) == 1
    misses = ListedVerdicts(1600, ["misses"])
    assert RampedStop(misses)(1) and misses.asked == [1]
    # with only misses stopping, a meets verdict ends the asking and the run goes on
    meets = ListedVerdicts(1600, ["meets"])
    only = RampedStop(meets, stop_on=("misses",))
    assert not any(only(call) for call in range(1, 50)) and meets.asked == [1]


def test_ramped_stop_stops_an_overloaded_run_the_watchs_pace_never_checks():
    """vLLM at 64 req/s on 2 servers (400 requests) ends before the watch's first check (812
    events); asked at the ramp's pace it stops with the full run's verdict and a bound above
    the full attainment."""
    from slolab.sim.verdict import RampedStop

    setup = ServingSetup("azure_conv_2023", policy="vllm", servers=2, limit=400, seed=3)
    instance, sched = setup.prepare(setup.instance(64.0))
    full = sched.run(instance, seed=setup.seed, record_iterations=False)
    attained = metrics.attainment(instance, full, "deadline")
    plain = AttainmentWatch(instance, "deadline", 0.9)
    sched.run(instance, seed=setup.seed, record_iterations=False, stop=plain)
    # 400 requests, one check per 128 output tokens: every = 812 events, never reached
    assert (plain.every, plain.checks, plain.verdict) == (812, 0, None)
    watch = AttainmentWatch(instance, "deadline", 0.9)
    short = sched.run(instance, seed=setup.seed, record_iterations=False, stop=RampedStop(watch))
    assert short.info["stopped_early"] and watch.verdict == "misses" and attained < 0.9
    assert watch.bound is not None and attained <= watch.bound < 0.9
    assert watch.stopped_at_s is not None and watch.stopped_at_s < full.token_times.max()
