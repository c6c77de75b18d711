"""The tdg-batch problem: one scheduling point of one server; the best next iteration by TDG.

A snapshot captured from an online SlideBatching run on a trace: the queue (decoding requests
with their next-token deadlines, prefilling and waiting requests with the prompt tokens left), the
free KV memory and SlideBatching's latency budget at that point. Exact model ``tdg-batch``
(knapsack MILP with integer chunks, CP-SAT, brute force); heuristics: SlideBatching's own choice
and its two ablations. See docs/proserve.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.problems.registry import Heuristic, Objective, Option, Problem, register_problem

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload


def snapshot_from_point(source: Instance, point: dict[str, Any], name: str) -> Instance:
    """A tdg-batch instance from a scheduling point captured on ``source``.

    ``point`` is :func:`slolab.heuristics.proserve.capture_point`'s record. Rows are the queue's
    requests by arrival; decoding and prefilling requests are warm-started (``running``, with
    their ``remaining_prefill_tokens`` and ``generated_tokens``), waiting ones arrive as they did.
    """
    from slolab.instances import Cluster, Instance, Workload

    ids = np.asarray(point["ids"], dtype=np.int64)
    order = np.argsort(source.workload.arrival_s[ids], kind="stable")
    ids = ids[order]
    wl = source.workload
    running = ~np.asarray(point["waiting"], dtype=bool)[order]
    columns: dict[str, Any] = {
        "arrival_s": wl.arrival_s[ids],
        "prompt_tokens": wl.prompt_tokens[ids],
        "output_tokens": wl.output_tokens[ids],
        "running": running,
        "remaining_prefill_tokens": np.asarray(point["remaining_prefill"])[order],
        "generated_tokens": np.asarray(point["generated"])[order],
        "trace_row": ids,
    }
    for key in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s", "priority", "tier"):
        columns[key] = wl[key][ids]
    cl = source.cluster
    cluster = Cluster(
        servers=1,
        kv_capacity_tokens=cl.kv_capacity_tokens,
        max_batch_size=cl.max_batch_size,
        max_batch_tokens=cl.max_batch_tokens,
    )
    settings = {
        "scheduling_time_s": float(point["now_s"]),
        "latency_budget_s": float(point["latency_budget_s"]),
        "eta_s": float(point["eta_s"]),
        "w_prefill": float(source.settings.get("w_prefill", 1.0)),
        "w_decode": float(source.settings.get("w_decode", 1.0)),
    }
    workload = Workload(columns, source=f"{wl.source} at {float(point['now_s']):.6f} s")
    return Instance(name, workload, cluster, source.timing, problem="tdg-batch", settings=settings)


def with_given_cache(snapshot: Instance, trace: Workload) -> Instance:
    """``snapshot`` with the prefix cache its trace's earlier requests left, as the column
    ``cached_tokens`` (docs/engine.md, "A snapshot's given cache").

    :func:`slolab.instances.prefix_state.cached_before` over the snapshot's trace rows replays
    every request of the trace arriving before the first of them (unbounded LRU, 512-token
    blocks); each waiting request then finds its cached prefix when it starts, a running one
    keeps 0 (its KV is its own). The queue itself is the one captured without the cache.
    ``trace`` is the snapshot's trace with its ``hash_ids``
    (:func:`slolab.problems.tdg_horizon.read_block_trace`).
    """
    import dataclasses

    from slolab.instances.prefix_state import cached_before
    from slolab.instances.records import CACHED_COLUMN

    wl = snapshot.workload
    rows = np.asarray(wl["trace_row"], dtype=np.int64)
    if not np.array_equal(trace.prompt_tokens[rows], wl.prompt_tokens):
        raise ValueError(f"the snapshot's trace_row column does not index {trace.source}")
    cached = cached_before(trace, rows)
    cached = np.where(np.asarray(wl["running"], dtype=bool), 0, cached)
    workload = wl.with_columns(**{CACHED_COLUMN: cached})
    name = f"{snapshot.name}-cached"
    return dataclasses.replace(snapshot, name=name, workload=workload)


def captured_snapshots(
    trace: str | Path = "azure_conv_2023",
    *,
    seed: int,
    n: int = 200,
    rate: float = 20.0,
    timing: str = "proserve-affine",
    format: str | None = None,
) -> tuple[Instance, list[dict[str, Any]]]:
    """Simulate the first ``n`` requests of a trace at ``rate`` req/s under SlideBatching on one
    server and return the instance and every scheduling point whose queue a snapshot can hold
    (no request was preempted: a preempted request recomputes its generated tokens)."""
    from slolab.heuristics.proserve import SlideBatching
    from slolab.problems.tdg_horizon import proserve_instance
    from slolab.sim import run

    inst = proserve_instance(trace, seed=seed, n=n, rate=rate, timing=timing, format=format)
    policy = SlideBatching(capture=True)
    run(inst, policy, None, seed=seed, record_iterations=False)
    points = [
        p
        for p in policy.captured
        if not np.any((np.asarray(p["generated"]) > 0) & ~np.asarray(p["decoding"]))
    ]
    return inst, points


def build(
    *,
    seed: int,
    trace: str = "azure_conv_2023",
    queue: int = 8,
    n: int = 200,
    rate: float = 20.0,
    timing: str = "proserve-affine",
    format: str | None = None,
    cache: bool = False,
) -> Instance:
    """The captured scheduling point whose queue size is closest to ``queue`` (the first such).

    Points holding both decoding and not-yet-prefilled requests are preferred. ``cache=True``
    gives its waiting requests the prefix cache the trace's earlier requests left
    (:func:`with_given_cache`; a Mooncake trace).
    """
    if queue < 1:
        raise ValueError(f"queue must be >= 1, got {queue}")
    if cache:
        from slolab.problems.tdg_horizon import read_block_trace

        blocks = read_block_trace(trace, format)
    inst, points = captured_snapshots(
        trace, seed=seed, n=n, rate=rate, timing=timing, format=format
    )
    if not points:
        raise ValueError("the simulation captured no scheduling point; raise n or the rate")

    def distance(point: dict[str, Any]) -> tuple[int, int]:
        mixed = bool(np.any(point["decoding"])) and not bool(np.all(point["decoding"]))
        return abs(len(point["ids"]) - queue), 0 if mixed else 1

    best = min(points, key=distance)
    label = (
        f"tdg-batch-{Path(str(trace)).stem.replace('_', '-')}-q{len(best['ids'])}-r{rate:g}-s{seed}"
    )
    snapshot = snapshot_from_point(inst, best, label)
    return with_given_cache(snapshot, blocks) if cache else snapshot


PROBLEM = register_problem(
    Problem(
        name="tdg-batch",
        title="one scheduling point: decode tokens and prefill chunks of the next iteration "
        "within SlideBatching's latency budget; maximize the TDG it earns",
        objective=Objective(
            "iteration TDG",
            "max",
            "slolab.sim.metrics:tdg_emitted_objective",
            "TDG of the tokens the iteration emits by their deadlines (ProServe Eq. 3)",
        ),
        builder=build,
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            Option("format", str, None, "trace format (default: detected)"),
            Option("queue", int, 8, "queued requests wanted at the captured point"),
            Option("n", int, 200, "requests simulated to capture scheduling points", minimum=1),
            Option("rate", float, 20.0, "arrival rate of the simulated trace (req/s)"),
            Option("timing", str, "proserve-affine", "timing: proserve-affine or a preset"),
            Option("seed", int, 0, "seed of the SLO and priority draws", minimum=0),
            Option(
                "cache",
                bool,
                False,
                "give the waiting requests the prefix cache the trace's earlier requests left "
                "(cached_tokens; needs a Mooncake trace with hash_ids)",
            ),
        ),
        models=("tdg-batch",),
        heuristics=(
            Heuristic(
                "slide-batching",
                "SlideBatching's choice at this point (Sec. 4.2, Algorithm 1)",
                schedule="slolab.heuristics.proserve:slide_batching_step",
            ),
            Heuristic(
                "slide-deadline",
                "SlideBatching w/ only deadline (ablation, Sec. 5.4)",
                schedule="slolab.heuristics.proserve:slide_deadline_step",
                baseline=True,
            ),
            Heuristic(
                "slide-density",
                "SlideBatching w/ only density (ablation, Sec. 5.4)",
                schedule="slolab.heuristics.proserve:slide_density_step",
                baseline=True,
            ),
        ),
        docs="proserve.md",
        settings=("latency_budget_s", "w_prefill", "w_decode"),
    )
)
