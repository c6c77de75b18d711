"""SLOs-Serve scenario study: serving capacity per scheduler, scenario and replica count.

Capacity is the largest arrival rate (req/s) with >= 90% deadline attainment
(:func:`slolab.harness.scenarios.capacity_of`), for SLOs-Serve, Sarathi-Serve and vLLM on the
ChatBot, Coder, Summarizer and Mixed scenarios with tight SLOs (prefill 3x zero-load, decode
per Table 1; ``--slack loose``: 5x), on 1, 2 and 4 replicas. A replica count ``r`` simulates ``min(300 r, 1200)``
requests. Prints a table with the ratio SLOs-Serve / best baseline and writes
``benchmarks/out/slos_scenarios.csv``.

Run ``python benchmarks/slos_scenarios.py``;
``--quick`` runs ChatBot and Coder on one replica with 150 requests and ``rel_tol`` 0.1.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
from slolab.harness.scenarios import POLICIES, capacity_of
from slolab.instances.scenarios import SCENARIOS

log = logging.getLogger("slolab")

OUT = Path(__file__).resolve().parent / "out" / "slos_scenarios.csv"
REQUESTS_PER_REPLICA = 300
MAX_REQUESTS = 1200


def requests_for(replicas: int) -> int:
    """Requests simulated for a replica count: 300 per replica, at most 1200."""
    return min(REQUESTS_PER_REPLICA * replicas, MAX_REQUESTS)


def measure(
    scenarios: list[str],
    replicas: list[int],
    policies: list[str],
    *,
    n_of: Any,
    rel_tol: float,
    seed: int,
    slack: str = "tight",
) -> pd.DataFrame:
    """One row per (scenario, replicas, policy): capacity and the search's record."""
    rows = []
    for scenario in scenarios:
        for servers in replicas:
            n = n_of(servers)
            for policy in policies:
                start = time.perf_counter()
                res = capacity_of(
                    scenario, policy, servers, seed=seed, n=n, rel_tol=rel_tol, slack=slack
                )
                rows.append(
                    {
                        "scenario": scenario,
                        "slack": slack,
                        "replicas": servers,
                        "requests": n,
                        "policy": policy,
                        "capacity_req_s": res.capacity,
                        "per_gpu_req_s": res.capacity / servers,
                        "attainment_at_capacity": max(a for r, a in res.probes if r == res.capacity)
                        if res.capacity > 0
                        else float("nan"),
                        "n_probes": res.n_probes,
                        "stop_reason": res.stop_reason,
                        "monotone": res.monotone,
                        "wall_s": time.perf_counter() - start,
                    }
                )
                print(
                    f"{scenario:10s} x{servers} {policy:10s} {res.capacity:8.3f} req/s "
                    f"({res.n_probes} probes, {rows[-1]['wall_s']:.1f} s)",
                    flush=True,
                )
    return pd.DataFrame(rows)


def ratio_table(table: pd.DataFrame) -> pd.DataFrame:
    """Capacity per scheduler in columns, with the best baseline and SLOs-Serve's ratio to it."""
    wide = table.pivot_table(
        index=["scenario", "replicas"], columns="policy", values="capacity_req_s"
    ).reset_index()
    baselines = [p for p in POLICIES if p != "slos-serve" and p in wide.columns]
    wide["best_baseline"] = wide[baselines].max(axis=1)
    wide["ratio"] = wide["slos-serve"] / wide["best_baseline"]
    order = {name: i for i, name in enumerate(SCENARIOS)}
    wide = wide.sort_values(["scenario", "replicas"], key=lambda c: c.map(order).fillna(c))
    wide.columns.name = None
    return wide.reset_index(drop=True)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset, for a smoke test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--slack",
        choices=["tight", "loose"],
        default="tight",
        help="TTFT slack: tight = 3x zero-load prefill, loose = 5x (Table 3) (default: tight)",
    )
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=None)
    parser.add_argument("--replicas", nargs="+", type=int, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.quick:
        scenarios, replicas, tol = ["chatbot", "coder"], [1], 0.1

        def n_of(servers: int) -> int:
            return 150 * servers
    else:
        scenarios, replicas, tol = list(SCENARIOS), [1, 2, 4], 0.05
        n_of = requests_for
    scenarios = args.scenarios or scenarios
    replicas = args.replicas or replicas
    table = measure(
        scenarios,
        replicas,
        list(POLICIES),
        n_of=n_of,
        rel_tol=tol,
        seed=args.seed,
        slack=args.slack,
    )
    print(f"\nCapacity (req/s) at 90% deadline attainment, {args.slack} SLOs")
    print(ratio_table(table).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"\nwrote {args.out}")
    return table


if __name__ == "__main__":
    main()
