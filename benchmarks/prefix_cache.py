"""Prefix caching on the Mooncake conversation trace: reuse in the trace, engine speed with
caching on and off, routers, and capacity with and without caching.

Sections (each row printed and written to ``benchmarks/out/prefix_cache.csv``):

- ``trace``: the share of prompt tokens an infinite cache shared by every request would skip,
  counted as the engine counts a hit (whole 512-token blocks inside the first ``prompt - 1``
  tokens), and the share of all prompt blocks that repeat an earlier block;
- ``speed``: the first ``--limit`` requests at ``--rate`` req/s (the trace's arrivals
  time-scaled) under Sarathi with least-loaded routing on ``--servers`` servers, caching off
  and on (512-token blocks), the engine's CPU time (the run, not reading the trace) best of
  ``--repeat`` rounds (each round runs caching off and on, one after the other), and their
  ratio;
- ``router``: the same runs with caching on under round robin, least-loaded and the
  cache-aware router: hit rate, prefill tokens saved, attainment, TTFT p50, mean e2e;
- ``capacity``: ``slolab capacity``'s search (90% deadline attainment, Poisson arrivals: the
  trace's own bursts miss the target at any rate) for Sarathi with least-loaded and
  cache-aware routing and for PolyServe, caching off and on.

Asserts only what is stable: caching off and on serve the same requests, and the cache skips
no more than the infinite cache of the trace section would. Wall and CPU times are the
machine's (it may be shared: the load average is printed).

Usage: ``python benchmarks/prefix_cache.py [--limit 2000] [--servers 4] [--rate 1.0]
[--repeat 2] [--kv-capacity 200000] [--skip-capacity]``
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import pandas as pd
from slolab.harness.serving import ServingSetup, capacity_search
from slolab.instances.readers import trace_path
from slolab.sim import metrics

OUT = Path(__file__).parent / "out"
BLOCK = 512


def trace_reuse() -> dict:
    """Infinite-cache reuse of the whole trace."""
    seen: set[int] = set()
    blocks = repeated = prompt_tokens = hit_tokens = 0
    with open(trace_path("mooncake_conversation"), encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            ids, prompt = record["hash_ids"], int(record["input_length"])
            blocks += len(ids)
            repeated += sum(1 for h in ids if h in seen)
            k = 0
            while k < (prompt - 1) // BLOCK and ids[k] in seen:
                k += 1
            hit_tokens += k * BLOCK
            prompt_tokens += prompt
            seen.update(ids[: prompt // BLOCK])
    return {
        "section": "trace",
        "blocks": blocks,
        "repeated_block_share": repeated / blocks,
        "infinite_cache_hit_rate": hit_tokens / prompt_tokens,
    }


def setup(
    args: argparse.Namespace,
    cache: str,
    router: str | None,
    policy: str = "sarathi",
    arrivals: str | None = None,
):
    return ServingSetup(
        "mooncake_conversation",
        policy=policy,
        router=router,
        servers=args.servers,
        limit=args.limit,
        slos="polyserve",
        prefix_cache=cache,
        kv_capacity=args.kv_capacity,
        arrivals=arrivals,
    )


def simulate(args: argparse.Namespace, cache: str, router: str | None) -> tuple[dict, float]:
    return simulate_each(args, [cache], router)[0]


def simulate_each(
    args: argparse.Namespace, caches: list[str], router: str | None
) -> list[tuple[dict, float]]:
    """Each of ``caches``' run, its summary and its best CPU time over ``--repeat`` rounds. A
    round runs every cache setting once, so a change in the machine's load hits them alike."""
    prepared = [
        setup(args, cache, router).prepare(setup(args, cache, router).instance(args.rate))
        for cache in caches
    ]
    best = [float("inf")] * len(caches)
    summaries: list[dict] = [{} for _ in caches]
    for _ in range(args.repeat):
        for i, (instance, sched) in enumerate(prepared):
            # the engine's run only (reading the trace and its block ids is not timed)
            cpu0 = time.process_time()
            outcome = sched.run(instance, seed=0, record_iterations=False)
            best[i] = min(best[i], time.process_time() - cpu0)
            summaries[i] = metrics.summary(instance, outcome)
    return list(zip(summaries, best, strict=True))


def row_of(section: str, cache: str, router: str, summary: dict, cpu_s: float) -> dict:
    pc = summary.get("prefix_cache", {})
    return {
        "section": section,
        "cache": cache,
        "router": router,
        "finished": summary["finished"],
        "attainment": summary["attainment"],
        "ttft_p50_s": summary["ttft_p50"],
        "e2e_mean_s": summary["e2e_mean"],
        "hit_rate": pc.get("hit_rate", 0.0),
        "prefill_tokens_saved": pc.get("prefill_tokens_saved", 0),
        "evictions": pc.get("evictions", 0),
        "cpu_s": cpu_s,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--kv-capacity", type=int, default=200_000)
    parser.add_argument("--skip-capacity", action="store_true")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        print(
            ", ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
        pd.DataFrame(rows).to_csv(OUT / "prefix_cache.csv", index=False)

    reuse = trace_reuse()
    emit(reuse)
    (off, cpu_off), (on, cpu_on) = simulate_each(args, ["off", "auto"], "least-loaded")
    emit(row_of("speed", "off", "least-loaded", off, cpu_off))
    emit(row_of("speed", "512", "least-loaded", on, cpu_on))
    emit({"section": "speed", "ratio_on_over_off": cpu_on / cpu_off})
    assert off["finished"] + off["rejected"] == on["finished"] + on["rejected"]
    assert on["prefix_cache"]["hit_rate"] <= 1.0
    for router in ("round-robin", "cache-aware"):
        summary, cpu = simulate(args, "auto", router)
        emit(row_of("router", "512", router, summary, cpu))
    if args.skip_capacity:
        return
    for policy, router in (
        ("sarathi", "least-loaded"),
        ("sarathi", "cache-aware"),
        ("polyserve", None),
    ):
        for cache in ("off", "auto"):
            wall0 = time.perf_counter()
            found, _ = capacity_search(
                setup(args, cache, router, policy, arrivals="poisson"), rel_tol=0.05, rate=args.rate
            )
            emit(
                {
                    "section": "capacity",
                    "policy": policy,
                    "router": router or "own",
                    "cache": cache,
                    "capacity_req_s": found.capacity,
                    "probes": len(found.probes),
                    "wall_s": time.perf_counter() - wall0,
                }
            )


if __name__ == "__main__":
    main()
