"""The shipped instances: how each is cut from the vendored traces, and what is known of it.

``python -m slolab.harness.shipped`` rebuilds every instance file under ``instances/data/`` and
rewrites the manifest; exact-problem instances are solved again (HiGHS, 600 s limit) and their
optimum recorded with the status, solver and time that proved it. A test rebuilds each
instance and checks it equals the shipped file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slolab.instances import Instance, add_shipped
from slolab.problems.deployment_capacity import deployment_instance
from slolab.problems.sa_ordering import sa_snapshot
from slolab.problems.serving import serving_instance

log = logging.getLogger("slolab")


@dataclass(frozen=True, slots=True)
class ShippedSpec:
    """How one shipped instance is built."""

    name: str
    source: str
    cut: str
    seed: int
    build: Callable[[], Instance]


def _serving(
    name: str, trace: str, limit: int, servers: int, seed: int, rate: float | None
) -> ShippedSpec:
    cut = f"first {limit} requests" + (f", time-compressed to {rate} req/s" if rate else "")
    cut += f"; PolyServe SLO tiers (seed {seed}); {servers} co-located servers, llama2-7b-h100"
    return ShippedSpec(
        name,
        f"instances/data/traces/{trace}.csv",
        cut,
        seed,
        lambda: serving_instance(
            trace, seed=seed, servers=servers, limit=limit, rate=rate, name=name
        ),
    )


def _sa(n: int, batch: int, seed: int) -> ShippedSpec:
    name = f"sa-azure-n{n}-b{batch}"
    cut = (
        f"{n - n // 2} consecutive chat requests (Azure conv) + {n // 2} code requests (Azure code), "
        f"prompt + output <= 2048, seeded start, shuffled; all queued at t=0; B = {batch}; "
        "SA-paper SLOs; sa-qwen2.5-7b-v100"
    )
    return ShippedSpec(
        name,
        "instances/data/traces/azure_conv_2023.csv + azure_code_2023.csv",
        cut,
        seed,
        lambda: sa_snapshot(n, batch, seed=seed, name=name),
    )


def _deployment(name: str, configurations: str, limit: int, traffic: float) -> ShippedSpec:
    cut = (
        f"first {limit} requests, arrivals time-scaled to {traffic}x their rate; PolyServe SLO "
        f"tiers (seed 0) under the fastest configuration; capacities of {configurations} "
        "measured at attainment 0.9 (probes of 200 requests, seed 0)"
    )
    return ShippedSpec(
        name,
        "instances/data/traces/azure_conv_2023.csv",
        cut,
        0,
        lambda: deployment_instance(
            trace="azure_conv_2023",
            configurations=configurations,
            limit=limit,
            traffic=traffic,
            stream_requests=200,
            seed=0,
            name=name,
        ),
    )


SPECS: tuple[ShippedSpec, ...] = (
    _serving("azure-conv-500-2srv", "azure_conv_2023", 500, 2, 0, 6.0),
    _serving("azure-code-300-1srv", "azure_code_2023", 300, 1, 0, None),
    _sa(6, 2, 11),
    _sa(8, 4, 12),
    _sa(10, 4, 13),
    _sa(20, 4, 14),
    _sa(40, 4, 15),
    _deployment(
        "deploy-azure-conv-200-3cfg",
        "llama2-7b/h100/tp1,llama2-7b/a100/tp1,llama2-7b/a40/tp1",
        200,
        6.0,
    ),
)


def spec(name: str) -> ShippedSpec:
    """The spec of a shipped instance by name."""
    for s in SPECS:
        if s.name == name:
            return s
    raise KeyError(f"no shipped instance {name!r}; known: {', '.join(s.name for s in SPECS)}")


def known_facts(inst: Instance, time_limit: float) -> dict[str, Any]:
    """What is known of an instance's optimum (solved now), or its baseline figures."""
    from slolab.harness.compare import objective
    from slolab.harness.methods import run_exact_result
    from slolab.problems import build_model, get_problem
    from slolab.solvers import solve

    model = get_problem(inst.problem).default_model
    if model is None:
        return {"note": "serving stream: no exact model; compare heuristics and capacity"}
    res = solve(build_model(model, inst), "highs", time_limit=time_limit)
    facts: dict[str, Any] = {
        "status": res.status.value,
        "solver": "highs",
        "time_limit_s": time_limit,
        "runtime_s": round(res.runtime_s, 3),
        "bound": res.bound,
    }
    outcome, ran = run_exact_result(inst, res, seed=0)
    if outcome is not None:
        facts["incumbent"] = objective(ran, outcome)
    if res.status.value == "OPTIMAL":
        facts["optimum"] = facts["incumbent"]
    return facts


def build_all(time_limit: float = 600.0, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Rebuild the shipped instances (all, or ``names``) and their manifest entries."""
    entries = []
    for s in SPECS:
        if names and s.name not in names:
            continue
        inst = s.build()
        facts = known_facts(inst, time_limit)
        entries.append(add_shipped(inst, source=s.source, cut=s.cut, seed=s.seed, known=facts))
        log.info("shipped %s: %s", s.name, facts)
    return entries


def main() -> None:
    ap = argparse.ArgumentParser(description="Rebuild the shipped instances and their manifest.")
    ap.add_argument(
        "--time-limit", type=float, default=600.0, help="seconds per exact solve (default: 600)"
    )
    ap.add_argument("names", nargs="*", help="only these instances (default: all)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for e in build_all(args.time_limit, args.names or None):
        print(e["name"], e["known"])


if __name__ == "__main__":
    main()
