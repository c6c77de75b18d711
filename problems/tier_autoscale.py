"""The tier-autoscale problem (PolyServe): how many servers each TPOT tier holds, window by
window, while the tier mix of the arrivals changes; minimize server-seconds.

An instance is a stream whose TPOT mix shifts: PolyServe's Sec. 5.3 experiment takes uniform
lengths (input [1, 8192], output [1, 2048]) and gives the first half of the requests the mix
10/20/30/40 % (20/30/50/100 ms) and the second half the inverted one. Settings: ``window_s``
(the plan's windows), ``servers`` (the fleet, the most servers on at once) and ``mode``.
Exact model ``tier-autoscale`` (a **lower bound** of the windowed fluid model; MILP and
CP-SAT); heuristics: PolyServe (it scales its tiers itself), and CO-Chunk on the whole fleet.
The objective is the run's cost in server-seconds; compare it at the attainment each run
reaches. See docs/polyserve.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from slolab.problems.registry import Heuristic, Objective, Option, Problem, register_problem
from slolab.problems.tier_partition import MODES, POLYSERVE_MAX_BATCH_SIZE, POLYSERVE_TIMING, online

if TYPE_CHECKING:
    from slolab.instances.records import Instance

#: The Sec. 5.3 mixes: the first half of the stream, then the second (inverted).
FIRST_MIX = (0.1, 0.2, 0.3, 0.4)
SECOND_MIX = (0.4, 0.3, 0.2, 0.1)


def shift_instance(
    n: int,
    *,
    rate: float,
    seed: int,
    servers: int = 20,
    mode: str = "colocated",
    window_s: float = 30.0,
    max_prompt_tokens: int = 8192,
    max_output_tokens: int = 2048,
    timing: str = POLYSERVE_TIMING,
    kv_capacity_tokens: int | None = None,
    name: str | None = None,
) -> Instance:
    """PolyServe's tier-mix shift (Sec. 5.3): ``n`` requests of uniform lengths arriving as a
    Poisson process at ``rate`` req/s; the first ``n // 2`` get the SLOs of the 10/20/30/40 %
    TPOT mix, the rest those of the inverted mix (TTFT and the idle-server rule as in Sec. 5.1).

    References
    ----------
    PolyServe, Sec. 5.3 (burstiness: the TPOT distribution inverts after 150,000 of 300,000
    requests).
    """
    from slolab.heuristics.polyserve import (
        H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
        H200_LLAMA31_8B_KV_TOKENS,
    )
    from slolab.instances import Cluster, Instance, Workload, assign_slos, uniform_lengths
    from slolab.timing import resolve_timing

    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    model = resolve_timing(timing)
    wl = uniform_lengths(n, max_prompt_tokens, max_output_tokens, rate=rate, seed=seed)
    half = n // 2
    parts = []
    for rows, mix, offset in ((slice(0, half), FIRST_MIX, 0), (slice(half, n), SECOND_MIX, 1)):
        part = Workload({c: np.asarray(wl[c])[rows] for c in wl.columns}, source=wl.source)
        parts.append(
            assign_slos(part, "polyserve", seed=seed + offset, timing=model, tier_probabilities=mix)
        )
    columns = {c: np.concatenate([np.asarray(p[c]) for p in parts]) for c in parts[0].columns}
    shifted = Workload(columns, source=f"{wl.source}, TPOT mix inverted after {half}")
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=kv_capacity_tokens or H200_LLAMA31_8B_KV_TOKENS,
        max_batch_size=POLYSERVE_MAX_BATCH_SIZE,
        max_batch_tokens=0,
        kv_bytes_per_token=H200_LLAMA31_8B_KV_BYTES_PER_TOKEN,
    )
    settings = {
        "seed": seed,
        "rate": float(rate),
        "servers": servers,
        "mode": mode,
        "window_s": float(window_s),
        "slos": "polyserve (mix inverted halfway)",
    }
    label = name or f"shift-{n}-{mode[:2]}-{servers}srv-s{seed}"
    return Instance(label, shifted, cluster, model, problem="tier-autoscale", settings=settings)


def build(
    *,
    n: int = 2000,
    rate: float = 20.0,
    servers: int = 20,
    mode: str = "colocated",
    window_s: float = 30.0,
    timing: str = POLYSERVE_TIMING,
    seed: int = 0,
) -> Instance:
    """A tier-autoscale instance (see :func:`shift_instance`)."""
    return shift_instance(
        n, rate=rate, seed=seed, servers=servers, mode=mode, window_s=window_s, timing=timing
    )


PROBLEM = register_problem(
    Problem(
        name="tier-autoscale",
        title="servers per TPOT tier per window while the tier mix shifts; minimize server-seconds",
        objective=Objective(
            "cost",
            "min",
            "slolab.sim.metrics:cost_objective",
            "server-seconds from each server's switch-on to its departure",
        ),
        builder=build,
        options=(
            Option("n", int, 2000, "requests (the mix inverts after n // 2)", minimum=2),
            Option("rate", float, 20.0, "Poisson arrival rate (req/s)"),
            Option("servers", int, 20, "fleet: the most servers on at once"),
            Option("mode", str, "colocated", "serving mode", choices=MODES),
            Option("window_s", float, 30.0, "length of the plan's windows (s)"),
            Option("timing", str, POLYSERVE_TIMING, "timing preset"),
            Option(
                "seed", int, 0, "seed of the lengths, the arrivals and the SLO draws", minimum=0
            ),
        ),
        models=("tier-autoscale",),
        heuristics=(
            Heuristic(
                "polyserve",
                "PolyServe (Sec. 4.3-4.4): tiers grow from and return to the best-effort pool",
                policy=online("polyserve"),
            ),
            Heuristic(
                "chunk",
                "CO-Chunk on the whole fleet (a fixed cluster)",
                policy=online("chunk"),
                baseline=True,
            ),
        ),
        docs="polyserve.md",
        settings=("servers", "mode", "window_s"),
    )
)
