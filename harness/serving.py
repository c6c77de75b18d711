"""A trace served by a scheduler: the set-up behind ``slolab simulate``, ``capacity`` and ``plan``.

:class:`ServingSetup` holds what those commands take (the trace, how it is cut and given SLOs,
the cluster, the scheduler and router) and builds the instance and the policy exactly one way,
whether the command line, a sweep task or the capacity planner asks.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from slolab.heuristics.policies import Scheduler
from slolab.instances.records import Instance
from slolab.problems.flags import SCALING_OPTIONS, SERVING_OPTIONS, slo_scheme_of
from slolab.problems.registry import OptionValueError
from slolab.solvers.capacity import SEARCH_SPAN, CapacityResult, ProbeVerdict, capacity

#: Each field's default, from the flags' one declaration (:mod:`slolab.problems.flags`).
_DEFAULT: dict[str, Any] = {o.name: o.default for o in (*SERVING_OPTIONS, *SCALING_OPTIONS)}


@dataclasses.dataclass(frozen=True, slots=True)
class ServingSetup:
    """How a trace is read, given SLOs, put on a cluster and scheduled (``slolab simulate``).

    Each field but ``trace`` is a flag declared once in :mod:`slolab.problems.flags` (the
    field's name is the flag's argparse destination, its default the declared one; the suite
    checks that every field has its declaration), so ``ServingSetup.from_namespace(args)`` is
    the command's set-up.

    Attributes
    ----------
    trace : str
        Trace file, or the name of a vendored trace.
    seed : int
        Seed of every random choice (SLO draws, arrival draws, random routing).
    servers : int
        Number of servers (model replicas).
    policy : str
        Scheduler by name (:mod:`slolab.heuristics.policies`).
    router : str or None
        Router by name (None: the policy's own, :attr:`PolicyEntry.router`, else
        ``least-loaded``).
    decode_router : str or None
        Disaggregated mode: router of the decode servers (None: the policy's own, else the
        engine's default).
    timing : str
        Timing preset.
    slos : str or None
        SLO scheme (several joined by ``+``); None means ``slos-serve`` when ``scenario`` is
        set, else ``polyserve``; ``"none"`` assigns no SLOs.
    scenario, slack : str or None
        With the ``slos-serve`` scheme: its scenario and slack.
    token_budget : str or int
        Tokens per iteration of a budgeted policy: an integer, or ``"auto"``
        (:func:`slolab.heuristics.policies.sarathi_token_budget`).
    limit : int or None
        Use only the first ``limit`` requests of the trace.
    format, columns, time_unit, zero_output, max_request_tokens, arrivals, cv
        How the trace is read and timed (the problems' trace options,
        :data:`slolab.problems.TRACE_OPTIONS`).
    mode : str
        ``colocated``, ``static`` or ``disaggregated``.
    prefill_servers : int
        Disaggregated: servers in the prefill pool.
    kv_capacity : int or None
        KV-cache capacity per server, tokens (None: the timing preset's, else 200,000;
        :meth:`kv_capacity_used`).
    max_batch_tokens, max_batch_size : int
        Token budget and most sequences per iteration.
    prefix_cache : str
        Prefix caching: ``auto``, the default (512-token blocks when the trace has block ids,
        as Mooncake's; off otherwise), ``off`` or a block size
        (:func:`slolab.problems.serving.prefix_block_tokens`).
    autoscale : str or None
        Scaler name (:func:`slolab.heuristics.scalers.elastic_setup`); None: fixed servers.
    min_servers, max_servers, scale_metric, scale_upper, scale_lower
        The scaler's bounds and thresholds.
    startup : str or None
        Where switched-on servers load weights from (``instant``, ``disk``, ``host``,
        ``d2d``; None: ``instant`` under a policy's own scaler, else ``disk``).
    """

    trace: str
    seed: int = _DEFAULT["seed"]
    servers: int = _DEFAULT["servers"]
    policy: str = _DEFAULT["policy"]
    router: str | None = _DEFAULT["router"]
    decode_router: str | None = _DEFAULT["decode_router"]
    timing: str = _DEFAULT["timing"]
    slos: str | None = _DEFAULT["slos"]
    scenario: str | None = _DEFAULT["scenario"]
    slack: str | None = _DEFAULT["slack"]
    token_budget: str | int = _DEFAULT["token_budget"]
    limit: int | None = _DEFAULT["limit"]
    format: str | None = _DEFAULT["format"]
    columns: str | None = _DEFAULT["columns"]
    time_unit: str | None = _DEFAULT["time_unit"]
    zero_output: str = _DEFAULT["zero_output"]
    max_request_tokens: int | None = _DEFAULT["max_request_tokens"]
    arrivals: str | None = _DEFAULT["arrivals"]
    cv: float | None = _DEFAULT["cv"]
    mode: str = _DEFAULT["mode"]
    prefill_servers: int = _DEFAULT["prefill_servers"]
    kv_capacity: int | None = _DEFAULT["kv_capacity"]
    max_batch_tokens: int = _DEFAULT["max_batch_tokens"]
    max_batch_size: int = _DEFAULT["max_batch_size"]
    prefix_cache: str = _DEFAULT["prefix_cache"]
    autoscale: str | None = _DEFAULT["autoscale"]
    min_servers: int = _DEFAULT["min_servers"]
    max_servers: int = _DEFAULT["max_servers"]
    scale_metric: str | None = _DEFAULT["scale_metric"]
    scale_upper: float | None = _DEFAULT["scale_upper"]
    scale_lower: float | None = _DEFAULT["scale_lower"]
    startup: str | None = _DEFAULT["startup"]

    def __post_init__(self) -> None:
        for name in ("seed", "servers", "prefill_servers", "kv_capacity"):
            value = getattr(self, name)
            if name == "kv_capacity" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if self.servers < 1:
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if self.seed < 0:
            raise OptionValueError(
                f"seed must be >= 0, got {self.seed}", f"--seed must be >= 0, got {self.seed}"
            )
        if isinstance(self.max_batch_tokens, bool) or not (
            isinstance(self.max_batch_tokens, int) and self.max_batch_tokens >= 0
        ):
            raise OptionValueError(
                f"max_batch_tokens must be an integer >= 0 (the servers' cap on tokens per "
                f"iteration, 0 for none), got {self.max_batch_tokens!r}",
                f"--max-batch-tokens must be >= 0 (the servers' cap on tokens per iteration, 0 "
                f"for none), got {self.max_batch_tokens!r}",
            )
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")

    @classmethod
    def from_namespace(
        cls, args: argparse.Namespace, *, absent: Iterable[str] = ()
    ) -> ServingSetup:
        """The set-up from parsed command-line options (the fields' names are their dests).

        A command that does not take some of the fields' flags names them in ``absent`` (they
        keep their declared defaults); any other field missing from ``args`` is an error, so a
        renamed flag cannot fall back to its default unnoticed.
        """
        skipped = set(absent)
        names = [field.name for field in dataclasses.fields(cls)]
        missing = [n for n in names if not hasattr(args, n) and n not in skipped]
        if missing:
            raise TypeError(
                f"the command's options lack {', '.join(missing)}: declare their flags "
                "(slolab.problems.flags) or name them absent"
            )
        return cls(**{name: getattr(args, name) for name in names if hasattr(args, name)})

    def slo_scheme(self) -> str | None:
        """The SLO scheme applied (None for ``"none"``)."""
        return slo_scheme_of(self.slos, self.scenario)

    def kv_capacity_used(self) -> tuple[int, str]:
        """The KV-cache tokens per server the run uses and where they come from
        (:func:`slolab.timing.presets.kv_capacity_of`: ``--kv-capacity``, the preset's, or the
        default)."""
        from slolab.timing.presets import kv_capacity_of

        return kv_capacity_of(self.timing, self.kv_capacity)

    def reading(self) -> dict[str, Any]:
        """The trace options (:data:`slolab.problems.TRACE_OPTIONS`) of this set-up."""
        from slolab.problems import TRACE_OPTIONS

        return {o.name: getattr(self, o.name) for o in TRACE_OPTIONS}

    def instance(self, rate: float | None = None) -> Instance:
        """The serving instance at ``rate`` req/s (None: the trace's own arrivals), before the
        scheduler lays out its cluster (:meth:`prepare`): a policy with its own layout gets it
        co-located, the servers to lay out as it does."""
        from slolab.heuristics.policies import policy_entry
        from slolab.problems.serving import serving_instance

        own_layout = policy_entry(self.policy).setup is not None
        return serving_instance(
            self.trace,
            seed=self.seed,
            servers=self.servers,
            timing=self.timing,
            slos=self.slo_scheme(),
            slo_params={
                name: value
                for name, value in (("scenario", self.scenario), ("slack", self.slack))
                if value is not None
            },
            rate=rate,
            limit=self.limit,
            mode="colocated" if own_layout else self.mode,
            prefill_servers=0 if own_layout else self.prefill_servers,
            kv_capacity_tokens=self.kv_capacity,
            max_batch_tokens=self.max_batch_tokens,
            max_batch_size=self.max_batch_size,
            prefix_cache=self.prefix_cache,
            **self.reading(),
        )

    @property
    def router_name(self) -> str:
        """The router run: ``router``, else the policy's own by name, else ``"own"`` for a
        policy that routes itself, else ``least-loaded``."""
        from slolab.heuristics.policies import policy_entry

        entry = policy_entry(self.policy)
        if self.router:
            return self.router
        return entry.router or ("own" if entry.setup is not None else "least-loaded")

    def scheduler(self, instance: Instance) -> Scheduler:
        """A fresh scheduler for ``instance`` (built by :meth:`instance`): the policy, its
        routers, and the cluster and scaler of a policy that brings its own
        (:func:`slolab.heuristics.policies.make_scheduler`; ``instance``'s server count is
        the fleet)."""
        from slolab.heuristics.policies import make_scheduler, parse_token_budget, policy_entry

        entry = policy_entry(self.policy)
        budget: int | None = None
        if entry.token_budget:
            budget = (
                parse_token_budget(self.token_budget)
                if isinstance(self.token_budget, str)
                else self.token_budget
            )
        if budget is not None and 0 < self.max_batch_tokens < budget:
            raise OptionValueError(
                f"token_budget {budget} exceeds max_batch_tokens {self.max_batch_tokens}",
                f"--token-budget {budget} exceeds --max-batch-tokens {self.max_batch_tokens} "
                "(the servers' cap on tokens per iteration)",
            )
        if entry.setup is None and self.decode_router is not None:
            if self.mode != "disaggregated":
                raise ValueError("--decode-router applies to --mode disaggregated only")
        return make_scheduler(
            self.policy,
            instance,
            token_budget=budget,
            router=self.router,
            decode_router=self.decode_router,
            mode=self.mode,
            servers=instance.cluster.servers,
            prefill_servers=self.prefill_servers,
        )

    def prepare(self, instance: Instance) -> tuple[Instance, Scheduler]:
        """The instance to run and a fresh scheduler with its scaler: the policy's own scaler
        (``startup`` default ``instant``, as PolyServe assumes) or the ``autoscale`` scaler
        (``startup`` default ``disk``); the cluster carries that start-up delay."""
        from slolab.heuristics.scalers import elastic_setup, with_startup

        sched = self.scheduler(instance)
        thresholds = {
            name: value
            for name, value in (
                ("metric", self.scale_metric),
                ("upper", self.scale_upper),
                ("lower", self.scale_lower),
            )
            if value is not None
        }
        if thresholds and self.autoscale != "threshold":
            raise ValueError(
                f"--scale-{next(iter(thresholds))} applies to --autoscale threshold only"
            )
        if sched.scaler is not None:
            if self.autoscale is not None:
                raise ValueError(
                    f"policy {self.policy!r} scales the cluster itself: drop --autoscale"
                )
            ran = with_startup(sched.on(instance), self.startup or "instant")
            return ran, dataclasses.replace(sched, instance=ran)
        ran, scaler = elastic_setup(
            sched.on(instance),
            self.autoscale,
            min_servers=self.min_servers,
            max_servers=self.max_servers,
            startup=self.startup or "disk",
            **thresholds,
        )
        return ran, dataclasses.replace(sched, scaler=scaler, instance=ran)

    def simulate(
        self,
        rate: float | None = None,
        *,
        progress: bool = False,
        stop: Callable[[Instance], Callable[[Any], bool]] | None = None,
    ) -> tuple[Instance, Any, Scheduler]:
        """The instance run at ``rate``, its Outcome under this set-up's scheduler, and the
        scheduler (its router may report on its own decisions). ``stop(instance)`` gives the
        run's stopping rule (``stop`` of :func:`slolab.sim.run`), if any."""
        instance, sched = self.prepare(self.instance(rate))
        warn_large_fleet(instance.cluster.servers, instance.n_requests)
        outcome = sched.run(
            instance,
            seed=self.seed,
            record_iterations=False,
            progress=progress,
            stop=None if stop is None else stop(instance),
        )
        return instance, outcome, sched


#: Seconds to route one request past one server, measured on this project's 2-core machine
#: (0.52 to 0.55 us with 20,000 and 100,000 servers): routers that compare servers
#: (least-loaded, the default) look at every server for each request.
ROUTE_S_PER_REQUEST_SERVER = 0.55e-6
#: Bytes of engine state per server (0.78 KB measured with 20,000 to 100,000 servers).
BYTES_PER_SERVER = 800
#: A run estimated to route for longer than this (s), or to hold more server state than
#: :data:`LARGE_FLEET_BYTES`, is announced before it starts.
LARGE_FLEET_S = 30.0
LARGE_FLEET_BYTES = 2**30

_announced: set[tuple[int, int]] = set()


def warn_large_fleet(servers: int, requests: int) -> str | None:
    """Log (once per fleet and request count) what a very large fleet will cost, before a run.

    Returns the warning, or None when the run is estimated to route within
    :data:`LARGE_FLEET_S` seconds and hold less than :data:`LARGE_FLEET_BYTES`.
    """
    route_s = ROUTE_S_PER_REQUEST_SERVER * servers * requests
    memory = BYTES_PER_SERVER * servers
    if route_s <= LARGE_FLEET_S and memory <= LARGE_FLEET_BYTES:
        return None
    message = (
        f"{servers:,} servers for {requests:,} requests: about {route_s:,.0f} s of routing "
        f"(the least-loaded router looks at every server for each request) and "
        f"{memory / 2**30:.2g} GiB of server state"
    )
    if servers > requests:
        message += (
            f"; at most {requests:,} servers ever hold a request at once, the rest only add "
            "idle cost"
        )
    if (servers, requests) not in _announced:
        _announced.add((servers, requests))
        logging.getLogger("slolab").warning(message)
    return message


def simulate_summary(
    setup: ServingSetup,
    rate: float | None = None,
    *,
    progress: bool = False,
    token_budget: bool = False,
    idle_oracle: bool = False,
) -> dict[str, Any]:
    """What ``slolab simulate --json`` prints: one run's metrics and its set-up.

    The keys of :func:`slolab.sim.metrics.summary` (cost included), with ``wall_s`` the wall
    time of the whole call (building the instance included), ``simulate_s`` the engine's and
    ``stall`` why the run stalled ("" unless ``stalled`` > 0, or ``rejected_held`` > 0: requests a
    router held that no server took by the end), plus ``instance``, ``rate`` (the arrival rate
    asked for, req/s; None for the trace's own arrivals), ``policy``, ``router``, ``mode``,
    ``servers``, ``timing``, ``kv_capacity`` (tokens per server) and ``kv_capacity_source``
    (``--kv-capacity``, ``preset NAME`` or ``default``), ``autoscale`` and ``startup_s``; a
    router that reports on its own decisions (a
    ``summary()`` method, as PolyServe's controller) adds its figures as ``router_*``. With
    ``token_budget``, also ``token_budget``: the tokens per iteration a budgeted policy ran at
    (``--token-budget auto`` resolved; None for other policies). With ``idle_oracle``, also
    ``idle_met``: the requests an idle server could meet (:func:`slolab.sim.idle.idle_met`,
    attainment by deadline; co-located runs only).
    """
    from slolab.sim import metrics

    start = time.perf_counter()
    instance, outcome, sched = setup.simulate(rate, progress=progress)
    summary = metrics.summary(instance, outcome)
    summary["wall_s"] = time.perf_counter() - start
    summary["simulate_s"] = outcome.wall_s
    summary["stall"] = outcome.info.get("stall", "")
    summary["rejected_held"] = held = int(outcome.info.get("rejected_held", 0))
    if held and not summary["stalled"]:
        router = sched.decode_router if sched.router is None else sched.router
        made = type(router)
        summary["stall"] = (
            f"router {made.__module__}:{made.__qualname__} held {held} request(s) in a central "
            f"queue that no server took by the end of the run (t={outcome.end_s:.6g} s); they "
            "are rejected"
        )
    if token_budget:
        summary["token_budget"] = getattr(sched.policy, "token_budget", None)
    if idle_oracle:
        from slolab.sim.idle import idle_met

        summary["idle_met"] = int(idle_met(instance).sum())
    report = getattr(sched.router, "summary", None)
    if callable(report):
        summary.update({f"router_{k}": v for k, v in report().items()})
    summary.update(
        {
            "instance": instance.name,
            "rate": rate,
            "policy": setup.policy,
            "router": setup.router_name,
            "mode": setup.mode,
            "servers": setup.servers,
            "timing": setup.timing,
            "kv_capacity": int(instance.cluster.kv_capacity_tokens),
            "kv_capacity_source": setup.kv_capacity_used()[1],
            "autoscale": setup.autoscale or "none",
            "startup_s": instance.cluster.startup_s,
        }
    )
    return summary


def capacity_search(
    setup: ServingSetup,
    *,
    target: float = 0.9,
    definition: str = "deadline",
    rate: float | None = None,
    start_rate: float | None = None,
    rel_tol: float = 0.02,
    max_probes: int = 30,
    progress: bool = False,
    early: bool = True,
    workers: int = 1,
) -> tuple[CapacityResult, float]:
    """Largest arrival rate at which ``setup`` meets ``target`` attainment (``slolab capacity``).

    Each probe simulates the trace at the probed rate: its own arrivals time-scaled, or with
    ``setup.arrivals`` a drawn process at that rate. ``rate`` is the reference rate of a drawn
    process (required with ``arrivals``; not allowed without, where the reference is the
    trace's own mean rate); ``start_rate`` (default: the reference) is the first probe. With
    ``early`` a probe stops as soon as its verdict is certain
    (:class:`slolab.sim.verdict.AttainmentWatch`): the same verdicts, hence the same search,
    with the stopped probes' attainments recorded as the bounds they proved. After a first
    miss the floor rate is probed at once (``floor_first``) unless the set-up has a scaler that
    ticks through idle spans (no ``skip_idle_ticks``: its ticks make a probe's cost grow with
    the simulated span, HyperFlexis's scaler). ``workers``
    processes probe at once (:func:`slolab.solvers.capacity.capacity`: the same capacity as
    one at a time, in fewer rounds).

    Returns
    -------
    (CapacityResult, float)
        The search's result and the reference rate (req/s).
    """
    from slolab.heuristics.policies import policy_entry
    from slolab.instances import mean_rate
    from slolab.sim.metrics import check_attainable

    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    check_attainable(setup.instance(rate), definition)
    if setup.arrivals is None:
        if rate is not None:
            raise ValueError(
                "--rate applies to capacity with --arrivals only (each probe time-scales the "
                "trace to its rate; --start-rate sets the first one)"
            )
        reference = mean_rate(setup.instance(None).workload)
    elif rate is None:
        raise ValueError(f"--arrivals {setup.arrivals} needs --rate (requests per second)")
    else:
        reference = rate
    show_runs = progress and sys.stderr.isatty()

    probe = functools.partial(_probe, setup, definition, target, early, show_runs and workers == 1)
    # a scaler that ticks through the whole simulated span makes a probe at 1/1024 of the rate
    # cost up to 1024 times the ticks: with one the floor is probed only if the halving reaches
    # it; one that passes idle ticks (skip_idle_ticks) costs little more at the floor
    ticking = False
    if policy_entry(setup.policy).setup is not None or setup.autoscale is not None:
        scaler = setup.prepare(setup.instance(rate))[1].scaler
        ticking = (
            scaler is not None
            and math.isfinite(scaler.interval_s)
            and not hasattr(scaler, "skip_idle_ticks")
        )
    pool = ProcessPoolExecutor(workers) if workers > 1 else None
    try:
        found = capacity(
            probe,
            target=target,
            start_rate=start_rate or reference,
            rel_tol=rel_tol,
            max_probes=max_probes,
            progress=progress,
            floor_first=not ticking,
            workers=workers,
            executor=pool,
        )
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return found, reference


def _probe(
    setup: ServingSetup,
    definition: str,
    target: float,
    early: bool,
    progress: bool,
    rate: float,
) -> ProbeVerdict:
    """One capacity probe: ``setup`` simulated at ``rate``, stopped early when ``early`` and
    its verdict is certain (a module-level function, so a process pool can run it)."""
    from slolab.sim import metrics
    from slolab.sim.verdict import AttainmentWatch, RampedStop

    start = time.perf_counter()
    watches: list[AttainmentWatch] = []

    def watch(instance: Instance) -> RampedStop:
        watches.append(AttainmentWatch(instance, definition, target))
        return RampedStop(watches[-1])

    instance, outcome, _ = setup.simulate(rate, progress=progress, stop=watch if early else None)
    wall = time.perf_counter() - start
    bound = watches[0].bound if watches else None
    if bound is not None:
        return ProbeVerdict(bound, early=True, wall_s=wall)
    return ProbeVerdict(
        metrics.attainment(instance, outcome, definition),
        wall_s=wall,
        stalled=int(outcome.info.get("stalled", 0)),
    )


def missed_at(instance: Instance, outcome: Any, definition: str = "deadline") -> str:
    """Which requests of a run miss their SLO and which part of it, in one phrase.

    Said of a capacity search's lowest rate, it says why no rate meets the target: for example
    ``"412 of 1000 requests miss: 398 their TTFT (prompts 8,190 to 135,000 tokens, median
    20,400), 14 a later token's deadline"``.
    """
    from slolab.sim import metrics

    table = metrics.request_table(instance, outcome)
    wl = instance.workload
    missed = ~table[f"met_{definition}"].to_numpy()
    if definition == "e2e":
        missed &= table["has_e2e_slo"].to_numpy()
    rejected = missed & table["rejected"].to_numpy()
    unfinished = missed & ~rejected & ~table["finished"].to_numpy()
    with np.errstate(invalid="ignore"):
        ttft_late = ~(table["ttft_s"].to_numpy() <= wl["ttft_slo_s"] + metrics.ON_TIME_TOLERANCE_S)
    ttft = missed & ~rejected & ~unfinished & ttft_late & ~np.isnan(wl["ttft_slo_s"])
    rest = missed & ~rejected & ~unfinished & ~ttft
    counted = int(table["has_e2e_slo"].sum()) if definition == "e2e" else len(table)
    parts = []
    if ttft.any():
        prompts = wl.prompt_tokens[ttft]
        parts.append(
            f"{int(ttft.sum())} their TTFT (prompts {int(prompts.min()):,} to "
            f"{int(prompts.max()):,} tokens, median {int(np.median(prompts)):,})"
        )
    if rest.any():
        parts.append(
            f"{int(rest.sum())} "
            + ("their end-to-end bound" if definition == "e2e" else "a later token's bound")
        )
    if rejected.any():
        parts.append(f"{int(rejected.sum())} rejected")
    if unfinished.any():
        parts.append(f"{int(unfinished.sum())} never finished")
    return f"{int(missed.sum())} of {counted} requests miss: " + ", ".join(parts)


def capacity_notes(
    setup: ServingSetup, found: CapacityResult, definition: str = "deadline"
) -> list[str]:
    """One line per thing a reader of ``found`` must know: a capacity that is only a lower
    bound (the target was met at the highest rate probed), a target no rate meets (with
    :func:`missed_at` at the lowest rate), a probe budget that ran out, a probe whose run
    stalled (no valid attainment: the search stopped there)."""
    lo, hi = found.bracket
    notes = []
    if found.stop_reason == "stalled":
        rate = found.probes[-1][0]
        notes.append(
            f"the probe at {rate:.4g} req/s stalled: {setup.policy} left {found.stalled[-1]} "
            "request(s) waiting with nothing left to run; it is no valid attainment and the "
            "search stopped there (slolab simulate --rate shows the stall)"
        )
    if found.capped_high:
        notes.append(
            f"capacity is a lower bound: the target was still met at the highest rate probed "
            f"({lo:.4g} req/s, {SEARCH_SPAN} x the first probe); give a higher --start-rate to "
            "search above"
        )
    elif found.capped_low:
        instance, outcome, _ = setup.simulate(hi)
        stalled = int(outcome.info.get("stalled", 0))
        why = (
            f"the run stalled: {setup.policy} left {stalled} request(s) waiting with nothing "
            "left to run (no valid attainment; slolab simulate --rate shows the stall)"
            if stalled
            else missed_at(instance, outcome, definition)
        )
        note = (
            f"{setup.policy} can never meet {found.target:.0%} {definition} attainment on "
            f"{setup.servers} server{'s' if setup.servers != 1 else ''}: at {hi:.4g} req/s "
            f"(1/{SEARCH_SPAN} of the first probe) " + why
        )
        arrivals = instance.workload.arrival_s
        distinct = len(np.unique(arrivals))
        if setup.arrivals is None and distinct < len(arrivals) / 2:
            # time-scaling keeps simultaneous arrivals simultaneous: bursts stay bursts
            note += (
                f"; the trace's {len(arrivals)} requests arrive at {distinct} distinct times and "
                "time-scaling keeps each burst at one instant: try --arrivals poisson --rate R"
            )
        notes.append(note)
    elif found.stop_reason == "max_probes":
        notes.append(
            f"the probe budget ran out before the bracket ({lo:.4g}, {hi:.4g}) req/s reached "
            f"--rel-tol {found.rel_tol:g}: the capacity lies in it; raise --max-probes"
        )
    return notes
