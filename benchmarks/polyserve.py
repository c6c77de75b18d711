"""PolyServe studies and benchmark: goodput against the bounds, the tier-mix shift, scaling,
engine and router speed, solve times.

Sections (``--section``, repeatable; default all; each prints a table and writes
``benchmarks/out/polyserve_<section>[_<scale>].csv``):

- ``goodput``: goodput at 90 % deadline attainment (a capacity search over the Poisson rate)
  of PolyServe and its baselines, co-located (CO) and disaggregated (PD); beside them the
  paper's optimal throughput (every request at its own best batch, ``fluid_rate``) and the
  tier-partition MILP's bound on the same servers. CO-Chunk is the best of a sweep of token
  budgets (1024, 2048).
- ``curve``: attainment (overall and per tier) at rates from 20 % to 120 % of the optimal
  throughput, Azure conversation lengths, PolyServe against the best baseline of each mode.
- ``shift``: the tier-mix shift (the mix inverts halfway, Sec. 5.3) on a fleet of 20,
  PolyServe autoscaling: attainment per half and cost, against the windowed plan's optimum (a
  lower bound) and CO-Chunk keeping the whole fleet on.
- ``scaling``: goodput per server against the fleet size on the uniform trace, PolyServe and
  CO-Chunk, with the bounds per server.
- ``speed``: a long Azure conversation stream at 60 % of the optimal throughput (engine wall
  and CPU time) and PolyServe's routing decision latency per arriving request.
- ``solvers``: partition MILP solve times (HiGHS, CP-SAT) by servers, and the largest
  windowed-plan horizon each backend proves optimal within 60 s.
- ``ablation``: co-located chunk sizing, the paper's profile (prefill attention ignored)
  against the iteration model: share of prefill iterations over their tier's TPOT, and
  attainment, Azure conversation at 60 % of the optimal throughput.
- ``ttft``: co-located PolyServe on the uniform trace, 32 servers, at 27.5 and 55 req/s:
  attainment by TTFT SLO and prompt length, and the share of misses that are TTFT misses.

Scales (the figures in docs/polyserve.md are from the default):

- default (about 15 minutes on one core): goodput on 8 servers, 20 s of arrivals per probe,
  Azure conversation (every baseline) plus Azure code and uniform (PolyServe against the best
  baseline of its mode); scaling on 8, 16 and 32 servers; speed on 100,000 requests on 20
  servers.
- ``--full`` (the paper's scale, hours): goodput on 20 servers, 60 s of arrivals per probe,
  every vendored trace and uniform; scaling from 8 to 64 servers; speed on 300,000 requests
  on 20 and 64 servers.
- ``--quick``: a smoke run (short streams, few points), a minute or two.

Goodput is measured on finite streams: a stream ends before queues reach their steady state,
so a measured goodput may exceed the steady-state bounds, the more so the shorter the stream.
Asserts only what is stable: every partition MILP behind a bound is proved optimal. Wall times
are reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.heuristics.policies import make_scheduler
from slolab.models import tier_partition as tp
from slolab.problems.tier_autoscale import shift_instance
from slolab.problems.tier_partition import stream_instance
from slolab.sim import metrics, run
from slolab.solvers import Status, solve
from slolab.solvers.capacity import capacity

OUT = Path(__file__).parent / "out"
TARGET = 0.9
CHUNK_BUDGETS = (1024, 2048)
#: Traces on which every baseline runs; elsewhere the best baseline of each mode there (CO-Chunk
#: co-located, PD-Minimal disaggregated).
ALL_BASELINES = ("azure_conv_2023",)


@dataclasses.dataclass(frozen=True, slots=True)
class Scale:
    """Sizes of one run of the benchmark (see the module docstring)."""

    name: str
    goodput_servers: int
    #: Seconds of arrivals a goodput probe simulates. Long against the requests' lifetimes (up
    #: to tens of seconds at a 100 ms TPOT), queues reach their steady state; a short stream
    #: ends before a backlog builds and reads above the steady-state bounds.
    span_s: float
    goodput_traces: tuple[str, ...]
    #: Relative width of the capacity search's final bracket.
    rel_tol: float
    curve_servers: int
    shift_requests: int
    scaling_servers: tuple[int, ...]
    speed_requests: int
    speed_servers: tuple[int, ...]
    solver_servers: tuple[int, ...]
    plan_requests: int

    @property
    def suffix(self) -> str:
        return "" if self.name == "default" else f"_{self.name}"


SCALES = {
    "default": Scale(
        "default",
        goodput_servers=8,
        span_s=20.0,
        goodput_traces=("azure_conv_2023", "azure_code_2023", "uniform"),
        rel_tol=0.05,
        curve_servers=8,
        shift_requests=6000,
        scaling_servers=(8, 16, 32),
        speed_requests=100_000,
        speed_servers=(20,),
        solver_servers=(8, 20, 64, 256),
        plan_requests=20_000,
    ),
    "full": Scale(
        "full",
        goodput_servers=20,
        span_s=60.0,
        goodput_traces=(
            "azure_conv_2023",
            "azure_code_2023",
            "arxiv_summarization",
            "mooncake_conversation",
            "uniform",
        ),
        rel_tol=0.05,
        curve_servers=20,
        shift_requests=20_000,
        scaling_servers=tuple(range(8, 65, 8)),
        speed_requests=300_000,
        speed_servers=(20, 64),
        solver_servers=(8, 20, 64, 256),
        plan_requests=40_000,
    ),
    "quick": Scale(
        "quick",
        goodput_servers=4,
        span_s=5.0,
        goodput_traces=("azure_conv_2023",),
        rel_tol=0.2,
        curve_servers=4,
        shift_requests=600,
        scaling_servers=(4, 8),
        speed_requests=5000,
        speed_servers=(8,),
        solver_servers=(8, 20),
        plan_requests=2000,
    ),
}


def simulate(inst, policy: str, mode: str, servers: int, token_budget: int | None = None):
    sched = make_scheduler(policy, inst, mode=mode, servers=servers, token_budget=token_budget)
    out = sched.run(sched.instance, seed=0, record_iterations=False)
    return sched, out


def goodput(
    scale: Scale, trace: str, n: int, policy: str, mode: str, servers: int, start: float, budget
):
    """Capacity (req/s) at 90 % attainment of ``policy``, the probes it took."""

    def probe(rate: float) -> float:
        inst = stream_instance(trace, n, rate, seed=0, servers=servers, mode=mode)
        sched, out = simulate(inst, policy, mode, servers, budget)
        return metrics.attainment(sched.instance, out)

    res = capacity(
        probe,
        target=TARGET,
        start_rate=start,
        rel_tol=scale.rel_tol,
        max_probes=14,
        progress=False,
    )
    return res.capacity, len(res.probes)


def best_goodput(
    scale: Scale, trace: str, n: int, policy: str, mode: str, optimal: float
) -> tuple[float, int, int | None]:
    """Goodput of ``policy`` on ``scale.goodput_servers`` servers, searched from 70 % of the
    optimal throughput; CO-Chunk's is the best over :data:`CHUNK_BUDGETS`. Returns (goodput,
    probes over every budget, the budget that gave it)."""
    budgets = CHUNK_BUDGETS if policy == "chunk" else (None,)
    servers = scale.goodput_servers
    found = [
        (*goodput(scale, trace, n, policy, mode, servers, 0.7 * optimal, b), b) for b in budgets
    ]
    cap, _, budget = max(found, key=lambda f: f[0])
    return cap, sum(f[1] for f in found), budget


def bounds(trace: str, n: int, mode: str, servers: int) -> tuple[float, float]:
    """(the paper's optimal throughput, the tier-partition MILP bound), req/s."""
    inst = stream_instance(trace, n, 1.0, seed=0, servers=servers, mode=mode)
    milp = solve(tp.TierPartition(inst, mode=mode, servers=servers), solver="highs", time_limit=60)
    assert milp.status == Status.OPTIMAL, (trace, mode, servers, milp.status)
    return tp.fluid_rate(inst, mode, servers), float(milp.objective)


def stream_length(scale: Scale, rate: float) -> int:
    """Requests in ``scale.span_s`` seconds of arrivals at ``rate`` (at least 500)."""
    return max(500, int(rate * scale.span_s))


def section_goodput(scale: Scale) -> pd.DataFrame:
    rows = []
    servers = scale.goodput_servers
    for trace in scale.goodput_traces:
        for mode in ("colocated", "disaggregated"):
            optimal, bound = bounds(trace, 2000, mode, servers)
            n = stream_length(scale, 0.8 * optimal)
            if trace in ALL_BASELINES:
                policies = ["polyserve", "random", "minimal"]
                policies += ["chunk"] if mode == "colocated" else []
            else:
                policies = ["polyserve", "chunk" if mode == "colocated" else "minimal"]
            for policy in policies:
                t0 = time.perf_counter()
                cap, probes, budget = best_goodput(scale, trace, n, policy, mode, optimal)
                rows.append(
                    {
                        "trace": trace,
                        "mode": mode,
                        "policy": policy,
                        "servers": servers,
                        "requests": n,
                        "goodput": cap,
                        "token_budget": budget,
                        "optimal": optimal,
                        "bound": bound,
                        "of_optimal": cap / optimal if optimal else np.nan,
                        "of_bound": cap / bound if bound else np.nan,
                        "probes": probes,
                        "wall_s": time.perf_counter() - t0,
                    }
                )
                print(rows[-1], flush=True)
    frame = pd.DataFrame(rows)
    best = (
        frame[frame.policy != "polyserve"]
        .groupby(["trace", "mode"])["goodput"]
        .max()
        .rename("best_baseline")
    )
    frame = frame.join(best, on=["trace", "mode"])
    frame["vs_best_baseline"] = frame["goodput"] / frame["best_baseline"]
    return frame


def section_curve(scale: Scale) -> pd.DataFrame:
    trace, servers = "azure_conv_2023", scale.curve_servers
    rows = []
    for mode in ("colocated", "disaggregated"):
        optimal, _ = bounds(trace, 2000, mode, servers)
        policies = ["polyserve", "chunk" if mode == "colocated" else "minimal"]
        for policy in policies:
            for frac in (0.2, 0.4, 0.6, 0.8, 1.0, 1.2):
                n = stream_length(scale, frac * optimal)
                inst = stream_instance(trace, n, frac * optimal, seed=0, servers=servers, mode=mode)
                sched, out = simulate(
                    inst, policy, mode, servers, 2048 if policy == "chunk" else None
                )
                s = metrics.summary(sched.instance, out)
                row = {
                    "mode": mode,
                    "policy": policy,
                    "servers": servers,
                    "load": frac,
                    "requests": n,
                    "attainment": s["attainment"],
                }
                row.update({f"tier_{k}": v for k, v in s["attainment_by_tier"].items()})
                rows.append(row)
                print(row, flush=True)
    return pd.DataFrame(rows)


def section_shift(scale: Scale) -> pd.DataFrame:
    n, servers = scale.shift_requests, 20
    rows = []
    for mode in ("colocated", "disaggregated"):
        probe = shift_instance(n, rate=1.0, seed=0, servers=servers, mode=mode)
        rate = 0.5 * tp.fluid_rate(probe, mode, servers)
        inst = shift_instance(n, rate=rate, seed=0, servers=servers, mode=mode, window_s=30.0)
        t0 = time.perf_counter()
        sched, out = simulate(inst, "polyserve", mode, servers)
        wall = time.perf_counter() - t0
        s = metrics.summary(sched.instance, out)
        plan = solve(tp.TierAutoscale(inst), solver="highs", time_limit=120)
        half = inst.workload.arrival_s[n // 2]
        first, second = inst.workload.arrival_s < half, inst.workload.arrival_s >= half
        t = metrics.request_table(sched.instance, out)
        met = t["met_deadline"].to_numpy()
        chunk_sched, chunk_out = simulate(inst, "chunk", "colocated", servers, 2048)
        rows.append(
            {
                "mode": mode,
                "requests": n,
                "rate": rate,
                "attainment": s["attainment"],
                "attainment_first_half": float(met[first].mean()),
                "attainment_second_half": float(met[second].mean()),
                "cost_server_s": s["cost_server_s"],
                "cost_per_request_s": s["cost_per_request_s"],
                "fleet_cost_server_s": servers * out.end_s,
                "plan_cost_server_s": plan.objective,
                "plan_status": plan.status.value,
                "cost_over_plan": s["cost_server_s"] / plan.objective if plan.objective else np.nan,
                "chunk_attainment": metrics.attainment(chunk_sched.instance, chunk_out),
                "chunk_cost_server_s": metrics.server_seconds(chunk_sched.instance, chunk_out),
                "scale_events": s["scale_events"],
                "wall_s": wall,
            }
        )
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def section_scaling(scale: Scale) -> pd.DataFrame:
    rows = []
    trace = "uniform"
    for servers in scale.scaling_servers:
        optimal, bound = bounds(trace, 2000, "colocated", servers)
        n = stream_length(scale, 0.8 * optimal)
        for policy, budget in (("polyserve", None), ("chunk", 2048)):
            cap, probes = goodput(
                scale, trace, n, policy, "colocated", servers, 0.7 * optimal, budget
            )
            rows.append(
                {
                    "servers": servers,
                    "policy": policy,
                    "requests": n,
                    "goodput": cap,
                    "goodput_per_server": cap / servers,
                    "bound_per_server": bound / servers,
                    "optimal_per_server": optimal / servers,
                    "probes": probes,
                }
            )
            print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def section_speed(scale: Scale) -> pd.DataFrame:
    n = scale.speed_requests
    rows = []
    for mode in ("colocated", "disaggregated"):
        for servers in scale.speed_servers:
            probe = stream_instance(
                "azure_conv_2023", 2000, 1.0, seed=0, servers=servers, mode=mode
            )
            rate = 0.6 * tp.fluid_rate(probe, mode, servers)
            inst = stream_instance("azure_conv_2023", n, rate, seed=0, servers=servers, mode=mode)
            t0, c0 = time.perf_counter(), time.process_time()
            sched, out = simulate(inst, "polyserve", mode, servers)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s = metrics.summary(sched.instance, out)
            lat = np.asarray(sched.router.latencies_s)
            rows.append(
                {
                    "mode": mode,
                    "servers": servers,
                    "requests": n,
                    "rate": rate,
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "tokens_simulated": s["tokens_simulated"],
                    "us_per_token": 1e6 * cpu / s["tokens_simulated"],
                    "attainment": s["attainment"],
                    "decision_mean_us": 1e6 * float(lat.mean()),
                    "decision_p50_us": 1e6 * float(np.percentile(lat, 50)),
                    "decision_p99_us": 1e6 * float(np.percentile(lat, 99)),
                    "decisions": len(lat),
                }
            )
            print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def section_solvers(scale: Scale) -> pd.DataFrame:
    rows = []
    for servers in scale.solver_servers:
        inst = stream_instance("azure_conv_2023", 2000, 1.0, seed=0, servers=servers)
        for mode in ("colocated", "disaggregated"):
            for solver in ("highs", "cpsat"):
                res = solve(
                    tp.TierPartition(inst, mode=mode, servers=servers), solver=solver, time_limit=60
                )
                rows.append(
                    {
                        "model": "tier-partition",
                        "mode": mode,
                        "size": servers,
                        "solver": solver,
                        "status": res.status.value,
                        "objective": res.objective,
                        "bound": res.bound,
                        "runtime_s": res.runtime_s,
                    }
                )
                print(rows[-1], flush=True)
    n = scale.plan_requests
    fleet = 1024  # an unlimited pool (Sec. 5.4): every window's demand can be served
    for mode in ("colocated", "disaggregated"):
        probe = shift_instance(n, rate=1.0, seed=0, servers=fleet, mode=mode)
        rate = 0.5 * tp.fluid_rate(probe, mode, 64)
        for solver in ("highs", "cpsat"):
            largest = 0
            for windows in (5, 10, 20, 40, 80, 160, 320):
                inst = shift_instance(
                    n,
                    rate=rate,
                    seed=0,
                    servers=fleet,
                    mode=mode,
                    window_s=(n / rate) / windows * 1.0001,
                )
                res = solve(tp.TierAutoscale(inst), solver=solver, time_limit=60)
                rows.append(
                    {
                        "model": "tier-autoscale",
                        "mode": mode,
                        "size": tp.PlanData.of(inst).windows,
                        "solver": solver,
                        "status": res.status.value,
                        "objective": res.objective,
                        "bound": res.bound,
                        "runtime_s": res.runtime_s,
                    }
                )
                print(rows[-1], flush=True)
                if res.status != Status.OPTIMAL:
                    break
                largest = rows[-1]["size"]
            rows.append(
                {
                    "model": "tier-autoscale",
                    "mode": mode,
                    "solver": solver,
                    "largest_proved_60s": largest,
                }
            )
    return pd.DataFrame(rows)


def section_ablation(scale: Scale) -> pd.DataFrame:
    """Co-located chunk sizing: the paper's profile (prefill attention ignored, Sec. 4.5)
    against the iteration model, Azure conversation at 60 % of the optimal throughput."""
    from slolab.heuristics.polyserve import (
        PolyServeController,
        PolyServeParams,
        PolyServePolicy,
        polyserve_cluster,
    )

    servers, n = 20, 2000
    rate = 0.6 * tp.fluid_rate(
        stream_instance("azure_conv_2023", n, 1.0, seed=0), "colocated", servers
    )
    inst = polyserve_cluster(
        stream_instance("azure_conv_2023", n, rate, seed=0, servers=servers), "colocated", servers
    )
    rows = []
    for chunk_timing in ("profile", "model"):
        ctrl = PolyServeController(PolyServeParams(chunk_timing=chunk_timing))
        out = run(inst, PolyServePolicy(ctrl), ctrl, seed=0, scaler=ctrl)
        tpot_of_pool = {p: ctrl.tiers[j] for p, j in ctrl.tier_of_pool.items()}
        pools = np.array([out.pool_names[out.server_pool[i]] for i in out.it_server])
        tpot = np.array([tpot_of_pool[p] for p in pools])
        prefill = out.it_features[:, 0] > 0
        over = (out.it_end - out.it_start)[prefill] > tpot[prefill] + 1e-12
        rows.append(
            {
                "chunk_timing": chunk_timing,
                "servers": servers,
                "requests": n,
                "rate": rate,
                "prefill_iterations": int(prefill.sum()),
                "over_tpot": float(over.mean()),
                "attainment": metrics.attainment(inst, out),
            }
        )
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


def section_ttft(scale: Scale) -> pd.DataFrame:
    """Co-located PolyServe on the uniform trace at light load: attainment by TTFT SLO and
    prompt length (every miss is a TTFT miss), 32 servers, a third and two thirds of the bound."""
    servers, n = 32, 2516
    rows = []
    for rate in (27.5, 55.0):
        inst = stream_instance("uniform", n, rate, seed=0, servers=servers)
        sched, out = simulate(inst, "polyserve", "colocated", servers)
        t = metrics.request_table(sched.instance, out)
        met = t["met_deadline"].to_numpy()
        ttft_slo = np.asarray(inst.workload["ttft_slo_s"])
        ttft_missed = t["ttft_s"].to_numpy() > ttft_slo
        prompt = inst.workload.prompt_tokens
        for slo in np.unique(ttft_slo):
            for lo, hi in ((0, 2048), (2048, 4096), (4096, 6144), (6144, 8192)):
                sel = (ttft_slo == slo) & (prompt > lo) & (prompt <= hi)
                rows.append(
                    {
                        "servers": servers,
                        "rate": rate,
                        "attainment": float(met.mean()),
                        "misses_on_ttft": float(ttft_missed[~met].mean()) if (~met).any() else 1.0,
                        "ttft_slo_s": float(slo),
                        "prompt_tokens": f"({lo}, {hi}]",
                        "requests": int(sel.sum()),
                        "met": float(met[sel].mean()),
                    }
                )
        print(rows[-1], flush=True)
    return pd.DataFrame(rows)


SECTIONS = {
    "goodput": section_goodput,
    "curve": section_curve,
    "shift": section_shift,
    "scaling": section_scaling,
    "speed": section_speed,
    "solvers": section_solvers,
    "ablation": section_ablation,
    "ttft": section_ttft,
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--section", choices=sorted(SECTIONS), action="append", help="run only these")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the paper's scale (hours)")
    size.add_argument("--quick", action="store_true", help="a smoke run (a minute or two)")
    args = ap.parse_args()
    scale = SCALES["full" if args.full else "quick" if args.quick else "default"]
    OUT.mkdir(exist_ok=True)
    pd.set_option("display.width", 200)
    for name in args.section or list(SECTIONS):
        t0 = time.perf_counter()
        frame = SECTIONS[name](scale)
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        path = OUT / f"polyserve_{name}{scale.suffix}.csv"
        frame.to_csv(path, index=False)
        print(f"wrote {path} ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
