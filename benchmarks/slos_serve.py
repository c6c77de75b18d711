"""SLOs-Serve benchmarks: DP time per call, B1/B2 solve times, and serving capacity.

Three parts, printed as tables and written to ``benchmarks/out/slos_serve.csv`` (one row per
measurement, column ``part`` tells which):

1. ``dp``: wall time of :func:`slos_dp` per scheduler call at (new, running) = (10, 100) and
   (30, 300), on calls built from Azure conversation lengths with SLOs-Serve ChatBot SLOs
   (tight prefill) and the ``opt-13b-h100-slos`` timing.
2. ``exact``: B1 and B2 MILP solve times (HiGHS, 60 s limit) on growing calls.
3. ``capacity``: largest arrival rate with >= 90% deadline attainment for SLOs-Serve, Sarathi
   and vLLM on the ChatBot scenario (first requests of the Azure conversation trace), 1 and 2
   replicas.

Run ``python benchmarks/slos_serve.py``;
``--quick`` shrinks every part (for a smoke test).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.heuristics.baselines import LeastLoaded, PrefillFirstFCFS, SarathiFCFS
from slolab.heuristics.slos_serve import SLOsServePolicy
from slolab.heuristics.slos_serve_dp import slos_dp
from slolab.instances import assign_slos, read_trace, scale_rate, trace_path
from slolab.instances.records import Cluster, Instance, Workload
from slolab.models.slos_admission import AdmissionB1, AdmissionB2, AdmissionProblem
from slolab.sim import metrics, run
from slolab.solvers import solve
from slolab.solvers.capacity import capacity
from slolab.timing import preset, time2bs

log = logging.getLogger("slolab")

TIMING_PRESET = "opt-13b-h100-slos"
TRACE = "azure_conv_2023"
OUT = Path(__file__).resolve().parent / "out" / "slos_serve.csv"
KV_CAPACITY_TOKENS = 200_000


def chatbot_workload(n: int, seed: int) -> Workload:
    """First ``n`` Azure conversation requests with SLOs-Serve ChatBot SLOs (tight prefill)."""
    timing = preset(TIMING_PRESET)
    wl = read_trace(trace_path(TRACE), limit=n)
    return assign_slos(
        wl, "slos-serve", seed=seed, timing=timing, scenario="chatbot", slack="tight"
    )


def call_problem(
    n_new: int, n_running: int, seed: int, memory_slack: float = 0.5
) -> AdmissionProblem:
    """A scheduler call with trace lengths: ``n_running`` forced requests and ``n_new`` new ones.

    Running requests: 90% decoding (a random number of tokens already generated), 10% with a
    part of their prompt left and deadlines the running set can meet (half of each batch's
    budget serves them in order). New requests arrive at
    the call (deadline = TTFT). KV capacity: the running memory plus ``memory_slack`` of the
    new requests' memory, so memory binds.
    """
    rng = np.random.default_rng(seed)
    wl = chatbot_workload(2000, seed)
    rows = rng.choice(len(wl), n_new + n_running, replace=False)
    prompt = wl.prompt_tokens[rows].astype(np.int64)
    output = wl.output_tokens[rows].astype(np.int64)
    ttft = np.asarray(wl["ttft_slo_s"], dtype=float)[rows]
    tpot = np.asarray(wl["tpot_slo_s"], dtype=float)[rows]
    n = len(rows)
    running = np.arange(n) < n_running
    t0 = float(tpot.min())
    prefilling = running & (rng.random(n) < 0.1)
    decoding = running & ~prefilling
    remaining = np.where(decoding, 0, prompt)
    remaining = np.where(
        prefilling, np.maximum(1, (prompt * rng.uniform(0.1, 1.0, n)).astype(int)), remaining
    )
    # running prefills keep feasible deadlines: in order, each is due once half the batch
    # budget has covered it and the ones before it
    half_budget = time2bs(preset(TIMING_PRESET), t0) // 2
    reach = np.cumsum(np.where(prefilling, remaining, 0))
    running_deadline = t0 * (np.ceil(reach / half_budget) + 1)
    deadline = np.where(running, running_deadline, ttft)
    deadline = np.where(decoding, np.nan, np.maximum(deadline, t0))
    generated = np.where(decoding, rng.integers(1, np.maximum(output, 2)), 0)
    generated = np.minimum(generated, output)
    kv = prompt + output
    capacity_tokens = int(kv[running].sum() + memory_slack * kv[~running].sum())
    return AdmissionProblem(
        running=running,
        remaining_prefill_tokens=remaining,
        prefill_deadline_s=deadline,
        tpot_s=tpot,
        kv_tokens=kv,
        value=np.where(running, 0.0, 1.0),
        output_tokens=np.maximum(output, 1),
        kv_capacity_tokens=capacity_tokens,
        timing=preset(TIMING_PRESET),
        generated_tokens=generated,
    )


def bench_dp(sizes: list[tuple[int, int]], repeats: int, memory_unit: int) -> list[dict[str, Any]]:
    rows = []
    for n_new, n_run in sizes:
        times, admitted, feasible = [], [], 0
        for k in range(repeats):
            problem = call_problem(n_new, n_run, seed=k)
            decision = slos_dp(problem, memory_unit=memory_unit)
            times.append(decision.runtime_s)
            admitted.append(len(decision.admitted))
            feasible += decision.feasible
        rows.append(
            {
                "part": "dp",
                "n_new": n_new,
                "n_running": n_run,
                "memory_unit": memory_unit,
                "calls": repeats,
                "feasible_calls": feasible,
                "mean_admitted": float(np.mean(admitted)),
                "median_ms": 1e3 * statistics.median(times),
                "max_ms": 1e3 * max(times),
            }
        )
    return rows


def bench_exact(sizes: list[tuple[int, int]], time_limit_s: float) -> list[dict[str, Any]]:
    rows = []
    for n_new, n_run in sizes:
        problem = call_problem(n_new, n_run, seed=0)
        dp = slos_dp(problem, memory_unit=1)
        for label, model in (("B1", AdmissionB1(problem)), ("B2", AdmissionB2(problem))):
            start = time.perf_counter()
            res = solve(model, "highs", time_limit=time_limit_s)
            rows.append(
                {
                    "part": "exact",
                    "model": label,
                    "n_new": n_new,
                    "n_running": n_run,
                    "status": str(res.status.name if hasattr(res.status, "name") else res.status),
                    "objective": res.objective,
                    "dp_value": dp.value,
                    "solve_s": res.runtime_s,
                    "wall_s": time.perf_counter() - start,
                    "dp_ms": 1e3 * dp.runtime_s,
                }
            )
    return rows


def serving(wl: Workload, servers: int) -> Instance:
    cluster = Cluster(servers=servers, kv_capacity_tokens=KV_CAPACITY_TOKENS, max_batch_tokens=2048)
    return Instance(f"chatbot-{servers}", wl, cluster, preset(TIMING_PRESET), problem="serving")


def _probe(wl: Workload, servers: int, make: Any, seed: int, call_times_s: list[float]) -> Any:
    """``probe(rate) -> deadline attainment`` of a fresh policy from ``make`` at ``rate``.

    DP call times of SLOs-Serve runs are appended to ``call_times_s``.
    """

    def probe(rate: float) -> float:
        inst = serving(scale_rate(wl, rate), servers)
        policy = make()
        router = LeastLoaded() if servers > 1 else None
        out = run(inst, policy, router, seed=seed, record_iterations=False)
        call_times_s.extend(getattr(policy, "call_times_s", []))
        return metrics.attainment(inst, out)

    return probe


def bench_capacity(
    n_requests: int, replicas: list[int], rel_tol: float, seed: int
) -> list[dict[str, Any]]:
    wl = chatbot_workload(n_requests, seed)
    timing = preset(TIMING_PRESET)
    tightest = float(np.nanmin(np.asarray(wl["tpot_slo_s"], dtype=float)))
    # Sarathi-Serve sizes its token budget to the decode SLO: the tokens one TPOT allows
    sarathi_budget = min(time2bs(timing, tightest), 2048)
    policies = {
        "slos-serve": SLOsServePolicy,
        "sarathi": lambda: SarathiFCFS(sarathi_budget),
        "vllm": PrefillFirstFCFS,
    }
    rows = []
    for servers in replicas:
        for name, make in policies.items():
            calls: list[float] = []
            probe = _probe(wl, servers, make, seed, calls)
            start = time.perf_counter()
            res = capacity(
                probe, target=0.9, start_rate=2.0 * servers, rel_tol=rel_tol, progress=False
            )
            rows.append(
                {
                    "part": "capacity",
                    "policy": name,
                    "replicas": servers,
                    "requests": n_requests,
                    "capacity_req_s": res.capacity,
                    "per_gpu_req_s": res.capacity / servers,
                    "probes": res.n_probes,
                    "probe_points": [[float(r), float(a)] for r, a in res.probes],
                    "monotone": res.monotone,
                    "dp_calls": len(calls),
                    "dp_mean_ms": 1e3 * float(np.mean(calls)) if calls else float("nan"),
                    "wall_s": time.perf_counter() - start,
                }
            )
            log.info("capacity %s x%d: %.3f req/s", name, servers, res.capacity)
    return rows


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.quick:
        dp_sizes, repeats = [(10, 100)], 2
        exact_sizes, limit = [(5, 20)], 20.0
        n_req, replicas, tol = 200, [1], 0.1
    else:
        dp_sizes, repeats = [(10, 100), (30, 300)], 5
        exact_sizes, limit = [(5, 20), (10, 50), (10, 100), (30, 300)], 60.0
        n_req, replicas, tol = 600, [1, 2], 0.05
    frames = []
    for unit in (64, 1):
        frames.append(pd.DataFrame(bench_dp(dp_sizes, repeats, unit)))
    print("DP time per call (slos_dp)")
    print(pd.concat(frames).drop(columns="part").to_string(index=False))
    exact = pd.DataFrame(bench_exact(exact_sizes, limit))
    print("\nB1 / B2 exact solve times (HiGHS)")
    print(exact.drop(columns="part").to_string(index=False))
    cap = pd.DataFrame(bench_capacity(n_req, replicas, tol, args.seed))
    print("\nCapacity at 90% deadline attainment (ChatBot, Azure conv)")
    print(cap.drop(columns=["part", "probe_points"]).to_string(index=False))
    table = pd.concat([*frames, exact, cap], ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(f"\nwrote {args.out}")
    return table


if __name__ == "__main__":
    main()
