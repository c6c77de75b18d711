"""tdg-horizon at trace scale: certified intervals [best schedule, bound] on windows with the
trace's own output lengths.

For each trace (Azure conversation and code 2023), load (low, medium, high) and window size
(25, 50, 100, 200, 500 requests; ``--max-output-tokens 0``, seed 0), the benchmark runs

- ``bound``: the bound ``tdg-horizon-bound`` (HiGHS) within ``--bound-limit`` seconds and
  ``--max-pairs`` (request, bucket) pairs: the time-bucketed LP with release cuts (the
  ``bucket`` family, its first round), then with the completion-leader rows (``chain``, LP
  rounds, then ``chain-integral``, the MILP's dual bound, while time is left), each family's
  value and the tightest reported; with ``--plain`` also the plain bucket LP (no release
  cuts, same limits); with ``--without-start-rows`` also the bound without the ``chain``
  family's start rows (same limits), so each window has both against the same ``lns``;
  with ``--bound-method columns`` the column-generation bound ``tdg-horizon-columns`` in its
  place, with ``columns-chain`` the same with the ``chain`` family's rows in its master
  (``chain=True``), with ``columns-bp`` (``columns-bp-chain``) the column master with integral
  completed-iteration counts by branch-and-price on SCIP ``tdg-horizon-columns-bp`` (with the
  ``chain`` rows), with ``both`` both ``bound`` and ``columns`` (``U`` the least), with
  ``bound-burst`` and ``columns-burst`` the bound and the column master with the
  burst-capacity rows (``burst_rows=True``, ``burst=True``);
- ``lns``: the replay-scored steering search, within ``--lns-limit`` seconds; with
  ``--lns-master S`` also ``lns-master``: the same search with its last ``S`` seconds given
  to the integer restricted master's steerings (``steered_search(master_limit=S)``), replayed
  and checked as the harness does;
- SlideBatching and the five baselines of ProServe's evaluation, online;

and reports the interval ``[L, U]`` (``L`` the best TDG any method reached, ``U`` the bound),
its relative width ``1 - L / U``, the ideal gain, every policy's gap interval ``[1 - v / L,
1 - v / U]`` and the wall times. Results go to ``benchmarks/out/tdg_bounds.csv`` (one row per
window and method) and a summary table is printed.

Run ``python benchmarks/tdg_bounds.py`` (defaults: bound 120 s, lns 20 s per window, about an
hour on a shared 2-core machine); ``--sizes 25,50`` or ``--quick`` for a smoke test. Wall times
are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from slolab.harness.compare import compare
from slolab.models.tdg_columns import ROUND_COLUMNS, SMOOTHING, START_SHARE
from slolab.problems.tdg_horizon import KEEP_OUTPUTS, PROSERVE_POLICIES, horizon_window

OUT = Path(__file__).resolve().parent / "out"
TRACES = ("azure_conv_2023", "azure_code_2023")
LOADS = ("low", "medium", "high")
SIZES = (25, 50, 100, 200, 500)
#: What gives ``U``: the bucket/chain bound, the column-generation bound (with the chain rows in
#: its master: ``columns-chain``), the column master with integral iteration counts by
#: branch-and-price (``columns-bp``, ``columns-bp-chain``), or the least of ``bound`` and
#: ``columns``.
BOUND_METHODS = (
    "bound",
    "bound-burst",
    "columns",
    "columns-chain",
    "columns-burst",
    "columns-bp",
    "columns-bp-chain",
    "both",
)


def one_window(
    trace: str,
    n: int,
    load: str,
    *,
    bound_limit: float,
    lns_limit: float,
    max_pairs: int,
    plain: bool = False,
    without_start_rows: bool = False,
    bound_method: str = "bound",
    lns_master: float | None = None,
    start_share: float = START_SHARE,
    smoothing: float = SMOOTHING,
    columns_per_round: int = ROUND_COLUMNS,
) -> list[dict[str, Any]]:
    """Every method on one window; the rows of the compare table plus the window's interval.

    ``load`` is a named load (low, medium, high) or an arrival rate in req/s (``"16"``).
    ``bound_method``: ``bound`` (``tdg-horizon-bound``), ``columns`` (``tdg-horizon-columns``
    in its place), ``columns-chain`` (the same with ``chain=True``), ``columns-bp`` and
    ``columns-bp-chain`` (``tdg-horizon-columns-bp``, without and with the chain rows) or
    ``both`` (``U`` the
    least of ``bound`` and ``columns``). ``lns_master``: seconds of the
    integer master's step in an ``lns-master`` row (None: no such row). ``start_share``: the
    columns' bucket-LP start's share of ``bound_limit`` (``TdgHorizonColumns(start_share=)``);
    ``smoothing``: their dual smoothing factor (``TdgHorizonColumns(smoothing=)``);
    ``columns_per_round``: columns added per request and round (``columns_per_round=``).
    """
    from slolab.models.tdg_bound import TdgHorizonBound
    from slolab.models.tdg_bp import TdgHorizonBranchPrice
    from slolab.models.tdg_columns import TdgHorizonColumns
    from slolab.solvers import solve

    rate = None if load in LOADS else float(load)
    inst = horizon_window(
        trace,
        n=n,
        seed=0,
        load="medium" if rate is not None else load,
        rate=rate,
        max_output_tokens=KEEP_OUTPUTS,
    )
    if bound_method not in BOUND_METHODS:
        raise ValueError(f"bound_method must be one of {', '.join(BOUND_METHODS)}")
    cpu = time.process_time()
    model: Any = TdgHorizonBound(
        inst, max_pairs=max_pairs, burst_rows=bound_method == "bound-burst"
    )
    if bound_method in ("columns", "columns-chain", "columns-burst"):
        model = TdgHorizonColumns(
            inst,
            max_pairs=max_pairs,
            chain=bound_method == "columns-chain",
            burst=bound_method == "columns-burst",
            start_share=start_share,
            smoothing=smoothing,
            columns_per_round=columns_per_round,
        )
    if bound_method in ("columns-bp", "columns-bp-chain"):
        model = TdgHorizonBranchPrice(
            inst, max_pairs=max_pairs, chain=bound_method == "columns-bp-chain"
        )
    bound = solve(model, "highs", time_limit=bound_limit)
    bound_cpu_s = time.process_time() - cpu
    columns: dict[str, Any] = {}
    if bound_method not in ("bound", "bound-burst"):
        cpu = time.process_time()
        got = bound
        if bound_method == "both":
            got = solve(
                TdgHorizonColumns(
                    inst,
                    max_pairs=max_pairs,
                    start_share=start_share,
                    smoothing=smoothing,
                    columns_per_round=columns_per_round,
                ),
                "highs",
                time_limit=bound_limit,
            )
        columns = {
            "bound": float(got.bound),
            "s": got.runtime_s,
            "cpu_s": time.process_time() - cpu if bound_method == "both" else bound_cpu_s,
            "status": got.status.value,
            "rounds": got.details.get("rounds"),
            "master": got.details.get("master"),
            "cuts": sum(r.get("cuts", 0) for r in got.details.get("history", [])),
            "burst_rows": sum(r.get("burst_rows", 0) for r in got.details.get("history", [])),
            "root": got.details.get("columns_bound"),
            "root_status": got.details.get("columns_status"),
            "scip": got.details.get("scip_bound"),
            "scip_status": got.details.get("scip_status"),
            "nodes": got.details.get("nodes"),
        }
    plain_bound, plain_s = float("nan"), float("nan")
    if plain:
        other = solve(
            TdgHorizonBound(inst, max_pairs=max_pairs, release_cuts=False),
            "highs",
            time_limit=bound_limit,
        )
        plain_bound, plain_s = float(other.bound), other.runtime_s
    former: dict[str, Any] = {}
    if without_start_rows:
        cpu = time.process_time()
        other = solve(
            TdgHorizonBound(inst, max_pairs=max_pairs, start_rows=False),
            "highs",
            time_limit=bound_limit,
        )
        former = {
            "bound": float(other.bound),
            "s": other.runtime_s,
            "cpu_s": time.process_time() - cpu,
            "status": other.status.value,
            "integral": other.details["families"].get("chain-integral", float("nan")),
        }
    families = bound.details.get("families", {})
    levels = bound.details.get("levels", [])
    # the bucket family is the first round of each LP: its time is up to the end of the fine
    # LP's first round (NaN when that LP was not solved)
    fine = next(
        (i for i, level in enumerate(levels) if level["pairs"] == bound.details["pairs"]), None
    )
    bucket_s = float("nan")
    if fine is not None and levels[fine].get("round_s"):
        bucket_s = sum(level["runtime_s"] for level in levels[:fine]) + levels[fine]["round_s"][0]
    cpu = time.process_time()
    frame = compare(inst, ["lns"], time_limit=lns_limit)
    lns_cpu_s = time.process_time() - cpu
    extra = [compare(inst, list(PROSERVE_POLICIES), time_limit=lns_limit)]
    if lns_master is not None:
        extra.append(lns_master_row(inst, lns_limit, lns_master))
    frame = pd.concat([frame, *extra], ignore_index=True)
    best = float(frame["objective"].max())
    best_plain = float(frame.loc[frame["method"] != "lns-master", "objective"].max())
    upper = float(bound.bound) if bound.bound is not None else float("inf")
    if columns:
        upper = min(upper, columns["bound"])
    rows = []
    for _, r in frame.iterrows():
        v = float(r["objective"])
        rows.append(
            {
                "trace": trace,
                "load": load,
                "requests": n,
                "output_tokens": int(inst.workload.output_tokens.sum()),
                "method": r["method"],
                "tdg": v,
                "runtime_s": float(r["runtime_s"]),
                "lns_cpu_s": lns_cpu_s,
                "violations": int(r["violations"]),
                "best": best,
                "best_without_master": best_plain,
                "master_value": r.get("master_value"),
                "master_kept": r.get("master_kept"),
                "master_steered": r.get("steered"),
                "bound": upper,
                "bound_status": bound.status.value,
                "bound_s": bound.runtime_s,
                "bound_cpu_s": bound_cpu_s,
                "load_average": os.getloadavg()[0],
                "bound_spacing_s": bound.details.get("spacing_s"),
                "bound_pairs": bound.details.get("pairs"),
                "ideal": bound.details.get("ideal"),
                "bound_plain": plain_bound,
                "bound_plain_s": plain_s,
                "bound_bucket": families.get("bucket", float("nan")),
                "bound_bucket_s": bucket_s,
                "bound_chain": families.get("chain", float("nan")),
                "bound_chain_integral": families.get("chain-integral", float("nan")),
                "bound_chain_burst": families.get("chain+burst", float("nan")),
                "bound_chain_integral_burst": families.get("chain-integral+burst", float("nan")),
                "bound_tightest": bound.details.get("tightest"),
                "bound_rounds": sum(level.get("rounds", 0) for level in levels),
                "bound_cuts": sum(level.get("cuts", 0) for level in levels),
                "bound_start_cuts": sum(
                    level.get("mip", {}).get("start_cuts", 0) for level in levels
                ),
                "bound_without_start_rows": former.get("bound", float("nan")),
                "bound_without_start_rows_s": former.get("s", float("nan")),
                "bound_without_start_rows_cpu_s": former.get("cpu_s", float("nan")),
                "bound_without_start_rows_status": former.get("status"),
                "bound_without_start_rows_integral": former.get("integral", float("nan")),
                "width_without_start_rows": 1 - best / former.get("bound", float("nan")),
                "bound_method": bound_method,
                "columns_start_share": start_share,
                "columns_smoothing": smoothing,
                "columns_per_round": columns_per_round,
                "bound_columns": columns.get("bound", float("nan")),
                "bound_columns_s": columns.get("s", float("nan")),
                "bound_columns_cpu_s": columns.get("cpu_s", float("nan")),
                "bound_columns_status": columns.get("status"),
                "bound_columns_rounds": columns.get("rounds"),
                "bound_columns_master": columns.get("master"),
                "bound_columns_cuts": columns.get("cuts"),
                "bound_columns_burst_rows": columns.get("burst_rows"),
                "bound_bp_root": columns.get("root"),
                "bound_bp_root_status": columns.get("root_status"),
                "bound_bp_scip": columns.get("scip"),
                "bound_bp_scip_status": columns.get("scip_status"),
                "bound_bp_nodes": columns.get("nodes"),
                "width": 1 - best / upper,
                "gap_lo": 1 - v / best,
                "gap_hi": 1 - v / upper,
            }
        )
    return rows


def lns_master_row(inst: Any, lns_limit: float, master_limit: float) -> pd.DataFrame:
    """The ``lns-master`` row: ``steered_search`` (seed 0) with ``master_limit``, its schedule
    replayed and checked; objective the replay's TDG."""
    from slolab.heuristics.tdg_search import steered_search
    from slolab.sim import check, metrics, replay

    t0 = time.perf_counter()
    schedule, report = steered_search(
        inst, seed=0, time_limit=lns_limit, quiet=True, master_limit=master_limit
    )
    out = replay(inst, schedule)
    return pd.DataFrame(
        [
            {
                "method": "lns-master",
                "objective": metrics.tdg(inst, out),
                "runtime_s": time.perf_counter() - t0,
                "violations": len(check(inst, out)),
                "steered": report.steered_tdg,
                "master_value": report.master_tdg,
                "master_kept": report.master_kept,
            }
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=",".join(TRACES))
    parser.add_argument(
        "--loads", default=",".join(LOADS), help="named loads, or arrival rates in req/s"
    )
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--bound-limit", type=float, default=120.0, help="s per bound LP")
    parser.add_argument("--lns-limit", type=float, default=20.0, help="s per lns search")
    parser.add_argument("--max-pairs", type=int, default=12_000, help="LP size budget")
    parser.add_argument(
        "--plain", action="store_true", help="also solve the plain LP (no release cuts)"
    )
    parser.add_argument(
        "--without-start-rows",
        action="store_true",
        help="also solve the bound without the chain family's start rows",
    )
    parser.add_argument(
        "--bound-method",
        choices=BOUND_METHODS,
        default="bound",
        help="U from tdg-horizon-bound (bound), tdg-horizon-columns (columns), the same with the "
        "chain family's rows (columns-chain), the columns with integral iteration counts by "
        "branch-and-price (columns-bp, columns-bp-chain), the bound or the columns with the "
        "burst-capacity rows (bound-burst, columns-burst) or the least of bound and columns "
        "(both; each within --bound-limit)",
    )
    parser.add_argument(
        "--lns-master",
        type=float,
        default=None,
        help="also an lns-master row: lns with its last S s given to the integer master",
    )
    parser.add_argument(
        "--columns-start-share",
        type=float,
        default=START_SHARE,
        help="share of --bound-limit the columns' starting bucket LP may take (0: none)",
    )
    parser.add_argument(
        "--columns-smoothing",
        type=float,
        default=SMOOTHING,
        help="the columns' dual smoothing factor in [0, 1) (0: price at the master's duals)",
    )
    parser.add_argument(
        "--columns-per-round",
        type=int,
        default=ROUND_COLUMNS,
        help="columns the columns' pricing adds per request and round at most",
    )
    parser.add_argument("--quick", action="store_true", help="25 requests, 10 s limits")
    parser.add_argument("--out", default=str(OUT / "tdg_bounds.csv"))
    a = parser.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.quick:
        sizes, a.bound_limit, a.lns_limit = [25], 10.0, 10.0
    rows: list[dict[str, Any]] = []
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    for n in sizes:
        for trace in a.traces.split(","):
            for load in a.loads.split(","):
                t0 = time.perf_counter()
                got = one_window(
                    trace,
                    n,
                    load,
                    bound_limit=a.bound_limit,
                    lns_limit=a.lns_limit,
                    max_pairs=a.max_pairs,
                    plain=a.plain,
                    without_start_rows=a.without_start_rows,
                    bound_method=a.bound_method,
                    lns_master=a.lns_master,
                    start_share=a.columns_start_share,
                    smoothing=a.columns_smoothing,
                    columns_per_round=a.columns_per_round,
                )
                rows.extend(got)
                pd.DataFrame(rows).to_csv(a.out, index=False)
                head = got[0]
                print(
                    f"{trace} n={n} {load}: [{head['best']:.6g}, {head['bound']:.6g}] width "
                    f"{head['width']:.1%} (ideal {head['ideal']:.6g}; bound {head['bound_s']:.0f} "
                    f"s, {head['bound_cpu_s']:.0f} s CPU, {head['bound_status']}, spacing "
                    f"{head['bound_spacing_s']} s; load average {head['load_average']:.1f}) in "
                    f"{time.perf_counter() - t0:.0f} s; lns {head['lns_cpu_s']:.0f} s CPU"
                    + f"; bucket {head['bound_bucket']:.6g} ({head['bound_bucket_s']:.0f} s), chain "
                    f"{head['bound_chain']:.6g}, integral {head['bound_chain_integral']:.6g}, "
                    f"tightest {head['bound_tightest']}"
                    + (f"; plain LP {head['bound_plain']:.6g}" if a.plain else "")
                    + (
                        f"; L without lns-master {head['best_without_master']:.6g}"
                        if a.lns_master is not None
                        else ""
                    )
                    + (
                        f"; columns {head['bound_columns']:.6g} ({head['bound_columns_s']:.0f} s, "
                        f"{head['bound_columns_cpu_s']:.0f} s CPU, {head['bound_columns_status']}, "
                        f"{head['bound_columns_rounds']} rounds, "
                        f"{head['bound_columns_cuts']} interval rows)"
                        if a.bound_method != "bound"
                        else ""
                    )
                    + (
                        f"; root columns {head['bound_bp_root']:.6g} "
                        f"({head['bound_bp_root_status']}), SCIP {head['bound_bp_scip']:.6g} "
                        f"({head['bound_bp_scip_status']}, {head['bound_bp_nodes']} nodes)"
                        if a.bound_method.startswith("columns-bp")
                        else ""
                    )
                    + (
                        f"; without start rows {head['bound_without_start_rows']:.6g} "
                        f"({head['bound_without_start_rows_s']:.0f} s), width "
                        f"{head['width_without_start_rows']:.1%}"
                        if a.without_start_rows
                        else ""
                    ),
                    flush=True,
                )
    frame = pd.DataFrame(rows)
    summary = frame.pivot_table(
        index=["trace", "load", "requests", "width", "bound_s"],
        columns="method",
        values="gap_hi",
    )
    print(summary.to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
