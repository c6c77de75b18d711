"""ProServe benchmarks: SlideBatching's decision latency, exact solve times, gaps and studies.

Parts (``--part``; all by default), printed as tables and written to
``benchmarks/out/proserve_<part>.csv``:

1. ``latency``: wall time of one SlideBatching call with 64 and 512 queued requests (half
   decoding, half waiting; Azure conversation lengths, ProServe SLOs and timing).
2. ``batch``: tdg-batch exact solve time (HiGHS and CP-SAT, 60 s limit) against the queue size,
   on scheduling points captured from an online SlideBatching run; and, over every captured
   point of that run, the knapsack optimum against SlideBatching's own choice.
3. ``horizon``: tdg-horizon solve time against the window size (HiGHS, 60 s; CP-SAT on the small
   ones), and SlideBatching and the baselines against the optimum on windows cut at low, medium
   and high load.
4. ``single``: TDG ratio and SLO attainment against the arrival rate for SlideBatching and the five
   baselines, one server, Azure conversation and code.
5. ``cluster``: GoRouting against Min-Load on 4 and 8 instances, co-located and disaggregated
   (half prefill, half decode), under SlideBatching and Sarathi-FCFS.

Run ``python benchmarks/proserve.py`` (about 30 minutes on one core); ``--quick`` shrinks every
part to a smoke test. Wall times are reported, never asserted.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.harness.compare import compare
from slolab.heuristics.policies import make_policy, make_router
from slolab.heuristics.proserve import (
    SlideBatching,
    SlideBatchingParams,
    one_iteration_schedule,
)
from slolab.models.proserve import TdgBatch
from slolab.problems import build_instance
from slolab.problems.tdg_batch import captured_snapshots, snapshot_from_point
from slolab.problems.tdg_horizon import PROSERVE_POLICIES, proserve_instance
from slolab.sim import metrics, replay, run
from slolab.sim.policy import Batch
from slolab.solvers import solve

log = logging.getLogger("slolab")

OUT = Path(__file__).resolve().parent / "out"


def _write(part: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    OUT.mkdir(parents=True, exist_ok=True)
    frame.to_csv(OUT / f"proserve_{part}.csv", index=False)
    print(f"\n== {part} ==")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return frame


# -- 1. decision latency ------------------------------------------------------------------------


class _TimedCall:
    """At the scheduling time, call SlideBatching ``repeats`` times and record each wall time."""

    def __init__(self, at_s: float, repeats: int, params: SlideBatchingParams) -> None:
        self.inner = SlideBatching(params)
        self.at_s = at_s
        self.repeats = repeats
        self.times_s: list[float] = []
        self.batch: Batch | None = None

    def start(self, instance: Any, seed: int) -> None:
        self.inner.start(instance, seed)

    def next_batch(self, server: Any) -> Batch:
        if self.batch is not None:
            return Batch()
        if server.now < self.at_s:
            return Batch(wake_at_s=self.at_s)
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            batch = self.inner.next_batch(server)
            self.times_s.append(time.perf_counter() - t0)
        self.batch = batch
        return batch


def latency_point(queued: int, seed: int) -> tuple[Any, dict[str, Any]]:
    """A scheduling point with ``queued`` requests: the first half decoding, the rest waiting."""
    source = proserve_instance(
        "azure_conv_2023", seed=seed, n=queued, rate=50.0, kv_capacity_tokens=10_000_000
    )
    wl = source.workload
    ids = np.arange(queued)
    decoding = ids < queued // 2
    rng = np.random.default_rng(seed)
    generated = np.where(decoding, rng.integers(1, np.maximum(wl.output_tokens, 2)), 0).astype(
        np.int64
    )
    generated = np.minimum(generated, np.maximum(wl.output_tokens - 1, 0))
    decoding &= generated >= 1
    point = {
        "now_s": float(wl.arrival_s[-1]),
        "ids": ids,
        "decoding": decoding,
        "waiting": ~decoding,
        "generated": np.where(decoding, generated, 0),
        "remaining_prefill": np.where(decoding, 0, wl.prompt_tokens),
        "latency_budget_s": 0.0,
        "eta_s": 0.05,
    }
    return source, point


def part_latency(quick: bool) -> pd.DataFrame:
    rows = []
    for queued in (64, 512):
        for phi in ("aggressive", "conservative"):
            source, point = latency_point(queued, seed=0)
            inst = snapshot_from_point(source, point, f"latency-q{queued}")
            timed = _TimedCall(point["now_s"], 20 if quick else 200, SlideBatchingParams(phi=phi))
            run(inst, timed, seed=0, record_iterations=False)
            t = np.array(timed.times_s)
            assert timed.batch is not None
            rows.append(
                {
                    "queued": queued,
                    "phi": phi,
                    "calls": len(t),
                    "median_ms": 1e3 * float(np.median(t)),
                    "p99_ms": 1e3 * float(np.percentile(t, 99)),
                    "batch_decode": len(timed.batch.decode),
                    "batch_prefill": len(timed.batch.prefill),
                }
            )
    return _write("latency", rows)


# -- 2. per-batch exact ----------------------------------------------------------------------------


def part_batch(quick: bool) -> pd.DataFrame:
    rows = []
    source, points = captured_snapshots(
        "azure_conv_2023", seed=0, n=150 if quick else 300, rate=20.0
    )
    sizes = np.array([len(p["ids"]) for p in points])
    targets = (8, 32) if quick else (8, 16, 32, 64, 128, 256)
    for target in targets:
        point = points[int(np.argmin(np.abs(sizes - target)))]
        inst = snapshot_from_point(source, point, f"batch-q{len(point['ids'])}")
        for solver in ("highs", "cpsat"):
            res = solve(TdgBatch(inst), solver=solver, time_limit=60.0)
            rows.append(
                {
                    "kind": "scaling",
                    "queued": len(point["ids"]),
                    "solver": solver,
                    "status": res.status.value,
                    "objective": res.objective,
                    "bound": res.bound,
                    "runtime_s": res.runtime_s,
                }
            )
    # knapsack optimum vs SlideBatching's choice at every captured point (a sample when quick)
    step = max(len(points) // (20 if quick else 200), 1)
    ratios = []
    for k, point in enumerate(points[::step]):
        inst = snapshot_from_point(source, point, f"point-{k}")
        res = solve(TdgBatch(inst), solver="highs", time_limit=60.0)
        out = replay(
            inst,
            one_iteration_schedule(inst, SlideBatching(SlideBatchingParams(eta_s=point["eta_s"]))),
        )
        slide = metrics.tdg_emitted(inst, out)
        within = bool(
            out.n_iterations == 0
            or out.it_end[0] - out.it_start[0] <= point["latency_budget_s"] + 1e-9
        )
        opt = float(res.objective or 0.0)
        ratios.append(
            {
                "kind": "point",
                "queued": len(point["ids"]),
                "solver": "highs",
                "status": res.status.value,
                "objective": opt,
                "slide_tdg": slide,
                "slide_within_budget": within,
                "runtime_s": res.runtime_s,
            }
        )
    frame = _write("batch", rows + ratios)
    pts = frame[frame["kind"] == "point"]
    if len(pts):
        positive = pts[pts["objective"] > 0]
        share = float((pts["slide_tdg"] >= pts["objective"] - 1e-9).mean())
        mean_ratio = (
            float((positive["slide_tdg"] / positive["objective"]).mean())
            if len(positive)
            else float("nan")
        )
        print(
            f"\nSlideBatching's choice reaches the knapsack optimum at {share:.1%} of "
            f"{len(pts)} points; mean ratio {mean_ratio:.4f} where the optimum is positive"
        )
    return frame


# -- 3. horizon exact ------------------------------------------------------------------------------


def part_horizon(
    quick: bool,
    sizes: tuple[int, ...] | None = None,
    gap_sizes: tuple[int, ...] | None = None,
    cpsat_upto: int = 4,
) -> pd.DataFrame:
    """Windows proved by size (``sizes``, high load, seed 0; CP-SAT too up to ``cpsat_upto``
    requests) and every policy's gap on the windows of ``gap_sizes`` at three loads (defaults
    by ``quick``)."""
    rows = []
    if sizes is None:
        sizes = (2, 3, 4) if quick else (2, 3, 4, 5, 6, 7, 8)
    if gap_sizes is None:
        gap_sizes = (3,) if quick else (4, 6)
    for n in sizes:
        inst = build_instance("tdg-horizon", n=n, load="high", seed=0)
        solvers = ("highs", "cpsat") if n <= cpsat_upto else ("highs",)
        for solver in solvers:
            frame = compare(inst, [solver, "slide-batching"], time_limit=60.0)
            ex = frame.iloc[0]
            rows.append(
                {
                    "kind": "scaling",
                    "n": n,
                    "load": "high",
                    "seed": 0,
                    "method": solver,
                    "status": ex["status"],
                    "objective": ex["objective"],
                    "bound": ex["bound"],
                    "runtime_s": ex["runtime_s"],
                    "slide_tdg": frame.iloc[1]["objective"],
                }
            )
    methods = ["highs", *PROSERVE_POLICIES]
    seeds = (0,) if quick else (0, 1, 2)
    for n in gap_sizes:
        for load in ("low", "medium", "high"):
            for seed in seeds:
                inst = build_instance("tdg-horizon", n=n, load=load, seed=seed)
                frame = compare(inst, methods, time_limit=60.0)
                for _, r in frame.iterrows():
                    rows.append(
                        {
                            "kind": "gap",
                            "n": n,
                            "load": load,
                            "seed": seed,
                            "method": r["method"],
                            "status": r["status"],
                            "objective": r["objective"],
                            "bound": r["bound"],
                            "runtime_s": r["runtime_s"],
                            "ideal": float(metrics.token_weights(inst).sum()),
                            "gap_lo": r["gap_lo"],
                            "gap_hi": r["gap_hi"],
                        }
                    )
    return _write("horizon", rows)


# -- 4. single server ------------------------------------------------------------------------------

SINGLE_RATES = {"azure_conv_2023": (8.0, 16.0, 24.0, 32.0), "azure_code_2023": (0.5, 1.0, 2.0, 4.0)}


def _run_row(inst: Any, policy: str, router: str | None, **extra: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    decode_router = make_router("most-free-kv") if inst.cluster.mode == "disaggregated" else None
    out = run(
        inst,
        make_policy(policy, inst),
        make_router(router) if router else None,
        seed=0,
        decode_router=decode_router,
        record_iterations=False,
    )
    s = metrics.summary(inst, out)
    return {
        **extra,
        "policy": policy,
        "router": router or "",
        "tdg_ratio": s["tdg_ratio"],
        "attainment": s["attainment_ttft+mean-tpot"],
        "attainment_deadline": s["attainment"],
        "wall_s": time.perf_counter() - t0,
    }


def part_single(quick: bool) -> pd.DataFrame:
    rows = []
    n = 200 if quick else 1000
    for trace, rates in SINGLE_RATES.items():
        for rate in rates[1:3] if quick else rates:
            inst = proserve_instance(trace, seed=0, n=n, rate=rate)
            for policy in PROSERVE_POLICIES:
                rows.append(_run_row(inst, policy, None, trace=trace, rate=rate))
    frame = _write("single", rows)
    _claims(frame, ["trace", "rate"])
    return frame


def _claims(frame: pd.DataFrame, keys: list[str]) -> None:
    """ProServe's headline: SlideBatching's TDG and attainment over the best baseline."""
    out = []
    for key, g in frame.groupby(keys):
        mine = g[g["policy"] == "slide-batching"]
        others = g[g["policy"] != "slide-batching"]
        if mine.empty or others.empty:
            continue
        out.append(
            {
                **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
                "tdg_gain_vs_best": float(mine["tdg_ratio"].max() / others["tdg_ratio"].max() - 1),
                "att_gain_vs_best": float(
                    mine["attainment"].max() / max(others["attainment"].max(), 1e-12) - 1
                ),
            }
        )
    if out:
        print(pd.DataFrame(out).to_string(index=False, float_format=lambda v: f"{v:+.3f}"))


# -- 5. cluster ----------------------------------------------------------------------------------


#: KV tokens per instance in the cluster study: enough that a disaggregated decode instance never
#: runs out (the engine cannot preempt on a decode server: recomputing needs a prefill).
CLUSTER_KV_TOKENS = 2_000_000


def part_cluster(quick: bool) -> pd.DataFrame:
    rows = []
    n = 400 if quick else 2000
    per_instance = (6.0,) if quick else (4.0, 8.0, 12.0)
    for servers in (4,) if quick else (4, 8):
        for mode in ("colocated", "disaggregated"):
            for rate_each in per_instance:
                rate = rate_each * servers
                inst = proserve_instance(
                    "azure_conv_2023",
                    seed=0,
                    n=n,
                    rate=rate,
                    servers=servers,
                    mode=mode,
                    prefill_servers=servers // 2 if mode == "disaggregated" else 0,
                    kv_capacity_tokens=CLUSTER_KV_TOKENS,
                )
                for policy in ("slide-batching", "sarathi-fcfs"):
                    for router in ("go-routing", "min-load"):
                        rows.append(
                            _run_row(inst, policy, router, servers=servers, mode=mode, rate=rate)
                        )
    return _write("cluster", rows)


PARTS: dict[str, Callable[[bool], pd.DataFrame]] = {
    "latency": part_latency,
    "batch": part_batch,
    "horizon": part_horizon,
    "single": part_single,
    "cluster": part_cluster,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument(
        "--part", action="append", choices=list(PARTS), help="run only these parts (repeatable)"
    )
    a = parser.parse_args()
    for name in a.part or list(PARTS):
        t0 = time.perf_counter()
        PARTS[name](a.quick)
        print(f"[{name}: {time.perf_counter() - t0:.1f} s]")


if __name__ == "__main__":
    main()
