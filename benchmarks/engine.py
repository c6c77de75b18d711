"""Engine speed and scaling on real traces.

1. Azure conv 2023 (19,366 requests, its own arrival times) on 4 co-located servers.
2. A 300k-request stream on 20 servers: the Azure conv trace repeated back to back (each copy
   shifted by the trace's span, so lengths and burstiness are real) and compressed in time to
   5x its rate (20 servers instead of 4).
3. Scaling: prefixes of the 300k stream (on the same 20 servers); wall time against tokens
   simulated on log-log axes, least-squares slope = the growth exponent.
4. Elastic: the largest stream run again on a cluster that starts with 4 servers and is scaled
   between 4 and 32 by the threshold scaler (requests queued or running per server: above 8
   switch one on, below 2 drain one; checked every second, 10 s cool-down; disk start-up of
   the llama2-7b-h100 preset, 1.71 s); the ratio of its wall time to the fixed 20-server run
   of the same stream is reported (target <= 1.5), with both runs' cost and attainment.

Each run reports wall and CPU time (``time.process_time``; steadier than wall time when the
machine is shared). Prints a table and writes ``benchmarks/out/engine.csv``. Asserts only what
is stable: every run finishes every request; the exponent and the elastic ratio are reported,
not asserted.

Usage: ``python benchmarks/engine.py [--quick]`` (``--quick``: smaller scaling points; the
elastic run uses the 40k prefix instead of the 300k stream).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import pandas as pd
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.heuristics.scalers import ThresholdScaler, elastic_setup
from slolab.instances import Cluster, Instance, Workload, assign_slos, read_trace, trace_path
from slolab.sim import metrics, run
from slolab.timing import preset

OUT = Path(__file__).parent / "out"


def conv_trace() -> Workload:
    return read_trace(trace_path("azure_conv_2023"))


def repeated(wl: Workload, copies: int, speedup: float) -> Workload:
    """``copies`` back-to-back copies of ``wl``, time compressed by ``speedup``."""
    span = float(wl.arrival_s[-1]) + 1.0
    arr = np.concatenate([wl.arrival_s + k * span for k in range(copies)]) / speedup
    return Workload(
        {
            "arrival_s": arr,
            "prompt_tokens": np.tile(wl.prompt_tokens, copies),
            "output_tokens": np.tile(wl.output_tokens, copies),
        },
        source=f"{copies}x {wl.source} at {speedup}x rate",
    )


def instance(wl: Workload, servers: int) -> Instance:
    timing = preset("llama2-7b-h100")
    wl = assign_slos(wl, "polyserve", seed=0, timing=timing)
    cl = Cluster(servers=servers, kv_capacity_tokens=200_000, max_batch_tokens=2048)
    return Instance(f"bench-{len(wl)}-{servers}", wl, cl, timing)


def elastic(inst: Instance) -> tuple[Instance, ThresholdScaler]:
    """``inst`` on 4 servers to start, scaled between 4 and 32 (see the module docstring)."""
    start = dataclasses.replace(inst.cluster, servers=4)
    small = dataclasses.replace(inst, name=f"{inst.name}-elastic", cluster=start)
    setup, scaler = elastic_setup(
        small,
        "threshold",
        min_servers=4,
        max_servers=32,
        startup="disk",
        metric="load",
        upper=8.0,
        lower=2.0,
    )
    assert isinstance(scaler, ThresholdScaler)
    return setup, scaler


def measure(label: str, inst: Instance, scaler: ThresholdScaler | None = None) -> dict:
    t0 = time.perf_counter()
    c0 = time.process_time()
    out = run(inst, SarathiFCFS(), LeastLoaded(), seed=0, record_iterations=False, scaler=scaler)
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t0
    s = metrics.summary(inst, out)
    assert s["finished"] == s["requests"], (
        f"{label}: {s['requests'] - s['finished']} requests unfinished"
    )
    return {
        "run": label,
        "requests": s["requests"],
        "servers": inst.cluster.servers,
        "tokens_simulated": s["tokens_simulated"],
        "wall_s": wall,
        "cpu_s": cpu,
        "requests_per_s": s["requests"] / wall,
        "tokens_per_s": s["tokens_simulated"] / wall,
        "attainment": s["attainment"],
        "utilization": s["utilization"],
        "cost_server_s": s["cost_server_s"],
        "servers_max": s["servers_max"],
        "scale_events": s["scale_events"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smaller scaling points, no 300k run")
    args = ap.parse_args()
    conv = conv_trace()
    rows = [measure("azure-conv-2023 x 4 servers", instance(conv, 4))]
    stream = repeated(conv, 16, 5.0)
    stream = Workload(
        {k: stream[k][:300_000] for k in ("arrival_s", "prompt_tokens", "output_tokens")},
        source=stream.source,
    )
    sizes = [10_000, 20_000, 40_000] if args.quick else [20_000, 40_000, 80_000, 160_000, 300_000]
    for n in sizes:
        sub = Workload(
            {k: stream[k][:n] for k in ("arrival_s", "prompt_tokens", "output_tokens")},
            source=stream.source,
        )
        rows.append(measure(f"stream {n} x 20 servers", instance(sub, 20)))
    inst, scaler = elastic(instance(sub, 20))
    rows.append(measure(f"stream {sizes[-1]} elastic 4-32 servers", inst, scaler))
    frame = pd.DataFrame(rows)
    ratio = float(frame["wall_s"].iloc[-1] / frame["wall_s"].iloc[-2])
    cpu_ratio = float(frame["cpu_s"].iloc[-1] / frame["cpu_s"].iloc[-2])
    frame["elastic_ratio"] = [np.nan] * (len(frame) - 1) + [ratio]
    frame["elastic_cpu_ratio"] = [np.nan] * (len(frame) - 1) + [cpu_ratio]
    scal = frame[frame["run"].str.startswith("stream") & ~frame["run"].str.contains("elastic")]
    slope, _ = np.polyfit(np.log(scal["tokens_simulated"]), np.log(scal["wall_s"]), 1)
    pd.set_option("display.width", 160)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(
        f"\nwall time ~ tokens^{slope:.3f} (least squares on log-log over {len(scal)} stream prefixes)"
    )
    print(
        f"elastic run / fixed 20-server run of the same stream: {ratio:.2f}x wall time, "
        f"{cpu_ratio:.2f}x CPU time"
    )
    OUT.mkdir(exist_ok=True)
    frame.assign(exponent=slope).to_csv(OUT / "engine.csv", index=False)
    print(f"wrote {OUT / 'engine.csv'}")


if __name__ == "__main__":
    main()
