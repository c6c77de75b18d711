"""The tier-partition problem (PolyServe): servers per TPOT tier for a workload mix on ``N``
servers; maximize the arrival rate served within the SLOs.

An instance is a steady-state workload description: the requests of a trace (their lengths,
PolyServe's SLOs and tiers; their arrival times at ``rate`` req/s, so the online heuristics run
on it as a stream), and the settings ``servers`` (``N``), ``mode`` (``colocated`` or
``disaggregated``) and ``rate``. Exact models (all **bounds**, no schedule): ``tier-partition``
(integer servers, promoted flows; MILP, CP-SAT on a grid, brute force) and
``tier-partition-fluid`` (continuous servers). Heuristics: PolyServe and its baselines, online
on the stream. The objective is the rate of requests meeting their deadline SLO (req/s):
attainment times the stream's arrival rate. See docs/polyserve.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slolab.problems.registry import (
    RATE_HELP,
    TRACE_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    register_problem,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance

#: PolyServe's deployment (Sec. 5.1): Llama-3.1-8B on one H200 per server.
POLYSERVE_TIMING = "llama3.1-8b-h200"
#: Batch limits of the PolyServe setups: vLLM's sequence cap raised so the KV memory and the
#: TPOT bound the batch (Sec. 3.4), no token cap (the budgets are the policies').
POLYSERVE_MAX_BATCH_SIZE = 4096
MODES = ("colocated", "disaggregated")
#: PolyServe's policies and baselines (slolab names).
POLICIES = ("polyserve", "random", "minimal", "chunk")


def polyserve_instance(
    trace: str = "azure_conv_2023",
    *,
    seed: int,
    servers: int = 20,
    mode: str = "colocated",
    rate: float | None = None,
    limit: int | None = None,
    timing: str = POLYSERVE_TIMING,
    kv_capacity_tokens: int | None = None,
    max_batch_size: int = POLYSERVE_MAX_BATCH_SIZE,
    problem: str = "tier-partition",
    name: str | None = None,
    **reading: Any,
) -> Instance:
    """A PolyServe setup: ``trace`` with PolyServe's SLOs (Sec. 5.1) on ``servers`` servers of
    Llama-3.1-8B on H200 (KV capacity :data:`slolab.heuristics.polyserve.H200_LLAMA31_8B_KV_TOKENS`
    unless given; 131,072 KV bytes per token moved after a disaggregated prefill), ``mode`` in
    the settings. A length-only trace needs ``arrivals`` (and ``rate``) in ``reading``."""
    import dataclasses

    from slolab.heuristics.polyserve import (
        H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
        H200_LLAMA31_8B_KV_TOKENS,
    )
    from slolab.problems.serving import serving_instance

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    inst = serving_instance(
        trace,
        seed=seed,
        servers=servers,
        timing=timing,
        slos="polyserve",
        rate=rate,
        limit=limit,
        kv_capacity_tokens=kv_capacity_tokens or H200_LLAMA31_8B_KV_TOKENS,
        max_batch_size=max_batch_size,
        max_batch_tokens=0,
        name=name,
        # the tier partition's fluid model charges every prompt token's prefill: no cache
        prefix_cache="off",
        **reading,
    )
    settings = {**inst.settings, "servers": servers, "mode": mode}
    label = name or f"{inst.name}-{mode[:2]}-{servers}srv"
    cluster = dataclasses.replace(
        inst.cluster, kv_bytes_per_token=H200_LLAMA31_8B_KV_BYTES_PER_TOKEN
    )
    return dataclasses.replace(
        inst, name=label, problem=problem, settings=settings, cluster=cluster
    )


#: PolyServe's synthetic trace (Sec. 5.1's uniform_4096_1024): input [1, 8192], output
#: [1, 2048].
UNIFORM_MAX_PROMPT, UNIFORM_MAX_OUTPUT = 8192, 2048


def stream_instance(
    trace: str,
    n: int,
    rate: float,
    *,
    seed: int,
    servers: int = 20,
    mode: str = "colocated",
    timing: str = POLYSERVE_TIMING,
    kv_capacity_tokens: int | None = None,
    name: str | None = None,
) -> Instance:
    """PolyServe's evaluation stream (Sec. 5.1-5.2): ``n`` requests whose lengths are drawn from
    ``trace`` (``"uniform"``: the synthetic [1, 8192] x [1, 2048] trace; otherwise a trace file
    or vendored name, sampled with replacement), Poisson arrivals at ``rate`` req/s, PolyServe's
    SLOs; ``servers`` and ``mode`` in the settings. The lengths and SLOs depend on ``seed`` only,
    so the same requests arrive at every ``rate`` (a goodput search changes the rate alone).

    References
    ----------
    PolyServe, Sec. 5.1 ("we randomly sample 300,000 requests per dataset") and 5.2 (Poisson
    arrivals).
    """
    import numpy as np
    from slolab.heuristics.polyserve import (
        H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
        H200_LLAMA31_8B_KV_TOKENS,
    )
    from slolab.instances import (
        Cluster,
        Instance,
        Workload,
        assign_slos,
        read_workload,
        uniform_lengths,
    )
    from slolab.instances.transform import draw_arrivals
    from slolab.timing import resolve_timing

    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    rng = np.random.default_rng(seed)
    if trace == "uniform":
        lengths = uniform_lengths(n, UNIFORM_MAX_PROMPT, UNIFORM_MAX_OUTPUT, rate=1.0, seed=seed)
        prompt, output = lengths.prompt_tokens, lengths.output_tokens
        source = lengths.source
    else:
        wl = read_workload(trace, order_only=True)
        rows = rng.integers(0, len(wl), size=n)
        prompt, output = wl.prompt_tokens[rows], wl.output_tokens[rows]
        source = f"{n} requests sampled from {wl.source}"
    arrival = draw_arrivals(n, "poisson", rate, seed=seed + 1)
    model = resolve_timing(timing)
    workload = Workload(
        {"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output}, source=source
    )
    workload = assign_slos(workload, "polyserve", seed=seed, timing=model)
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=kv_capacity_tokens or H200_LLAMA31_8B_KV_TOKENS,
        max_batch_size=POLYSERVE_MAX_BATCH_SIZE,
        max_batch_tokens=0,
        kv_bytes_per_token=H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
    )
    settings = {"seed": seed, "rate": float(rate), "servers": servers, "mode": mode}
    label = name or f"{trace}-{n}-{mode[:2]}-{servers}srv"
    return Instance(label, workload, cluster, model, problem="tier-partition", settings=settings)


def build(
    *,
    trace: str = "azure_conv_2023",
    servers: int = 20,
    mode: str = "colocated",
    rate: float | None = None,
    limit: int | None = 2000,
    timing: str = POLYSERVE_TIMING,
    kv_capacity_tokens: int | None = None,
    seed: int = 0,
    **reading: Any,
) -> Instance:
    """A tier-partition instance (see :func:`polyserve_instance`)."""
    return polyserve_instance(
        trace,
        seed=seed,
        servers=servers,
        mode=mode,
        rate=rate,
        limit=limit,
        timing=timing,
        kv_capacity_tokens=kv_capacity_tokens,
        **reading,
    )


def online(policy: str) -> Any:
    """``instance -> Scheduler``: a PolyServe policy (or baseline) on the instance's servers in
    its mode."""

    def make(instance: Instance) -> Any:
        from slolab.heuristics.policies import make_scheduler

        return make_scheduler(
            policy,
            instance,
            mode=str(instance.settings.get("mode", "colocated")),
            servers=int(instance.settings.get("servers", instance.cluster.servers)),
        )

    make.__name__ = f"{policy}_online"
    return make


_DESCRIPTIONS = {
    "polyserve": "PolyServe (Sec. 4): tiers, highest-load feasible server, lazy promotion, "
    "autoscaling from a best-effort pool",
    "random": "PD-/CO-Random (Sec. 5.1): a random server, Sarathi token budget",
    "minimal": "PD-/CO-Minimal (Sec. 5.1): the server with the lowest predicted cycle time",
    "chunk": "CO-Chunk (Sec. 5.1): static token budget, least-loaded routing (co-located only)",
}

PROBLEM = register_problem(
    Problem(
        name="tier-partition",
        title="servers per TPOT tier for a workload mix on N servers; maximize the served rate",
        objective=Objective(
            "goodput",
            "max",
            "slolab.sim.metrics:goodput_objective",
            "requests meeting their deadline SLO per second (attainment x arrival rate)",
        ),
        builder=build,
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            *TRACE_OPTIONS,
            Option("servers", int, 20, "servers N to partition"),
            Option("mode", str, "colocated", "serving mode", choices=MODES),
            Option("rate", float, None, RATE_HELP),
            Option(
                "limit", int, 2000, "use the first N requests of the trace", flag="--n", minimum=1
            ),
            Option("timing", str, POLYSERVE_TIMING, "timing preset"),
            Option(
                "kv_capacity_tokens",
                int,
                None,
                "KV tokens per server (default: Llama-3.1-8B on an H200, 845,642)",
                flag="--kv-capacity",
            ),
            Option("seed", int, 0, "seed of the SLO draws and of the arrival process", minimum=0),
        ),
        models=("tier-partition", "tier-partition-fluid"),
        aliases={"fluid": "tier-partition-fluid:highs"},
        heuristics=(
            Heuristic("polyserve", _DESCRIPTIONS["polyserve"], policy=online("polyserve")),
            *(
                Heuristic(name, _DESCRIPTIONS[name], policy=online(name), baseline=True)
                for name in POLICIES[1:]
            ),
        ),
        docs="polyserve.md",
        settings=("servers", "mode"),
    )
)
