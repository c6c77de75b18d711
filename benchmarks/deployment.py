"""Deployment planning on the shipped traces: mixed fleet against the best single configuration.

For each trace (Azure conversation, Azure code, Mooncake conversation) and model (Llama-2-7B,
Llama-2-70B), the planner of :mod:`slolab.harness.deploy` on the first ``--requests`` requests
(PolyServe's SLOs, the trace's own arrival times) over A100 / H100 / A40 at every TP degree the
profiles support: the capacities per (configuration, request class), the MILP optimum and the
two heuristics on them, then the mixed fleet and the best single configuration each simulated
and tightened until they meet the target (at most 8 rounds). Each row: the fleets and their
costs ($/h), the saving of the mixed fleet over the best single one (both simulated), their
simulated attainments, the heuristics' gaps to the MILP optimum on the measured capacities, the
capacity probes (simulations) run and how many stopped early, the capacity searches read from
the run's capacity cache and the simulations that saved (cases sharing a trace cut, classes
and configurations in the same order: ``--gpu-sets`` gives several grids per trace and model),
the capacity searches' and the planner's wall time. The fleets compared are the loops' last fleets
trimmed (servers removed while the simulation still meets the target,
:func:`slolab.harness.deploy.trim_fleet`); the loops' own fleets are in ``*_loop_fleet``.

Asserts only what is stable: the MILP optimum is at most every heuristic's cost. Prints a table
and writes ``benchmarks/out/deployment.csv`` (a row as soon as it is measured).

Usage: ``python benchmarks/deployment.py [--requests 200] [--traffic 1] [--traces ...]
[--models ...] [--gpus a100 h100 a40 | --gpu-sets h100,a100,a40 h100 ...] [--tps 1 2 4 8]
[--uncalibrated] [--out deployment.csv]``
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import pandas as pd
from slolab.harness import deploy

OUT = Path(__file__).parent / "out"
TRACES = ("azure_conv_2023", "azure_code_2023", "mooncake_conversation")
MODELS = ("llama2-7b", "llama2-70b")
GPUS = ("a100", "h100", "a40")
TPS = (1, 2, 4, 8)


def one_case(
    trace: str,
    model: str,
    requests: int,
    target: float,
    traffic: float,
    gpus: tuple[str, ...] = GPUS,
    tps: tuple[int, ...] = TPS,
    cache: deploy.CapacityCache | None = None,
    calibrated: bool = True,
) -> dict:
    """The planner on one trace and model at ``traffic`` times the cut trace's rate, over the
    grid ``gpus`` x ``tps`` (capacities already in ``cache`` read; the calibrated presets
    unless ``calibrated`` is False); one row."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    configurations, _ = deploy.configuration_names(model, gpus, tps, calibrated=calibrated)
    instance = deploy.trace_instance(trace, configurations, limit=requests, seed=0, traffic=traffic)
    report = deploy.plan_deployment(instance, configurations, target=target, seed=0, cache=cache)
    wall = time.perf_counter() - start
    optimum = report.optimum_cost
    assert optimum <= report.greedy_cost + 1e-9, (trace, model, optimum, report.greedy_cost)
    if math.isfinite(report.best_single_cost):
        assert optimum <= report.best_single_cost + 1e-9
    record = report.to_record()
    del record["refused"]
    return {
        "trace": trace,
        "model": model,
        "gpus": ",".join(gpus),
        "requests": instance.n_requests,
        "traffic": traffic,
        "grid": len(configurations),
        **record,
        "capacity_s": report.capacities.wall_s,
        "wall_s": wall,
        "load_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument(
        "--traffic", type=float, default=1.0, help="multiple of the cut trace's own rate"
    )
    parser.add_argument("--out", default="deployment.csv", help="CSV file name in benchmarks/out")
    parser.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--gpus", nargs="+", default=list(GPUS), help="GPU types of the grid")
    parser.add_argument(
        "--gpu-sets",
        nargs="+",
        default=None,
        help="several grids per trace and model, each comma-separated GPU types (instead of "
        "--gpus); their capacities shared through one cache",
    )
    parser.add_argument(
        "--tps", nargs="+", type=int, default=list(TPS), help="tensor-parallel degrees of the grid"
    )
    parser.add_argument(
        "--uncalibrated",
        action="store_true",
        help="the profile-only presets MODEL/GPU/tpN instead of MODEL/GPU/tpN/calibrated",
    )
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / args.out
    rows: list[dict] = []
    grids = (
        [tuple(args.gpus)]
        if args.gpu_sets is None
        else [tuple(g.split(",")) for g in args.gpu_sets]
    )
    cache = deploy.CapacityCache()
    for trace in args.traces:
        for model in args.models:
            for gpus in grids:
                try:
                    row = one_case(
                        trace,
                        model,
                        args.requests,
                        args.target,
                        args.traffic,
                        gpus,
                        tuple(args.tps),
                        cache,
                        calibrated=not args.uncalibrated,
                    )
                except ValueError as error:  # a target out of reach of the grid, in one line
                    rows.append({"trace": trace, "model": model, "note": str(error)})
                    pd.DataFrame(rows).to_csv(path, index=False)
                    print(f"{trace:22s} {model:10s} {error}", flush=True)
                    continue
                rows.append(row)
                pd.DataFrame(rows).to_csv(path, index=False)
                print(
                    f"{trace:22s} {model:10s} {row['gpus']}: single {row['single_fleet']} "
                    f"${row['single_cost']:.2f}/h ({row['single_attainment']:.3f}); mixed "
                    f"{row['mixed_fleet']} ${row['mixed_cost']:.2f}/h "
                    f"({row['mixed_attainment']:.3f}); saving {row['saving']:.1%}; "
                    f"{row['capacity_probes']} capacity probes ({row['capacity_early']} early, "
                    f"{row['capacity_reused']} searches read from the cache, "
                    f"{row['capacity_saved']} simulations saved) in {row['capacity_s']:.0f} s; "
                    f"{row['wall_s']:.0f} s",
                    flush=True,
                )
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
