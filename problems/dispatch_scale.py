"""The dispatch-scale problem (HyperFlexis): a short trace window on an elastic co-located
cluster; decide routing, every worker's iterations and when workers are switched on, trading
attainment against worker-seconds.

Exact model ``dispatch-scale`` (MILP, CP-SAT, exhaustive search) and its Pareto front
(``slolab pareto``), the relaxation bound ``dispatch-bound`` (method ``bound``) and
``dispatch-lns`` (the search beside that bound); heuristics: the large-neighbourhood search
``lns`` (:func:`lns_schedule`), HyperFlexis's dispatcher with and without its scaler and with
priority mapping; baselines: round robin (Llumnix-style), SCORPIO with round robin, and the
SA-ordering scheduler behind round robin. Also the paper's task mixes (:func:`task_mix_workload`),
which the studies and ``slolab simulate --slos hyperflexis`` share. See docs/hyperflexis.md.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.models.dispatch_lns import START_POLICIES, StartRun, lives_window, lns
from slolab.models.dispatch_scale import ScaleWindow, decision_schedule
from slolab.problems.registry import (
    Heuristic,
    Objective,
    Option,
    Problem,
    register_model_options,
    register_problem,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Workload
    from slolab.sim.outcome import Outcome
    from slolab.sim.schedule import Schedule

PROBLEM_NAME = "dispatch-scale"

#: HyperFlexis Table 1 lengths: (input mean, input sd, output mean, output sd) in tokens.
TASK_LENGTHS: dict[str, tuple[float, float, float, float]] = {
    "medical_qa": (32.57, 10.32, 38.92, 16.83),
    "tldr_content_gen": (44.38, 6.58, 96.04, 35.03),
    "tldr_headline_gen": (121.82, 35.04, 13.59, 6.55),
    "wikisql": (643.22, 337.01, 27.82, 4.84),
    "gsm8k": (51.44, 15.78, 90.13, 26.73),
    "sharegpt": (259.19, 324.88, 207.79, 234.99),
}
#: The vendored traces a task's requests are drawn from (pooled).
TASK_TRACES = ("azure_conv_2023", "azure_code_2023")
#: A trace row stands for a task when both lengths lie within this many standard deviations of
#: the task's Table 1 means.
LENGTH_BOX_SD = 2.0
#: The timing model of the HyperFlexis studies: Eqs. 1-2 with DistServe's coefficients.
HYPERFLEXIS_TIMING = "opt-13b-a100-hyperflexis"


def task_pool(task: str, *, box_sd: float = LENGTH_BOX_SD) -> tuple[np.ndarray, np.ndarray]:
    """``(prompt, output)`` of every row of :data:`TASK_TRACES` that stands for ``task``: both
    lengths within ``box_sd`` standard deviations of the task's Table 1 means."""
    from slolab.instances import read_trace, resolve_trace

    if task not in TASK_LENGTHS:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASK_LENGTHS)}")
    p_mean, p_sd, o_mean, o_sd = TASK_LENGTHS[task]
    prompts, outputs = [], []
    for trace in TASK_TRACES:
        wl = read_trace(resolve_trace(trace))
        p, o = wl.prompt_tokens, wl.output_tokens
        keep = (np.abs(p - p_mean) <= box_sd * p_sd) & (np.abs(o - o_mean) <= box_sd * o_sd)
        prompts.append(p[keep])
        outputs.append(o[keep])
    return np.concatenate(prompts), np.concatenate(outputs)


def task_mix_workload(
    task_set: str = "4-task",
    *,
    per_task: int = 300,
    qps: float,
    seed: int,
    max_output_tokens: int | None = None,
) -> Workload:
    """A HyperFlexis task mix cut from the vendored traces, with Table 1's SLOs.

    Each task of the set (Table 1) gets ``per_task`` requests drawn, seeded, from the rows of
    the Azure conv and code 2023 traces whose prompt and output lengths both lie within
    :data:`LENGTH_BOX_SD` standard deviations of the task's Table 1 means (without replacement
    when the pool is large enough, with replacement otherwise); each task's requests arrive as
    a Poisson process at ``qps / tasks`` requests per second (each task contributes equally),
    merged in time. SLOs: the ``hyperflexis`` scheme on the ``task`` column.

    Parameters
    ----------
    task_set : {"4-task", "2-task"}
        HyperFlexis Sec. 7.3's two sets.
    per_task : int
        Requests per task (the paper: 300).
    qps : float
        Total arrival rate (req/s).
    seed : int
        Seed of the draws and the arrivals.
    max_output_tokens : int, optional
        Cut every output to this many tokens (for exact-model windows).

    References
    ----------
    HyperFlexis, Sec. 7.3 and Table 1.
    """
    from slolab.instances import Workload, assign_slos
    from slolab.instances.slos import HYPERFLEXIS_TASK_SETS

    if task_set not in HYPERFLEXIS_TASK_SETS:
        raise ValueError(
            f"task_set must be one of {', '.join(HYPERFLEXIS_TASK_SETS)}, got {task_set!r}"
        )
    if isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 1:
        raise ValueError(f"per_task must be an integer >= 1, got {per_task!r}")
    if not (math.isfinite(qps) and qps > 0):
        raise ValueError(f"qps must be a finite number > 0, got {qps}")
    tasks = HYPERFLEXIS_TASK_SETS[task_set]
    rng = np.random.default_rng(seed)
    rate = qps / len(tasks)
    arrival, prompt, output, label = [], [], [], []
    for task in tasks:
        p, o = task_pool(task)
        if not len(p):
            raise ValueError(f"no row of {', '.join(TASK_TRACES)} stands for task {task!r}")
        rows = rng.choice(len(p), size=per_task, replace=len(p) < per_task)
        arrival.append(np.cumsum(rng.exponential(1.0 / rate, size=per_task)))
        prompt.append(p[rows])
        output.append(o[rows])
        label += [task] * per_task
    order = np.argsort(np.concatenate(arrival), kind="stable")
    out = np.concatenate(output)[order]
    if max_output_tokens is not None:
        out = np.minimum(out, max_output_tokens)
    wl = Workload(
        {
            "arrival_s": np.concatenate(arrival)[order],
            "prompt_tokens": np.concatenate(prompt)[order],
            "output_tokens": out,
            "task": np.array(label)[order],
        },
        source=f"hyperflexis {task_set} from {' + '.join(TASK_TRACES)}",
    )
    return assign_slos(wl, "hyperflexis", seed=seed)


def mix_instance(
    task_set: str = "4-task",
    *,
    qps: float,
    seed: int,
    per_task: int = 300,
    servers: int = 4,
    mode: str = "colocated",
    prefill_servers: int = 0,
    timing: str = HYPERFLEXIS_TIMING,
    startup: str = "d2d",
    startup_preset: str | None = None,
    max_servers: int = 8,
    kv_capacity_tokens: int = 200_000,
    max_batch_size: int = 256,
) -> Instance:
    """A serving instance of a HyperFlexis task mix (the studies' setting).

    ``servers`` start on (``prefill_servers`` of them prefill when ``mode`` is
    ``"disaggregated"``); a worker switched on serves after the start-up delay of
    ``startup_preset`` (default: the timing preset's own) for weights from ``startup``. No cap
    on batch tokens: workers prefill whole prompts, as vLLM-Ascend does.
    """
    import dataclasses

    from slolab.instances import Cluster, Instance
    from slolab.timing import resolve_timing
    from slolab.timing.startup import startup_delay_s

    model = resolve_timing(timing)
    wl = task_mix_workload(task_set, per_task=per_task, qps=qps, seed=seed)
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=kv_capacity_tokens,
        mode=mode,
        prefill_servers=prefill_servers,
        max_batch_size=max_batch_size,
        max_batch_tokens=0,
        startup_s=startup_delay_s(startup_preset or timing, startup),
    )
    settings = {
        "seed": seed,
        "qps": qps,
        "task_set": task_set,
        "max_servers": max_servers,
        "startup": startup,
        "startup_preset": startup_preset or timing,
    }
    inst = Instance(f"hyperflexis-{task_set}-q{qps:g}-s{seed}", wl, cluster, model)
    return dataclasses.replace(inst, settings=settings)


def build(
    *,
    seed: int,
    task_set: str = "4-task",
    n: int = 4,
    rate: float = 8.0,
    max_output_tokens: int = 3,
    slo_scale: float = 1.0,
    servers: int = 1,
    max_servers: int = 2,
    slot_s: float = 0.25,
    startup: str = "d2d",
    startup_preset: str | None = None,
    cost_weight: float = 0.25,
    timing: str = HYPERFLEXIS_TIMING,
    trace: str | None = None,
    format: str | None = None,
    load: str | None = None,
    cache: bool = False,
) -> Instance:
    """A dispatch-scale window: ``n`` consecutive requests of a task mix (or of a trace).

    The stream is :func:`task_mix_workload` at ``rate`` req/s (``trace``: that trace at its own
    times rescaled to ``rate``, with the ``hyperflexis`` SLOs of the 4-task set); the window
    starts at a seeded position, its arrivals are shifted to start at 0, outputs are cut to
    ``max_output_tokens``, and every SLO is multiplied by ``slo_scale``. The cluster starts
    with ``servers`` ready workers and may switch on up to ``max_servers`` in all, at scaling
    slots of ``slot_s`` seconds, each serving after the start-up delay of ``startup_preset``
    (default: the timing preset's) for weights from ``startup``; ``cost_weight`` prices a
    worker-second in attainment.

    ``max_output_tokens=0`` keeps the trace's outputs (trace-scale windows). ``load`` (low,
    medium or high) replaces ``rate``: the stream is cut at the rate whose offered work,
    ``rate x`` the mean work per request (its prefill alone plus its decode tokens' marginal
    terms, :func:`request_work_s`), is :data:`LOADS` ``[load]`` of ``max_servers`` workers.

    ``cache`` gives the window the prefix cache its trace's earlier requests left (the column
    ``cached_tokens``, :func:`slolab.instances.prefix_state.cached_before`, 512-token blocks,
    unbounded): it needs a ``trace`` with prompt block ids (Mooncake's ``hash_ids``).
    """
    from slolab.instances import Cluster, Instance, Workload, assign_slos, read_workload
    from slolab.instances import resolve_trace as resolve
    from slolab.sim.metrics import COST_WEIGHT_KEY
    from slolab.timing import resolve_timing
    from slolab.timing.startup import startup_delay_s

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    for name, value in (("rate", rate), ("slo_scale", slo_scale), ("slot_s", slot_s)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not (math.isfinite(cost_weight) and cost_weight >= 0):
        raise ValueError(f"cost_weight must be a finite number >= 0, got {cost_weight}")
    if max_output_tokens < 0:
        raise ValueError(
            f"max_output_tokens must be >= 0 (0: keep the trace's), got {max_output_tokens}"
        )
    if load is not None and load not in LOADS:
        raise ValueError(f"load must be one of {', '.join(LOADS)}, got {load!r}")
    if not 1 <= servers <= max_servers:
        raise ValueError(f"need 1 <= servers <= max_servers, got {servers} and {max_servers}")
    if cache and trace is None:
        raise ValueError(
            "cache needs a trace with prompt block ids (hash_ids), for example "
            "trace='mooncake_conversation'; the task mixes have none"
        )
    model = resolve_timing(timing)
    if load is not None:
        rate = _rate_at_load(model, LOADS[load], max_servers, trace, task_set, n, seed, format)
    if trace is None:
        stream = task_mix_workload(task_set, per_task=max(n, 8), qps=rate, seed=seed)
        source = stream.source
    else:
        stream = read_workload(
            resolve(trace), rate=rate, seed=seed, format=format, keep_hash_ids=cache
        )
        stream = assign_slos(stream, "hyperflexis", seed=seed, task=task_set)
        source = str(Path(str(trace)).name)
    if len(stream) < n:
        raise ValueError(f"{source}: {len(stream)} requests, need {n}")
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, len(stream) - n + 1))
    rows = np.arange(start, start + n)
    arrival = stream.arrival_s[rows] - stream.arrival_s[rows[0]]
    columns: dict[str, Any] = {
        "arrival_s": arrival,
        "prompt_tokens": stream.prompt_tokens[rows],
        "output_tokens": (
            np.minimum(stream.output_tokens[rows], max_output_tokens)
            if max_output_tokens
            else stream.output_tokens[rows]
        ),
        "ttft_slo_s": stream["ttft_slo_s"][rows] * slo_scale,
        "tpot_slo_s": stream["tpot_slo_s"][rows] * slo_scale,
        "e2e_slo_s": stream["e2e_slo_s"][rows],
        "tier": stream["tier"][rows],
        "task": stream["task"][rows],
    }
    if cache:
        from slolab.instances.prefix_state import cached_before
        from slolab.instances.records import CACHED_COLUMN

        columns[CACHED_COLUMN] = cached_before(stream, rows)
    window = Workload(columns, source=f"{source} rows {start}..{start + n - 1}")
    need = int((window.prompt_tokens + window.output_tokens).sum())
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=max(200_000, need),
        max_batch_tokens=0,
        startup_s=startup_delay_s(startup_preset or timing, startup),
    )
    settings: dict[str, Any] = {
        "seed": seed,
        "task_set": task_set,
        "rate": float(rate),
        "slo_scale": float(slo_scale),
        "max_output_tokens": max_output_tokens,
        "max_servers": max_servers,
        "slot_s": float(slot_s),
        "startup": startup,
        "startup_preset": startup_preset or timing,
        COST_WEIGHT_KEY: float(cost_weight),
        "definition": "deadline",
    }
    if load is not None:
        settings["load"] = load
    if cache:
        settings["cache"] = True
    label = f"ds-{task_set}-n{n}-r{rate:g}-w{servers}-{max_servers}-s{seed}"
    if cache:
        label += "-cache"
    return Instance(label, window, cluster, model, problem=PROBLEM_NAME, settings=settings)


#: Offered work over the capacity of ``max_servers`` workers, per named load of ``--load``.
LOADS = {"low": 0.3, "medium": 0.6, "high": 0.9}


def request_work_s(timing: Any, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """Work of each request (s): its prefill alone (Eq. 1) plus its decode tokens' marginal
    terms (Eq. 2 without the per-step intercept, context growing by one per token); the work
    the trace-scale relaxation counts (docs/hyperflexis.md)."""
    from slolab.timing.forms import phase_affine

    view = phase_affine(timing)
    if view is None:
        raise ValueError("--load needs a latency model affine once the phases are known")
    p = np.asarray(prompt, dtype=float)
    o = np.asarray(output, dtype=float)
    prefill = np.array([view.any_s + view.prefill_s + view.prefill_part_s(int(x)) for x in p])
    # sum over k = 2..o of (token term + kv (p + k - 1)) = (o - 1) token + kv ((o - 1) p + o (o - 1) / 2)
    decode = (o - 1) * view.decode_token_s + view.kv_s * ((o - 1) * p + o * (o - 1) / 2.0)
    return prefill + decode


def _rate_at_load(
    timing: Any,
    load: float,
    workers: int,
    trace: str | None,
    task_set: str,
    n: int,
    seed: int,
    format: str | None,
) -> float:
    """Arrival rate (req/s) at which the stream's mean request work fills ``load`` of
    ``workers`` workers."""
    from slolab.instances import read_workload
    from slolab.instances import resolve_trace as resolve

    if trace is None:
        stream = task_mix_workload(task_set, per_task=max(n, 8), qps=1.0, seed=seed)
    else:
        stream = read_workload(resolve(trace), rate=1.0, seed=seed, format=format)
    work = request_work_s(timing, stream.prompt_tokens, stream.output_tokens)
    return load * workers / float(work.mean())


def online(
    policy: str,
    *,
    router: str | None = None,
    decode_router: str | None = None,
    scaler: str | None = None,
) -> Any:
    """``instance -> Scheduler``: the registered policy ``policy``
    (:func:`slolab.heuristics.policies.make_scheduler`) on the window's cluster as it is,
    behind the registered ``router`` (None: the policy's own), with ``decode_router`` on a
    disaggregated cluster (None: the policy's own) and the registered ``scaler``
    (:func:`slolab.heuristics.scalers.make_scaler`), which acts every scaling slot (the
    instance's ``slot_s`` setting, else 1 s) up to the instance's ``max_servers`` setting."""

    def make(instance: Instance) -> Any:
        import dataclasses

        from slolab.heuristics.policies import make_scheduler
        from slolab.heuristics.scalers import make_scaler

        disaggregated = instance.cluster.mode == "disaggregated"
        made = make_scheduler(
            policy,
            instance,
            router=router,
            decode_router=decode_router if disaggregated else None,
        )
        if scaler is None:
            return made
        settings = instance.settings
        most = int(settings.get("max_servers", instance.cluster.servers))
        return dataclasses.replace(
            made,
            scaler=make_scaler(
                scaler,
                max_servers=max(most, instance.cluster.servers),
                interval_s=float(settings.get("slot_s", 1.0)),
            ),
        )

    parts = (policy, router, scaler)
    make.__name__ = "_".join(p.replace("-", "_") for p in parts if p is not None) + "_online"
    return make


def online_scheduler(name: str, instance: Instance) -> Any:
    """The :class:`slolab.heuristics.policies.Scheduler` of the problem's online heuristic
    ``name`` (``hyperflexis``, ``hyperflexis-scaling``, ``round-robin``, ...) on ``instance``;
    ValueError listing the known ones."""
    from slolab.problems.registry import resolve

    known = {h.name: h.policy for h in PROBLEM.heuristics if h.policy is not None}
    if name not in known:
        raise ValueError(
            f"{PROBLEM_NAME} has no online heuristic {name!r}; known: {', '.join(known)}"
        )
    return resolve(known[name])(instance)


PROBLEM = register_problem(
    Problem(
        name=PROBLEM_NAME,
        title=(
            "a trace window on an elastic cluster: routing, iterations and workers switched "
            "on; maximize attainment minus the price of the worker-seconds"
        ),
        objective=Objective(
            "utility",
            "max",
            "slolab.sim.metrics:attainment_minus_cost_objective",
            "attainment (deadline definition) minus cost_weight_per_server_s x worker-seconds "
            "(HyperFlexis Eqs. 3-4)",
        ),
        builder=build,
        options=(
            Option(
                "task_set",
                str,
                "4-task",
                "HyperFlexis task set (Table 1)",
                choices=("4-task", "2-task"),
            ),
            Option("n", int, 4, "requests in the window", minimum=1),
            Option("rate", float, 8.0, "arrival rate of the stream the window is cut from (req/s)"),
            Option(
                "max_output_tokens", int, 3, "output tokens kept per request (0: the trace's own)"
            ),
            Option("slo_scale", float, 1.0, "multiply every Table 1 SLO by this"),
            Option("servers", int, 1, "workers ready at time 0"),
            Option("max_servers", int, 2, "most workers, those switched on included"),
            Option("slot_s", float, 0.25, "scaling slot: workers switch on at its multiples (s)"),
            Option(
                "startup",
                str,
                "d2d",
                "where a switched-on worker loads its weights",
                choices=("disk", "host", "d2d"),
            ),
            Option(
                "startup_preset",
                str,
                None,
                "start-up preset (default: the timing preset's; hyperflexis-* are Table 2)",
            ),
            Option("cost_weight", float, 0.25, "attainment given up per worker-second"),
            Option("timing", str, HYPERFLEXIS_TIMING, "timing preset (Eqs. 1-2 form)"),
            Option("trace", str, None, "cut from this trace instead of the task mix"),
            Option("format", str, None, "trace format (default: detected)"),
            Option(
                "load",
                str,
                None,
                "instead of --rate: offered work 0.3, 0.6 or 0.9 of max_servers workers",
                choices=tuple(LOADS),
            ),
            Option(
                "cache",
                bool,
                False,
                "give the window the prefix cache the trace's earlier requests left (a trace "
                "with hash_ids: Mooncake)",
            ),
            Option("seed", int, 0, "seed of the draws, the arrivals and the cut", minimum=0),
        ),
        models=("dispatch-scale", "dispatch-bound", "dispatch-lns"),
        aliases={"bound": "dispatch-bound:highs"},
        heuristics=(
            Heuristic(
                "lns",
                "large-neighbourhood search from the best of the online policies' runs and "
                "greedy starts, the incumbent replayed (honours --time-limit)",
                schedule="slolab.problems.dispatch_scale:lns_schedule",
            ),
            Heuristic(
                "hyperflexis",
                "HyperFlexis's multi-SLO dispatcher (Sec. 5.1, Alg. 1), fixed cluster",
                policy=online("hyperflexis"),
            ),
            Heuristic(
                "hyperflexis-scaling",
                "the dispatcher with the threshold scaler (Sec. 6, Alg. 3)",
                policy=online("hyperflexis", scaler="hyperflexis"),
            ),
            Heuristic(
                "hyperflexis-pm",
                "the dispatcher with priority-based SLO mapping (Sec. 5.2)",
                policy=online("hyperflexis-pm"),
            ),
            Heuristic(
                "round-robin",
                "Llumnix-style round robin over vLLM workers (Sec. 7.4)",
                policy=online("vllm", router="round-robin", decode_router="round-robin"),
                baseline=True,
            ),
            Heuristic(
                "scorpio-rr",
                "SCORPIO (TTFT and TPOT guards) behind round robin (Sec. 7.4)",
                policy=online("scorpio", router="round-robin"),
                baseline=True,
            ),
            Heuristic(
                "sa-rr",
                "the SA-ordering scheduler behind round robin (Sec. 7.4)",
                policy=online("sa-online", router="round-robin"),
                baseline=True,
            ),
        ),
        docs="hyperflexis.md",
        settings=("task_set", "slot_s", "max_servers", "cost_weight_per_server_s"),
        front="slolab.models.dispatch_scale:pareto_front",
    )
)


def _online_start(policy: str, instance: Instance, seed: int) -> Outcome | None:
    """Online heuristic ``policy``'s run on a window for ``dispatch-lns``'s starts, or None
    when it would run a changed instance (:data:`slolab.models.dispatch_lns.StartRun`)."""
    from slolab.heuristics.policies import Scheduler

    made = Scheduler.of(online_scheduler(policy, instance))
    if made.on(instance) is not instance:
        return None
    return made.run(instance, seed=seed)


def online_start(policy: str) -> StartRun:
    """Online heuristic ``policy``'s run as a start of ``dispatch-lns``
    (:func:`slolab.models.dispatch_lns.online_decision` writes it as a decision)."""
    return functools.partial(_online_start, policy)


#: The runs ``dispatch-lns`` starts from: every start policy's (name -> StartRun).
LNS_STARTS = {name: online_start(name) for name in START_POLICIES}

register_model_options("dispatch-lns", starts=LNS_STARTS)


def lns_schedule(
    instance: Instance, *, seed: int, time_limit: float = 60.0, quiet: bool = False
) -> Schedule:
    """The ``lns`` heuristic of dispatch-scale: :func:`slolab.models.dispatch_lns.lns` from
    :data:`LNS_STARTS` for the whole ``time_limit``, its incumbent as a Schedule. The exact
    model ``dispatch-lns`` runs the same search beside the relaxation bound."""
    found = lns(instance, seed=seed, time_limit=time_limit, starts=LNS_STARTS, quiet=quiet)
    data = ScaleWindow.of(instance)
    return decision_schedule(lives_window(data, found.decision), found.decision)
