"""HyperFlexis benchmarks: dispatcher decision latency, exact solve times against the window,
Pareto fronts against the heuristics, and the paper's studies (QPS sweeps).

Parts (``--part``; all by default), printed as tables and written to
``benchmarks/out/hyperflexis_<part>.csv``:

1. ``latency``: wall time of one decision of the HyperFlexis dispatcher (and, for reference,
   of SCORPIO and vLLM behind round robin) over whole runs of the 4-task mix on 4 workers.
2. ``exact``: dispatch-scale solve time against the window size (HiGHS, CP-SAT and the
   exhaustive search, 30 s each): status, objective, bound, gap; the largest window each
   proves within the limit.
3. ``pareto``: on windows of 4 requests, the exact front (HiGHS) and, for each heuristic, its
   (cost, attainment) and its distance to the front: its cost over the least cost at its
   attainment.
4. ``studies``: attainment (deadline and TTFT + mean TPOT), mean E2E latency and cost
   against the QPS for HyperFlexis (with and without scaling, with priority mapping) and the
   baselines: the 4-task and 2-task mixes co-located on 4 workers (scaling to 8), and the
   4-task mix disaggregated (2P + 2D, scaling to 8); 300 requests per task.

Run ``python benchmarks/hyperflexis.py`` (about 15 minutes on one core); ``--quick`` shrinks
every part to a smoke test. Wall times are reported, never asserted.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.harness.compare import compare
from slolab.models.dispatch_scale import DispatchScale, pareto_front
from slolab.problems import build_instance
from slolab.problems.dispatch_scale import mix_instance, online_scheduler
from slolab.sim import metrics, run
from slolab.solvers import solve

OUT = Path(__file__).resolve().parent / "out"
HEURISTICS = (
    "hyperflexis",
    "hyperflexis-scaling",
    "hyperflexis-pm",
    "round-robin",
    "scorpio-rr",
    "sa-rr",
)


def _write(part: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT / f"hyperflexis_{part}.csv", index=False)
    print(f"\n== {part} ==")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return frame


# -- 1. decision latency ------------------------------------------------------------------------


class _Timed:
    """A policy whose every decision is timed (wall time of ``next_batch``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.times_s: list[float] = []
        self.queue: list[int] = []

    def start(self, instance: Any, seed: int) -> None:
        self.inner.start(instance, seed)

    def next_batch(self, server: Any) -> Any:
        t0 = time.perf_counter()
        batch = self.inner.next_batch(server)
        self.times_s.append(time.perf_counter() - t0)
        self.queue.append(len(server.held) + len(server.waiting))
        return batch


def latency(quick: bool) -> pd.DataFrame:
    rows = []
    per_task = 40 if quick else 300
    for qps in (80.0, 320.0):
        inst = mix_instance("4-task", qps=qps, seed=0, per_task=per_task, servers=4)
        for name in ("hyperflexis", "scorpio-rr", "round-robin"):
            setup = online_scheduler(name, inst)
            timed = _Timed(setup.policy)
            run(inst, timed, setup.router, seed=0, record_iterations=False)
            us = np.array(timed.times_s) * 1e6
            rows.append(
                {
                    "qps": qps,
                    "policy": name,
                    "calls": len(us),
                    "mean_us": float(us.mean()),
                    "p50_us": float(np.percentile(us, 50)),
                    "p99_us": float(np.percentile(us, 99)),
                    "max_queue": int(max(timed.queue)),
                }
            )
    return _write("latency", rows)


# -- 2. exact solve time against the window -----------------------------------------------------


def exact(quick: bool, sizes: tuple[int, ...] | None = None) -> pd.DataFrame:
    """Windows of ``sizes`` requests (default by ``quick``) by HiGHS, CP-SAT and exhaustive
    search; a backend stops after a size it proves on no seed."""
    rows = []
    if sizes is None:
        sizes = (2, 3) if quick else (2, 3, 4, 5, 6, 7, 8)
    seeds = (0,) if quick else (0, 1, 2)
    limit = 10.0 if quick else 30.0
    stopped = {"highs": False, "cpsat": False, "brute": False}
    for n in sizes:
        for seed in seeds:
            inst = build_instance("dispatch-scale", n=n, seed=seed, slo_scale=0.25, rate=10.0)
            for solver in ("highs", "cpsat", "brute"):
                if stopped[solver]:
                    continue
                res = solve(DispatchScale(inst), solver=solver, time_limit=limit)
                lo, hi = res.optimum_interval
                rows.append(
                    {
                        "n": n,
                        "seed": seed,
                        "tokens": int(inst.workload.output_tokens.sum()),
                        "solver": solver,
                        "status": res.status.value,
                        "objective": res.objective,
                        "optimum_lo": lo,
                        "optimum_hi": hi,
                        "gap": res.gap,
                        "runtime_s": res.runtime_s,
                    }
                )
        for solver in stopped:
            done = [r for r in rows if r["n"] == n and r["solver"] == solver]
            if done and all(r["status"] != "OPTIMAL" for r in done):
                stopped[solver] = True
    return _write("exact", rows)


# -- 3. Pareto fronts against the heuristics ----------------------------------------------------


def pareto(quick: bool, seeds: tuple[int, ...] | None = None, write: bool = True) -> pd.DataFrame:
    """The exact front (HiGHS) of 4-request windows, one per seed (default: one quick, six
    full), and each heuristic's (cost, attainment) with its excess cost over the front; the
    CSV is written unless ``write`` is False."""
    rows = []
    seeds = seeds or ((0,) if quick else (0, 1, 2, 3, 4, 5))
    for seed in seeds:
        inst = build_instance(
            "dispatch-scale", n=4, seed=seed, slo_scale=0.25, rate=10.0, servers=1, max_servers=2
        )
        t0 = time.perf_counter()
        front = pareto_front(inst, solver="highs", time_limit=60.0)
        front_s = time.perf_counter() - t0
        for p in front:
            rows.append(
                {
                    "seed": seed,
                    "method": "front",
                    "status": p.status.value,
                    "attainment": p.attainment,
                    "cost_server_s": p.cost_server_s,
                    "excess_cost_s": 0.0,
                    "runtime_s": front_s,
                }
            )
        frame = compare(inst, list(HEURISTICS))
        for _, r in frame.iterrows():
            reach = [p.cost_server_s for p in front if p.attainment >= r.attainment - 1e-12]
            rows.append(
                {
                    "seed": seed,
                    "method": r.method,
                    "status": r.status,
                    "attainment": r.attainment,
                    "cost_server_s": r.cost_server_s,
                    "excess_cost_s": r.cost_server_s - min(reach),
                    "runtime_s": r.runtime_s,
                }
            )
    return _write("pareto", rows) if write else pd.DataFrame(rows)


# -- 4. the paper's studies ---------------------------------------------------------------------

SETTINGS = {
    "4-task": ("4-task", "colocated", (40.0, 80.0, 160.0, 240.0, 320.0)),
    "2-task": ("2-task", "colocated", (40.0, 80.0, 120.0, 160.0, 240.0)),
    "4-task-pd": ("4-task", "disaggregated", (40.0, 80.0, 160.0, 240.0, 320.0)),
}


def studies(quick: bool) -> pd.DataFrame:
    rows = []
    per_task = 40 if quick else 300
    for label, (task_set, mode, qpss) in SETTINGS.items():
        names = list(HEURISTICS)
        if mode == "disaggregated":
            names = ["hyperflexis", "hyperflexis-scaling", "round-robin"]
        for qps in qpss[:2] if quick else qpss:
            inst = mix_instance(
                task_set,
                qps=qps,
                seed=0,
                per_task=per_task,
                servers=4,
                mode=mode,
                prefill_servers=2 if mode == "disaggregated" else 0,
                max_servers=8,
            )
            for name in names:
                setup = online_scheduler(name, inst)
                t0 = time.perf_counter()
                out = setup.run(inst, seed=0, record_iterations=False)
                s = metrics.summary(inst, out)
                rows.append(
                    {
                        "setting": label,
                        "qps": qps,
                        "method": name,
                        "attainment": s["attainment"],
                        "attainment_mean_tpot": s["attainment_ttft+mean-tpot"],
                        "e2e_mean_s": s["e2e_mean"],
                        "cost_server_s": s["cost_server_s"],
                        "servers_max": s["servers_max"],
                        "scale_events": s["scale_events"],
                        "wall_s": time.perf_counter() - t0,
                    }
                )
    return _write("studies", rows)


PARTS = {"latency": latency, "exact": exact, "pareto": pareto, "studies": studies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=sorted(PARTS), action="append", help="part(s) to run")
    parser.add_argument("--quick", action="store_true", help="a smoke test of every part")
    args = parser.parse_args()
    for part in args.part or list(PARTS):
        PARTS[part](args.quick)


if __name__ == "__main__":
    main()
