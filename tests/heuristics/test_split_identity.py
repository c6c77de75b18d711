"""Every registered policy, and every online heuristic of the dispatch-scale problem, gives the
outcome recorded before PolyServe became a package and SCORPIO and SA-online left
``hyperflexis.py``: the same token times, batches, placements, rejections and scaling events,
hashed, on seeded cuts of the Azure conversation and Mooncake traces."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
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


def outcome_hash(outcome, decisions=None) -> str:
    """sha256 (first 16 hex digits) of :data:`FIELDS` of ``outcome``, its scaling events, its
    end and the router's routing decisions (PolyServe counts them)."""
    h = hashlib.sha256()
    for name in FIELDS:
        value = getattr(outcome, name, None)
        h.update(name.encode())
        if value is not None:
            h.update(np.ascontiguousarray(value).tobytes())
    h.update(repr(outcome.scale_events).encode())
    h.update(repr(float(outcome.end_s)).encode())
    h.update(repr(decisions).encode())
    return h.hexdigest()[:16]


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
    )
    settings = {"servers": SERVERS, "mode": mode}
    return Instance(f"{cut}-{n}-{mode}", wl, cluster, timing, settings=settings)


def policy_hashes(cut: str, mode: str) -> dict[str, str]:
    """Per registered policy (:data:`STATIC` ones only on a static cluster, and only there):
    the hash of its run on the cut (seed 0), checked; or the name of the exception it raises
    there (a mode it does not run in)."""
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
        found[name] = outcome_hash(out, getattr(scheduler.router, "decisions", None))
    return found


def dispatch_instances() -> dict[str, Instance]:
    """The dispatch-scale problem's settings: a HyperFlexis task mix co-located and
    disaggregated, and trace windows with their real outputs."""
    mix = {"per_task": 20, "servers": 4, "max_servers": 6, "qps": 160, "seed": 1}
    window = {"n": 60, "load": "high", "max_output_tokens": 0, "max_servers": 4, "seed": 0}
    return {
        "mix-co": mix_instance("4-task", mode="colocated", **mix),
        "mix-pd": mix_instance("4-task", mode="disaggregated", prefill_servers=2, **mix),
        "azure": build_instance("dispatch-scale", trace="azure_conv_2023", **window),
        "mooncake": build_instance("dispatch-scale", trace="mooncake_conversation", **window),
    }


def dispatch_hashes() -> dict[str, dict[str, str]]:
    """Per instance of :func:`dispatch_instances`, per online heuristic of the dispatch-scale
    problem: the hash of its run (seed 0), checked."""
    problem = get_problem("dispatch-scale")
    found: dict[str, dict[str, str]] = {}
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
            row[h.name] = outcome_hash(out)
    return found


# Recorded on the code before the split.
POLICIES: dict[tuple[str, str], dict[str, str]] = {
    ("azure", "colocated"): {
        "chunk": "8445a6be83812251",
        "edf": "8d745475d5ad0c45",
        "fairbatching": "2df98355bc72d9a0",
        "hyperflexis": "4acc94324227ad1c",
        "hyperflexis-pm": "d99722a62fc61aaf",
        "minimal": "530aa89f886ac789",
        "polyserve": "cac97665549332e2",
        "polyserve-always-tpot": "774d02df56e1e388",
        "random": "5023c576cdd20042",
        "sa-online": "d0677de2fddc0f6c",
        "sarathi": "8445a6be83812251",
        "sarathi-fcfs": "8445a6be83812251",
        "sarathi-priority": "27e231e25a885ed1",
        "scorpio": "7948fe25ca905385",
        "slide-batching": "b7f8a50fb82e3bb6",
        "slos-serve": "62523e9d2dbae97b",
        "vllm": "7fe44b0eb34d62cd",
        "vllm-fcfs": "7fe44b0eb34d62cd",
        "weighted-vtc": "972f92e1ca0ec447",
    },
    ("azure", "disaggregated"): {
        "chunk": "raises ValueError",
        "edf": "db8971a59ccb21e9",
        "fairbatching": "db8971a59ccb21e9",
        "hyperflexis": "b22e4e35945e90fc",
        "hyperflexis-pm": "dfcb032b61528968",
        "minimal": "0558b215ef78becf",
        "polyserve": "5bfaf164a42b075c",
        "polyserve-always-tpot": "5bfaf164a42b075c",
        "random": "0558b215ef78becf",
        "sa-online": "raises ValueError",
        "sarathi": "0558b215ef78becf",
        "sarathi-fcfs": "0558b215ef78becf",
        "sarathi-priority": "7fd740de8a079fb7",
        "scorpio": "raises ValueError",
        "slide-batching": "9c9b37d718cba29d",
        "slos-serve": "raises ValueError",
        "vllm": "3bbaa8b5ebe9947c",
        "vllm-fcfs": "3bbaa8b5ebe9947c",
        "weighted-vtc": "22567ad5709515e8",
    },
    ("azure", "static"): {"static-fcfs": "33bde8289c03026d"},
    ("mooncake", "colocated"): {
        "chunk": "e7492f1e36c58015",
        "edf": "2703b2822b468642",
        "fairbatching": "0945d0fb90987b48",
        "hyperflexis": "9292d2710b8b2202",
        "hyperflexis-pm": "51a1924464956265",
        "minimal": "152b56c9db16d295",
        "polyserve": "4678b6d80331d692",
        "polyserve-always-tpot": "628f05ed2b59b20c",
        "random": "decf4810c34ba9cf",
        "sa-online": "fe74ed7557a557ba",
        "sarathi": "e7492f1e36c58015",
        "sarathi-fcfs": "e7492f1e36c58015",
        "sarathi-priority": "b4eaf96b70830d84",
        "scorpio": "ef7df605c4fa45ef",
        "slide-batching": "90f9a051e573d4ee",
        "slos-serve": "d4b7c239544c5534",
        "vllm": "1460492b003d5e49",
        "vllm-fcfs": "1460492b003d5e49",
        "weighted-vtc": "e8526b9234677d1c",
    },
    ("mooncake", "disaggregated"): {
        "chunk": "raises ValueError",
        "edf": "4b5042382f37e669",
        "fairbatching": "4b5042382f37e669",
        "hyperflexis": "9c9d714793d75cac",
        "hyperflexis-pm": "5046bc8b245a8e80",
        "minimal": "63b96f2873a6b43d",
        "polyserve": "2a394ff2ea20ff60",
        "polyserve-always-tpot": "2a394ff2ea20ff60",
        "random": "63b96f2873a6b43d",
        "sa-online": "raises ValueError",
        "sarathi": "63b96f2873a6b43d",
        "sarathi-fcfs": "63b96f2873a6b43d",
        "sarathi-priority": "6507b0048bdbf1dd",
        "scorpio": "raises ValueError",
        "slide-batching": "0263cf4a9e85f535",
        "slos-serve": "raises ValueError",
        "vllm": "6ecc55695926751b",
        "vllm-fcfs": "6ecc55695926751b",
        "weighted-vtc": "d099de3d7352f98c",
    },
    ("mooncake", "static"): {"static-fcfs": "3d586a7811a1408f"},
}
DISPATCH: dict[str, dict[str, str]] = {
    "azure": {
        "hyperflexis": "6246e37987faf717",
        "hyperflexis-pm": "6246e37987faf717",
        "hyperflexis-scaling": "8412036cf08db980",
        "round-robin": "57db9bc7a92499b7",
        "sa-rr": "7474674a3bffc752",
        "scorpio-rr": "6b3532b389aaeff0",
    },
    "mix-co": {
        "hyperflexis": "604549725c3f0d4a",
        "hyperflexis-pm": "8d9a02536c0f6e84",
        "hyperflexis-scaling": "2a9c28187eb26057",
        "round-robin": "b6364c86203bf2bf",
        "sa-rr": "724d795189f360b9",
        "scorpio-rr": "470ba50128e67e52",
    },
    "mix-pd": {
        "hyperflexis": "41b712df9321afc2",
        "hyperflexis-pm": "37ff8a797a9e7109",
        "hyperflexis-scaling": "410a2d580487c8ba",
        "round-robin": "7c716d22984de7f6",
    },
    "mooncake": {
        "hyperflexis": "b2bf314e5e685417",
        "hyperflexis-pm": "2f1a1626a0fec829",
        "hyperflexis-scaling": "bb6ab12c43ac17de",
        "round-robin": "e3174c41f201184c",
        "sa-rr": "fbb29e4375b60339",
        "scorpio-rr": "ce8b4334414bc7d8",
    },
}


@pytest.mark.parametrize("cut", sorted(CUTS))
@pytest.mark.parametrize("mode", MODES)
def test_every_registered_policy_keeps_its_outcome(cut, mode):
    """Each registered policy's run on the cut in the mode hashes as recorded (or raises the
    same exception), and no policy was added or dropped."""
    assert policy_hashes(cut, mode) == POLICIES[cut, mode]


def test_every_dispatch_scale_heuristic_keeps_its_outcome():
    """HyperFlexis (fixed, scaling, priority mapping), round robin, SCORPIO and SA-online
    behind round robin, as the dispatch-scale problem declares them, hash as recorded."""
    assert dispatch_hashes() == DISPATCH
