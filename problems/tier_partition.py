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
    unless given), ``mode`` in the settings. A length-only trace needs ``arrivals`` (and
    ``rate``) in ``reading``."""
    import dataclasses

    from slolab.heuristics.polyserve import H200_LLAMA31_8B_KV_TOKENS
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
        **reading,
    )
    settings = {**inst.settings, "servers": servers, "mode": mode}
    label = name or f"{inst.name}-{mode[:2]}-{servers}srv"
    return dataclasses.replace(inst, name=label, problem=problem, settings=settings)


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
            Option("limit", int, 2000, "use the first N requests of the trace", flag="--n"),
            Option("timing", str, POLYSERVE_TIMING, "timing preset"),
            Option(
                "kv_capacity_tokens",
                int,
                None,
                "KV tokens per server (default: Llama-3.1-8B on an H200, 845,642)",
                flag="--kv-capacity",
            ),
            Option("seed", int, 0, "seed of the SLO draws and of the arrival process"),
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
    )
)
