"""tdg-horizon's search with and without the exact slice move, at the same time budget.

For each window (Azure code 2023, real output lengths, seed 0) and load, the benchmark runs
``steered_search`` (method ``lns``) twice with the same wall-time limit: the steering alone, and
with ``slice_after`` (the rest of the time goes to exact slice moves once that many steering
steps in a row fail). Every result is replayed and checked. Prints one row per run (TDG, the
steering's value, steps, slices solved / OPTIMAL / kept, violations, wall and CPU seconds, load
average) and writes them to ``benchmarks/out/tdg_slice.csv``. Wall times are reported, never
asserted.

Run ``python benchmarks/tdg_slice.py --sizes 25 --limit 120`` (about 12 minutes).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from slolab.heuristics.tdg_search import steered_search
from slolab.problems.tdg_horizon import KEEP_OUTPUTS, horizon_window
from slolab.sim import check, metrics, replay

OUT = Path(__file__).resolve().parent / "out"


def one_run(n: int, load: str, limit: float, slice_after: int | None) -> dict[str, Any]:
    """One search on one window; its row."""
    inst = horizon_window("azure_code_2023", n=n, seed=0, load=load, max_output_tokens=KEEP_OUTPUTS)
    cpu = time.process_time()
    schedule, report = steered_search(
        inst, seed=0, time_limit=limit, slice_after=slice_after, quiet=True
    )
    cpu_s = time.process_time() - cpu
    out = replay(inst, schedule)
    return {
        "requests": n,
        "load": load,
        "limit_s": limit,
        "slice_after": slice_after,
        "tdg": metrics.tdg(inst, out),
        "steered_tdg": report.steered_tdg,
        "start_tdg": report.start_tdg,
        "steps": report.steps,
        "slices": report.slices,
        "slices_optimal": report.slices_optimal,
        "slices_kept": report.slice_improvements,
        "violations": len(check(inst, out)),
        "runtime_s": report.runtime_s,
        "cpu_s": cpu_s,
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25")
    parser.add_argument("--loads", default="low,medium,high")
    parser.add_argument("--limit", type=float, default=120.0, help="s per search")
    parser.add_argument(
        "--slice-after", type=int, default=150, help="steps without a gain before slicing"
    )
    parser.add_argument("--out", default=str(OUT / "tdg_slice.csv"))
    a = parser.parse_args(argv)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        for load in a.loads.split(","):
            for after in (None, a.slice_after):
                row = one_run(n, load, a.limit, after)
                rows.append(row)
                pd.DataFrame(rows).to_csv(a.out, index=False)
                print(
                    f"n={n} {load} slice_after={after}: TDG {row['tdg']:.2f} (steering "
                    f"{row['steered_tdg']:.2f}, {row['steps']} steps; slices {row['slices']}, "
                    f"{row['slices_optimal']} OPTIMAL, {row['slices_kept']} kept; "
                    f"{row['violations']} violations) {row['runtime_s']:.0f} s, "
                    f"{row['cpu_s']:.0f} s CPU, load average {row['load_average']:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
