"""The SLOs-Serve admission problem: at one scheduler call, which new requests to admit.

Exact models: ``slos-b1`` (0-1 MILP with cumulative token budgets, the default) and
``slos-b2`` (time-indexed, per-batch sizes); heuristic: the paper's multi-SLO DP.
See docs/slos_serve.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.instances.hints import SuggestingError, Suggestion
from slolab.problems.registry import (
    TRACE_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    register_problem,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.timing import TimingModel


def slos_snapshot(
    trace: str | Path = "azure_conv_2023",
    *,
    new: int,
    running: int,
    seed: int,
    timing: str | TimingModel = "opt-13b-h100-slos",
    scenario: str = "chatbot",
    slack: str = "tight",
    kv_capacity_tokens: int | None = None,
    name: str | None = None,
    rate: float | None = None,
    cache: bool = False,
    **reading: Any,
) -> Instance:
    """One SLOs-Serve scheduler call cut from a real trace (``problem="slos-admission"``).

    A seeded run of ``running + new`` consecutive trace requests (lengths real, SLOs from the
    ``"slos-serve"`` scheme for ``scenario`` and ``slack``): the first ``running`` are decoding
    (each has emitted a seeded number of its tokens, at least one), the last ``new`` arrive at the
    call, one second after the last running request's arrival. KV capacity defaults to the
    running requests' needs plus 60% of the new ones' (prompt + output each), so memory binds.
    ``rate`` and ``**reading`` (``format``, ``arrivals``, ...) say how the trace is read and
    timed, as in :func:`slolab.instances.read_workload` (the arrival process draws with
    ``seed``).

    With ``cache`` each new request gets the prefix the trace's earlier requests left in the
    cache (:func:`slolab.instances.prefix_state.cached_before` on the new rows: every request
    before them, the running ones included, touches its prompt's blocks), as the column
    ``cached_tokens``; running requests get 0 (they are warm-started holding their KV), and the
    default capacity counts the new requests' uncached need. It needs a trace with prompt
    block ids (``hash_ids``: Mooncake, e.g. ``"mooncake_conversation"``).

    References
    ----------
    SLOs-Serve, Sec. 3.2.1 (the scheduler call: running requests are forced, new ones admitted).
    """
    from slolab.instances import Cluster, assign_slos, read_workload
    from slolab.instances.prefix_state import cached_before
    from slolab.models.slos_admission import snapshot_instance
    from slolab.timing import resolve_timing

    if new < 1 or running < 0:
        raise ValueError(f"need new >= 1 and running >= 0, got new={new}, running={running}")
    model = resolve_timing(timing)
    wl = read_workload(trace, rate=rate, seed=seed, keep_hash_ids=cache, **reading)
    if cache and "hash_ids" not in wl:
        raise SuggestingError(
            f"{wl.source}: ",
            Suggestion("cache"),
            " needs a trace with prompt block ids (hash_ids), such as mooncake_conversation",
        )
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
    cached = np.zeros(total, dtype=np.int64)
    if cache:
        cached[running:] = cached_before(wl, new_rows)
    capacity = kv_capacity_tokens
    if capacity is None:
        capacity = int(kv[:running].sum() + 0.6 * (kv - cached)[running:].sum())
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
        cached_tokens=cached if cache else None,
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
    from slolab.heuristics.baselines import LeastLoaded
    from slolab.heuristics.slos_serve import SLOsServePolicy
    from slolab.instances import Cluster
    from slolab.instances.scenarios import scenario_instance
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


#: Requests of the online run a scheduler call is captured from (``--from-simulation``).
SIMULATED_REQUESTS = 300


def build(
    *,
    seed: int,
    trace: str = "azure_conv_2023",
    new: int = 10,
    running: int = 20,
    timing: str = "opt-13b-h100-slos",
    scenario: str = "chatbot",
    slack: str = "tight",
    from_simulation: bool = False,
    n: int | None = None,
    rate: float | None = None,
    cache: bool = False,
    **reading: Any,
) -> Instance:
    """A scheduler call cut from a trace, or (``from_simulation``) captured from an online run.

    With ``from_simulation`` the call of an online SLOs-Serve run of ``n`` requests of
    ``scenario`` (at ``rate`` req/s) whose new and running counts are closest to ``new`` and
    ``running`` is returned (see :func:`slos_snapshots_from_simulation`); ``trace`` and the
    reading options (``**reading``: ``format``, ``arrivals``, ...) do not apply then. ``n``
    (default :data:`SIMULATED_REQUESTS`) applies with ``from_simulation`` only. ``cache``
    gives a cut's new requests the prefix cache the trace's earlier requests left (see
    :func:`slos_snapshot`; a trace with ``hash_ids``); a simulated run's scenario has none.
    """
    if not from_simulation:
        if n is not None:
            raise SuggestingError(
                Suggestion("n"),
                " applies with ",
                Suggestion("from_simulation"),
                " only (the requests simulated); a cut of the trace takes ",
                Suggestion("new"),
                " and ",
                Suggestion("running"),
            )
        return slos_snapshot(
            trace,
            new=new,
            running=running,
            seed=seed,
            timing=timing,
            scenario=scenario,
            slack=slack,
            rate=rate,
            cache=cache,
            **reading,
        )
    if cache:
        raise SuggestingError(
            Suggestion("cache"),
            " needs a cut of a trace with prompt block ids (Mooncake); the scenario run by ",
            Suggestion("from_simulation"),
            " has none",
        )
    if n is None:
        n = SIMULATED_REQUESTS
    calls = slos_snapshots_from_simulation(
        scenario, seed=seed, n=n, rate=rate, timing=timing, slack=slack
    )
    if not calls:
        raise ValueError(
            "the simulation made no scheduler call with new requests; raise n or the rate"
        )

    def distance(call: Instance) -> int:
        held = int(np.asarray(call.workload["running"]).sum())
        return abs(call.n_requests - held - new) + abs(held - running)

    return min(calls, key=distance)


PROBLEM = register_problem(
    Problem(
        name="slos-admission",
        title="one SLOs-Serve scheduler call: admit new requests; maximize admitted value",
        objective=Objective(
            "admitted value",
            "max",
            "slolab.sim.metrics:admitted_value_objective",
            "value of the new requests served within their SLO (running ones are forced)",
        ),
        builder=build,
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            *TRACE_OPTIONS,
            Option("new", int, 10, "new requests at the call"),
            Option("running", int, 20, "running requests at the call"),
            Option("scenario", str, "chatbot", "SLOs-Serve scenario (its Table 1)"),
            Option("slack", str, "tight", "SLO slack", choices=("tight", "loose")),
            Option(
                "from_simulation",
                bool,
                False,
                "capture the call from an online SLOs-Serve run of the scenario (n requests "
                "at --rate) closest to --new/--running, instead of cutting the trace",
            ),
            Option(
                "n",
                int,
                None,
                f"with --from-simulation: requests simulated (default: {SIMULATED_REQUESTS})",
                minimum=1,
            ),
            Option(
                "rate",
                float,
                None,
                "mean arrival rate (req/s): of the simulated run with --from-simulation; of the "
                "drawn process with --arrivals; else the trace is time-scaled to it",
            ),
            Option(
                "cache",
                bool,
                False,
                "give the new requests the prefix cache the trace's earlier requests left "
                "(column cached_tokens; a trace with hash_ids, such as mooncake_conversation)",
            ),
            Option("timing", str, "opt-13b-h100-slos", "timing preset"),
            Option("seed", int, 0, "seed of the cut and the SLO draws", minimum=0),
        ),
        models=("slos-b1", "slos-b2"),
        aliases={"b1": "slos-b1:highs", "b2": "slos-b2:highs"},
        heuristics=(
            Heuristic(
                "dp",
                "SLOs-Serve's multi-SLO DP (Sec. 3.2.1, App. C)",
                schedule="slolab.heuristics.slos_serve_dp:dp_schedule",
            ),
        ),
        docs="slos_serve.md",
        settings=("call_time_s", "kv_capacity_tokens"),
    )
)
