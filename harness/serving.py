"""A trace served by a scheduler: the set-up behind ``slolab simulate``, ``capacity`` and ``plan``.

:class:`ServingSetup` holds what those commands take (the trace, how it is cut and given SLOs,
the cluster, the scheduler and router) and builds the instance and the policy exactly one way,
whether the command line, a sweep task or the capacity planner asks.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np
from slolab.harness.capacity import CapacityResult, capacity
from slolab.instances.records import Instance


@dataclasses.dataclass(frozen=True, slots=True)
class ServingSetup:
    """How a trace is cut, given SLOs, put on a cluster and scheduled (``slolab simulate``).

    Field names and defaults are those of the ``simulate`` command's options.

    Attributes
    ----------
    trace : str
        Trace file, or the name of a vendored trace.
    seed : int
        Seed of every random choice (SLO draws, random routing).
    servers : int
        Number of servers (model replicas).
    policy, router : str
        Scheduler (see :data:`slolab.heuristics.POLICIES`) and router
        (:data:`slolab.heuristics.ROUTERS`).
    timing : str
        Timing preset.
    slos : str or None
        SLO scheme; None means ``slos-serve`` when ``scenario`` is set, else ``polyserve``;
        ``"none"`` assigns no SLOs.
    scenario, slack : str or None
        With the ``slos-serve`` scheme: its scenario and slack.
    token_budget : str or int
        Tokens per iteration of ``sarathi`` / ``edf``: an integer, or ``"auto"`` (the largest
        batch that fits the tightest TPOT SLO under the timing model).
    limit : int or None
        Use only the first ``limit`` requests of the trace.
    format : str or None
        Trace format (None: detected).
    mode : str
        ``colocated``, ``static`` or ``disaggregated``.
    prefill_servers : int
        Disaggregated: servers in the prefill pool.
    kv_capacity : int
        KV-cache capacity per server, tokens.
    max_batch_tokens, max_batch_size : int
        Token budget and most sequences per iteration.
    """

    trace: str
    seed: int = 0
    servers: int = 1
    policy: str = "sarathi"
    router: str = "least-loaded"
    timing: str = "llama2-7b-h100"
    slos: str | None = None
    scenario: str | None = None
    slack: str | None = None
    token_budget: str | int = "auto"
    limit: int | None = None
    format: str | None = None
    mode: str = "colocated"
    prefill_servers: int = 0
    kv_capacity: int = 200_000
    max_batch_tokens: int = 2048
    max_batch_size: int = 256

    def __post_init__(self) -> None:
        for name in ("seed", "servers", "prefill_servers", "kv_capacity"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {value!r}")
        if self.servers < 1:
            raise ValueError(f"servers must be >= 1, got {self.servers}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> ServingSetup:
        """The set-up from parsed command-line options (the fields' names are their dests)."""
        names = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: getattr(args, name) for name in names if hasattr(args, name)})

    def slo_scheme(self) -> str | None:
        """The SLO scheme applied (None for ``"none"``)."""
        scheme = self.slos or ("slos-serve" if self.scenario else "polyserve")
        return None if scheme == "none" else scheme

    def instance(self, rate: float | None = None) -> Instance:
        """The serving instance, rescaled to ``rate`` req/s (None: the trace's own)."""
        from slolab.harness.build import serving_instance

        return serving_instance(
            self.trace,
            seed=self.seed,
            format=self.format,
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
            mode=self.mode,
            prefill_servers=self.prefill_servers,
            kv_capacity_tokens=self.kv_capacity,
            max_batch_tokens=self.max_batch_tokens,
            max_batch_size=self.max_batch_size,
        )

    def policy_and_router(self, instance: Instance) -> tuple[Any, Any]:
        """A fresh scheduler and router for ``instance``."""
        from slolab.heuristics import POLICIES, ROUTERS
        from slolab.timing import time2bs

        if self.policy not in POLICIES:
            raise ValueError(
                f"unknown policy {self.policy!r}; known: {', '.join(sorted(POLICIES))}"
            )
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known: {', '.join(sorted(ROUTERS))}")
        if self.policy in ("sarathi", "edf"):
            if self.token_budget == "auto":
                tpot = instance.workload["tpot_slo_s"]
                tpot = tpot[np.isfinite(tpot)]
                budget = time2bs(instance.timing, float(tpot.min())) if len(tpot) else 0
                budget = min(budget, self.max_batch_tokens) if budget > 0 else self.max_batch_tokens
            else:
                try:
                    budget = int(self.token_budget)
                except ValueError:
                    raise ValueError(
                        f"--token-budget must be an integer or auto, got {self.token_budget!r}"
                    ) from None
            return POLICIES[self.policy](token_budget=budget), ROUTERS[self.router]()
        return POLICIES[self.policy](), ROUTERS[self.router]()


def simulate_summary(
    setup: ServingSetup, rate: float | None = None, *, progress: bool = False
) -> dict[str, Any]:
    """What ``slolab simulate --json`` prints: one run's metrics and its set-up.

    The keys of :func:`slolab.sim.metrics.summary`, with ``wall_s`` the wall time of the
    whole call (building the instance included) and ``simulate_s`` the engine's, plus
    ``instance``, ``policy``, ``router``, ``servers``, ``timing`` and ``server_s`` (servers
    times the end of the run, s: the cost of keeping them on).
    """
    from slolab.sim import metrics, run

    start = time.perf_counter()
    instance = setup.instance(rate)
    policy, router = setup.policy_and_router(instance)
    outcome = run(
        instance, policy, router, seed=setup.seed, record_iterations=False, progress=progress
    )
    summary = metrics.summary(instance, outcome)
    summary["wall_s"] = time.perf_counter() - start
    summary["simulate_s"] = outcome.wall_s
    summary["server_s"] = instance.cluster.servers * outcome.end_s
    summary.update(
        {
            "instance": instance.name,
            "policy": setup.policy,
            "router": setup.router,
            "servers": setup.servers,
            "timing": setup.timing,
        }
    )
    return summary


def capacity_search(
    setup: ServingSetup,
    *,
    target: float = 0.9,
    definition: str = "deadline",
    start_rate: float | None = None,
    rel_tol: float = 0.02,
    max_probes: int = 30,
    progress: bool = False,
) -> tuple[CapacityResult, float]:
    """Largest arrival rate at which ``setup`` meets ``target`` attainment (``slolab capacity``).

    Each probe rescales the trace to the probed rate (time compression) and simulates it;
    ``start_rate`` defaults to the trace's own mean rate.

    Returns
    -------
    (CapacityResult, float)
        The search's result and the trace's own mean rate (req/s).
    """
    from slolab.instances import mean_rate
    from slolab.sim import metrics, run

    trace_rate = mean_rate(setup.instance(None).workload)

    def probe(rate: float) -> float:
        instance = setup.instance(rate)
        policy, router = setup.policy_and_router(instance)
        outcome = run(instance, policy, router, seed=setup.seed, record_iterations=False)
        return metrics.attainment(instance, outcome, definition)

    found = capacity(
        probe,
        target=target,
        start_rate=start_rate or trace_rate,
        rel_tol=rel_tol,
        max_probes=max_probes,
        progress=progress,
    )
    return found, trace_rate
