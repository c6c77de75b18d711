"""Public test helpers: the contract every online policy keeps, checked on seeded random
instances (``slolab check-policy NAME``; a plugin's own tests call :func:`check_policy`).

The contract:

- ``engine``: the run completes: the policy returns only batches the engine accepts (no
  :class:`slolab.sim.PolicyError`);
- ``checker``: the schedule it produced passes the independent checker
  (:func:`slolab.sim.check`: arrivals, prefill before decode, timing, KV capacity, batch
  limits, ...);
- ``finished``: every request is finished (all its output tokens emitted) or rejected by the
  policy (a request the engine rejected because the run stalled counts as unfinished);
- ``budget``: no iteration carries more tokens than the policy's declared budget (its
  ``token_budget`` attribute, when it has an integer one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.instances.records import Cluster, Instance, Workload

__all__ = ["CONTRACT_RULES", "ContractViolation", "check_policy", "contract_instances"]

#: The rules of the policy contract, in the order they are checked.
CONTRACT_RULES = ("engine", "checker", "finished", "budget")

_TIME = re.compile(r"t=([-+0-9.eE]+|inf)|at ([-+0-9.eE]+)s")
_REQUEST = re.compile(r"request (\d+)")


@dataclass(frozen=True, slots=True)
class ContractViolation:
    """One broken rule of the policy contract.

    Attributes
    ----------
    seed : int
        Seed of the random instance (and of the run).
    rule : str
        One of :data:`CONTRACT_RULES`.
    message : str
        What happened.
    request : int or None
        The request concerned, when one is.
    time_s : float or None
        Simulation time of the violation (s), when known.
    """

    seed: int
    rule: str
    message: str
    request: int | None = None
    time_s: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in CONTRACT_RULES:
            raise ValueError(f"rule must be one of {', '.join(CONTRACT_RULES)}, got {self.rule!r}")

    @classmethod
    def parse(cls, seed: int, rule: str, message: str) -> ContractViolation:
        """A violation whose request and time are read from an engine or checker message."""
        time = _TIME.search(message)
        request = _REQUEST.search(message)
        return cls(
            seed,
            rule,
            message,
            int(request.group(1)) if request else None,
            float(time.group(1) or time.group(2)) if time else None,
        )

    def __str__(self) -> str:
        where = [f"seed {self.seed}"]
        if self.request is not None:
            where.append(f"request {self.request}")
        if self.time_s is not None:
            where.append(f"t={self.time_s:.6g}s")
        return f"{self.rule} ({', '.join(where)}): {self.message}"


def contract_instances(
    seeds: Sequence[int] = (0, 1, 2),
    *,
    n_requests: int = 40,
    servers: int = 2,
    timing: str = "llama2-7b-h100",
    mode: str = "colocated",
) -> list[Instance]:
    """One random serving instance per seed, small enough to check in a fraction of a second.

    ``n_requests`` requests arrive by a Poisson process at 20 req/s with prompts of 1-1024
    and outputs of 1-512 tokens (uniform), a TTFT SLO of 0.3, 0.5 or 1 s and a TPOT SLO of
    20, 50 or 100 ms (uniform choices, PolyServe's levels), priority 1 or 2; on ``servers``
    servers of 8,192 KV tokens (so memory runs out under load), at most 2,048 tokens (above any prompt) and 64
    sequences per iteration, timed by the preset ``timing``, in ``mode`` (``colocated``,
    ``static``, or ``disaggregated`` with one prefill server).
    """
    from slolab.timing import preset

    if n_requests < 1:
        raise ValueError(f"n_requests must be >= 1, got {n_requests}")
    model = preset(timing)
    found = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        workload = Workload(
            {
                "arrival_s": np.cumsum(rng.exponential(1 / 20.0, n_requests)),
                "prompt_tokens": rng.integers(1, 1025, n_requests),
                "output_tokens": rng.integers(1, 513, n_requests),
                "ttft_slo_s": rng.choice([0.3, 0.5, 1.0], n_requests),
                "tpot_slo_s": rng.choice([0.02, 0.05, 0.1], n_requests),
                "priority": rng.choice([1.0, 2.0], n_requests),
            }
        )
        cluster = Cluster(
            servers=servers,
            kv_capacity_tokens=8192,
            max_batch_tokens=2048,
            max_batch_size=64,
            mode=mode,
            prefill_servers=1 if mode == "disaggregated" else 0,
        )
        found.append(Instance(f"contract-seed{seed}", workload, cluster, model))
    return found


def _scheduler(policy: str | Callable[[Instance], Any], instance: Instance) -> Any:
    from slolab.heuristics.policies import Scheduler, make_scheduler

    if isinstance(policy, str):
        return make_scheduler(policy, instance)
    made = policy(instance)
    if isinstance(made, Scheduler | tuple):
        return Scheduler.of(made)
    return Scheduler(made)


def check_policy(
    policy: str | Callable[[Instance], Any],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    n_requests: int = 40,
    servers: int = 2,
    mode: str = "colocated",
) -> list[ContractViolation]:
    """Every violation of the policy contract (module docstring) on
    :func:`contract_instances` of ``seeds``; empty when the policy keeps it.

    Parameters
    ----------
    policy : str or callable
        A policy name (registered, a plugin's, or ``package.module:Name``), or
        ``make(instance)`` returning a Policy, a ``(policy, router)`` pair or a
        :class:`slolab.heuristics.policies.Scheduler`.
    seeds : sequence of int
        One random instance per seed; the run uses the same seed.
    n_requests, servers : int
        Size of each instance.
    mode : str
        Serving mode of the instances (a static-batching policy needs ``static``).
    """
    from slolab.sim import PolicyError, check

    found: list[ContractViolation] = []
    for seed, instance in zip(
        seeds,
        contract_instances(seeds, n_requests=n_requests, servers=servers, mode=mode),
        strict=True,
    ):
        sched = _scheduler(policy, instance)
        ran = sched.on(instance)
        try:
            outcome = sched.run(instance, seed=seed, record_iterations=True)
        except PolicyError as exc:
            found.append(ContractViolation.parse(seed, "engine", str(exc)))
            continue
        found += [ContractViolation.parse(seed, "checker", m) for m in check(ran, outcome)]
        found += _unfinished(seed, ran, outcome)
        budget = getattr(sched.policy, "token_budget", None)
        if isinstance(budget, int | np.integer) and not isinstance(budget, bool):
            found += _over_budget(seed, outcome, int(budget))
    return found


def _unfinished(seed: int, instance: Instance, outcome: Any) -> list[ContractViolation]:
    times = outcome.token_times
    last = times[outcome.token_offsets[1:] - 1]
    stalled = np.zeros(len(last), dtype=bool)
    stalled[outcome.info.get("stalled_requests", [])] = True
    open_ = np.flatnonzero(~np.isfinite(last) & (~outcome.rejected | stalled))
    arrival = instance.workload.arrival_s
    return [
        ContractViolation(
            seed,
            "finished",
            f"request {r} arrived at {arrival[r]:.6g}s, was not rejected"
            f"{' by the policy (the run stalled)' if stalled[r] else ''} and has "
            f"{int(np.sum(~np.isfinite(times[outcome.token_offsets[r] : outcome.token_offsets[r + 1]])))}"
            f" of {int(instance.workload.output_tokens[r])} tokens never emitted",
            int(r),
            float(arrival[r]),
        )
        for r in open_.tolist()
    ]


def _over_budget(seed: int, outcome: Any, budget: int) -> list[ContractViolation]:
    from slolab.sim.outcome import PHASE_STATIC

    offsets = outcome.entry_offsets
    # static-batch members carry their output tokens, not the tokens of one iteration
    counted = np.where(outcome.entry_phase == PHASE_STATIC, 0, outcome.entry_tokens)
    cumulative = np.concatenate([[0], np.cumsum(counted, dtype=np.int64)])
    totals = cumulative[offsets[1:]] - cumulative[offsets[:-1]]
    found = []
    for i in np.flatnonzero(totals > budget).tolist():
        total = totals[i]
        if offsets[i + 1] > offsets[i]:
            found.append(
                ContractViolation(
                    seed,
                    "budget",
                    f"server {int(outcome.it_server[i])}: an iteration carries {int(total)} "
                    f"tokens, the policy declares a budget of {budget}",
                    int(outcome.entry_request[offsets[i]]),
                    float(outcome.it_start[i]),
                )
            )
    return found
