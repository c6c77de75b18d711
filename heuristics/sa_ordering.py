"""The SA paper's simulated-annealing scheduler and the baselines it is compared with.

:func:`sa_order` decides, for a queue of requests, the order and the batch split that maximize
``G = #SLO-met / sum of latencies`` (the problem of :mod:`slolab.models.sa_ordering`) by
simulated annealing:

- two starting plans: the input (arrival) order and the order of predicted execution time,
  both in full batches of ``B``; if the second meets every SLO, it is returned at once;
  otherwise the one with the higher G is the start;
- three moves, one drawn uniformly per iteration: *squeeze* a request into the previous batch
  (when it is not in the first batch and the previous batch has room), *delay* it to the next
  batch (when that batch has room; from the last batch this opens a new one), or *swap* two
  requests;
- Metropolis acceptance: a better plan always, a worse one with probability
  ``exp((G_new - G_cur) / T)``;
- geometric cooling ``T <- cooling_rate * T`` after ``iterations_per_temperature`` moves, from
  ``initial_temperature`` until ``T`` falls to ``final_temperature`` or below;
- the best plan seen is returned.

Baselines (:data:`BASELINES`): first come first served, earliest deadline first, shortest
predicted execution first, each in full batches.

Every method returns ordered batches; :func:`plan_schedule` turns them into a
:class:`~slolab.sim.schedule.Schedule` for :func:`slolab.sim.replay`.

References
----------
SLO-Aware Scheduling for Large Language Model Inferences (the "SA paper"), Sec. 4.3
(Algorithm 1, priority mapping by simulated annealing) and Sec. 5.1 (default
hyperparameters); the hyperparameter reading is argued in docs/sa_ordering.md.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from slolab.instances.records import Instance
from slolab.models.sa_ordering import Batches, OrderingProblem, as_problem, sorted_full_batches
from slolab.sim.schedule import Schedule

__all__ = [
    "BASELINES",
    "annealing_schedule",
    "edf_schedule",
    "fcfs_schedule",
    "shortest_first_schedule",
    "OrderingRule",
    "SAParams",
    "arrival_order",
    "batches_by_rule",
    "deadline_order",
    "edf_batches",
    "exec_time_order",
    "fcfs_batches",
    "plan_g",
    "plan_schedule",
    "sa_order",
    "shortest_first_batches",
]


@dataclass(frozen=True, slots=True)
class SAParams:
    """Hyperparameters of the simulated annealing (defaults: the SA paper's, Sec. 5.1).

    Parameters
    ----------
    initial_temperature : float
        Starting temperature ``T_0`` (> ``final_temperature``).
    final_temperature : float
        The search stops once the temperature falls to this threshold or below (> 0).
    iterations_per_temperature : int
        Moves tried at each temperature level (>= 1).
    cooling_rate : float
        Geometric cooling factor ``alpha``, ``T <- alpha T`` (0 < alpha < 1).

    References
    ----------
    SA paper, Sec. 5.1 ("Implementations": 500, 20, 100 and 0.95) and Sec. 5.2 (Figure 8).
    """

    initial_temperature: float = 500.0
    final_temperature: float = 20.0
    iterations_per_temperature: int = 100
    cooling_rate: float = 0.95

    def __post_init__(self) -> None:
        if not (math.isfinite(self.final_temperature) and self.final_temperature > 0):
            raise ValueError(
                f"final_temperature must be finite and > 0, got {self.final_temperature}"
            )
        if not (
            math.isfinite(self.initial_temperature)
            and self.initial_temperature > self.final_temperature
        ):
            raise ValueError(
                "initial_temperature must be finite and > final_temperature "
                f"({self.final_temperature}), got {self.initial_temperature}"
            )
        k = self.iterations_per_temperature
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"iterations_per_temperature must be an integer >= 1, got {k!r}")
        if not 0 < self.cooling_rate < 1:
            raise ValueError(f"cooling_rate must be in (0, 1), got {self.cooling_rate}")

    @property
    def temperature_levels(self) -> int:
        """Number of temperature levels: ``T_0 alpha^i > T_final`` for ``i = 0 .. levels - 1``."""
        levels = 0
        t = self.initial_temperature
        while t > self.final_temperature:
            levels += 1
            t *= self.cooling_rate
        return levels

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SAParams:
        """Parameters from a mapping; unknown keys raise ValueError naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown SA parameter(s) {unknown}; known: {', '.join(sorted(known))}"
            )
        return cls(**dict(data))

    @classmethod
    def from_toml(cls, path: str | Path, table: str | None = None) -> SAParams:
        """Parameters from a TOML file; ``table`` names a sub-table (``"sa"`` for ``[sa]``).

        Needs Python >= 3.11 (:mod:`tomllib`); :meth:`from_dict` works everywhere.
        """
        try:
            import tomllib
        except ModuleNotFoundError as error:
            raise RuntimeError("SAParams.from_toml needs Python >= 3.11 (tomllib)") from error
        data: Mapping[str, Any] = tomllib.loads(Path(path).read_text())
        if table is not None:
            if table not in data:
                raise ValueError(f"{path}: no table [{table}]")
            data = data[table]
        return cls.from_dict(data)


# ---------------------------------------------------------------------------------------------
# baselines: an ordering rule, then full batches
# ---------------------------------------------------------------------------------------------


class OrderingRule(Protocol):
    """A priority order of the queued requests (first = served first)."""

    def __call__(self, problem: OrderingProblem) -> list[int]: ...


def arrival_order(problem: OrderingProblem) -> list[int]:
    """First come first served: by arrival, ties by request index."""
    return sorted(range(problem.n_requests), key=lambda r: (float(problem.arrival_s[r]), r))


def deadline_order(problem: OrderingProblem) -> list[int]:
    """Earliest deadline first: by ``arrival + e2e SLO`` for requests with an e2e SLO, else
    ``arrival + TTFT SLO``; requests with neither go last; ties by request index."""

    def deadline(r: int) -> float:
        e2e = float(problem.e2e_slo_s[r])
        if not math.isnan(e2e):
            return float(problem.arrival_s[r]) + e2e
        ttft = float(problem.ttft_slo_s[r])
        if not math.isnan(ttft):
            return float(problem.arrival_s[r]) + ttft
        return math.inf

    return sorted(range(problem.n_requests), key=lambda r: (deadline(r), r))


def exec_time_order(problem: OrderingProblem) -> list[int]:
    """Shortest predicted execution first: by ``e_r(B)`` (the member's latency in a full batch,
    without waiting), ties by request index."""
    b = problem.batch_size
    return sorted(range(problem.n_requests), key=lambda r: (float(problem.exec_s[r, b]), r))


def batches_by_rule(problem: Instance | OrderingProblem, rule: OrderingRule) -> Batches:
    """Full batches of ``B`` along the order given by ``rule`` (the last may be smaller)."""
    data = as_problem(problem)
    return sorted_full_batches(data, rule(data))


def fcfs_batches(problem: Instance | OrderingProblem) -> Batches:
    """First come first served in full batches (vLLM-like order under static batching)."""
    return batches_by_rule(problem, arrival_order)


def edf_batches(problem: Instance | OrderingProblem) -> Batches:
    """Earliest deadline (e2e, else TTFT) first, in full batches."""
    return batches_by_rule(problem, deadline_order)


def shortest_first_batches(problem: Instance | OrderingProblem) -> Batches:
    """Shortest predicted execution time first, in full batches."""
    return batches_by_rule(problem, exec_time_order)


#: Baseline methods by name: each maps a problem to ordered batches.
BASELINES: dict[str, Callable[[Instance | OrderingProblem], Batches]] = {
    "fcfs": fcfs_batches,
    "edf": edf_batches,
    "shortest-first": shortest_first_batches,
}


def plan_schedule(batches: Sequence[Sequence[int]]) -> Schedule:
    """The static-batch schedule running ``batches`` in order on one server."""
    return Schedule.static_batches(batches)


def annealing_schedule(instance: Instance, *, seed: int) -> Schedule:
    """The SA paper's plan for ``instance`` (paper defaults) as a replayable schedule."""
    batches, _ = sa_order(instance, seed=seed)
    return plan_schedule(batches)


def fcfs_schedule(instance: Instance, *, seed: int) -> Schedule:
    """:func:`fcfs_batches` as a schedule (``seed`` unused: the rule is deterministic)."""
    return plan_schedule(fcfs_batches(instance))


def edf_schedule(instance: Instance, *, seed: int) -> Schedule:
    """:func:`edf_batches` as a schedule (``seed`` unused)."""
    return plan_schedule(edf_batches(instance))


def shortest_first_schedule(instance: Instance, *, seed: int) -> Schedule:
    """:func:`shortest_first_batches` as a schedule (``seed`` unused)."""
    return plan_schedule(shortest_first_batches(instance))


def plan_g(problem: Instance | OrderingProblem, batches: Sequence[Sequence[int]]) -> float:
    """G of a plan, evaluated exactly (as an engine replay would)."""
    return as_problem(problem).evaluate(batches).g


# ---------------------------------------------------------------------------------------------
# simulated annealing
# ---------------------------------------------------------------------------------------------


class _PlanEvaluator:
    """G of a plan given as (order, batch sizes), with plain Python lists for speed.

    Met status uses the precomputed latest start ``L_r(s)`` (start <= L_r(s)); the final plan
    is re-evaluated exactly by :meth:`OrderingProblem.evaluate`.
    """

    def __init__(self, problem: OrderingProblem) -> None:
        b = problem.batch_size
        self.exec_by_size = [problem.exec_s[:, s].tolist() for s in range(b + 1)]
        self.latest_by_size = [problem.latest_start_s[:, s].tolist() for s in range(b + 1)]
        self.arrival = problem.arrival_s.tolist()
        self.arrival_total = float(problem.arrival_s.sum())
        self.snapshot = problem.snapshot
        self.first_arrival = float(problem.arrival_s.min())

    def g(self, order: list[int], sizes: list[int]) -> float:
        end = self.first_arrival
        total = 0.0
        met = 0
        i = 0
        arrival = self.arrival
        for s in sizes:
            execs = self.exec_by_size[s]
            latest = self.latest_by_size[s]
            members = order[i : i + s]
            i += s
            start = end
            if not self.snapshot:
                for r in members:
                    if arrival[r] > start:
                        start = arrival[r]
            longest = 0.0
            for r in members:
                e = execs[r]
                total += e
                if start <= latest[r]:
                    met += 1
                if e > longest:
                    longest = e
            total += s * start
            end = start + longest
        return met / (total - self.arrival_total)


def _split(order: Sequence[int], b: int) -> list[int]:
    n = len(order)
    return [min(b, n - i) for i in range(0, n, b)]


def sa_order(
    problem: Instance | OrderingProblem,
    params: SAParams | None = None,
    *,
    seed: int,
) -> tuple[Batches, float]:
    """Order and batch the queued requests by the SA paper's simulated annealing.

    Parameters
    ----------
    problem : Instance or OrderingProblem
        An SA-ordering instance (``instance.problem == "sa-ordering"``) or its problem data.
    params : SAParams, optional
        Hyperparameters (default: the paper's).
    seed : int
        Seed of the move and acceptance draws (same seed, same plan).

    Returns
    -------
    batches : tuple of tuples of int
        The best plan found, batches in run order.
    g : float
        Its G (1/s), evaluated exactly.

    References
    ----------
    SA paper, Sec. 4.3 (Algorithm 1) and Sec. 5.1 (hyperparameters).
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    data = as_problem(problem)
    params = params or SAParams()
    n, b = data.n_requests, data.batch_size
    rng = random.Random(seed)
    evaluator = _PlanEvaluator(data)

    input_order = list(range(n))
    by_exec = exec_time_order(data)
    second = sorted_full_batches(data, by_exec)
    second_value = data.evaluate(second)
    if second_value.met_requests == n:
        return second, second_value.g
    first_g = data.evaluate(sorted_full_batches(data, input_order)).g
    order = input_order if first_g >= second_value.g else by_exec
    sizes = _split(order, b)
    g_cur = evaluator.g(order, sizes)
    best_g, best_order, best_sizes = g_cur, order[:], sizes[:]

    randrange = rng.randrange
    uniform = rng.random
    exp = math.exp
    temperature = params.initial_temperature
    while temperature > params.final_temperature:
        for _ in range(params.iterations_per_temperature):
            kind = randrange(3)
            i = randrange(n)
            k = 0
            first = 0
            while first + sizes[k] <= i:
                first += sizes[k]
                k += 1
            old_sizes = sizes[:]
            if kind == 0:  # squeeze into the previous batch
                if k == 0 or sizes[k - 1] >= b:
                    continue
                j = first
                sizes[k - 1] += 1
                sizes[k] -= 1
                if sizes[k] == 0:
                    del sizes[k]
            elif kind == 1:  # delay to the next batch
                j = first + sizes[k] - 1
                if k == len(sizes) - 1:
                    if sizes[k] == 1:
                        continue
                    sizes[k] -= 1
                    sizes.append(1)
                else:
                    if sizes[k + 1] >= b:
                        continue
                    sizes[k] -= 1
                    sizes[k + 1] += 1
                    if sizes[k] == 0:
                        del sizes[k]
            else:  # swap two requests
                j = randrange(n)
            order[i], order[j] = order[j], order[i]
            g_new = evaluator.g(order, sizes)
            if g_new >= g_cur or uniform() < exp((g_new - g_cur) / temperature):
                g_cur = g_new
                if g_cur > best_g:
                    best_g, best_order, best_sizes = g_cur, order[:], sizes[:]
            else:
                order[i], order[j] = order[j], order[i]
                sizes[:] = old_sizes
        temperature *= params.cooling_rate

    batches = []
    pos = 0
    for s in best_sizes:
        batches.append(tuple(best_order[pos : pos + s]))
        pos += s
    plan = data.check_batches(batches)
    return plan, data.evaluate(plan).g
