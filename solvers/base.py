"""Solver-side contract: Status, Result and the ExactModel interface every model implements.

An exact model (one per paper problem, in :mod:`slolab.models`) is built from an Instance and
offers one or more *formulations*:

- :meth:`ExactModel.milp` returns a :class:`MilpFormulation` (a PuLP problem, written once, run
  unchanged on HiGHS or CBC);
- :meth:`ExactModel.cpsat` returns a :class:`CpFormulation` (an OR-Tools CP-SAT model);
- :meth:`ExactModel.brute_force` enumerates every decision (tiny instances only).

Each formulation turns a solver solution into a :class:`slolab.sim.schedule.Schedule` that the
engine replays; the harness recomputes the objective from the replay with the shared metrics.
Models whose objective needs several solves (a ratio handled by Dinkelbach iterations, say)
override :meth:`ExactModel.solve_with`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from slolab.sim.schedule import Schedule


class Status(str, Enum):
    """Outcome of a solve. OPTIMAL only when the backend proved it."""

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    INFEASIBLE = "INFEASIBLE"
    TIME_LIMIT = "TIME_LIMIT"
    UNKNOWN = "UNKNOWN"

    @property
    def has_solution(self) -> bool:
        return self in (Status.OPTIMAL, Status.FEASIBLE)


@dataclass(frozen=True)
class Result:
    """What a solve produced.

    ``objective`` is the incumbent's value (None without one), ``bound`` the best proved bound
    on the optimum (an upper bound when maximizing). A run cut by its time limit has status
    TIME_LIMIT (with or without an incumbent: ``schedule`` tells), never OPTIMAL.
    """

    status: Status
    objective: float | None
    bound: float | None
    runtime_s: float
    backend: str
    model: str
    sense: str = "max"
    schedule: Schedule | None = None
    log: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sense not in ("max", "min"):
            raise ValueError(f"sense must be 'max' or 'min', got {self.sense!r}")
        if not self.runtime_s >= 0:
            raise ValueError(f"runtime_s must be >= 0, got {self.runtime_s}")
        if self.status == Status.OPTIMAL and self.objective is None:
            raise ValueError("an OPTIMAL result needs an objective")

    @property
    def optimum_interval(self) -> tuple[float, float]:
        """Interval known to contain the optimum: (incumbent, bound) ordered low to high.

        Unknown sides are -inf / +inf. An OPTIMAL result gives a point interval.
        """
        inc = self.objective
        if self.status == Status.OPTIMAL and inc is not None:
            return (inc, inc)
        lo, hi = -math.inf, math.inf
        if self.sense == "max":
            if inc is not None:
                lo = inc
            if self.bound is not None:
                hi = self.bound
        else:
            if self.bound is not None:
                lo = self.bound
            if inc is not None:
                hi = inc
        return (lo, hi)

    @property
    def gap(self) -> float | None:
        """Relative gap |bound - objective| / max(|objective|, 1e-12); 0 when OPTIMAL."""
        if self.status == Status.OPTIMAL:
            return 0.0
        if self.objective is None or self.bound is None:
            return None
        return abs(self.bound - self.objective) / max(abs(self.objective), 1e-12)

    def to_record(self) -> dict[str, Any]:
        lo, hi = self.optimum_interval
        return {
            "model": self.model,
            "backend": self.backend,
            "status": self.status.value,
            "objective": self.objective,
            "bound": self.bound,
            "gap": self.gap,
            "optimum_lo": lo,
            "optimum_hi": hi,
            "runtime_s": self.runtime_s,
        }


@dataclass(frozen=True)
class FrontPoint:
    """One point of a cost-attainment Pareto front (the epsilon-constraint method).

    Attributes
    ----------
    cost_server_s : float
        Server-seconds of the point's schedule, replayed (the incumbent of its level).
    attainment : float
        Attainment of that schedule, replayed.
    status : Status
        OPTIMAL when the least cost at the level is proved; otherwise the cost lies in
        ``[cost_bound, cost_server_s]``.
    cost_bound : float or None
        Proved lower bound on the least cost at the level.
    level : float
        The attainment the level required (the point may exceed it).
    runtime_s : float
        Wall time of the level's solve (s).
    backend : str
        Solver backend.
    schedule : Schedule or None
        The schedule (with its scaling plan) behind the point.
    """

    cost_server_s: float
    attainment: float
    status: Status
    cost_bound: float | None
    level: float
    runtime_s: float = 0.0
    backend: str = ""
    schedule: Schedule | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cost_server_s) and self.cost_server_s >= 0):
            raise ValueError(f"cost_server_s must be finite and >= 0, got {self.cost_server_s}")
        if not 0.0 <= self.attainment <= 1.0:
            raise ValueError(f"attainment must be in [0, 1], got {self.attainment}")
        if not self.runtime_s >= 0:
            raise ValueError(f"runtime_s must be >= 0, got {self.runtime_s}")

    @property
    def gap(self) -> float | None:
        """Relative distance of the cost to its bound (0 when OPTIMAL)."""
        if self.status == Status.OPTIMAL:
            return 0.0
        if self.cost_bound is None:
            return None
        return abs(self.cost_server_s - self.cost_bound) / max(abs(self.cost_server_s), 1e-12)

    def to_record(self) -> dict[str, Any]:
        return {
            "cost_server_s": self.cost_server_s,
            "attainment": self.attainment,
            "status": self.status.value,
            "cost_bound": self.cost_bound,
            "gap": self.gap,
            "level": self.level,
            "runtime_s": self.runtime_s,
            "backend": self.backend,
        }


@dataclass
class MilpFormulation:
    """A MILP written with PuLP, plus how to read a schedule off its solution.

    ``to_schedule()`` is called after a successful solve (variables carry values).
    ``objective_of(value)`` maps PuLP's objective value to the model's objective (identity by
    default; for example a scaled or shifted objective).
    """

    problem: Any  # pulp.LpProblem
    to_schedule: Callable[[], Schedule | None]
    objective_of: Callable[[float], float] = lambda v: v


@dataclass
class CpFormulation:
    """A CP-SAT model plus how to read a schedule off a solver holding its solution.

    CP-SAT objectives are integer: ``objective_of`` maps the solver's objective (and bound) to
    the model's objective.
    """

    model: Any  # ortools.sat.python.cp_model.CpModel
    to_schedule: Callable[[Any], Schedule | None]
    objective_of: Callable[[float], float] = lambda v: v


class ExactModel:
    """An exact formulation of one paper problem, built from an Instance.

    Subclasses set ``name`` (the registry key, e.g. ``"sa-ordering"``) and ``sense`` and
    implement any of :meth:`milp`, :meth:`cpsat`, :meth:`brute_force`.
    """

    name: ClassVar[str] = ""
    sense: ClassVar[str] = "max"
    #: True for a model whose optimum bounds the problem's objective but describes no schedule
    #: the engine can replay (a steady-state fluid model, say): its Results carry no Schedule
    #: and the harness labels it ``"bound"``.
    bound_only: ClassVar[bool] = False
    #: True for a model whose :meth:`solve_with` runs a search that draws its own progress bar
    #: (:class:`slolab.solvers.search.Search`), so a caller draws none around it.
    draws_progress: ClassVar[bool] = False
    #: The backends it runs on (None: every backend of a formulation :meth:`supports` names).
    backends: ClassVar[tuple[str, ...] | None] = None
    #: Silences the progress bar of a model that draws one (``--quiet``, ``--json``, compare).
    quiet: bool = False

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def milp(self) -> MilpFormulation:
        raise NotImplementedError(f"model {self.name!r} has no MILP formulation")

    def cpsat(self) -> CpFormulation:
        raise NotImplementedError(f"model {self.name!r} has no CP-SAT formulation")

    def brute_force(self, time_limit: float) -> tuple[float, Schedule | None] | None:
        """Exhaustive search: ``(optimum, schedule)``, or None when infeasible.

        Raises :class:`TimeoutError` when ``time_limit`` seconds pass first.
        """
        raise NotImplementedError(f"model {self.name!r} has no brute-force search")

    def supports(self) -> frozenset[str]:
        """Formulation kinds this model implements: subset of {"milp", "cpsat", "brute"}."""
        kinds = set()
        cls = type(self)
        if cls.milp is not ExactModel.milp:
            kinds.add("milp")
        if cls.cpsat is not ExactModel.cpsat:
            kinds.add("cpsat")
        if cls.brute_force is not ExactModel.brute_force:
            kinds.add("brute")
        return frozenset(kinds)

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        """Custom solve loop (for example Dinkelbach). None means: use the backend's default."""
        return None
