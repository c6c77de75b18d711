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
5. With ``--bp``: branch-and-price on SCIP (``sa-ordering-bp``) against the column method and
   the position-arc MILP on HiGHS at N = 20, 30, 40, 50, 60 (``--bp-sizes``), three snapshots
   each (seeds 0, 1, 2; ``--bp-seeds``), 60 s per solve up to N = 40 and 300 s above
   (``--bp-limit`` overrides both): status, time, incumbent, bound, final gap and
   branch-and-price's root gap (the bound after its root column LP over the final G, minus
   one), and the proved-within-limit rate per size and method. ``--bp-only`` runs this part
   alone. Methods ``bp-nocuts`` and ``columns-nocuts`` are the same without the
   claim-capacity cuts, ``bp-nobounds`` and ``columns-nobounds`` without the start-time bounds,
   ``bp-noposition`` without the branching level on a request's position and
   ``bp-positionfirst`` with that level before the met-request one, ``bp-positionspread`` with
   its split on the most spread request, ``bp-plunging`` with SCIP's own node selection (which
   dives) instead of the smallest bound first, ``bp-nodecuts`` with the claim-capacity cuts
   of each node's decisions separated in the tree, ``bp-treemilp`` with the restricted MILP
   run inside the tree. ``--bp-shipped`` adds
   shipped instances (e.g. ``sa-azure-n40-b4``) to the snapshots; ``--bp-first-seed k``
   starts the snapshots at seed ``k`` (seeds ``k .. --bp-seeds - 1``).
6. With ``--cuts``: the root gap with and without the claim-capacity cuts
   (docs/sa_ordering.md Sec. 6, "Cuts") on the snapshots of ``--cuts-sizes`` (seeds 0, 1, 2;
   ``--cuts-seeds``) and the shipped ``sa-azure-n40-b4``. The incumbent G is the column
   method's after ``--cuts-limit`` seconds; at ``lambda`` = G the plain column LP, the LP
   with the violated cuts separated, the LP with the start-time bounds (docs Sec. 6,
   "Start-time bounds") and the LP with both are solved to convergence from the incumbent's
   columns, and each gives ``bound / G - 1``. Also the cuts found, added and the LP's claimed-met
   count. ``--cuts-only`` runs this part alone and writes ``benchmarks/out/sa_ordering_cuts.csv``.
7. With ``--ti-only``: the time-indexed network's bound (docs/sa_ordering.md Sec. 6) on
   ``--ti-snapshots`` within ``--ti-limit`` seconds each on a grid of ``--ti-step`` seconds,
   with ng-route memory of ``--ti-ng`` requests (0: none, the default), with
   ``--ti-ng-warm SHARE`` priced without memory first (up to that share of the limit), and with
   ``--ti-primal S`` the last ``S`` seconds of the limit given to a primal from the priced
   paths (a restricted arc MILP; docs Sec. 6, "A primal from the network"): its plan's exact G,
   so each row is an interval; writes ``benchmarks/out/sa_ordering_ti.csv``. With
   ``--ti-sr-rounds R`` instead: what subset-row cuts could give (docs Sec. 6, "Subset-row
   cuts, measured"): column generation at each snapshot's first ratio for ``--ti-limit``
   seconds, then ``R`` rounds of the ``--ti-sr-most`` most violated cuts over its paths (an
   upper estimate of the LP with the cuts, not a bound); writes
   ``benchmarks/out/sa_ordering_ti_sr.csv``.

Prints tables and writes ``benchmarks/out/sa_ordering.csv`` (``--tag T``: ``sa_ordering-T.csv``,
and likewise for the parts' files, so that runs started together keep their own). Asserts only
stable facts: every
proved optimum agrees across backends (1e-9 relative) and every schedule passes the checker.

Usage: ``python benchmarks/sa_ordering.py [--quick] [--intervals] [--bp | --bp-only]
[--bp-sizes 20,30] [--bp-seeds 3] [--bp-methods bp,columns,highs] [--bp-limit S]
[--bp-first-seed 0] [--bp-shipped sa-azure-n40-b4]
[--cuts | --cuts-only] [--cuts-sizes 20,30,40] [--cuts-seeds 3] [--cuts-limit S]
[--ti-only] [--ti-snapshots NAME@RATIO,N:SEED@RATIO] [--ti-limit S] [--ti-step S] [--ti-ng K]
[--ti-ng-warm [SHARE]] [--ti-primal S] [--ti-primal-arc-share SHARE] [--ti-sr-rounds R]
[--ti-sr-most K]
[--brute-limit S] [--tag T]``.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.heuristics.sa_ordering import sa_order
from slolab.instances.io import load_shipped
from slolab.models.sa_columns import (
    ColumnMaster,
    claim_capacity_cuts,
    latency_floor,
    met_limit,
    ratio_bound,
)
from slolab.models.sa_ordering import batches_of
from slolab.problems import build_model
from slolab.problems.sa_ordering import sa_snapshot
from slolab.sim import check, metrics, replay
from slolab.sim.schedule import Schedule
from slolab.solvers import solve
from tqdm import tqdm

OUT = Path(__file__).parent / "out"


#: Exact methods: label -> (registered model, backend). "columns" is the column method
#: (column generation, reduced-cost enumeration, restricted MILP on HiGHS).
METHODS = {
    "brute": ("sa-ordering", "brute"),
    "highs": ("sa-ordering", "highs"),
    "cbc": ("sa-ordering", "cbc"),
    "cpsat": ("sa-ordering", "cpsat"),
    "columns": ("sa-ordering-columns", "highs"),
    "bp": ("sa-ordering-bp", "highs"),
    "columns-nocuts": ("sa-ordering-columns", "highs"),
    "bp-nocuts": ("sa-ordering-bp", "highs"),
    "columns-nobounds": ("sa-ordering-columns", "highs"),
    "bp-nobounds": ("sa-ordering-bp", "highs"),
    "bp-noposition": ("sa-ordering-bp", "highs"),
    "bp-positionfirst": ("sa-ordering-bp", "highs"),
    "bp-positionspread": ("sa-ordering-bp", "highs"),
    "bp-plunging": ("sa-ordering-bp", "highs"),
    "bp-nodecuts": ("sa-ordering-bp", "highs"),
    "bp-treemilp": ("sa-ordering-bp", "highs"),
}
#: Options of the variant methods: label suffix -> model options.
VARIANTS = {
    "-nocuts": {"cuts": False},
    "-nobounds": {"bounds": False},
    "-noposition": {"position": None},
    "-positionfirst": {"position": "first"},
    "-positionspread": {"position_pick": "spread"},
    "-plunging": {"best_first": False},
    "-nodecuts": {"node_cuts": True},
    "-treemilp": {"tree_milp": True},
}


def prove(inst, method: str, time_limit: float) -> dict:
    model, solver = METHODS[method]
    options = next((v for k, v in VARIANTS.items() if method.endswith(k)), {})
    res = solve(build_model(model, inst, **options), solver=solver, time_limit=time_limit)
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
        assert abs(row["replayed_g"] - res.objective) <= 1e-9 * res.objective, "replay differs"
    for key in (
        "root_bound",
        "cuts",
        "nodes",
        "warm_start_status",
        "final_milp",
        "blind_splits",
        "node_cuts",
        "node_cut_rows",
        "tree_milps",
        "tree_milp_s",
        "node_cut_checks",
        "node_cut_s",
        "scip_runs",
    ):
        if key in res.details:
            row[key] = res.details[key]
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


def bp_limit(n: int, override: float | None) -> float:
    """Seconds per solve in the branch-and-price part: 60 up to N = 40, 300 above."""
    if override is not None:
        return override
    return 60.0 if n <= 40 else 300.0


def part_bp(
    sizes: list[int],
    seeds: int,
    methods: list[str],
    limit: float | None,
    shipped: tuple[str, ...] = (),
    first_seed: int = 0,
) -> pd.DataFrame:
    """Branch-and-price against the column method and the arc MILP on snapshots
    ``sa_snapshot(n, 4, seed=s)`` and the ``shipped`` instances (seed -1): one row per
    (instance, method), with the relative gap ``bound / G - 1`` and branch-and-price's root
    gap (its root bound over the final G)."""
    rows = []
    cases = [(f"n{n}-seed{s}", n, s) for n in sizes for s in range(first_seed, seeds)]
    for name in shipped:
        cases.append((name, load_shipped(name).n_requests, -1))
    jobs = [(case, m) for case in cases for m in methods]
    for (label, n, seed), method in tqdm(jobs, desc="branch-and-price part", unit="solve"):
        inst = load_shipped(label) if seed < 0 else sa_snapshot(n, 4, seed=seed)
        r = prove(inst, method, bp_limit(n, limit))
        r["instance"] = label
        obj, bound = r["objective"], r["bound"]
        r["gap"] = bound / obj - 1.0 if obj and bound is not None else None
        root = r.get("root_bound")
        r["root_gap"] = root / obj - 1.0 if obj and root is not None else None
        r.update({"part": "bp", "n": n, "batch": 4, "seed": seed, "limit_s": bp_limit(n, limit)})
        rows.append(r)
        tqdm.write(
            f"  {method} {label}: {r['status']} in {r['runtime_s']:.1f}s, "
            f"G {obj:.6f}, bound {bound:.6f}"
        )
    frame = pd.DataFrame(rows)
    for n, g in frame.groupby("n"):
        optimal = g[g.status == "OPTIMAL"]
        if len(optimal) > 1:
            for seed, h in optimal.groupby("seed"):
                vals = h["objective"].tolist()
                assert all(abs(v - vals[0]) <= 1e-9 * vals[0] for v in vals), (n, seed, vals)
    return frame


def root_gaps(inst, label: str, limit: float) -> dict:
    """Root gap of one snapshot with and without the claim-capacity cuts, at ``lambda`` = the
    column method's incumbent after ``limit`` seconds."""
    model = build_model("sa-ordering-columns", inst)
    data = model.problem
    res = solve(model, solver="highs", time_limit=limit)
    plan = batches_of(res.schedule)
    value = data.evaluate(plan)
    lam = value.g
    latency_lb = latency_floor(data, plan, time.perf_counter() + 600.0)
    pool = claim_capacity_cuts(data)
    row = {
        "part": "cuts",
        "instance": label,
        "n": data.n_requests,
        "incumbent": lam,
        "incumbent_status": res.status.value,
        "incumbent_met": value.met_requests,
        "cuts_found": len(pool),
    }
    families = (("plain", False, False), ("cuts", True, False), ("bounds", False, True))
    for name, with_cuts, bounds in (*families, ("both", True, True)):
        limit = met_limit(data, pool if with_cuts else ())
        master = ColumnMaster(data, lam, bounds=bounds, met_limit=limit)
        master.add_plan(plan)
        t0 = time.perf_counter()
        if with_cuts:
            _, lower, _, converged = master.separate(pool, t0 + 600.0)
            row[f"{name}_added"] = len(master.cuts)
        else:
            _, lower, _, converged = master.solve_lp(t0 + 600.0)
        assert converged, (label, name)
        bound = ratio_bound(lam, lower, latency_lb)
        row[f"{name}_bound"] = bound
        row[f"{name}_root_gap"] = bound / lam - 1.0
        row[f"{name}_claimed"] = float(master.claimed().sum())
        row[f"{name}_lp_s"] = time.perf_counter() - t0
    for name in ("cuts", "bounds", "both"):
        assert row[f"{name}_bound"] <= row["plain_bound"] * (1.0 + 1e-9), f"{name} loosened"
    plain = row["plain_root_gap"]
    for name in ("cuts", "bounds", "both"):
        closed = 1.0 - row[f"{name}_root_gap"] / plain if plain > 1e-12 else None
        row["gap_closed" if name == "cuts" else f"{name}_gap_closed"] = closed
    return row


def part_cuts(sizes: list[int], seeds: int, limit: float) -> pd.DataFrame:
    """Root gaps with and without the cuts on ``sa_snapshot(n, 4, seed=s)`` and the shipped
    ``sa-azure-n40-b4``."""
    jobs = [(f"N={n} seed={s}", n, s) for n in sizes for s in range(seeds)]
    jobs.append(("sa-azure-n40-b4", 40, None))
    rows = []
    for label, n, seed in tqdm(jobs, desc="cuts part", unit="snapshot"):
        inst = load_shipped(label) if seed is None else sa_snapshot(n, 4, seed=seed)
        row = root_gaps(inst, label, limit)
        row["seed"] = seed
        rows.append(row)
        tqdm.write(
            f"  {label}: root gap {100 * row['plain_root_gap']:.2f}% without cuts, "
            f"{100 * row['cuts_root_gap']:.2f}% with {row['cuts_added']} cuts, "
            f"{100 * row['bounds_root_gap']:.2f}% with the start-time bounds, "
            f"{100 * row['both_root_gap']:.2f}% with both"
        )
    return pd.DataFrame(rows)


def report_cuts(frame: pd.DataFrame) -> None:
    """Print the cuts part: one row per snapshot."""
    print(
        "\nRoot gap without and with the claim-capacity cuts and the start-time bounds "
        "(B = 4; lambda = incumbent):"
    )
    cols = [
        "instance",
        "incumbent",
        "incumbent_met",
        "plain_root_gap",
        "plain_claimed",
        "cuts_found",
        "cuts_added",
        "cuts_root_gap",
        "cuts_claimed",
        "gap_closed",
        "cuts_lp_s",
        "bounds_root_gap",
        "bounds_gap_closed",
        "both_root_gap",
        "both_claimed",
        "both_gap_closed",
    ]
    print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))


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


def ti_snapshot(spec: str) -> tuple[str, str, object]:
    """A ``--ti-snapshots`` entry ``NAME[@RATIO]``: the name, the ratio as given ('' when
    none) and the instance (a shipped name, or ``N:SEED`` for ``sa_snapshot(N, 4, seed=SEED)``)."""
    name, _, ratio = spec.partition("@")
    if ":" in name:
        n, seed = (int(v) for v in name.split(":"))
        return name, ratio, sa_snapshot(n, 4, seed=seed)
    return name, ratio, load_shipped(name)


def part_ti(
    specs: list[str],
    limit: float,
    step_s: float,
    ng_size: int = 0,
    ng_warm: float = 0.0,
    primal_s: float = 0.0,
    primal_arc_share: float = 0.25,
) -> pd.DataFrame:
    """The time-indexed network's bound (:func:`slolab.models.sa_time_index.time_indexed_bound`)
    per snapshot spec ``NAME[@RATIO]`` (a shipped name, or ``N:SEED`` for ``sa_snapshot(N, 4,
    seed=SEED)``; ``RATIO`` the first ratio tried, default the deterministic starting plan's
    G), seeded with the starting plan, within ``limit`` seconds on a grid of ``step_s``, with
    ng-route memory of ``ng_size`` (0: none), priced without it first for up to ``ng_warm`` of
    the time (0: not); with ``primal_s > 0`` the last ``primal_s`` seconds go to the primal
    from the priced paths (its plan is checked and its exact G reported, with the gap
    ``bound / G - 1``), ``primal_arc_share`` of them for the arc MILP."""
    import os

    from slolab.models.sa_ordering import SAOrderingModel, as_problem
    from slolab.models.sa_time_index import time_indexed_bound

    rows = []
    for spec in specs:
        name, ratio, inst = ti_snapshot(spec)
        problem = as_problem(inst)
        plan, value = SAOrderingModel(inst).starting_plan()
        start, cpu = time.perf_counter(), time.process_time()
        floor = latency_floor(problem, plan, start + limit / 8)
        left = limit - (time.perf_counter() - start)
        got = time_indexed_bound(
            problem,
            plan,
            float(ratio) if ratio else value.g,
            floor,
            left,
            step_s=step_s,
            ng_size=ng_size,
            ng_warm=ng_warm,
            primal_s=primal_s,
            primal_arc_share=primal_arc_share,
        )
        rows.append(
            {
                "snapshot": name,
                "first_ratio": float(ratio) if ratio else value.g,
                "latency_floor_s": floor,
                "bound": got.bound,
                "ratios": len(got.tried),
                "converged": sum(int(t["converged"]) for t in got.tried),
                "tried": ";".join(
                    f"{t['ratio']:.6f}:{t['f_lower']:.3f}{'ng' if t['ng'] else ''}"
                    for t in got.tried
                ),
                "ng_ratios": sum(1 for t in got.tried if t["ng"]),
                "paths": got.columns,
                "ticks": got.ticks,
                "ng_size": got.ng_size,
                "ng_fallbacks": got.fallbacks,
                "ng_warm": ng_warm,
                "primal_arc_share": primal_arc_share if primal_s else float("nan"),
                **primal_columns(inst, problem, got.primal, got.bound),
                "wall_s": time.perf_counter() - start,
                "cpu_s": time.process_time() - cpu,
                "load_average": os.getloadavg()[0],
            }
        )
    return pd.DataFrame(rows)


def part_ti_subset_rows(
    specs: list[str], limit: float, step_s: float, rounds: int, most: int
) -> pd.DataFrame:
    """What subset-row cuts could give on the time-indexed network (docs/sa_ordering.md Sec. 6,
    "Subset-row cuts, measured"): per snapshot spec (as :func:`part_ti`), at its first ratio,
    column generation without memory from the starting plan for up to ``limit`` seconds, then
    :func:`slolab.models.sa_ti_cuts.subset_row_lift` over the master's paths: ``rounds``
    rounds of the ``most`` most violated cuts. The lifted LP is an upper estimate of the LP
    with the cuts over every path (it has fewer columns), not a bound."""
    import os

    from slolab.models.sa_ordering import SAOrderingModel, as_problem
    from slolab.models.sa_ti_cuts import path_counts, subset_row_lift
    from slolab.models.sa_time_index import TimeIndexedMaster, ratio_bound

    rows = []
    for spec in specs:
        name, ratio, inst = ti_snapshot(spec)
        problem = as_problem(inst)
        plan, value = SAOrderingModel(inst).starting_plan()
        lam = float(ratio) if ratio else value.g
        start = time.perf_counter()
        floor = latency_floor(problem, plan, start + limit / 8)
        master = TimeIndexedMaster(problem, lam, step_s)
        lb, converged = master.generate(plan, start + limit)
        generated_s = time.perf_counter() - start
        costs = np.array([sum(master.cost(c) for c in p) for p in master.paths])
        lift = subset_row_lift(
            costs, path_counts(master.paths, problem.n_requests), rounds, most, limit
        )
        rows.append(
            {
                "snapshot": name,
                "ratio": lam,
                "latency_floor_s": floor,
                "f_lower": lb,
                "converged": converged,
                "bound": ratio_bound(lam, lb, floor) if math.isfinite(lb) else float("nan"),
                "paths": len(master.paths),
                "lp": lift.values[0],
                "violated": lift.violated,
                "max_violation": lift.max_violation,
                "cuts": len(lift.cuts),
                "lifted_lp": lift.values[-1],
                "lifted": ";".join(f"{v:.3f}" for v in lift.values),
                "generate_s": generated_s,
                "lift_s": lift.runtime_s,
                "load_average": os.getloadavg()[0],
            }
        )
    return pd.DataFrame(rows)


def primal_columns(inst, problem, primal, bound: float) -> dict[str, object]:
    """The columns of the primal of a ``part_ti`` row (empty without one): its plan's exact G
    (the plan evaluated again and replayed by the engine here, the checker clean), met count
    and latency, plans evaluated, priced paths that repeat no request, the arc MILP's size,
    the rounds of both MILPs and the gap ``bound / G - 1``."""
    if primal is None:
        return {}
    if primal.plan is not None:
        assert problem.evaluate(primal.plan) == primal.value
        replayed = replay(inst, Schedule.static_batches(primal.plan))
        assert check(inst, replayed) == [], "the primal's plan breaks a rule"
        assert abs(metrics.g_ratio(inst, replayed) - primal.g) <= 1e-9 * primal.g
    rounds = primal.rounds
    return {
        "primal_g": primal.g,
        "primal_met": primal.value.met_requests if primal.value else 0,
        "primal_latency_s": primal.value.total_latency_s if primal.value else float("nan"),
        "gap": bound / primal.g - 1.0 if primal.g > 0 else float("inf"),
        "plans_evaluated": primal.evaluated,
        "elementary_paths": primal.from_paths,
        "milp_arcs": primal.arcs,
        "milp_rows": primal.rows,
        "milp_rounds": ";".join(
            f"{r['milp']}:{r['ratio']:.6f}:{r['status']}:{r['objective']:.3f}:{r['solutions']}:"
            f"{r['g']:.6f}:{r['seconds']:.1f}s"
            for r in rounds
        ),
        "milp_s": sum(r["seconds"] for r in rounds),
        "primal_s": primal.runtime_s,
    }


def report_bp(frame: pd.DataFrame) -> None:
    """Print the branch-and-price part: every run, then the proved rate per N and method."""
    print("\nBranch-and-price against the column method and the arc MILP (B = 4):")
    cols = ["instance", "solver", "status", "runtime_s", "objective", "bound", "gap", "root_gap"]
    print(frame[cols].to_string(index=False))
    rate = frame.assign(proved=frame.status == "OPTIMAL").groupby(["n", "solver"])
    summary = rate.agg(
        proved=("proved", "sum"), runs=("proved", "size"), median_s=("runtime_s", "median")
    )
    print(summary.to_string())


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
    ap.add_argument(
        "--bp", action="store_true", help="also run the branch-and-price part (section 5)"
    )
    ap.add_argument("--bp-only", action="store_true", help="run the branch-and-price part only")
    ap.add_argument(
        "--bp-sizes",
        default="20,30,40,50,60",
        help="comma-separated N of the branch-and-price part (default: 20,30,40,50,60)",
    )
    ap.add_argument(
        "--bp-seeds", type=int, default=3, help="snapshots per N, seeds 0.. (default: 3)"
    )
    ap.add_argument(
        "--bp-methods",
        default="bp,columns,highs",
        help="comma-separated methods of the branch-and-price part (default: bp,columns,highs)",
    )
    ap.add_argument(
        "--bp-first-seed",
        type=int,
        default=0,
        help="first snapshot seed of the branch-and-price part (default: 0)",
    )
    ap.add_argument(
        "--bp-shipped",
        default="",
        help="comma-separated shipped instances added to the branch-and-price part "
        "(e.g. sa-azure-n40-b4; default: none)",
    )
    ap.add_argument(
        "--bp-limit",
        type=float,
        default=None,
        help="seconds per solve in the branch-and-price part (default: 60 up to N = 40, 300 above)",
    )
    ap.add_argument(
        "--cuts",
        action="store_true",
        help="also measure the root gap with and without the claim-capacity cuts (section 6)",
    )
    ap.add_argument("--cuts-only", action="store_true", help="run the cuts part only")
    ap.add_argument(
        "--cuts-sizes",
        default="20,30,40",
        help="comma-separated N of the cuts part (default: 20,30,40)",
    )
    ap.add_argument("--cuts-seeds", type=int, default=3, help="snapshots per N (default: 3)")
    ap.add_argument(
        "--cuts-limit",
        type=float,
        default=20.0,
        help="seconds of the column method for the incumbent of the cuts part (default: 20)",
    )
    ap.add_argument(
        "--ti-only",
        action="store_true",
        help="run the time-indexed network's bound only (on --ti-snapshots)",
    )
    ap.add_argument(
        "--ti-snapshots",
        default="sa-azure-n40-b4,40:2",
        help="snapshots NAME[@RATIO] (shipped name or N:SEED; RATIO the first ratio tried), "
        "comma-separated (default: sa-azure-n40-b4,40:2)",
    )
    ap.add_argument("--ti-limit", type=float, default=240.0, help="seconds per snapshot")
    ap.add_argument("--ti-step", type=float, default=0.05, help="grid step of node times (s)")
    ap.add_argument(
        "--ti-ng",
        type=int,
        default=0,
        help="ng-route memory size of the time-indexed pricing (0: none, the default)",
    )
    ap.add_argument(
        "--ti-ng-warm",
        type=float,
        nargs="?",
        const=0.5,
        default=0.0,
        help="with --ti-ng: price without memory first, until that bisection ends or this "
        "share of --ti-limit has passed, then with memory (default: off; the flag alone: 0.5)",
    )
    ap.add_argument(
        "--ti-primal",
        type=float,
        default=0.0,
        help="the last seconds of --ti-limit given to a primal from the priced paths (a "
        "restricted arc MILP; default: 0, none)",
    )
    ap.add_argument(
        "--ti-primal-arc-share",
        type=float,
        default=0.25,
        help="with --ti-primal: the share of its seconds the arc MILP may take, the position "
        "MILP the rest (default: 0.25)",
    )
    ap.add_argument(
        "--ti-sr-rounds",
        type=int,
        default=0,
        help="with --ti-only: instead of the bound, measure what subset-row cuts could give: "
        "column generation at each snapshot's first ratio for --ti-limit seconds, then this "
        "many rounds of cuts over its paths (an upper estimate, not a bound; default: 0, off)",
    )
    ap.add_argument(
        "--ti-sr-most",
        type=int,
        default=40,
        help="with --ti-sr-rounds: the most violated cuts added per round (default: 40)",
    )
    ap.add_argument(
        "--tag",
        default="",
        help="suffix of the CSV files written (sa_ordering_bp-TAG.csv, ...), so that runs "
        "started together do not overwrite each other's (default: none)",
    )
    args = ap.parse_args()
    pd.set_option("display.width", 200)

    def out(name: str) -> Path:
        return OUT / (f"{name}-{args.tag}.csv" if args.tag else f"{name}.csv")

    if args.cuts or args.cuts_only:
        try:
            cut_sizes = [int(v) for v in args.cuts_sizes.split(",")]
        except ValueError:
            ap.error(f"--cuts-sizes must be comma-separated integers, got {args.cuts_sizes!r}")
        if args.cuts_seeds < 1:
            ap.error(f"--cuts-seeds must be >= 1, got {args.cuts_seeds}")
        if not args.cuts_limit > 0:
            ap.error(f"--cuts-limit must be > 0, got {args.cuts_limit}")
    if args.ti_only:
        OUT.mkdir(exist_ok=True)
        if args.ti_ng < 0:
            ap.error(f"--ti-ng must be >= 0, got {args.ti_ng}")
        if not 0.0 <= args.ti_ng_warm <= 1.0:
            ap.error(f"--ti-ng-warm must be in [0, 1], got {args.ti_ng_warm}")
        if not 0.0 <= args.ti_primal < args.ti_limit:
            ap.error(f"--ti-primal must be in [0, --ti-limit), got {args.ti_primal}")
        if not 0.0 <= args.ti_primal_arc_share <= 1.0:
            ap.error(f"--ti-primal-arc-share must be in [0, 1], got {args.ti_primal_arc_share}")
        if args.ti_sr_rounds < 0 or args.ti_sr_most < 1:
            ap.error(
                f"--ti-sr-rounds must be >= 0 and --ti-sr-most >= 1, got {args.ti_sr_rounds} "
                f"and {args.ti_sr_most}"
            )
        specs = [v for v in args.ti_snapshots.split(",") if v]
        if args.ti_sr_rounds:
            frame = part_ti_subset_rows(
                specs,
                args.ti_limit,
                args.ti_step,
                args.ti_sr_rounds,
                args.ti_sr_most,
            )
            print(frame.drop(columns=["lifted"]).T.to_string())
            frame.to_csv(out("sa_ordering_ti_sr"), index=False)
            print(f"wrote {out('sa_ordering_ti_sr')}")
            return
        frame = part_ti(
            specs,
            args.ti_limit,
            args.ti_step,
            args.ti_ng,
            args.ti_ng_warm,
            args.ti_primal,
            args.ti_primal_arc_share,
        )
        table = frame.drop(columns=["tried"])
        print((table.T if args.ti_primal else table).to_string())
        frame.to_csv(out("sa_ordering_ti"), index=False)
        print(f"wrote {out('sa_ordering_ti')}")
        return
    if args.cuts_only:
        OUT.mkdir(exist_ok=True)
        frame = part_cuts(cut_sizes, args.cuts_seeds, args.cuts_limit)
        report_cuts(frame)
        frame.to_csv(out("sa_ordering_cuts"), index=False)
        print(f"wrote {out('sa_ordering_cuts')}")
        return
    if args.bp or args.bp_only:
        try:
            bp_sizes = [int(v) for v in args.bp_sizes.split(",")]
        except ValueError:
            ap.error(f"--bp-sizes must be comma-separated integers, got {args.bp_sizes!r}")
        shipped = tuple(v for v in args.bp_shipped.split(",") if v)
        bp_methods = args.bp_methods.split(",")
        unknown = [m for m in bp_methods if m not in METHODS]
        if unknown:
            ap.error(f"--bp-methods: unknown {unknown[0]!r}; known: {', '.join(METHODS)}")
    if args.bp_only:
        OUT.mkdir(exist_ok=True)
        frame = part_bp(
            bp_sizes, args.bp_seeds, bp_methods, args.bp_limit, shipped, args.bp_first_seed
        )
        report_bp(frame)
        frame.to_csv(out("sa_ordering_bp"), index=False)
        print(f"wrote {out('sa_ordering_bp')}")
        return
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
    if args.bp:
        frame = part_bp(
            bp_sizes, args.bp_seeds, bp_methods, args.bp_limit, shipped, args.bp_first_seed
        )
        report_bp(frame)
        parts.append(frame)
    if args.cuts:
        frame = part_cuts(cut_sizes, args.cuts_seeds, args.cuts_limit)
        report_cuts(frame)
        parts.append(frame)
    print("\nSA decision latency per call (paper defaults):")
    latency = part_latency([10, 40, 100], 5 if args.quick else 20)
    print(latency[["n", "runtime_s", "max_s", "repeats"]].to_string(index=False))
    OUT.mkdir(exist_ok=True)
    pd.concat([*parts, latency], ignore_index=True).to_csv(out("sa_ordering"), index=False)
    print(f"wrote {out('sa_ordering')}")


if __name__ == "__main__":
    main()
