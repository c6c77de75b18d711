"""Where the column LP's bound comes from on one SA-ordering snapshot (docs/sa_ordering.md Sec. 10).

1. Solve the snapshot with the column method (``--time-limit`` seconds) for an incumbent G.
2. At ``lambda`` = that G, solve the column LP (Sec. 6): its value ``min F`` (s), the bound on
   G it implies, how many requests it claims met in total (``sum_r y_r``) against the
   incumbent's count, and which requests it claims only fractionally.
3. Make those fractionally claimed requests unclaimable (cumulatively) and solve again, until
   the LP's claims are integral or ``--steps`` rounds have run. Each later row bounds only the
   plans that leave the unclaimable requests unmet. If the LP stays well below 0 once its claims
   are integral, the gap comes from the time rows (fractional orderings whose averaged start
   times satisfy the claims), not from the choice of the met set: branching on which requests
   meet would not close it alone.

Prints a table and writes ``benchmarks/out/sa_ordering_lp.csv``.

Usage: ``python benchmarks/sa_ordering_lp.py [--n N] [--seed S] [--time-limit T] [--steps K]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.models.sa_columns import ColumnMaster, latency_floor, ratio_bound
from slolab.models.sa_ordering import batches_of
from slolab.problems.sa_ordering import sa_snapshot
from slolab.solvers import build_model, solve

OUT = Path(__file__).parent / "out"
#: Claims within this of 0 or 1 count as integral.
INTEGRAL = 1e-6


def lp_row(
    data, plan, ratio: float, latency_lb: float, unclaimable: list[int]
) -> tuple[dict, list[int]]:
    """One LP solve with ``unclaimable`` barred: its table row and the fractionally claimed
    requests."""
    master = ColumnMaster(data, ratio, unclaimable)
    master.add_plan(plan)
    start = time.perf_counter()
    value, _, _, converged = master.solve_lp(start + 600.0)
    claimed = master.claimed()
    fractional = [r for r in range(data.n_requests) if INTEGRAL < claimed[r] < 1.0 - INTEGRAL]
    row = {
        "unclaimable": " ".join(map(str, unclaimable)) or "-",
        "lp_F_s": value,
        "g_bound": ratio_bound(ratio, value, latency_lb),
        "claimed": float(claimed.sum()),
        "fractional": " ".join(f"{r}:{claimed[r]:.3f}" for r in fractional) or "-",
        "columns": len(master.columns),
        "converged": converged,
        "runtime_s": time.perf_counter() - start,
    }
    return row, fractional


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=40, help="requests (default: 40)")
    ap.add_argument("--seed", type=int, default=None, help="snapshot seed (default: 200 + N)")
    ap.add_argument("--batch", type=int, default=4, help="largest batch B (default: 4)")
    ap.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds for the incumbent (default: 60)"
    )
    ap.add_argument("--steps", type=int, default=4, help="most rounds of step 3 (default: 4)")
    args = ap.parse_args()
    seed = 200 + args.n if args.seed is None else args.seed
    inst = sa_snapshot(args.n, args.batch, seed=seed)
    model = build_model("sa-ordering-columns", inst)
    data = model.problem
    res = solve(model, solver="highs", time_limit=args.time_limit)
    if res.schedule is None or not res.objective:
        raise SystemExit(f"no incumbent with G > 0 ({res.status.value})")
    plan = batches_of(res.schedule)
    value = data.evaluate(plan)
    print(
        f"N = {args.n}, B = {args.batch}, seed {seed}: {res.status.value}, G = {value.g:.6f} "
        f"({value.met_requests} met), bound {res.bound:.6f}, {res.runtime_s:.1f} s"
    )
    latency_lb = latency_floor(data, plan, time.perf_counter() + 600.0)
    rows = []
    unclaimable: list[int] = []
    for _ in range(args.steps + 1):
        row, fractional = lp_row(data, plan, value.g, latency_lb, unclaimable)
        rows.append(row)
        if not fractional:
            break
        unclaimable = sorted({*unclaimable, *fractional})
    table = pd.DataFrame(rows)
    table.insert(0, "incumbent_met", value.met_requests)
    table.insert(0, "lambda", value.g)
    table.insert(0, "n", args.n)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", 60)
    print(table.drop(columns=["n", "lambda"]).to_string(index=False))
    assert np.all(np.diff(table["lp_F_s"].to_numpy()) >= -1e-6), "a restriction lowered the LP"
    OUT.mkdir(exist_ok=True)
    table.to_csv(OUT / "sa_ordering_lp.csv", index=False)
    print(f"wrote {OUT / 'sa_ordering_lp.csv'}")


if __name__ == "__main__":
    main()
