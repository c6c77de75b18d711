"""Sweeps: wall time of a 200-task gap sweep per backend, and results-store speed.

1. Gap sweep: 100 SA-ordering snapshots (``sa_snapshot``, N = 8, B = 4, seeds 1-100; methods
   highs, sa, fcfs, edf, sjf) and 100 SLOs-Serve admission calls (``slos_snapshot``, 6 new + 16
   running, seeds 1-100; methods b1, b2, dp), every exact method with a 5 s limit: 200 tasks,
   800 rows. Run through ``load_spec`` + ``run_sweep`` (what ``slolab sweep`` does) on three
   backends, each into a fresh store: the local backend with 1 and with 2 worker processes
   (``--workers 1|2``), and a separately started ``LocalCluster`` of 2 workers reached by its
   address (``--dask ADDRESS``). Scaling ratio = wall(1 worker) / wall(2 workers). Each run also
   reports the sum of the tasks' own wall times on their workers (``task_busy_s``) and
   ``busy_fraction`` = task_busy_s / (workers x wall): below 1 by start-up and idle time, and
   task times grow when the machine's cores are shared with other work.
2. Store: append rows of the sweep schema (61 columns, compare-like rows, a task of 4 rows)
   in batches of 10,000 rows, then read them back with ``store.frame()`` (sorted by key) and
   ``pandas.read_parquet(DIR)``, and 8 columns only (``store.frame(columns=...)``), each three
   times in turn (first and best reported), at 10^4 and 10^6 rows; at 10^4 also as dict rows
   (the path a sweep's rows take).

Prints tables and writes ``benchmarks/out/sweeps.csv``. Wall times depend on the machine and
its load (the 1-minute load average is recorded with each run); nothing is asserted but the
row counts.

Usage: ``python benchmarks/sweeps.py [--quick] [--skip-sweep] [--skip-store]``
(``--quick``: a 20-task sweep, store sizes 10^4 and 10^5).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
from slolab.harness.store import COLUMN_TYPES
from slolab.harness.sweep import SWEEP_COLUMNS, Backend, open_store, run_sweep
from slolab.harness.sweep_spec import load_spec

OUT = Path(__file__).resolve().parent / "out" / "sweeps.csv"
#: What a gap study usually reads (with the key: 8 columns of 61).
FEW_COLUMNS = ["instance", "method", "status", "objective", "gap_lo", "gap_hi", "runtime_s"]

GAP_SWEEP = """
name = "gap-bench"

[run]
threads = 1

[[compare]]
builds = [{{ problem = "sa-ordering", n = 8, batch_size = 4, seeds = "1..{half}" }}]
methods = ["highs", "sa", "fcfs", "edf", "sjf"]
time_limits = [5.0]

[[compare]]
builds = [{{ problem = "slos-admission", new = 6, running = 16, seeds = "1..{half}" }}]
methods = ["b1", "b2", "dp"]
time_limits = [5.0]
"""


def load_average() -> float:
    """The 1-minute load average (runnable processes) when called."""
    return os.getloadavg()[0]


def gap_sweep(tasks: int, folder: Path) -> list[dict]:
    """Wall time of the gap sweep on each backend; also returns the last store's frame."""
    from dask.distributed import LocalCluster

    spec_path = folder / "gap.toml"
    spec_path.write_text(textwrap.dedent(GAP_SWEEP.format(half=tasks // 2)))
    spec = load_spec(spec_path)
    rows = []
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as cluster:
        backends = [
            ("local", 1, Backend("local", workers=1)),
            ("local", 2, Backend("local", workers=2)),
            ("dask LocalCluster", 2, Backend("dask", address=cluster.scheduler_address)),
        ]
        for label, workers, backend in backends:
            store = folder / f"store-{label.split()[0]}-{workers}"
            load = load_average()
            tally = run_sweep(spec, store, backend, progress=False, echo=lambda message: None)
            # Each task's wall time on its worker (repeated on each of its rows).
            busy_s = float(open_store(store).frame().groupby("task_key")["wall_s"].first().sum())
            rows.append(
                {
                    "benchmark": "gap-sweep",
                    "backend": label,
                    "workers": workers,
                    "tasks": tally.tasks,
                    "rows": tally.rows,
                    "failed": tally.failed,
                    "wall_s": tally.wall_s,
                    "tasks_per_s": tally.tasks / tally.wall_s,
                    "task_busy_s": busy_s,
                    "busy_fraction": busy_s / (workers * tally.wall_s),
                    "load_1min": load,
                }
            )
            print(
                f"gap sweep, {label:<17} {workers} worker(s): {tally.tasks} tasks, "
                f"{tally.rows} rows, {tally.failed} failed, {tally.wall_s:.1f} s; tasks busy "
                f"{busy_s:.1f} s in all (load {load:.2f})",
                flush=True,
            )
    frame = open_store(folder / "store-local-2").frame()
    summary = frame.groupby(["problem", "method"]).agg(
        rows=("method", "size"),
        optimal=("status", lambda s: int((s == "OPTIMAL").sum())),
        mean_gap_hi=("gap_hi", "mean"),
        max_gap_hi=("gap_hi", "max"),
        mean_runtime_s=("runtime_s", "mean"),
    )
    print("\nGap to the optimum interval's upper end, per method (2-worker run):")
    print(summary.to_string(float_format=lambda v: f"{v:.4f}"))
    return rows


def _batch_table(start: int, count: int, rng: np.random.Generator) -> pa.Table:
    """``count`` compare-like rows of the sweep schema (a task of 4 rows), rows ``start``...."""
    index = np.arange(start, start + count)
    task = index // 4
    keys = [f"{t:064x}" for t in task]
    methods = np.array(["highs", "sa", "fcfs", "edf"])[index % 4]
    columns: dict[str, pa.Array] = {
        "task_key": pa.array(keys),
        "sweep": pa.array(["store-bench"] * count),
        "task_kind": pa.array(["compare"] * count),
        "task": pa.array(
            [
                f'{{"instance":{{"build":"sa-ordering","options":{{"n":8,"seed":{t}}}}},'
                f'"kind":"compare","seed":0,"time_limit_s":5.0}}'
                for t in task
            ]
        ),
        "seed": pa.array(np.zeros(count, dtype=np.int64)),
        "threads": pa.array(np.ones(count, dtype=np.int64)),
        "time_limit_s": pa.array(np.full(count, 5.0)),
        "host": pa.array(["node17"] * count),
        "versions": pa.array(['{"python":"3.11.7","slolab":"0.1.0","highspy":"1.14.0"}'] * count),
        "wall_s": pa.array(rng.uniform(0.1, 2.0, count)),
        "finished_utc": pa.array(["2026-11-23T04:00:00+00:00"] * count),
        "instance": pa.array([f"sa-mixed-n8-b4-s{t}" for t in task]),
        "problem": pa.array(["sa-ordering"] * count),
        "requests": pa.array(np.full(count, 8, dtype=np.int64)),
        "method": pa.array(methods),
        "kind": pa.array(np.where(methods == "highs", "exact", "heuristic")),
        "status": pa.array(np.where(methods == "highs", "OPTIMAL", "HEURISTIC")),
        "objective": pa.array(rng.uniform(0.1, 0.5, count)),
        "runtime_s": pa.array(rng.uniform(0.001, 1.0, count)),
        "attainment": pa.array(rng.uniform(0.5, 1.0, count)),
        "violations": pa.array(np.zeros(count, dtype=np.int64)),
        "gap_lo": pa.array(rng.uniform(0.0, 0.3, count)),
        "gap_hi": pa.array(rng.uniform(0.0, 0.3, count)),
    }
    return pa.table(
        {
            name: columns.get(name, pa.nulls(count, COLUMN_TYPES[kind]))
            for name, kind in SWEEP_COLUMNS.items()
        }
    )


def store_speed(sizes: list[int], folder: Path, batch_rows: int = 10_000) -> list[dict]:
    """Write and read time of a sweep-schema store at each size (Arrow batches; dict rows
    too at 10^4)."""
    rng = np.random.default_rng(0)
    results = []
    for size in sizes:
        paths = ["arrow"] + (["dict rows"] if size <= 10_000 else [])
        for path in paths:
            directory = folder / f"store-{size}-{path.replace(' ', '-')}"
            store = open_store(directory)
            load = load_average()
            batches = [
                _batch_table(start, min(batch_rows, size - start), rng)
                for start in range(0, size, batch_rows)
            ]
            if path == "dict rows":
                batches_in = [batch.to_pylist() for batch in batches]
            else:
                batches_in = batches
            start = time.perf_counter()
            with store.writer() as writer:
                for batch in batches_in:
                    writer.append(batch)
            write_s = time.perf_counter() - start
            readers = {
                "frame": store.frame,
                "read_parquet": lambda directory=directory: pd.read_parquet(directory),
                "frame_8_columns": lambda store=store: store.frame(columns=FEW_COLUMNS),
            }
            # The first read in a process pays for growing its memory (a million rows of
            # strings): each reader is timed three times, in turn, and reported at its first
            # and its best.
            times: dict[str, list[float]] = {name: [] for name in readers}
            for _ in range(3):
                for name, read in readers.items():
                    start = time.perf_counter()
                    rows_read = len(read())
                    times[name].append(time.perf_counter() - start)
                    assert rows_read == size
            on_disk = sum(path.stat().st_size for path in directory.glob("part-*.parquet"))
            results.append(
                {
                    "benchmark": "store",
                    "rows": size,
                    "append_as": path,
                    "batch_rows": batch_rows,
                    "batches": len(batches),
                    "write_s": write_s,
                    **{f"{name}_first_s": spent[0] for name, spent in times.items()},
                    **{f"{name}_best_s": min(spent) for name, spent in times.items()},
                    "mb_on_disk": on_disk / 1e6,
                    "load_1min": load,
                }
            )
            print(
                f"store {size:>9,} rows ({path}): write {write_s:.2f} s; read, first / best of 3: "
                + ", ".join(
                    f"{name} {spent[0]:.2f} / {min(spent):.2f} s" for name, spent in times.items()
                )
                + f"; {on_disk / 1e6:.1f} MB (load {load:.2f})",
                flush=True,
            )
    return results


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 tasks; store up to 10^5 rows")
    parser.add_argument("--skip-sweep", action="store_true", help="store speed only")
    parser.add_argument("--skip-store", action="store_true", help="gap sweep only")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows: list[dict] = []
    print(f"cores available: {len(os.sched_getaffinity(0))}, load {load_average():.2f}")
    with tempfile.TemporaryDirectory(prefix="slolab-sweeps-") as folder:
        if not args.skip_sweep:
            rows += gap_sweep(20 if args.quick else 200, Path(folder))
        if not args.skip_store:
            rows += store_speed(
                [10_000, 100_000] if args.quick else [10_000, 1_000_000], Path(folder)
            )
    table = pd.DataFrame(rows)
    sweep = table[table["benchmark"] == "gap-sweep"]
    if len(sweep):
        one = float(sweep.loc[sweep["workers"] == 1, "wall_s"].iloc[0])
        for label in ("local", "dask LocalCluster"):
            two = sweep[(sweep["workers"] == 2) & (sweep["backend"] == label)]["wall_s"]
            print(f"scaling, 1 -> 2 workers ({label}): {one / float(two.iloc[0]):.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"\nwrote {args.out}")
    return table


if __name__ == "__main__":
    main()
