"""Instance builders: real traces to the instances each problem needs.

- :func:`serving_instance` — a stream of requests on a cluster (``problem="serving"``);
- :func:`sa_snapshot` — N queued requests for SA ordering (``problem="sa-ordering"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from slolab.instances import (
    Cluster,
    Instance,
    Workload,
    assign_slos,
    first_n,
    read_trace,
    scale_rate,
    trace_path,
)
from slolab.timing import TimingModel, preset


def resolve_timing(timing: str | TimingModel) -> TimingModel:
    """A timing model from a preset name (or the model itself)."""
    return preset(timing) if isinstance(timing, str) else timing


def resolve_trace(trace: str | Path) -> Path:
    """A trace file from a path or the name of a vendored trace."""
    p = Path(trace)
    if p.exists():
        return p
    try:
        return trace_path(str(trace))
    except (KeyError, ValueError) as exc:
        raise FileNotFoundError(
            f"no trace file {str(trace)!r} (and no vendored trace by that name: {exc})"
        ) from None


def serving_instance(
    trace: str | Path,
    *,
    seed: int,
    format: str | None = None,
    servers: int = 1,
    timing: str | TimingModel = "llama2-7b-h100",
    slos: str | None = "polyserve",
    slo_params: dict[str, Any] | None = None,
    rate: float | None = None,
    limit: int | None = None,
    mode: str = "colocated",
    prefill_servers: int = 0,
    kv_capacity_tokens: int = 200_000,
    max_batch_size: int = 256,
    max_batch_tokens: int = 2048,
    name: str | None = None,
) -> Instance:
    """A serving instance: a (rescaled, cut) real trace with SLOs on a cluster.

    Parameters
    ----------
    trace : path or vendored trace name
        Request trace (see :func:`slolab.instances.read_trace`).
    seed : int
        Seed of the SLO assignment.
    rate : float, optional
        Target mean arrival rate (req/s), by time compression of the trace.
    limit : int, optional
        Keep the first ``limit`` requests.
    """
    path = resolve_trace(trace)
    model = resolve_timing(timing)
    wl = read_trace(path, format=format, limit=limit)
    if limit is not None:
        wl = first_n(wl, limit)
    if rate is not None:
        wl = scale_rate(wl, rate)
    if slos:
        wl = assign_slos(wl, slos, seed=seed, timing=model, **(slo_params or {}))
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=kv_capacity_tokens,
        mode=mode,
        prefill_servers=prefill_servers,
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
    )
    label = name or f"{path.stem}-{len(wl)}"
    settings = {"seed": seed, "slos": slos or "none", "rate": rate if rate is not None else "trace"}
    return Instance(label, wl, cluster, model, problem="serving", settings=settings)


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
) -> Instance:
    """N queued requests (all at time 0) for the SA-ordering problem.

    Chat requests come from ``chat_trace`` (SLO: TTFT 10 s, TPOT 50 ms) and code requests
    from ``code_trace`` (SLO: e2e 30 s), half each when both are given (the paper's mixed
    dataset, shuffled with ``seed``). Each part is a run of consecutive trace requests starting
    at a seeded random position, restricted to ``prompt + output <= max_tokens`` (the paper
    keeps lengths under 2k for its latency predictor).

    References
    ----------
    SA-ordering paper, Sec. 5.1 (workloads, SLOs).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if chat_trace is None and code_trace is None:
        raise ValueError("give at least one of chat_trace and code_trace")
    rng = np.random.default_rng(seed)
    parts: list[tuple[Workload, np.ndarray, str]] = []
    n_chat = n if code_trace is None else (0 if chat_trace is None else n - n // 2)
    for trace, count, task in ((chat_trace, n_chat, "chat"), (code_trace, n - n_chat, "code")):
        if trace is None or count == 0:
            continue
        wl = read_trace(resolve_trace(trace))
        parts.append((wl, _snapshot_rows(wl, count, rng, max_tokens), task))
    prompt = np.concatenate([wl.prompt_tokens[rows] for wl, rows, _ in parts])
    output = np.concatenate([wl.output_tokens[rows] for wl, rows, _ in parts])
    tasks = np.concatenate([np.full(len(rows), t) for _, rows, t in parts])
    order = rng.permutation(n)
    wl = Workload(
        {
            "arrival_s": np.zeros(n),
            "prompt_tokens": prompt[order],
            "output_tokens": output[order],
            "task": tasks[order].astype(str),
        },
        source="sa-snapshot",
    )
    wl = assign_slos(wl, "sa", seed=seed)
    model = resolve_timing(timing)
    kind = (
        "mixed"
        if chat_trace is not None and code_trace is not None
        else ("chat" if code_trace is None else "code")
    )
    label = name or f"sa-{kind}-n{n}-b{batch_size}-s{seed}"
    cluster = Cluster(mode="static", max_batch_size=batch_size, kv_capacity_tokens=1 << 40)
    settings = {"batch_size": batch_size, "seed": seed, "max_tokens": max_tokens}
    return Instance(label, wl, cluster, model, problem="sa-ordering", settings=settings)


def slos_snapshot(
    trace: str | Path = "azure_conv_2023",
    *,
    new: int,
    running: int,
    seed: int,
    format: str | None = None,
    timing: str | TimingModel = "opt-13b-h100-slos",
    scenario: str = "chatbot",
    slack: str = "tight",
    kv_capacity_tokens: int | None = None,
    name: str | None = None,
) -> Instance:
    """One SLOs-Serve scheduler call cut from a real trace (``problem="slos-admission"``).

    A seeded run of ``running + new`` consecutive trace requests (lengths real, SLOs from the
    ``"slos-serve"`` scheme for ``scenario`` and ``slack``): the first ``running`` are decoding
    (each has emitted a seeded number of its tokens, at least one), the last ``new`` arrive at the
    call, one second after the last running request's arrival. KV capacity defaults to the
    running requests' needs plus 60% of the new ones' (prompt + output each), so memory binds.

    References
    ----------
    SLOs-Serve, Sec. 3.2.1 (the scheduler call: running requests are forced, new ones admitted).
    """
    from slolab.models.slos_admission import snapshot_instance

    if new < 1 or running < 0:
        raise ValueError(f"need new >= 1 and running >= 0, got new={new}, running={running}")
    model = resolve_timing(timing)
    wl = read_trace(resolve_trace(trace), format=format)
    wl = assign_slos(wl, "slos-serve", seed=seed, timing=model, scenario=scenario, slack=slack)
    rng = np.random.default_rng(seed)
    eligible = np.flatnonzero(wl.output_tokens >= 2)
    total = running + new
    if len(eligible) < total:
        raise ValueError(
            f"{wl.source}: only {len(eligible)} requests have >= 2 output tokens, need {total}"
        )
    start = int(rng.integers(0, len(eligible) - total + 1))
    rows = eligible[start : start + total]
    run_rows, new_rows = rows[:running], rows[running:]
    t_run = wl.arrival_s[run_rows] - (wl.arrival_s[run_rows[0]] if running else 0.0)
    call = (float(t_run[-1]) + 1.0) if running else 0.0
    out = wl.output_tokens[rows]
    generated = np.concatenate(
        [rng.integers(1, wl.output_tokens[run_rows]), np.zeros(new, dtype=np.int64)]
    )
    kv = wl.prompt_tokens[rows] + out
    capacity = kv_capacity_tokens
    if capacity is None:
        capacity = int(kv[:running].sum() + 0.6 * kv[running:].sum())
    label = name or f"slos-{Path(str(trace)).stem.replace('_', '-')}-new{new}-run{running}-s{seed}"
    return snapshot_instance(
        label,
        call,
        np.concatenate([t_run, np.full(new, call)]),
        wl.prompt_tokens[rows],
        out,
        wl["ttft_slo_s"][rows],
        wl["tpot_slo_s"][rows],
        model,
        cluster=Cluster(
            servers=1, kv_capacity_tokens=capacity, max_batch_size=max(total, 1), max_batch_tokens=0
        ),
        running=np.arange(total) < running,
        remaining_prefill_tokens=np.concatenate(
            [np.zeros(running, dtype=np.int64), wl.prompt_tokens[new_rows]]
        ),
        generated_tokens=generated,
        kv_capacity_tokens=capacity,
    )


def slos_snapshots_from_simulation(
    scenario: str = "chatbot",
    *,
    seed: int,
    n: int = 300,
    rate: float | None = None,
    min_new: int = 1,
    min_running: int = 0,
    timing: str | TimingModel = "opt-13b-h100-slos",
    slack: str = "tight",
) -> list[Instance]:
    """Scheduler calls captured from an online SLOs-Serve run, as admission instances.

    Simulates ``n`` requests of a SLOs-Serve scenario (one replica, optionally rescaled to
    ``rate`` req/s) under :class:`slolab.heuristics.slos_serve.SLOsServePolicy`, keeps every
    scheduler call with at least ``min_new`` new and ``min_running`` admitted requests, and turns
    each into an ``"slos-admission"`` instance: the admitted requests as running (their prompt
    progress and generated tokens at the call), the undecided ones as new, and the server's KV
    capacity. The instance keeps the paper's batch duration (the tightest TPOT in play), not
    the shorter batch the online policy may have chosen: B1's decode cadence meets every token
    deadline only when each TPOT is a multiple of the batch duration (docs/slos_serve.md), and
    the harness checks every solver objective against its replay.

    References
    ----------
    SLOs-Serve, Sec. 3.2.1 (the per-call admission problem).
    """
    from slolab.harness.scenarios import scenario_instance
    from slolab.heuristics.baselines import LeastLoaded
    from slolab.heuristics.slos_serve import SLOsServePolicy
    from slolab.models.slos_admission import snapshot_instance
    from slolab.sim import run

    inst = scenario_instance(
        scenario, seed=seed, replicas=1, n=n, slack=slack, rate=rate, timing=timing
    )
    policy = SLOsServePolicy(capture_calls=True)
    run(inst, policy, LeastLoaded(), seed=seed, record_iterations=False)
    wl = inst.workload
    out: list[Instance] = []
    for k, (rows, problem) in enumerate(policy.captured_calls):
        running = np.asarray(problem.running, dtype=bool)
        if (~running).sum() < min_new or running.sum() < min_running:
            continue
        idx = np.asarray(rows)
        call = float(problem.call_time_s)
        remaining = np.asarray(problem.remaining_prefill_tokens, dtype=np.int64)
        deadline = np.where(
            remaining > 0,
            call + np.nan_to_num(np.asarray(problem.prefill_deadline_s, dtype=float)),
            wl.arrival_s[idx] + wl["ttft_slo_s"][idx],
        )
        out.append(
            snapshot_instance(
                f"slos-sim-{scenario}-s{seed}-call{k}",
                call,
                wl.arrival_s[idx],
                wl.prompt_tokens[idx],
                wl.output_tokens[idx],
                wl["ttft_slo_s"][idx],
                wl["tpot_slo_s"][idx],
                inst.timing,
                cluster=Cluster(
                    servers=1,
                    kv_capacity_tokens=int(problem.kv_capacity_tokens),
                    max_batch_size=max(len(idx), 1),
                    max_batch_tokens=0,
                ),
                running=running,
                remaining_prefill_tokens=remaining,
                generated_tokens=np.asarray(problem.generated_tokens, dtype=np.int64),
                prefill_deadline_s=deadline,
                kv_capacity_tokens=int(problem.kv_capacity_tokens),
            )
        )
    return out
