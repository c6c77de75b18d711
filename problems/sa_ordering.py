"""The SA-ordering problem: order and batch N queued requests to maximize G = #met / sum of latencies.

Exact models: ``sa-ordering`` (position-arc MILP, CP-SAT, brute force; Dinkelbach on the
ratio), ``sa-ordering-columns`` (column generation plus enumeration) and ``sa-ordering-bp``
(branch-and-price on SCIP); heuristic: the SA paper's simulated annealing; baselines: FCFS,
EDF, shortest first, in full batches.
See docs/sa_ordering.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.problems.registry import (
    READ_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    register_model_options,
    register_problem,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload
    from slolab.timing import TimingModel

TASKS = ("mixed", "chat", "code")


def _snapshot_rows(wl: Workload, n: int, rng: np.random.Generator, max_tokens: int) -> np.ndarray:
    """``n`` consecutive requests (a real burst) whose lengths stay within ``max_tokens``."""
    ok = np.flatnonzero((wl.prompt_tokens + wl.output_tokens) <= max_tokens)
    if len(ok) < n:
        raise ValueError(
            f"{wl.source}: only {len(ok)} requests have at most {max_tokens} tokens, need {n}"
        )
    start = int(rng.integers(0, len(ok) - n + 1))
    return ok[start : start + n]


def sa_snapshot(
    n: int,
    batch_size: int,
    *,
    seed: int,
    chat_trace: str | Path | None = "azure_conv_2023",
    code_trace: str | Path | None = "azure_code_2023",
    timing: str | TimingModel = "sa-qwen2.5-7b-v100",
    max_tokens: int = 2048,
    name: str | None = None,
    cache: bool = False,
    **reading: Any,
) -> Instance:
    """N queued requests (all at time 0) for the SA-ordering problem.

    Chat requests come from ``chat_trace`` (SLO: TTFT 10 s, TPOT 50 ms) and code requests
    from ``code_trace`` (SLO: e2e 30 s), half each when both are given (the paper's mixed
    dataset, shuffled with ``seed``). Each part is a run of consecutive trace requests starting
    at a seeded random position, restricted to ``prompt + output <= max_tokens`` (the paper
    keeps lengths under 2k for its latency predictor). ``**reading`` (``format``, ``columns``,
    ``zero_output``, ...) says how the traces are read (see
    :func:`slolab.instances.read_workload`); only their order matters, so a length-only trace
    needs no arrival process.

    ``cache=True`` gives the snapshot its given prefix cache (the workload's
    ``cached_tokens``, docs/engine.md, "A snapshot's given cache"): each request's prefix of
    the blocks the trace's requests before the cut left in an unbounded cache
    (:func:`slolab.instances.prefix_state.cached_before`). It needs traces with prompt block ids
    (Mooncake's ``hash_ids``), so a mixed snapshot of the two Azure traces cannot have one.

    References
    ----------
    SA-ordering paper, Sec. 5.1 (workloads, SLOs).
    """
    from slolab.instances import Cluster, Instance, Workload, assign_slos, read_workload
    from slolab.instances.prefix_state import cached_before
    from slolab.instances.records import CACHED_COLUMN
    from slolab.timing import resolve_timing

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if chat_trace is None and code_trace is None:
        raise ValueError("give at least one of chat_trace and code_trace")
    rng = np.random.default_rng(seed)
    parts: list[tuple[Workload, np.ndarray, str]] = []
    cached_parts: list[np.ndarray] = []
    n_chat = n if code_trace is None else (0 if chat_trace is None else n - n // 2)
    for trace, count, task in ((chat_trace, n_chat, "chat"), (code_trace, n - n_chat, "code")):
        if trace is None or count == 0:
            continue
        wl = read_workload(trace, order_only=True, keep_hash_ids=cache, **reading)
        if cache and "hash_ids" not in wl:
            raise ValueError(
                f"{wl.source}: a snapshot with its given cache (cache=True) needs a trace with "
                "prompt block ids (hash_ids: Mooncake, e.g. --task chat --trace "
                "mooncake_conversation)"
            )
        rows = _snapshot_rows(wl, count, rng, max_tokens)
        parts.append((wl, rows, task))
        if cache:
            cached_parts.append(cached_before(wl, rows))
    prompt = np.concatenate([wl.prompt_tokens[rows] for wl, rows, _ in parts])
    output = np.concatenate([wl.output_tokens[rows] for wl, rows, _ in parts])
    tasks = np.concatenate([np.full(len(rows), t) for _, rows, t in parts])
    order = rng.permutation(n)
    columns = {
        "arrival_s": np.zeros(n),
        "prompt_tokens": prompt[order],
        "output_tokens": output[order],
        "task": tasks[order].astype(str),
    }
    if cache:
        columns[CACHED_COLUMN] = np.concatenate(cached_parts)[order]
    wl = Workload(columns, source="sa-snapshot")
    wl = assign_slos(wl, "sa", seed=seed)
    model = resolve_timing(timing)
    kind = (
        "mixed"
        if chat_trace is not None and code_trace is not None
        else ("chat" if code_trace is None else "code")
    )
    label = name or f"sa-{kind}-n{n}-b{batch_size}-s{seed}" + ("-cached" if cache else "")
    cluster = Cluster(mode="static", max_batch_size=batch_size, kv_capacity_tokens=1 << 40)
    settings: dict[str, Any] = {"batch_size": batch_size, "seed": seed, "max_tokens": max_tokens}
    if cache:
        settings["cache"] = True
    return Instance(label, wl, cluster, model, problem="sa-ordering", settings=settings)


def build(
    *,
    n: int,
    batch_size: int,
    seed: int,
    trace: str | None = None,
    task: str = "mixed",
    timing: str = "sa-qwen2.5-7b-v100",
    cache: bool = False,
    **reading: Any,
) -> Instance:
    """An SA-ordering snapshot: ``task`` says what the requests are, ``trace`` where they come from.

    ``task="mixed"`` takes half chat requests from Azure conv 2023 and half code requests from
    Azure code 2023 (the paper's mixed data set) and accepts no ``trace``; ``"chat"`` or
    ``"code"`` takes every request from ``trace`` (default: the Azure trace of that kind) with
    that task's SLO. The role of a trace comes from ``task``, never from its file name.
    ``cache=True`` gives the snapshot the prefix cache the trace's earlier requests left
    (:func:`sa_snapshot`; a trace with ``hash_ids``, such as ``mooncake_conversation``).
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    if task == "mixed":
        if trace is not None:
            raise ValueError(
                "a mixed snapshot takes its chat and code requests from the two Azure traces; "
                "to use one trace, say which task its requests are (chat or code)"
            )
        if cache:
            raise ValueError(
                "a mixed snapshot's Azure traces carry no prompt block ids, so it cannot have "
                "a given cache: use --task chat or code with a Mooncake trace"
            )
        return sa_snapshot(n, batch_size, seed=seed, timing=timing, **reading)
    chat, code = (
        (trace or "azure_conv_2023", None) if task == "chat" else (None, trace or "azure_code_2023")
    )
    return sa_snapshot(
        n,
        batch_size,
        seed=seed,
        chat_trace=chat,
        code_trace=code,
        timing=timing,
        cache=cache,
        **reading,
    )


PROBLEM = register_problem(
    Problem(
        name="sa-ordering",
        title="order and batch N queued requests (static batches of at most B); maximize G",
        objective=Objective(
            "G",
            "max",
            "slolab.sim.metrics:g_objective",
            "requests meeting their SLO divided by the sum of their latencies (1/s)",
        ),
        builder=build,
        options=(
            Option("n", int, 10, "queued requests", minimum=1),
            Option("batch_size", int, 4, "largest batch size B", flag="--batch"),
            Option(
                "task",
                str,
                "mixed",
                "request types: mixed (both Azure traces), chat or code",
                choices=TASKS,
            ),
            Option(
                "trace", str, None, "trace of the chat or code requests (with --task chat|code)"
            ),
            *READ_OPTIONS,
            Option("timing", str, "sa-qwen2.5-7b-v100", "timing preset"),
            Option("seed", int, 0, "seed of the cut, the mix and the SLO draws", minimum=0),
            Option(
                "cache",
                bool,
                False,
                "give the snapshot the prefix cache the trace's earlier requests left "
                "(cached_tokens; needs a trace with hash_ids, such as mooncake_conversation)",
            ),
        ),
        models=("sa-ordering", "sa-ordering-columns", "sa-ordering-bp"),
        aliases={
            "columns": "sa-ordering-columns:highs",
            "columns-cbc": "sa-ordering-columns:cbc",
            "bp": "sa-ordering-bp:highs",
        },
        heuristics=(
            Heuristic(
                "sa",
                "the SA paper's simulated annealing (paper defaults)",
                schedule="slolab.heuristics.sa_ordering:annealing_schedule",
            ),
            Heuristic(
                "fcfs",
                "input order, full batches",
                schedule="slolab.heuristics.sa_ordering:fcfs_schedule",
                baseline=True,
            ),
            Heuristic(
                "edf",
                "earliest SLO deadline first, full batches",
                schedule="slolab.heuristics.sa_ordering:edf_schedule",
                baseline=True,
            ),
            Heuristic(
                "sjf",
                "shortest predicted execution first, full batches",
                schedule="slolab.heuristics.sa_ordering:shortest_first_schedule",
                baseline=True,
            ),
        ),
        docs="sa_ordering.md",
        settings=("batch_size",),
    )
)


def _sa_anneal(problem: Any, *, seed: int) -> tuple[Any, Any]:
    """The SA paper's annealing (:func:`slolab.heuristics.sa_ordering.sa_order`): the warm
    start ``sa-ordering-bp`` takes."""
    from slolab.heuristics.sa_ordering import sa_order

    return sa_order(problem, seed=seed)


register_model_options("sa-ordering-bp", anneal=_sa_anneal)
