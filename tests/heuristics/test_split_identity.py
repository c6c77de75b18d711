"""Every registered policy, and every online heuristic of the dispatch-scale problem, gives the
outcome recorded before PolyServe became a package and SCORPIO and SA-online left
``hyperflexis.py``: the same batches, placements, rejections and scaling events, exactly, and
the same token times within 1e-10 of their magnitudes (tests/fingerprint.py), on seeded cuts of
the Azure conversation and Mooncake traces. The records are in ``test_split_identity.json``;
``PYTHONPATH=tests python tests/heuristics/test_split_identity.py`` re-records them after a
deliberate change."""

from __future__ import annotations

import dataclasses

import pytest
from fingerprint import Fingerprint, assert_case, fingerprint, load_recording, write_recording
from slolab.heuristics.policies import make_scheduler, policy_names
from slolab.instances import Cluster, Instance, assign_slos, read_workload
from slolab.problems import build_instance, get_problem
from slolab.problems.dispatch_scale import mix_instance
from slolab.problems.registry import resolve
from slolab.sim import check
from slolab.timing import resolve_timing

#: The Outcome arrays the hash reads: every token's time, each request's servers, first
#: iteration, prefill end, preemptions and rejection, the iteration log (each batch's entries)
#: and every server's life. Named, so that a field added to Outcome later does not move it.
FIELDS = (
    "server",
    "prefill_server",
    "rejected",
    "first_scheduled_s",
    "prefill_done_s",
    "token_offsets",
    "token_times",
    "preemptions",
    "busy_s",
    "it_server",
    "it_start",
    "it_end",
    "it_kv_tokens",
    "entry_offsets",
    "entry_request",
    "entry_phase",
    "entry_tokens",
    "preempt_request",
    "preempt_server",
    "preempt_s",
    "transfer_done_s",
    "rejected_s",
    "routed_s",
    "forward_request",
    "forward_from",
    "forward_to",
    "forward_s",
    "server_pool",
    "server_on_s",
    "server_ready_s",
    "server_drain_s",
    "server_off_s",
)
#: (trace, requests, arrival rate (req/s)): the first requests, time-compressed to the rate
CUTS = {"azure": ("azure_conv_2023", 100, 200.0), "mooncake": ("mooncake_conversation", 100, 1.5)}
MODES = ("colocated", "disaggregated", "static")
#: The policies that form static batches: the only ones run on a static cluster (the others
#: refuse the mode before the run, tests/sim/test_policy_modes.py)
STATIC = ("static-fcfs",)
SERVERS = 2


def outcome_fingerprint(outcome, decisions=None) -> Fingerprint:
    """:data:`FIELDS` of ``outcome``, its scaling events, its end and the router's routing
    decisions (PolyServe counts them)."""
    fields = [(name, getattr(outcome, name, None)) for name in FIELDS]
    return fingerprint(fields, outcome.scale_events, float(outcome.end_s), decisions)


def trace_cut(cut: str, mode: str) -> Instance:
    """The cut on ``SERVERS`` servers of Llama-3.1-8B on H200 in ``mode`` (one prefill
    server when disaggregated), PolyServe's SLOs then ProServe's priorities (seed 0)."""
    trace, n, rate = CUTS[cut]
    timing = resolve_timing("llama3.1-8b-h200")
    wl = read_workload(trace, rate=rate, limit=n)
    wl = assign_slos(wl, "polyserve", seed=0, timing=timing)
    wl = assign_slos(wl, "proserve", seed=0, timing=timing)
    cluster = Cluster(
        servers=SERVERS,
        mode=mode,
        prefill_servers=1 if mode == "disaggregated" else 0,
        kv_capacity_tokens=200_000,
        max_batch_size=64,
        max_batch_tokens=2048,
        kv_bytes_per_token=131_072,
        kv_transfer_queued=False,  # the KV transfers as recorded: in parallel, not queued
    )
    settings = {"servers": SERVERS, "mode": mode}
    return Instance(f"{cut}-{n}-{mode}", wl, cluster, timing, settings=settings)


def policy_fingerprints(cut: str, mode: str) -> dict[str, Fingerprint | str]:
    """Per registered policy (:data:`STATIC` ones only on a static cluster, and only there):
    the fingerprint of its run on the cut (seed 0), checked; or the name of the exception it
    raises there (a mode it does not run in)."""
    inst = trace_cut(cut, mode)
    found = {}
    for name in policy_names():
        if (mode == "static") != (name in STATIC):
            continue
        try:
            scheduler = make_scheduler(name, inst, mode=mode, servers=SERVERS)
            out = scheduler.run(inst, seed=0, record_iterations=True)
        except Exception as err:  # the refusal is part of the behaviour kept
            found[name] = f"raises {type(err).__name__}"
            continue
        assert check(scheduler.on(inst), out) == [], name
        found[name] = outcome_fingerprint(out, getattr(scheduler.router, "decisions", None))
    return found


def _parallel_transfers(instance: Instance) -> Instance:
    """``instance`` with its KV transfers in parallel, as when the battery was recorded
    (the engine queues them per prefill server's link since)."""
    cluster = dataclasses.replace(instance.cluster, kv_transfer_queued=False)
    return dataclasses.replace(instance, cluster=cluster)


def dispatch_instances() -> dict[str, Instance]:
    """The dispatch-scale problem's settings: a HyperFlexis task mix co-located and
    disaggregated, and trace windows with their real outputs."""
    mix = {"per_task": 20, "servers": 4, "max_servers": 6, "qps": 160, "seed": 1}
    window = {"n": 60, "load": "high", "max_output_tokens": 0, "max_servers": 4, "seed": 0}
    return {
        "mix-co": mix_instance("4-task", mode="colocated", **mix),
        "mix-pd": _parallel_transfers(
            mix_instance("4-task", mode="disaggregated", prefill_servers=2, **mix)
        ),
        "azure": build_instance("dispatch-scale", trace="azure_conv_2023", **window),
        "mooncake": build_instance("dispatch-scale", trace="mooncake_conversation", **window),
    }


def dispatch_fingerprints() -> dict[str, dict[str, Fingerprint]]:
    """Per instance of :func:`dispatch_instances`, per online heuristic of the dispatch-scale
    problem: the fingerprint of its run (seed 0), checked."""
    problem = get_problem("dispatch-scale")
    found: dict[str, dict[str, Fingerprint]] = {}
    for label, inst in dispatch_instances().items():
        row = found[label] = {}
        for h in problem.heuristics:
            if h.policy is None:
                continue  # a schedule heuristic (the search), not an online scheduler
            if label == "mix-pd" and h.name in ("scorpio-rr", "sa-rr"):
                continue  # co-located workers only
            scheduler = resolve(h.policy)(inst)
            out = scheduler.run(inst, seed=0, record_iterations=True)
            assert check(scheduler.on(inst), out) == [], (label, h.name)
            row[h.name] = outcome_fingerprint(out)
    return found


#: Recorded on the code before the split (its hashes, checked on the split code first):
#: "policies" per "cut/mode", then "dispatch" per instance, a record per heuristic.
RECORDED = load_recording(__file__)


def assert_row(found: dict, recorded: dict, what: str) -> None:
    """The same heuristics, each case matching its record."""
    assert sorted(found) == sorted(recorded), what
    for name, value in found.items():
        assert_case(value, recorded[name], f"{what} {name}")


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("mode", MODES)
def test_every_registered_policy_keeps_its_outcome(cut, mode):
    """Each registered policy's run on the cut in the mode matches its record (or raises the
    same exception), and no policy was added or dropped."""
    assert_row(policy_fingerprints(cut, mode), RECORDED["policies"][f"{cut}/{mode}"], cut)


def test_every_dispatch_scale_heuristic_keeps_its_outcome():
    """HyperFlexis (fixed, scaling, priority mapping), round robin, SCORPIO and SA-online
    behind round robin, as the dispatch-scale problem declares them, match their records."""
    found = dispatch_fingerprints()
    assert sorted(found) == sorted(RECORDED["dispatch"])
    for label, row in found.items():
        assert_row(row, RECORDED["dispatch"][label], label)


def _records(row: dict) -> dict:
    return {k: v.record() if isinstance(v, Fingerprint) else v for k, v in row.items()}


if __name__ == "__main__":
    policies = {
        f"{cut}/{mode}": _records(policy_fingerprints(cut, mode)) for cut in CUTS for mode in MODES
    }
    dispatch = {label: _records(row) for label, row in dispatch_fingerprints().items()}
    write_recording(__file__, {"policies": policies, "dispatch": dispatch})
