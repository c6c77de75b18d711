"""Deployment planning disaggregated against co-located, on the shipped traces.

For each trace (Azure conversation, Azure code, Mooncake conversation), model (Llama-2-7B,
Llama-2-70B) and traffic multiple, both planners (:func:`slolab.harness.deploy_pd.plan_modes`,
``--mode both``; ``--mode pd`` for the disaggregated one alone) on the first ``--requests``
requests (PolyServe's SLOs) over the grid ``--gpus`` x ``--tps``, KV caches moved over
``--link``. Each row: the co-located answer (fleet, cost, rounds, first-round cost and
attainment), the
disaggregated one (both pools, cost, rounds, first-round cost and attainment), the MILP's cost
and status on the measured capacities, the heuristics' gaps, which answer is cheaper and the
saving of disaggregation, capacity probes, wall time and the 1-minute load average.

Asserts only what is stable: each MILP optimum is at most its greedy's and best pair's cost.
Prints a table and writes ``benchmarks/out/deployment_pd.csv`` (a row as soon as it is
measured).

Usage: ``python benchmarks/deployment_pd.py [--requests 200] [--traffic 1 4] [--traces ...]
[--models ...] [--gpus h100 a100] [--tps 1 2 4 8] [--link infiniband-ndr] [--mode both]
[--probe-arrivals trace] [--co-probe-arrivals poisson] [--uncalibrated]`` (the arrivals of
the disaggregated and of the co-located capacity probes; the profile-only presets
``MODEL/GPU/tpN`` instead of the calibrated ones)
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import pandas as pd
from slolab.harness import deploy
from slolab.harness.deploy_pd import MODES, modes_record, plan_modes

OUT = Path(__file__).parent / "out"
TRACES = ("azure_conv_2023", "azure_code_2023", "mooncake_conversation")
MODELS = ("llama2-7b", "llama2-70b")

#: Columns of the printed table.
SHOWN = (
    "trace",
    "model",
    "traffic",
    "mixed_fleet",
    "mixed_cost",
    "mixed_rounds",
    "co_first_cost",
    "co_first_attainment",
    "pd_fleet",
    "pd_cost",
    "pd_rounds",
    "pd_first_cost",
    "pd_first_attainment",
    "pd_optimum_status",
    "answer",
    "pd_saving",
    "pd_capacity_probes",
    "wall_s",
    "load_1min",
)


def one_case(
    trace: str,
    model: str,
    requests: int,
    target: float,
    traffic: float,
    gpus: tuple[str, ...],
    tps: tuple[int, ...],
    link: str,
    mode: str,
    arrivals: str = "trace",
    co_arrivals: str = "poisson",
    calibrated: bool = True,
) -> dict:
    """Both planners on one trace, model and traffic multiple; one row."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    configurations, _ = deploy.configuration_names(model, gpus, tps, calibrated=calibrated)
    instance = deploy.trace_instance(trace, configurations, limit=requests, seed=0, traffic=traffic)
    answer = plan_modes(
        instance,
        configurations,
        mode=mode,
        target=target,
        link=link,
        seed=0,
        pd_arrivals=arrivals,
        co_arrivals=co_arrivals,
    )
    wall = time.perf_counter() - start
    if answer.pd is not None:
        optimum = answer.pd.optimum.cost
        assert optimum <= answer.pd.greedy_cost + 1e-9, (trace, model, optimum)
        if math.isfinite(answer.pd.best_pair_cost):
            assert optimum <= answer.pd.best_pair_cost + 1e-9, (trace, model, optimum)
    record = modes_record(answer)
    record.pop("refused", None)
    if answer.co is not None:  # the co-located MILP's first fleet, as solved
        first = answer.co.mixed.rounds[0].result
        record["co_first_cost"] = first.cost if first.plan is not None else math.nan
    return {
        "trace": trace,
        "model": model,
        "gpus": ",".join(gpus),
        "tps": ",".join(str(t) for t in tps),
        "requests": instance.n_requests,
        "traffic": traffic,
        "probe_arrivals": arrivals,
        "co_probe_arrivals": co_arrivals,
        "calibrated": calibrated,
        "grid": len(configurations),
        "refused_modes": "; ".join(f"{m}: {why}" for m, why in answer.refusals),
        **record,
        "wall_s": wall,
        "load_1min": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--traffic", nargs="+", type=float, default=[1.0])
    parser.add_argument(
        "--out", default="deployment_pd.csv", help="CSV file name in benchmarks/out"
    )
    parser.add_argument("--traces", nargs="+", default=list(TRACES), choices=list(TRACES))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--gpus", nargs="+", default=["h100", "a100"])
    parser.add_argument("--tps", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--link", default="infiniband-ndr")
    parser.add_argument("--mode", default="both", choices=list(MODES))
    parser.add_argument(
        "--probe-arrivals",
        default="trace",
        choices=["trace", "poisson"],
        help="arrivals of the disaggregated capacity probes",
    )
    parser.add_argument(
        "--co-probe-arrivals",
        default="poisson",
        choices=["poisson", "trace"],
        help="arrivals of the co-located capacity probes",
    )
    parser.add_argument(
        "--uncalibrated",
        action="store_true",
        help="the profile-only presets MODEL/GPU/tpN (default: MODEL/GPU/tpN/calibrated)",
    )
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / args.out
    rows: list[dict] = []
    for trace in args.traces:
        for model in args.models:
            for traffic in args.traffic:
                try:
                    row = one_case(
                        trace,
                        model,
                        args.requests,
                        args.target,
                        traffic,
                        tuple(args.gpus),
                        tuple(args.tps),
                        args.link,
                        args.mode,
                        args.probe_arrivals,
                        args.co_probe_arrivals,
                        not args.uncalibrated,
                    )
                except ValueError as error:  # a target out of reach of the grid, in one line
                    row = {"trace": trace, "model": model, "traffic": traffic, "note": str(error)}
                rows.append(row)
                pd.DataFrame(rows).to_csv(path, index=False)
                print(
                    " | ".join(f"{key}={row[key]}" for key in SHOWN if key in row)
                    + (f" | note={row['note']}" if "note" in row else ""),
                    flush=True,
                )
    table = pd.DataFrame(rows)
    shown = [key for key in SHOWN if key in table.columns]
    print(table[shown].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
