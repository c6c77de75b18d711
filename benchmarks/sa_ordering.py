"""SA ordering: exact models against exhaustive search, their scaling, and SA decision latency.

1. Time to prove optimality at N = 6, 8, 10 (B = 4; real-trace snapshots): exhaustive search
   (the paper's method), the MILP on HiGHS and on CBC, CP-SAT and the column method; one run
   each, with the ratio exhaustive / exact. Exhaustive search is cut at ``--brute-limit``
   seconds: a cut run gives a lower bound on its time and on the ratio.
2. Largest N proved optimal within 60 s (B = 4) by each exact method (the position-arc MILP on
   HiGHS and CBC, CP-SAT, and the column method), trying N = 10, 15, 20, 25, ... and stopping
   at the first size not proved; the interval of the first unproved size is kept.
3. SA decision latency per call (the paper's default hyperparameters) at N = 10, 40, 100.
4. With ``--intervals``: the column method at N = 10, 15, ..., 40 (no stop at the first
   unproved size; also with ``--quick``), with its incumbent, bound and relative gap.

Prints tables and writes ``benchmarks/out/sa_ordering.csv``. Asserts only stable facts: every
proved optimum agrees across backends (1e-9 relative) and every schedule passes the checker.

Usage: ``python benchmarks/sa_ordering.py [--quick] [--intervals] [--brute-limit S]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.heuristics.sa_ordering import sa_order
from slolab.problems.sa_ordering import sa_snapshot
from slolab.sim import check, metrics, replay
from slolab.solvers import build_model, solve

OUT = Path(__file__).parent / "out"


#: Exact methods: label -> (registered model, backend). "columns" is the column method
#: (column generation, reduced-cost enumeration, restricted MILP on HiGHS).
METHODS = {
    "brute": ("sa-ordering", "brute"),
    "highs": ("sa-ordering", "highs"),
    "cbc": ("sa-ordering", "cbc"),
    "cpsat": ("sa-ordering", "cpsat"),
    "columns": ("sa-ordering-columns", "highs"),
}


def prove(inst, method: str, time_limit: float) -> dict:
    model, solver = METHODS[method]
    res = solve(build_model(model, inst), solver=solver, time_limit=time_limit)
    row = {
        "solver": method,
        "status": res.status.value,
        "runtime_s": res.runtime_s,
        "objective": res.objective,
        "bound": res.bound,
    }
    if res.schedule is not None:
        out = replay(inst, res.schedule)
        assert check(inst, out) == [], f"{solver} schedule breaks a rule"
        row["replayed_g"] = metrics.g_ratio(inst, out)
    return row


def part_exhaustive(sizes: list[int], brute_limit: float) -> pd.DataFrame:
    rows = []
    for n in sizes:
        inst = sa_snapshot(n, 4, seed=100 + n)
        found = {}
        for solver in ("brute", "highs", "cbc", "cpsat", "columns"):
            limit = brute_limit if solver == "brute" else 600.0
            r = prove(inst, solver, limit)
            r.update({"part": "prove", "n": n, "batch": 4})
            rows.append(r)
            if r["status"] == "OPTIMAL":
                found[solver] = r["objective"]
        vals = list(found.values())
        assert all(abs(v - vals[0]) <= 1e-9 * abs(vals[0]) for v in vals), (
            f"N={n}: optima differ {found}"
        )
    return pd.DataFrame(rows)


def part_scaling(sizes: list[int], time_limit: float) -> pd.DataFrame:
    rows = []
    for solver in ("columns", "highs", "cpsat", "cbc"):
        for n in sizes:
            inst = sa_snapshot(n, 4, seed=200 + n)
            r = prove(inst, solver, time_limit)
            r.update({"part": "scaling", "n": n, "batch": 4})
            rows.append(r)
            print(f"  {solver} N={n}: {r['status']} in {r['runtime_s']:.2f}s", flush=True)
            if r["status"] != "OPTIMAL":
                break
    return pd.DataFrame(rows)


def part_intervals(sizes: list[int], time_limit: float) -> pd.DataFrame:
    """The column method at every size (no stop at the first unproved one): status, incumbent,
    bound and the relative gap ``bound / G - 1`` of each snapshot of the scaling grid."""
    rows = []
    for n in sizes:
        inst = sa_snapshot(n, 4, seed=200 + n)
        r = prove(inst, "columns", time_limit)
        gap = r["bound"] / r["objective"] - 1.0 if r["objective"] and r["bound"] else None
        r.update({"part": "intervals", "n": n, "batch": 4, "gap": gap})
        rows.append(r)
        shown = "-" if gap is None else f"{100 * gap:.1f}%"
        print(f"  columns N={n}: {r['status']} in {r['runtime_s']:.2f}s, gap {shown}", flush=True)
    return pd.DataFrame(rows)


def part_latency(sizes: list[int], repeats: int) -> pd.DataFrame:
    rows = []
    for n in sizes:
        inst = sa_snapshot(n, 4, seed=300 + n)
        times = []
        for k in range(repeats):
            t0 = time.perf_counter()
            sa_order(inst, seed=k)
            times.append(time.perf_counter() - t0)
        rows.append(
            {
                "part": "sa-latency",
                "n": n,
                "batch": 4,
                "solver": "sa",
                "runtime_s": float(np.median(times)),
                "max_s": float(np.max(times)),
                "repeats": repeats,
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick", action="store_true", help="N = 6, 8 only; scaling up to N = 20; fewer repeats"
    )
    ap.add_argument(
        "--brute-limit",
        type=float,
        default=1800.0,
        help="seconds for exhaustive search (default: 1800)",
    )
    ap.add_argument(
        "--intervals",
        action="store_true",
        help="also run the column method at N = 10, 15, ..., 40 without stopping at the "
        "first unproved size, and print its intervals",
    )
    args = ap.parse_args()
    pd.set_option("display.width", 200)
    prove_sizes = [6, 8] if args.quick else [6, 8, 10]
    proved = part_exhaustive(prove_sizes, args.brute_limit)
    ratios = []
    for n, g in proved.groupby("n"):
        brute = g[g.solver == "brute"].iloc[0]
        for _, r in g[g.solver != "brute"].iterrows():
            bound = "" if brute["status"] == "OPTIMAL" else ">= "
            ratios.append(
                {
                    "n": n,
                    "solver": r["solver"],
                    "exact_s": r["runtime_s"],
                    "exhaustive_s": brute["runtime_s"],
                    "speedup": f"{bound}{brute['runtime_s'] / r['runtime_s']:.0f}x",
                }
            )
    print("Time to prove optimality (B = 4):")
    print(proved[["n", "solver", "status", "runtime_s", "objective"]].to_string(index=False))
    print(pd.DataFrame(ratios).to_string(index=False))
    print("\nLargest N proved within 60 s (B = 4):")
    sizes = [10, 15, 20] if args.quick else [10, 15, 20, 25, 30, 35, 40, 50, 60, 80, 100]
    scaling = part_scaling(sizes, 60.0)
    best = scaling[scaling.status == "OPTIMAL"].groupby("solver")["n"].max()
    print(best.to_string())
    parts = [proved, scaling]
    if args.intervals:
        print("\nColumn method at every size (60 s each, B = 4):")
        intervals = part_intervals(list(range(10, 41, 5)), 60.0)
        print(
            intervals[["n", "status", "runtime_s", "objective", "bound", "gap"]].to_string(
                index=False
            )
        )
        parts.append(intervals)
    print("\nSA decision latency per call (paper defaults):")
    latency = part_latency([10, 40, 100], 5 if args.quick else 20)
    print(latency[["n", "runtime_s", "max_s", "repeats"]].to_string(index=False))
    OUT.mkdir(exist_ok=True)
    pd.concat([*parts, latency], ignore_index=True).to_csv(OUT / "sa_ordering.csv", index=False)
    print(f"wrote {OUT / 'sa_ordering.csv'}")


if __name__ == "__main__":
    main()
