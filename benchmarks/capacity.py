"""Capacity search speed: per policy and trace size, the search with and without early
verdicts, and with worker processes.

For each policy and request count (the first N requests of the Mooncake conversation trace,
PolyServe's SLOs, co-located unless ``--mode``), ``slolab capacity``'s search runs three ways:
every probe to its end (``full``), probes stopped once their verdict is certain (``early``), and
early with ``--workers`` processes (``parallel``, when ``--workers`` > 1). Each row: wall and CPU
time of the search (CPU of this process only, so not for ``parallel``), probes, probes stopped
early, the capacity and its bracket, the load average when it ran (the machine may be shared).

Asserts only what is stable: the three searches give the same capacity and bracket (early
verdicts and k-section change the cost, never the answer). Prints a table and writes
``benchmarks/out/capacity.csv`` (a row as soon as it is measured).

Usage: ``python benchmarks/capacity.py [--sizes 1000 2000] [--policies sarathi polyserve]
[--servers 8] [--mode colocated] [--workers 2] [--rel-tol 0.02] [--arrivals poisson --rate 3]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
from slolab.harness.serving import ServingSetup, capacity_search

OUT = Path(__file__).parent / "out"
POLICIES = ["sarathi", "vllm", "edf", "slos-serve", "slide-batching", "hyperflexis", "polyserve"]


def search(
    setup: ServingSetup, *, early: bool, workers: int, rel_tol: float, rate: float | None
) -> dict:
    load = os.getloadavg()[0]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    found, reference = capacity_search(
        setup, early=early, workers=workers, rel_tol=rel_tol, rate=rate
    )
    return {
        "wall_s": time.perf_counter() - wall0,
        "cpu_s": time.process_time() - cpu0 if workers == 1 else float("nan"),
        "probes": found.n_probes,
        "early_stops": found.n_early,
        "capacity": found.capacity,
        "bracket_lo": found.bracket[0],
        "bracket_hi": found.bracket[1],
        "stop_reason": found.stop_reason,
        "trace_rate": reference,
        "load_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    parser.add_argument("--policies", nargs="+", default=POLICIES)
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--mode", default="colocated")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rel-tol", type=float, default=0.02)
    parser.add_argument("--trace", default="mooncake_conversation")
    parser.add_argument("--skip-full", action="store_true", help="no full-probe search")
    parser.add_argument(
        "--arrivals",
        default=None,
        help="draw arrivals (poisson, gamma, uniform) at --rate instead of time-scaling the "
        "trace's own (the Mooncake trace's timestamps come in bursts)",
    )
    parser.add_argument("--rate", type=float, default=None, help="with --arrivals (req/s)")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / "capacity.csv"
    rows: list[dict] = []
    for policy in args.policies:
        for n in args.sizes:
            setup = ServingSetup(
                args.trace,
                policy=policy,
                servers=args.servers,
                limit=n,
                slos="polyserve",
                mode=args.mode,
                arrivals=args.arrivals,
            )
            ways = [("early", True, 1)]
            if not args.skip_full:
                ways.insert(0, ("full", False, 1))
            if args.workers > 1:
                ways.append(("parallel", True, args.workers))
            answers = set()
            for way, early, workers in ways:
                row = {"policy": policy, "requests": n, "servers": args.servers, "way": way}
                row |= {"mode": args.mode, "workers": workers}
                row |= {"arrivals": args.arrivals or "trace"}
                row |= search(
                    setup, early=early, workers=workers, rel_tol=args.rel_tol, rate=args.rate
                )
                rows.append(row)
                pd.DataFrame(rows).to_csv(path, index=False)
                print(
                    f"{policy:15s} {n:6d} {way:8s} wall {row['wall_s']:8.2f} s  "
                    f"probes {row['probes']:3d} (early {row['early_stops']:3d})  "
                    f"capacity {row['capacity']:.4g} req/s  load {row['load_1min']:.1f}",
                    flush=True,
                )
                answers.add((row["capacity"], row["bracket_lo"], row["bracket_hi"]))
            assert len(answers) == 1, f"{policy} at {n}: the searches disagree: {answers}"
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
