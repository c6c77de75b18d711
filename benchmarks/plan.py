"""Plan speed: the server-count search with and without early verdicts, per case and policy.

Each case is a ``slolab plan`` set-up (trace, requests, SLOs, timing, rate, server range); each
policy's plan runs twice: every simulation to its end (``full``, ``--full-probes``) and with
a simulation certain to miss the target stopped there (``early``, the default). Each row: CPU
and wall time of the plan (this process), simulations, how many stopped early, the count chosen
and its attainment and server-seconds, the 1-minute load average when it ran (the machine may
be shared).

Asserts only what is stable: both ways probe the same counts and choose the same count with the
same attainment, server-seconds and cost per met request. Prints a table and writes
``benchmarks/out/plan.csv`` (a row as soon as it is measured).

Usage: ``python benchmarks/plan.py [--cases example conv-2000 mooncake-1000]
[--policies sarathi slos-serve]``
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd
from slolab.harness.plan import plan
from slolab.harness.serving import ServingSetup

OUT = Path(__file__).parent / "out"


def conversation(limit: int) -> ServingSetup:
    """The first ``limit`` Azure conversation requests, OPT-13B on an H100, tight ChatBot SLOs."""
    return ServingSetup(
        "azure_conv_2023",
        limit=limit,
        timing="opt-13b-h100-slos",
        scenario="chatbot",
        slack="tight",
    )


def mooncake(limit: int) -> ServingSetup:
    """The first ``limit`` Mooncake conversation requests, PolyServe's SLOs, Poisson arrivals."""
    return ServingSetup("mooncake_conversation", limit=limit, slos="polyserve", arrivals="poisson")


#: name -> (set-up, rate in req/s, server range): the planning example of docs/planning.md,
#: the same set-up on 2,000 requests, and the Mooncake trace with PolyServe's SLOs and drawn
#: arrivals (its own times come in bursts no server count meets, docs/planning.md).
CASES: dict[str, tuple[ServingSetup, float, tuple[int, int]]] = {
    "example": (conversation(150), 16.0, (1, 16)),
    "conv-2000": (conversation(2000), 16.0, (1, 32)),
    "mooncake-1000": (mooncake(1000), 3.0, (1, 32)),
    "mooncake-4000": (mooncake(4000), 3.0, (1, 32)),
}


def one_plan(setup: ServingSetup, policy: str, rate: float, servers: tuple[int, int], early: bool):
    load = os.getloadavg()[0]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    (found,) = plan(setup, [policy], servers=servers, rate=rate, early=early)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    chosen = found.chosen
    row = {
        "cpu_s": cpu,
        "wall_s": wall,
        "simulations": len(found.probes),
        "stopped_early": len(found.stopped_early),
        "chosen": found.servers,
        "attainment": chosen.attainment if chosen else float("nan"),
        "server_s": chosen.server_s if chosen else float("nan"),
        "counts": " ".join(str(p.servers) for p in found.probes),
        "load_1min": load,
    }
    return row, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--policies", nargs="+", default=["sarathi", "slos-serve"])
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / "plan.csv"
    rows: list[dict] = []
    for case in args.cases:
        setup, rate, servers = CASES[case]
        for policy in args.policies:
            answers = set()
            for way, early in (("full", False), ("early", True)):
                row = {"case": case, "requests": setup.limit, "rate": rate, "policy": policy}
                measured, found = one_plan(setup, policy, rate, servers, early)
                row |= {"way": way} | measured
                rows.append(row)
                pd.DataFrame(rows).to_csv(path, index=False)
                print(
                    f"{case:14s} {policy:12s} {way:6s} CPU {row['cpu_s']:8.2f} s  wall "
                    f"{row['wall_s']:8.2f} s  simulations {row['simulations']:2d} (early "
                    f"{row['stopped_early']:2d})  servers {row['chosen']}  load "
                    f"{row['load_1min']:.1f}",
                    flush=True,
                )
                chosen = found.chosen
                answers.add(
                    (
                        row["counts"],
                        found.servers,
                        None if chosen is None else chosen.to_dict()["attainment"],
                        None if chosen is None else chosen.server_s,
                        None if chosen is None else chosen.cost_per_met_request_s,
                    )
                )
            assert len(answers) == 1, f"{case} {policy}: the plans disagree: {answers}"
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
