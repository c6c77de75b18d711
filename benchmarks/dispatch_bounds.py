"""dispatch-scale at trace scale: the certified interval [lns, bound] against the window size.

For each trace (Azure conv and code 2023), load (low, medium, high: offered work 0.3, 0.6, 0.9
of the 4 workers, ``--load``) and window size (25, 50, 100, 200, 500 consecutive requests with
their real outputs, ``--max-output-tokens 0``), one window (seed 0; 2 workers ready, up to 4,
d2d start-up, 0.25 s slots) priced so that keeping the 4 workers on through the arrival span
costs 0.1 of attainment (``lambda = 0.1 / (4 x span)``), and on it:

- ``bound``: the work-and-availability LP (HiGHS), its value and time; the ideal bound; for
  windows of at most 50 requests also the relaxation with binary ``m_r`` (HiGHS MILP);
- ``lns``: the large-neighbourhood search heuristic from its best start
  (:func:`slolab.problems.dispatch_scale.lns_schedule`; the whole time limit goes to the
  search, by size or ``--time-limit`` for every window; the exact model ``dispatch-lns``
  runs the same search beside the bound, which this benchmark takes from ``bound``);
- the online heuristics HyperFlexis (with and without its scaler) and round robin, each with
  its gap interval ``[gap_lo, gap_hi]`` from those two rows.

``--clairvoyance`` instead replays each heuristic's own iterations with every worker leaving
when its last iteration ends, on the trace windows and on the 4-request windows of the
HyperFlexis benchmark's front part, beside their proved optimum
(``benchmarks/out/dispatch_bounds_clairvoyance{,_small}.csv``).

The interval's relative width is ``(bound - lns) / bound``. Prints a table and writes
``benchmarks/out/dispatch_bounds.csv``. ``--quick`` runs 25 and 50 requests at high load on
one trace with short limits. Wall times are reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from slolab.harness.compare import compare
from slolab.models.dispatch_bounds import ideal_bound, relaxation_bound
from slolab.models.dispatch_scale import ScaleWindow
from slolab.problems import build_instance

OUT = Path(__file__).resolve().parent / "out"
TRACES = ("azure_conv_2023", "azure_code_2023")
LOADS = ("low", "medium", "high")
SIZES = (25, 50, 100, 200, 500)
#: Time limit of the search (and of each compare method) by window size (s).
LIMITS = {25: 15.0, 50: 20.0, 100: 60.0, 200: 60.0, 500: 90.0}
HEURISTICS = ("hyperflexis", "hyperflexis-scaling", "round-robin")
#: Attainment the 4 workers cost when kept on through the arrival span.
COST_SHARE = 0.1


def window(trace: str, load: str, n: int, seed: int = 0) -> Any:
    """The benchmark's window, priced by :data:`COST_SHARE`."""
    options = dict(
        trace=trace, n=n, load=load, max_output_tokens=0, servers=2, max_servers=4, seed=seed
    )
    first = build_instance("dispatch-scale", cost_weight=0.0, **options)
    span = float(first.workload.arrival_s.max())
    return build_instance("dispatch-scale", cost_weight=COST_SHARE / (4 * span), **options)


def cell(trace: str, load: str, n: int, limit: float) -> dict[str, Any]:
    inst = window(trace, load, n)
    wl = inst.workload
    row: dict[str, Any] = {
        "trace": trace,
        "load": load,
        "n": n,
        "tokens": int(wl.output_tokens.sum()),
        "rate": inst.settings["rate"],
        "span_s": float(wl.arrival_s.max()),
        "price": inst.settings["cost_weight_per_server_s"],
        "limit_s": limit,
    }
    t0 = time.perf_counter()
    frame = compare(inst, ["bound", "lns", *HEURISTICS], time_limit=limit)
    row["compare_s"] = time.perf_counter() - t0
    by = {r["method"]: r for r in frame.to_dict("records")}
    b, p = by["bound"], by["lns"]
    row["ideal"] = ideal_bound(ScaleWindow.of(inst))
    row["bound"] = b["bound"]
    row["bound_status"] = b["status"]
    row["bound_s"] = b["runtime_s"]
    if n <= 50:
        binary = relaxation_bound(inst, integral=True, time_limit=limit)
        row["bound_binary"] = binary.bound
        row["bound_binary_status"] = binary.status
    row["lns"] = p["objective"]
    row["lns_s"] = p["runtime_s"]
    row["lns_attainment"] = p["attainment"]
    row["lns_cost"] = p["cost_server_s"]
    row["lns_violations"] = p["violations"]
    row["width"] = (p["optimum_hi"] - p["optimum_lo"]) / abs(p["optimum_hi"])
    for h in HEURISTICS:
        r = by[h]
        row[f"{h}"] = r["objective"]
        row[f"{h}_attainment"] = r["attainment"]
        row[f"{h}_cost"] = r["cost_server_s"]
        row[f"{h}_gap_lo"] = r["gap_lo"]
        row[f"{h}_gap_hi"] = r["gap_hi"]
    return row


def clairvoyance(trace: str, load: str, n: int) -> list[dict[str, Any]]:
    """Each heuristic's run as it ran, and the same iterations replayed with every worker
    leaving when its last iteration ends (knowing that no later request will reach it): the
    part of its gap that knowing the future buys without changing a single decision."""
    from slolab.models.dispatch_lns import lives_window, online_decision
    from slolab.models.dispatch_scale import DispatchScale, ScaleWindow, decision_schedule
    from slolab.problems.dispatch_scale import online_start

    inst = window(trace, load, n)
    data = ScaleWindow.of(inst)
    rows = []
    frame = compare(inst, list(HEURISTICS))
    for h in HEURISTICS:
        decision = online_decision(data, inst, online_start(h), seed=0)
        ran = float(frame[frame.method == h].objective.iloc[0])
        left = (
            DispatchScale(inst).evaluate(decision_schedule(lives_window(data, decision), decision))
            if decision is not None
            else float("nan")
        )
        rows.append(
            {
                "trace": trace,
                "load": load,
                "n": n,
                "method": h,
                "online": ran,
                "clairvoyant_departures": left,
            }
        )
    return rows


def clairvoyance_small(seeds: range = range(6)) -> list[dict[str, Any]]:
    """The same on the 4-request windows of ``benchmarks/hyperflexis.py --part pareto``
    (``--n 4 --slo-scale 0.25 --rate 10``), with the proved optimum ``J*`` (HiGHS)."""
    from slolab.models.dispatch_lns import lives_window, online_decision
    from slolab.models.dispatch_scale import DispatchScale, ScaleWindow, decision_schedule
    from slolab.problems.dispatch_scale import online_start
    from slolab.solvers import solve

    rows = []
    for seed in seeds:
        inst = build_instance("dispatch-scale", n=4, seed=seed, slo_scale=0.25, rate=10.0)
        data = ScaleWindow.of(inst)
        best = solve(DispatchScale(inst), solver="highs", time_limit=60)
        frame = compare(inst, list(HEURISTICS))
        for h in HEURISTICS:
            decision = online_decision(data, inst, online_start(h), seed=0)
            left = (
                DispatchScale(inst).evaluate(
                    decision_schedule(lives_window(data, decision), decision)
                )
                if decision is not None
                else float("nan")
            )
            rows.append(
                {
                    "seed": seed,
                    "method": h,
                    "optimum": best.objective,
                    "status": best.status.value,
                    "online": float(frame[frame.method == h].objective.iloc[0]),
                    "clairvoyant_departures": left,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--traces", default=",".join(TRACES), help="comma-separated traces (default: both)"
    )
    parser.add_argument(
        "--loads", default=",".join(LOADS), help="comma-separated loads (default: all three)"
    )
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="comma-separated window sizes, requests (default: 25,50,100,200,500)",
    )
    parser.add_argument("--quick", action="store_true", help="25 and 50 requests, high load")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per method on every window (default: by window size, 15-90 s)",
    )
    parser.add_argument(
        "--out", default=str(OUT / "dispatch_bounds.csv"), help="CSV written after every window"
    )
    parser.add_argument(
        "--clairvoyance",
        action="store_true",
        help="instead: each heuristic as run against its iterations with clairvoyant departures "
        "(benchmarks/out/dispatch_bounds_clairvoyance.csv)",
    )
    args = parser.parse_args(argv)
    traces = args.traces.split(",")
    loads = args.loads.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    limits = dict(LIMITS)
    if args.quick:
        traces, loads, sizes = traces[:1], ["high"], [25, 50]
        limits = {25: 5.0, 50: 8.0}
    if args.time_limit is not None:
        if not args.time_limit > 0:
            parser.error(f"--time-limit must be > 0, got {args.time_limit}")
        limits = dict.fromkeys(sizes, args.time_limit)
    print(f"machine load (1, 5, 15 min): {os.getloadavg()}")
    if args.clairvoyance:
        found = [r for t in traces for lo in loads for n in sizes for r in clairvoyance(t, lo, n)]
        frame = pd.DataFrame(found)
        OUT.mkdir(parents=True, exist_ok=True)
        frame.to_csv(OUT / "dispatch_bounds_clairvoyance.csv", index=False)
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        small = pd.DataFrame(clairvoyance_small())
        small.to_csv(OUT / "dispatch_bounds_clairvoyance_small.csv", index=False)
        print(small.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        return
    rows = []
    for trace in traces:
        for load in loads:
            for n in sizes:
                row = cell(trace, load, n, limits[n])
                rows.append(row)
                print(
                    f"{trace} {load} n={n}: [{row['lns']:.4f}, {row['bound']:.4f}] width "
                    f"{100 * row['width']:.2f}% (bound {row['bound_s']:.1f} s "
                    f"{row['bound_status']}, lns {row['lns_s']:.1f} s; load average "
                    f"{os.getloadavg()[0]:.1f})",
                    flush=True,
                )
                out = Path(args.out)
                out.parent.mkdir(parents=True, exist_ok=True)
                pd.DataFrame(rows).to_csv(out, index=False)
    frame = pd.DataFrame(rows)
    cols = ["trace", "load", "n", "tokens", "ideal", "bound", "bound_s", "lns", "lns_s", "width"]
    cols += ["bound_status"]
    cols += [f"{h}_gap_lo" for h in HEURISTICS] + [f"{h}_gap_hi" for h in HEURISTICS]
    print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"machine load (1, 5, 15 min): {os.getloadavg()}")


if __name__ == "__main__":
    main()
