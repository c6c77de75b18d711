"""Small exact models with every formulation (MILP, CP-SAT, brute force) for the solver battery."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pulp
from ortools.sat.python import cp_model
from slolab.sim.schedule import Schedule
from slolab.solvers import CpFormulation, ExactModel, MilpFormulation, Result, Status

# How often (in enumerated candidates) the brute-force searches look at the clock.
CLOCK_EVERY = 1024


def chosen_schedule(items: Sequence[int]) -> Schedule:
    """One static batch holding the chosen items (an empty server when nothing is chosen)."""
    if not items:
        return Schedule(((),))
    return Schedule.static_batches([sorted(int(i) for i in items)])


def schedule_items(schedule: Schedule) -> list[int]:
    """Items of every batch of a schedule, in order."""
    return [r for its in schedule.iterations for it in its for r, _, _ in it.entries]


def enumerate_subsets(n: int, time_limit: float) -> Iterator[tuple[int, ...]]:
    """Every 0-1 vector of length n; TimeoutError once ``time_limit`` seconds pass."""
    deadline = time.perf_counter() + time_limit
    for count, picks in enumerate(itertools.product((0, 1), repeat=n)):
        if count % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
            raise TimeoutError(f"enumeration of 2^{n} subsets passed {time_limit} s")
        yield picks


@dataclass(frozen=True, slots=True)
class KnapsackData:
    """A multi-dimensional 0-1 knapsack: one weight row and capacity per resource."""

    values: tuple[int, ...]
    weights: tuple[tuple[int, ...], ...]
    capacities: tuple[int, ...]
    min_items: int = 0
    offset: int = 0


class Knapsack(ExactModel):
    """max offset + sum v_i x_i  s.t.  sum w_ki x_i <= c_k (every k),  sum x_i >= min_items."""

    name = "test-knapsack"
    sense = "max"

    @property
    def data(self) -> KnapsackData:
        return self.instance

    def milp(self) -> MilpFormulation:
        d = self.data
        n = len(d.values)
        problem = pulp.LpProblem("knapsack", pulp.LpMaximize)
        x = [problem.add_variable(f"x{i}", cat="Binary") for i in range(n)]
        problem += pulp.lpSum(d.values[i] * x[i] for i in range(n)) + d.offset
        for k, row in enumerate(d.weights):
            problem += pulp.lpSum(row[i] * x[i] for i in range(n)) <= d.capacities[k], f"cap{k}"
        if d.min_items:
            problem += pulp.lpSum(x) >= d.min_items, "min_items"

        def to_schedule() -> Schedule:
            return chosen_schedule([i for i in range(n) if x[i].value() > 0.5])

        return MilpFormulation(problem, to_schedule)

    def cpsat(self) -> CpFormulation:
        d = self.data
        n = len(d.values)
        model = cp_model.CpModel()
        x = [model.new_bool_var(f"x{i}") for i in range(n)]
        for k, row in enumerate(d.weights):
            model.add(sum(row[i] * x[i] for i in range(n)) <= d.capacities[k])
        if d.min_items:
            model.add(sum(x) >= d.min_items)
        model.maximize(sum(d.values[i] * x[i] for i in range(n)) + d.offset)

        def to_schedule(solver: Any) -> Schedule:
            return chosen_schedule([i for i in range(n) if solver.boolean_value(x[i])])

        return CpFormulation(model, to_schedule)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        d = self.data
        n = len(d.values)
        best: tuple[int, tuple[int, ...]] | None = None
        for picks in enumerate_subsets(n, time_limit):
            if sum(picks) < d.min_items:
                continue
            if any(
                sum(row[i] * picks[i] for i in range(n)) > cap
                for row, cap in zip(d.weights, d.capacities, strict=True)
            ):
                continue
            value = sum(d.values[i] * picks[i] for i in range(n))
            if best is None or value > best[0]:
                best = (value, picks)
        if best is None:
            return None
        return float(best[0] + d.offset), chosen_schedule([i for i in range(n) if best[1][i]])


class MilpOnlyKnapsack(Knapsack):
    """The knapsack without a CP-SAT formulation."""

    name = "milp-only-knapsack"
    cpsat = ExactModel.cpsat


def hard_knapsack(seed: int = 1, items: int = 150, resources: int = 15) -> Knapsack:
    """A random multi-dimensional knapsack no backend proves optimal in 1 s on this machine.

    150 items, 15 resources, weights and values uniform in [10, 100], capacities half the row
    sums. Measured here, incumbent vs bound at 1 s: HiGHS 15951 vs 15976, CBC 15951 vs 15977.1,
    CP-SAT 15946 vs 15979; CP-SAT (one worker) proves 15957 only after about 22 s and HiGHS
    is still open at 30 s. The objective carries an offset of 10_000 so that a bound missing
    the objective's constant term would fall below the incumbent.
    """
    rng = np.random.default_rng(seed)
    weights = rng.integers(10, 101, size=(resources, items))
    values = rng.integers(10, 101, size=items)
    return Knapsack(
        KnapsackData(
            values=tuple(int(v) for v in values),
            weights=tuple(tuple(int(w) for w in row) for row in weights),
            capacities=tuple(int(row.sum()) // 2 for row in weights),
            offset=10_000,
        )
    )


@dataclass(frozen=True, slots=True)
class JobsData:
    """Jobs on one machine: processing times and weights."""

    processing: tuple[int, ...]
    weights: tuple[int, ...]


class WeightedCompletion(ExactModel):
    """min sum_j w_j C_j on one machine (1 || sum w_j C_j); one job per static batch."""

    name = "test-weighted-completion"
    sense = "min"

    @property
    def data(self) -> JobsData:
        return self.instance

    def milp(self) -> MilpFormulation:
        """Disjunctive big-M: y_ij = 1 when i precedes j, M = sum of processing times."""
        p, w = self.data.processing, self.data.weights
        n, big_m = len(p), sum(p)
        problem = pulp.LpProblem("weighted_completion", pulp.LpMinimize)
        c = [problem.add_variable(f"C{j}", lowBound=p[j]) for j in range(n)]
        for i, j in itertools.combinations(range(n), 2):
            y = problem.add_variable(f"y{i}_{j}", cat="Binary")
            problem += c[j] >= c[i] + p[j] - big_m * (1 - y), f"after{i}_{j}"
            problem += c[i] >= c[j] + p[i] - big_m * y, f"before{i}_{j}"
        problem += pulp.lpSum(w[j] * c[j] for j in range(n))

        def to_schedule() -> Schedule:
            order = sorted(range(n), key=lambda j: c[j].value())
            return Schedule.static_batches([[j] for j in order])

        return MilpFormulation(problem, to_schedule)

    def cpsat(self) -> CpFormulation:
        p, w = self.data.processing, self.data.weights
        n, horizon = len(p), sum(p)
        model = cp_model.CpModel()
        starts = [model.new_int_var(0, horizon, f"s{j}") for j in range(n)]
        intervals = [model.new_fixed_size_interval_var(starts[j], p[j], f"i{j}") for j in range(n)]
        model.add_no_overlap(intervals)
        model.minimize(sum(w[j] * (starts[j] + p[j]) for j in range(n)))

        def to_schedule(solver: Any) -> Schedule:
            order = sorted(range(n), key=lambda j: solver.value(starts[j]))
            return Schedule.static_batches([[j] for j in order])

        return CpFormulation(model, to_schedule)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        p, w = self.data.processing, self.data.weights
        deadline = time.perf_counter() + time_limit
        best: tuple[int, tuple[int, ...]] | None = None
        for count, order in enumerate(itertools.permutations(range(len(p)))):
            if count % CLOCK_EVERY == 0 and time.perf_counter() > deadline:
                raise TimeoutError("permutation search passed its time limit")
            finish, cost = 0, 0
            for j in order:
                finish += p[j]
                cost += w[j] * finish
            if best is None or cost < best[0]:
                best = (cost, order)
        if best is None:
            return None
        return float(best[0]), Schedule.static_batches([[j] for j in best[1]])


@dataclass(frozen=True, slots=True)
class RatioData:
    """Pick items under a capacity to maximize value / (base + weight)."""

    values: tuple[int, ...]
    weights: tuple[int, ...]
    capacity: int
    base: int


class BestRatioSubset(ExactModel):
    """max (sum v_i x_i) / (base + sum w_i x_i)  s.t.  sum w_i x_i <= capacity, by Dinkelbach.

    For a current ratio lambda = N / D the subproblem is the integer program
    F(lambda) = max D sum v_i x_i - N (base + sum w_i x_i); the chosen set's own ratio is the
    next lambda, and F(lambda) = 0 proves lambda optimal (the current set scores exactly 0).
    """

    name = "test-best-ratio"
    sense = "max"

    @property
    def data(self) -> RatioData:
        return self.instance

    def milp_at(self, numerator: int, denominator: int) -> MilpFormulation:
        d = self.data
        n = len(d.values)
        problem = pulp.LpProblem("ratio_step", pulp.LpMaximize)
        x = [problem.add_variable(f"x{i}", cat="Binary") for i in range(n)]
        problem += (
            pulp.lpSum(
                (denominator * d.values[i] - numerator * d.weights[i]) * x[i] for i in range(n)
            )
            - numerator * d.base
        )
        problem += pulp.lpSum(d.weights[i] * x[i] for i in range(n)) <= d.capacity

        def to_schedule() -> Schedule:
            return chosen_schedule([i for i in range(n) if x[i].value() > 0.5])

        return MilpFormulation(problem, to_schedule)

    def cpsat_at(self, numerator: int, denominator: int) -> CpFormulation:
        d = self.data
        n = len(d.values)
        model = cp_model.CpModel()
        x = [model.new_bool_var(f"x{i}") for i in range(n)]
        model.add(sum(d.weights[i] * x[i] for i in range(n)) <= d.capacity)
        model.maximize(
            sum((denominator * d.values[i] - numerator * d.weights[i]) * x[i] for i in range(n))
            - numerator * d.base
        )

        def to_schedule(solver: Any) -> Schedule:
            return chosen_schedule([i for i in range(n) if solver.boolean_value(x[i])])

        return CpFormulation(model, to_schedule)

    def milp(self) -> MilpFormulation:
        return self.milp_at(0, 1)

    def cpsat(self) -> CpFormulation:
        return self.cpsat_at(0, 1)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        d = self.data
        n = len(d.values)
        best: tuple[float, tuple[int, ...]] | None = None
        for picks in enumerate_subsets(n, time_limit):
            weight = sum(d.weights[i] * picks[i] for i in range(n))
            if weight > d.capacity:
                continue
            ratio = sum(d.values[i] * picks[i] for i in range(n)) / (d.base + weight)
            if best is None or ratio > best[0]:
                best = (ratio, picks)
        if best is None:
            return None
        return best[0], chosen_schedule([i for i in range(n) if best[1][i]])

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        if backend.formulation == "brute":
            return None
        d = self.data
        deadline = time.perf_counter() + time_limit
        numerator, denominator, steps, solver_s = 0, 1, 0, 0.0
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                return Result(Status.TIME_LIMIT, None, None, solver_s, backend.name, self.name)
            if backend.formulation == "milp":
                form: MilpFormulation | CpFormulation = self.milp_at(numerator, denominator)
            else:
                form = self.cpsat_at(numerator, denominator)
            raw = backend.solve_formulation(form, remaining)
            steps += 1
            solver_s += raw.runtime_s
            if raw.status != Status.OPTIMAL or raw.schedule is None:
                return Result(raw.status, None, None, solver_s, backend.name, self.name)
            chosen = schedule_items(raw.schedule)
            if raw.objective is not None and raw.objective <= 1e-9:
                ratio = numerator / denominator
                return Result(
                    Status.OPTIMAL,
                    ratio,
                    ratio,
                    solver_s,
                    backend.name,
                    self.name,
                    schedule=raw.schedule,
                    details={"dinkelbach_steps": steps},
                )
            numerator = sum(d.values[i] for i in chosen)
            denominator = d.base + sum(d.weights[i] for i in chosen)
