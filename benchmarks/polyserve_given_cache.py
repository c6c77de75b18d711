"""PolyServe's tier partition on a Mooncake snapshot, with and without its given cache.

The snapshot is rows ``start .. start + n - 1`` of the Mooncake conversation trace with
PolyServe's SLOs on ``servers`` servers of Llama-3.1-8B on H200; its cache is the one the
requests before it left (:func:`slolab.instances.prefix_state.given_cache`, 512-token blocks,
unbounded). Per case (an all-zero column, then the cache) and model (``tier-partition``,
``tier-partition-fluid``, HiGHS): the status, the served rate bound (req/s) and the servers per
tier. Prints the table and writes ``benchmarks/out/polyserve_given_cache.csv``. Asserts only
what the models guarantee: the fluid bound is at least the integer one, and the cache never
lowers either (docs/polyserve.md, "Cached prefixes at the snapshot").

Usage: ``python -m slolab.benchmarks.polyserve_given_cache [--start 1000 --n 200 --servers 4]``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "out" / "polyserve_given_cache.csv"


def measure(start: int = 1000, n: int = 200, servers: int = 4, seed: int = 0) -> pd.DataFrame:
    """One row per (cache, model): status, bound (req/s), servers per tier."""
    from slolab.instances import assign_slos, read_workload
    from slolab.instances.prefix_state import given_cache
    from slolab.instances.records import cached_prompt_tokens
    from slolab.problems.tier_partition import polyserve_instance
    from slolab.solvers import build_model, solve

    base = polyserve_instance("mooncake_conversation", seed=seed, servers=servers, limit=n)
    trace = read_workload("mooncake_conversation", keep_hash_ids=True, limit=start + n)
    snap = given_cache(trace, np.arange(start, start + n))
    snap = assign_slos(snap, "polyserve", seed=seed, timing=base.timing)
    cached = cached_prompt_tokens(snap)
    rows = []
    for label, column in (("none", np.zeros(len(snap), np.int64)), ("given", cached)):
        case = dataclasses.replace(base, workload=snap.with_columns(cached_tokens=column))
        for model in ("tier-partition", "tier-partition-fluid"):
            res = solve(build_model(model, case), solver="highs", time_limit=60)
            split = res.details.get("solution", {}).get("servers_per_tier", {})
            rows.append(
                {
                    "cache": label,
                    "cached_share": float(column.sum() / snap.prompt_tokens.sum()),
                    "model": model,
                    "status": res.status.value,
                    "bound_req_s": res.objective,
                    "servers_per_tier": " ".join(f"{k}:{v:.3g}" for k, v in split.items()),
                }
            )
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=int, default=1000, help="first row of the snapshot")
    parser.add_argument("--n", type=int, default=200, help="requests in the snapshot")
    parser.add_argument("--servers", type=int, default=4, help="servers N to partition")
    args = parser.parse_args(argv)
    table = measure(args.start, args.n, args.servers)
    print(table.to_string(index=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(OUT, index=False)
    bound = table.set_index(["cache", "model"]).bound_req_s
    for cache in ("none", "given"):
        assert bound[cache, "tier-partition-fluid"] >= bound[cache, "tier-partition"] * (1 - 1e-9)
    for model in ("tier-partition", "tier-partition-fluid"):
        assert bound["given", model] >= bound["none", model] * (1 - 1e-9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
