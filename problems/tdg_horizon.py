"""The tdg-horizon problem: a short window of a trace on one server; maximize its total TDG.

Exact model ``tdg-horizon`` (iteration-indexed MILP, CP-SAT, brute force); heuristics: ProServe's
SlideBatching and the baselines of its evaluation, run online on the window. Also the ProServe
serving setup every ProServe study shares (:func:`proserve_instance`). See docs/proserve.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.problems.registry import Heuristic, Objective, Option, Problem, register_problem

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload
    from slolab.timing import TimingModel

#: ProServe's SLOs (its text gives no values): SLOs-Serve's tight SLOs (TTFT 3x the zero-load
#: prefill, TPOT 50 ms), then ProServe's priorities.
PROSERVE_SLOS = "slos-serve+proserve"
PROSERVE_SLO_PARAMS = {"slack": "tight"}
#: Offered load (arrival rate times the mean alone-service time) of the named window loads.
LOADS = {"low": 0.5, "medium": 1.0, "high": 2.0}
#: ``max_output_tokens`` value that keeps every request's output length as the trace gives it.
KEEP_OUTPUTS = 0
#: The policies of ProServe's single-server comparison (Sec. 5.1), by their slolab names.
PROSERVE_POLICIES = (
    "slide-batching",
    "vllm-fcfs",
    "sarathi-fcfs",
    "sarathi-priority",
    "fairbatching",
    "weighted-vtc",
)


def resolve_proserve_timing(timing: str | TimingModel) -> TimingModel:
    """``"proserve-affine"`` is :func:`slolab.models.proserve.proserve_timing`; other names are
    presets."""
    from slolab.timing import resolve_timing

    if timing == "proserve-affine":
        from slolab.models.proserve import proserve_timing

        return proserve_timing()
    return resolve_timing(timing)


def read_block_trace(trace: str | Path, format: str | None = None) -> Workload:
    """A trace with its prompts' block ids (``hash_ids``), for a given cache: Mooncake only
    (the other formats carry no block ids); anything else is refused in one line."""
    from slolab.instances import read_trace, resolve_trace
    from slolab.instances.readers import detect_format

    path = resolve_trace(trace)
    fmt = format or detect_format(path)
    if fmt != "mooncake":
        raise ValueError(
            f"a given cache needs a trace with hash_ids (Mooncake, e.g. "
            f"'mooncake_conversation'); {path.name} has the format {fmt!r}"
        )
    return read_trace(path, format=fmt, keep_hash_ids=True)


def proserve_workload(
    trace: str | Path,
    *,
    seed: int,
    timing: TimingModel,
    format: str | None = None,
    cache: bool = False,
) -> tuple[Workload, dict[str, float]]:
    """A whole trace with ProServe's SLOs and priorities, and the data set's TDG weights.

    SLOs: SLOs-Serve's tight ones (TTFT 3x the request's zero-load prefill time, TPOT 50 ms;
    ProServe gives no values), then each request high priority (weight 2) with probability 1/2,
    else 1 (ProServe Sec. 5.1 "Details"). Weights:
    ``w_p / w_d`` = mean input / mean output length of the whole trace (Sec. 5.1). With
    ``cache`` the trace keeps its block ids (:func:`read_block_trace`).
    """
    from slolab.instances import read_trace, resolve_trace, tdg_token_weights
    from slolab.problems.serving import assign_schemes

    if cache:
        wl = read_block_trace(trace, format)
    else:
        wl = read_trace(resolve_trace(trace), format=format)
    weights = tdg_token_weights(wl)
    wl = assign_schemes(wl, PROSERVE_SLOS, seed=seed, timing=timing, params=PROSERVE_SLO_PARAMS)
    return wl, weights


def proserve_instance(
    trace: str | Path = "azure_conv_2023",
    *,
    seed: int,
    n: int | None = None,
    rate: float | None = None,
    servers: int = 1,
    mode: str = "colocated",
    prefill_servers: int = 0,
    timing: str | TimingModel = "proserve-affine",
    kv_capacity_tokens: int = 200_000,
    format: str | None = None,
) -> Instance:
    """A ProServe serving instance: the first ``n`` requests of a trace at ``rate`` req/s.

    SLOs-Serve's tight SLOs plus ProServe priorities (:data:`PROSERVE_SLOS`), the TDG weights of the whole
    trace (ProServe Sec. 5.1: the data set's mean input / output length), the affine ProServe
    timing unless another is given.
    """
    import dataclasses

    from slolab.instances import read_trace, resolve_trace, tdg_token_weights
    from slolab.problems.serving import serving_instance

    inst = serving_instance(
        trace,
        seed=seed,
        format=format,
        servers=servers,
        timing=resolve_proserve_timing(timing),
        slos=PROSERVE_SLOS,
        slo_params=PROSERVE_SLO_PARAMS,
        rate=rate,
        limit=n,
        mode=mode,
        prefill_servers=prefill_servers,
        kv_capacity_tokens=kv_capacity_tokens,
        # the horizon models charge every prompt token's prefill: the replay caches nothing
        prefix_cache="off",
    )
    weights = tdg_token_weights(read_trace(resolve_trace(trace), format=format))
    return dataclasses.replace(inst, settings={**inst.settings, **weights})


def alone_service_s(timing: TimingModel, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Time each request takes alone on an idle server: its prefill, then ``o - 1`` decodes."""
    from slolab.instances import idle_decode_s, zero_load_prefill_s

    steps = np.maximum(output - 1, 0)
    return zero_load_prefill_s(timing, prompt) + steps * idle_decode_s(timing, prompt, output)


def horizon_window(
    trace: str | Path = "azure_conv_2023",
    *,
    n: int,
    seed: int,
    load: str = "medium",
    rate: float | None = None,
    max_output_tokens: int = 4,
    timing: str | TimingModel = "proserve-affine",
    format: str | None = None,
    max_iterations: int | None = None,
    name: str | None = None,
    cache: bool = False,
) -> Instance:
    """``n`` consecutive requests of a trace (seeded start) on one empty server.

    Arrivals keep the trace's gaps, rescaled so the window's mean rate is ``rate`` req/s, or, by
    default, the rate at which the offered load ``rate * mean alone-service time`` is
    :data:`LOADS` ``[load]`` (0.5, 1 or 2). Outputs are cut to ``max_output_tokens`` tokens (the
    window keeps every request's prompt and first tokens; the horizon stays small enough to
    solve); ``max_output_tokens = 0`` keeps the trace's output lengths
    (:data:`KEEP_OUTPUTS`). SLOs, priorities and weights as :func:`proserve_workload`.

    ``cache=True`` gives the window the cache its trace's earlier requests left
    (:func:`slolab.instances.prefix_state.cached_before`: an unbounded LRU replay of every request
    arriving before the window, 512-token blocks): each request's ``cached_tokens``, which
    every tdg-horizon model and the engine take as given (docs/engine.md, "A snapshot's given
    cache"). It needs a trace with ``hash_ids`` (Mooncake); off, the window is as before.

    References
    ----------
    ProServe, Sec. 5.1 (rate scaling of timestamped traces; priorities; TDG weights).
    """
    from slolab.instances import Cluster, Instance, Workload

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if max_output_tokens < 0:
        raise ValueError(
            f"max_output_tokens must be >= 1, or {KEEP_OUTPUTS} to keep the trace's outputs, "
            f"got {max_output_tokens}"
        )
    if load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}, got {load!r}")
    model = resolve_proserve_timing(timing)
    wl, weights = proserve_workload(trace, seed=seed, timing=model, format=format, cache=cache)
    if len(wl) < n:
        raise ValueError(f"{wl.source}: {len(wl)} requests, need {n}")
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, len(wl) - n + 1))
    rows = np.arange(start, start + n)
    prompt = wl.prompt_tokens[rows]
    output = wl.output_tokens[rows]
    if max_output_tokens != KEEP_OUTPUTS:
        output = np.minimum(output, max_output_tokens)
    if rate is None:
        rate = LOADS[load] / float(alone_service_s(model, prompt, output).mean())
    if not rate > 0:
        raise ValueError(f"rate must be > 0 req/s, got {rate}")
    gaps = np.diff(wl.arrival_s[rows])
    span = (n - 1) / rate
    arrival = np.zeros(n)
    if n > 1:
        scaled = gaps * (span / gaps.sum()) if gaps.sum() > 0 else np.full(n - 1, span / (n - 1))
        arrival[1:] = np.cumsum(scaled)
    columns: dict[str, Any] = {
        "arrival_s": arrival,
        "prompt_tokens": prompt,
        "output_tokens": output,
    }
    for key in ("ttft_slo_s", "tpot_slo_s", "e2e_slo_s", "priority", "tier"):
        columns[key] = wl[key][rows]
    if cache:
        from slolab.instances.prefix_state import cached_before
        from slolab.instances.records import CACHED_COLUMN

        columns[CACHED_COLUMN] = cached_before(wl, rows)
    window = Workload(columns, source=f"{wl.source} rows {start}..{start + n - 1}")
    need = int((prompt + output).sum())
    cluster = Cluster(servers=1, kv_capacity_tokens=max(200_000, need))
    settings: dict[str, Any] = {
        **weights,
        "seed": seed,
        "load": load,
        "rate": float(rate),
        "max_output_tokens": max_output_tokens,
    }
    if max_iterations is not None:
        settings["max_iterations"] = int(max_iterations)
    if cache:
        settings["given_cache"] = True
    cached = "-cached" if cache else ""
    label = name or f"tdg-{Path(str(trace)).stem.replace('_', '-')}-n{n}-{load}{cached}-s{seed}"
    return Instance(label, window, cluster, model, problem="tdg-horizon", settings=settings)


def build(
    *,
    seed: int,
    trace: str = "azure_conv_2023",
    n: int = 4,
    load: str = "medium",
    rate: float | None = None,
    max_output_tokens: int = 4,
    max_iterations: int | None = None,
    timing: str = "proserve-affine",
    format: str | None = None,
    cache: bool = False,
) -> Instance:
    """A tdg-horizon window (see :func:`horizon_window`)."""
    return horizon_window(
        trace,
        n=n,
        seed=seed,
        load=load,
        rate=rate,
        max_output_tokens=max_output_tokens,
        timing=timing,
        format=format,
        max_iterations=max_iterations,
        cache=cache,
    )


def online(policy: str) -> Any:
    """``instance -> (policy, None)``: a registered policy alone on the window's one server."""

    def make(instance: Instance) -> tuple[Any, Any]:
        from slolab.heuristics.policies import make_policy

        return make_policy(policy, instance), None

    make.__name__ = f"{policy.replace('-', '_')}_online"
    return make


def slide_ablation(order: str) -> Any:
    """``instance -> (policy, None)``: SlideBatching with one ordering only (Sec. 5.4)."""

    def make(instance: Instance) -> tuple[Any, Any]:
        from slolab.heuristics.proserve import SlideBatching, SlideBatchingParams

        return SlideBatching(SlideBatchingParams(order=order)), None

    make.__name__ = f"slide_{order}_online"
    return make


_DESCRIPTIONS = {
    "slide-batching": "ProServe's SlideBatching (Sec. 4.2), online",
    "vllm-fcfs": "vLLM-FCFS: prefill first, FCFS (Sec. 5.1)",
    "sarathi-fcfs": "Sarathi-FCFS: token budget, decode first, FCFS (Sec. 5.1)",
    "sarathi-priority": "Sarathi-Priority: decode first, then by priority and arrival (Sec. 5.1)",
    "fairbatching": "FairBatching: near-deadline decodes, prefills by deadline (Sec. 5.1)",
    "weighted-vtc": "Weighted VTC: weighted token fairness between priorities (Sec. 5.1)",
}

PROBLEM = register_problem(
    Problem(
        name="tdg-horizon",
        title="a short trace window on one server: every iteration's composition; maximize TDG",
        objective=Objective(
            "TDG",
            "max",
            "slolab.sim.metrics:tdg_objective",
            "token-level deadline-aware gain of the window (ProServe Eq. 3)",
        ),
        builder=build,
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            Option("format", str, None, "trace format (default: detected)"),
            Option("n", int, 4, "requests in the window", minimum=1),
            Option(
                "load",
                str,
                "medium",
                "offered load of the window: low 0.5, medium 1, high 2 (rate x alone service)",
                choices=tuple(LOADS),
            ),
            Option("rate", float, None, "arrival rate of the window (req/s; overrides --load)"),
            Option(
                "max_output_tokens",
                int,
                4,
                "output tokens kept per request (0: the trace's own output lengths)",
            ),
            Option(
                "max_iterations",
                int,
                None,
                "iterations the exact model may use (default: output tokens + requests)",
            ),
            Option("timing", str, "proserve-affine", "timing: proserve-affine or a preset"),
            Option("seed", int, 0, "seed of the cut, the SLO and the priority draws", minimum=0),
            Option(
                "cache",
                bool,
                False,
                "give the window the prefix cache its trace's earlier requests left "
                "(cached_tokens; needs a Mooncake trace with hash_ids)",
            ),
        ),
        models=(
            "tdg-horizon",
            "tdg-horizon-bound",
            "tdg-horizon-columns",
            "tdg-horizon-columns-bp",
        ),
        aliases={
            "bound": "tdg-horizon-bound:highs",
            "columns": "tdg-horizon-columns:highs",
            "columns-bp": "tdg-horizon-columns-bp:highs",
        },
        heuristics=(
            Heuristic(
                "lns",
                "clairvoyant search over steerings of the online policies, each candidate "
                "simulated (honours --time-limit)",
                schedule="slolab.heuristics.tdg_search:lns_schedule",
            ),
            Heuristic(
                "slide-batching", _DESCRIPTIONS["slide-batching"], policy=online("slide-batching")
            ),
            Heuristic(
                "slide-deadline",
                "SlideBatching w/ only deadline (ablation, Sec. 5.4)",
                policy=slide_ablation("deadline"),
            ),
            Heuristic(
                "slide-density",
                "SlideBatching w/ only density (ablation, Sec. 5.4)",
                policy=slide_ablation("density"),
            ),
            *(
                Heuristic(name, _DESCRIPTIONS[name], policy=online(name), baseline=True)
                for name in PROSERVE_POLICIES[1:]
            ),
        ),
        docs="proserve.md",
        settings=("load", "w_prefill", "w_decode"),
    )
)
