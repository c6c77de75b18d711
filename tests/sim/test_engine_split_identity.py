"""Every registered policy's outcome on a seeded battery decides as the one recorded from the
engine as a single module (``sim/engine.py``) before it became the package ``sim/engine/``:
servers, rejections, preemptions, forwards, the iteration log (each batch's requests and
tokens), scaling events and the run's info are compared exactly, token and event times within
1e-10 of their magnitudes (tests/fingerprint.py: the floats' last bits depend on the processor).

The battery runs every registered policy co-located on two trace cuts and disaggregated on one
(with the former parallel KV transfers, ``Cluster(kv_transfer_queued=False)``, as recorded; four
cases with the transfers queued per prefill server's link, recorded when they became the
default; ``static-fcfs`` on a static cluster), every scaler, central queues (the ``hold`` router on
both sides), KV rejections and preemptions on small servers, and a policy that stalls. A case
whose run raises records the exception's type and message instead.

The records are in ``test_engine_split_identity.json``. After a deliberate change of the
engine's decisions, re-record with ``PYTHONPATH=tests python
tests/sim/test_engine_split_identity.py`` and name the move in the commit. Moves so far: ``polyserve/small-kv/azure``, when PolyServe stopped
counting the requests rejected for their KV as held and started rejecting on arrival a request
no tier admits (287 finish, not 268: 19 of the 20 ms tier were held to the end behind 12 such
phantoms).
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from fingerprint import Fingerprint, assert_case, fingerprint, load_recording, write_recording
from slolab.sim import Batch

#: Two cuts of vendored traces: (trace, requests, Poisson rate in req/s).
CUTS = {
    "mooncake": ("mooncake_conversation", 150, 6.0),
    "azure": ("azure_conv_2023", 300, 15.0),
}


class OddOnly:
    """Serves only even-numbered requests (chunks of at most 512 tokens, then decode, within the
    free KV): the odd ones wait on their servers until the run stalls."""

    def start(self, instance, seed):
        self.prompt = instance.workload.prompt_tokens

    def next_batch(self, server):
        decode = server.decoding_ids()
        free = server.kv_free_tokens - len(decode)
        if free < 0:
            return Batch()
        prefill = [
            (r, min(server.remaining_prefill(r), 512, free - 1))
            for r in (*server.prefilling, *server.waiting)
            if r % 2 == 0
        ][:1]
        prefill = [(r, c) for r, c in prefill if c >= 1]
        if not prefill and not len(decode):
            return Batch()
        return Batch(prefill=prefill, decode=decode)


def _cases() -> dict[str, dict]:
    """Case name -> ServingSetup fields (plus ``rate`` and ``cut``)."""
    from slolab.heuristics.policies import policy_entry, policy_names

    cases: dict[str, dict] = {}
    for policy in policy_names():
        if policy == "static-fcfs":
            for cut in CUTS:
                cases[f"{policy}/static/{cut}"] = {"policy": policy, "mode": "static", "cut": cut}
            continue
        for cut in CUTS:
            cases[f"{policy}/colocated/{cut}"] = {"policy": policy, "cut": cut}
        own = policy_entry(policy).setup is not None
        cases[f"{policy}/disaggregated/mooncake"] = {
            "policy": policy,
            "mode": "disaggregated",
            "cut": "mooncake",
            "servers": 3,
            "prefill_servers": 0 if own else 1,
        }
    # a router that holds every request: a dispatcher pulls them from the central queues;
    # under any other policy they stay held and are rejected when the run ends
    for policy in ("hyperflexis", "hyperflexis-pm", "sarathi"):
        cases[f"{policy}/hold/azure"] = {"policy": policy, "router": "hold", "cut": "azure"}
        cases[f"{policy}/hold-decode/azure"] = {
            "policy": policy,
            "mode": "disaggregated",
            "cut": "azure",
            "servers": 4,
            "prefill_servers": 2,
            "decode_router": "hold",
        }
    # a loaded cluster: PolyServe's own scaler holds requests and passes quiet ticks
    for policy in ("polyserve", "polyserve-always-tpot"):
        for cut in CUTS:
            cases[f"{policy}/high-rate/{cut}"] = {
                "policy": policy,
                "cut": cut,
                "servers": 4,
                "rate": 60.0,
            }
    for scaler in ("threshold", "fixed", "hyperflexis"):
        for policy, cut in (("sarathi", "azure"), ("vllm", "mooncake"), ("hyperflexis", "azure")):
            cases[f"{policy}/autoscale-{scaler}/{cut}"] = {
                "policy": policy,
                "cut": cut,
                "autoscale": scaler,
                "min_servers": 1,
                "max_servers": 4,
            }
    for policy in ("sarathi", "vllm", "chunk", "edf", "minimal", "polyserve"):
        cases[f"{policy}/small-kv/azure"] = {"policy": policy, "cut": "azure", "kv_capacity": 3000}
    cases["vllm/small-kv-disaggregated/mooncake"] = {
        "policy": "vllm",
        "mode": "disaggregated",
        "cut": "mooncake",
        "servers": 3,
        "prefill_servers": 1,
        "kv_capacity": 3000,
    }
    # KV transfers queued on each prefill server's link (the engine's default since the
    # battery was recorded; the cases above run the former parallel transfers)
    for policy in ("sarathi", "vllm", "polyserve"):
        cases[f"{policy}/disaggregated-queued/mooncake"] = {
            "policy": policy,
            "mode": "disaggregated",
            "cut": "mooncake",
            "servers": 3,
            "prefill_servers": 0 if policy_entry(policy).setup is not None else 1,
            "queued": True,
        }
    cases["sarathi/hold-decode-queued/azure"] = {
        **cases["sarathi/hold-decode/azure"],
        "queued": True,
    }
    cases["sarathi/one-server-high-rate/azure"] = {
        "policy": "sarathi",
        "cut": "azure",
        "servers": 1,
        "rate": 40.0,
    }
    cases["odd-only/stall/mooncake"] = {"policy": "sarathi", "cut": "mooncake", "stall": True}
    return cases


CASES = _cases()


def _fingerprint(outcome) -> Fingerprint:
    """What the run decided, exactly, and when, within the tolerance of tests/fingerprint.py."""
    arrays = (
        outcome.token_times,
        outcome.server,
        outcome.prefill_server,
        outcome.rejected,
        outcome.rejected_kv,
        outcome.rejected_s,
        outcome.first_scheduled_s,
        outcome.prefill_done_s,
        outcome.transfer_done_s,
        outcome.routed_s,
        outcome.preemptions,
        outcome.preempt_request,
        outcome.preempt_s,
        outcome.forward_request,
        outcome.forward_to,
        outcome.forward_s,
        outcome.busy_s,
        outcome.it_server,
        outcome.it_start,
        outcome.it_end,
        outcome.it_features,
        outcome.it_kv_tokens,
        outcome.entry_request,
        outcome.entry_tokens,
        outcome.server_pool,
        outcome.server_on_s,
        outcome.server_ready_s,
        outcome.server_off_s,
    )
    info = outcome.info
    return fingerprint(
        arrays,
        float(outcome.end_s),
        float(outcome.cost_server_s),
        info["iterations"],
        info["rejected_held"],
        info["stalled"],
        info["stall"],
        info["stalled_requests"].tolist(),
        [dataclasses.astuple(e) for e in outcome.scale_events],
    )


def run_case(name: str) -> Fingerprint | str:
    """The case's fingerprint, or ``error <type>: <message>`` when its run raises."""
    from slolab.harness.serving import ServingSetup

    fields = dict(CASES[name])
    trace, limit, rate = CUTS[fields.pop("cut")]
    rate = fields.pop("rate", rate)
    stall = fields.pop("stall", False)
    queued = fields.pop("queued", False)
    # the single-module engine had no prefix cache: the Mooncake cuts run with caching off
    # (the serving default caches their blocks; tests/sim/test_prefix_cache_identity.py
    # records the cache's own decisions)
    setup = ServingSetup(
        trace,
        seed=3,
        servers=fields.pop("servers", 2),
        limit=limit,
        prefix_cache="off",
        **fields,
    )
    try:
        base = setup.instance(rate)
        base = dataclasses.replace(
            base, cluster=dataclasses.replace(base.cluster, kv_transfer_queued=queued)
        )
        instance, sched = setup.prepare(base)
        if stall:
            sched = dataclasses.replace(sched, policy=OddOnly())
        outcome = sched.run(instance, seed=setup.seed, record_iterations=True)
    except Exception as exc:
        return f"error {type(exc).__name__}: {exc}"
    return _fingerprint(outcome)


#: Recorded from the single-module engine (its hashes, checked on the package first).
EXPECTED = load_recording(__file__)


@pytest.mark.parametrize("name", sorted(CASES))
def test_outcome_matches_the_single_module_engine(name):
    """The case's decisions (or error) equal, and its times match, the single-module engine's."""
    assert_case(run_case(name), EXPECTED[name], name)


def test_battery_covers_every_registered_policy_and_scaler():
    """Every registered policy and scaler appears in the battery, and the recording has
    exactly the battery's cases."""
    from slolab.heuristics.policies import policy_names
    from slolab.heuristics.scalers import scaler_names

    policies = {c["policy"] for c in CASES.values()}
    scalers = {c["autoscale"] for c in CASES.values() if "autoscale" in c}
    assert set(policy_names()) <= policies
    assert set(scaler_names()) <= scalers
    assert set(EXPECTED) == set(CASES)


if __name__ == "__main__":
    import time
    from pathlib import Path

    # the module by its name, as pytest imports it (the stalling policy's name is in the hash)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_engine_split_identity as battery

    records = {}
    for case in sorted(CASES):
        t0 = time.perf_counter()
        value = battery.run_case(case)
        records[case] = value.record() if isinstance(value, Fingerprint) else value
        print(f"{case}: {time.perf_counter() - t0:.2f} s", flush=True)
    write_recording(__file__, records)
