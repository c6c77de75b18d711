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

With ``--bounds`` every LP carries the start-time bounds (docs/sa_ordering.md Sec. 6,
"Start-time bounds"). The first LP's *lent* claims are listed too: claimed columns at an arc
whose flow-weighted start ``sigma_a / f_a`` is past the column's deadline, which the LP allows
because another column at the same arc (an unclaimed one, limit ``UB_q``) lends its room.

Prints a table and writes ``benchmarks/out/sa_ordering_lp.csv``.

Usage: ``python benchmarks/sa_ordering_lp.py [--n N] [--seed S | --instance NAME] [--bounds]
[--time-limit T] [--steps K]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.instances.io import load_shipped
from slolab.models.sa_columns import (
    ColumnMaster,
    claim_capacity_cuts,
    latency_floor,
    met_limit,
    ratio_bound,
)
from slolab.models.sa_ordering import batches_of
from slolab.problems.sa_ordering import sa_snapshot
from slolab.solvers import build_model, solve

OUT = Path(__file__).parent / "out"
#: Claims within this of 0 or 1 count as integral.
INTEGRAL = 1e-6


def lent_claims(master: ColumnMaster) -> list[str]:
    """Claimed columns of the last LP solution whose arc starts (``sigma_a / f_a``) after their
    deadline, with their value, deadline and that start."""
    sol = np.asarray(master.highs.getSolution().col_value)
    values = sol[master.n_aux :]
    flow: dict[tuple[int, int], float] = {}
    for col, v in zip(master.columns, values, strict=True):
        flow[col.end, col.size] = flow.get((col.end, col.size), 0.0) + float(v)
    out = []
    for col, v in zip(master.columns, values, strict=True):
        arc = (col.end, col.size)
        if v <= INTEGRAL or not col.met or arc not in master.sigma_col:
            continue
        start = float(sol[master.sigma_col[arc]]) / flow[arc]
        if start > master.deadline(col) + 1e-6:
            out.append(
                f"arc {arc}: {v:.3f} x {col.members} claims {col.met} by "
                f"{master.deadline(col):.2f} s, the arc starts at {start:.2f} s"
            )
    return out


def lp_row(
    data,
    plan,
    ratio: float,
    latency_lb: float,
    unclaimable: list[int],
    bounds: bool = False,
    lent: list[str] | None = None,
) -> tuple[dict, list[int]]:
    """One LP solve with ``unclaimable`` barred (and the start-time bounds with ``bounds``): its
    table row and the fractionally claimed requests; ``lent`` collects :func:`lent_claims`."""
    limit = met_limit(data, claim_capacity_cuts(data)) if bounds else None
    master = ColumnMaster(data, ratio, unclaimable, bounds=bounds, met_limit=limit)
    master.add_plan(plan)
    start = time.perf_counter()
    value, _, _, converged = master.solve_lp(start + 600.0)
    claimed = master.claimed()
    fractional = [r for r in range(data.n_requests) if INTEGRAL < claimed[r] < 1.0 - INTEGRAL]
    if lent is not None:
        lent.extend(lent_claims(master))
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
    ap.add_argument(
        "--instance", default=None, help="a shipped snapshot instead (e.g. sa-azure-n40-b4)"
    )
    ap.add_argument("--bounds", action="store_true", help="LPs with the start-time bounds")
    ap.add_argument("--batch", type=int, default=4, help="largest batch B (default: 4)")
    ap.add_argument(
        "--time-limit", type=float, default=60.0, help="seconds for the incumbent (default: 60)"
    )
    ap.add_argument("--steps", type=int, default=4, help="most rounds of step 3 (default: 4)")
    args = ap.parse_args()
    seed = 200 + args.n if args.seed is None else args.seed
    if args.instance is not None:
        inst = load_shipped(args.instance)
        args.n, args.batch = inst.n_requests, int(inst.settings["batch_size"])
    else:
        inst = sa_snapshot(args.n, args.batch, seed=seed)
    model = build_model("sa-ordering-columns", inst)
    data = model.problem
    res = solve(model, solver="highs", time_limit=args.time_limit)
    if res.schedule is None or not res.objective:
        raise SystemExit(f"no incumbent with G > 0 ({res.status.value})")
    plan = batches_of(res.schedule)
    value = data.evaluate(plan)
    print(
        f"N = {args.n}, B = {args.batch}, {args.instance or f'seed {seed}'}: "
        f"{res.status.value}, G = {value.g:.6f} "
        f"({value.met_requests} met), bound {res.bound:.6f}, {res.runtime_s:.1f} s"
    )
    latency_lb = latency_floor(data, plan, time.perf_counter() + 600.0)
    rows = []
    unclaimable: list[int] = []
    lent: list[str] = []
    for step in range(args.steps + 1):
        row, fractional = lp_row(
            data, plan, value.g, latency_lb, unclaimable, args.bounds, lent if step == 0 else None
        )
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
    print("lent claims in the first LP:" if lent else "no lent claim in the first LP")
    for line in lent:
        print(f"  {line}")
    assert np.all(np.diff(table["lp_F_s"].to_numpy()) >= -1e-6), "a restriction lowered the LP"
    OUT.mkdir(exist_ok=True)
    table.to_csv(OUT / "sa_ordering_lp.csv", index=False)
    print(f"wrote {OUT / 'sa_ordering_lp.csv'}")


if __name__ == "__main__":
    main()
