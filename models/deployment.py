"""What to deploy: the cheapest fleet of (GPU, TP) configurations for a workload and its SLOs.

A configuration ``c`` is a server (one model replica on ``tp`` GPUs of one type) with a price
``p_c`` per server-hour. The traffic is split into request classes ``k`` (size buckets x SLO
tiers) arriving at ``lambda_k`` req/s. ``mu_kc`` is the measured capacity of one server of
``c`` serving class ``k`` alone: the largest arrival rate at which it meets the attainment
target (0 when it cannot serve the class at all). The plan chooses ``n_c`` servers of each
configuration and the fraction ``x_kc`` of class ``k`` sent to configuration ``c``:

.. math::

    \\min \\sum_c p_c n_c \\quad \\text{s.t.} \\quad
    \\sum_c x_{kc} = 1 \\;\\; \\forall k, \\qquad
    \\sum_k \\frac{\\lambda_k x_{kc}}{\\mu_{kc}} \\le n_c \\;\\; \\forall c, \\qquad
    x_{kc} \\le n_c \\;\\; \\forall k: \\lambda_k > 0, \\qquad
    x_{kc} \\ge 0, \\;\\; x_{kc} = 0 \\text{ if } \\mu_{kc} = 0, \\qquad
    n_c \\in \\mathbb{Z}, \\; L_c \\le n_c \\le U_c.

``sum_k lambda_k x_kc / mu_kc`` is the configuration's load in servers: each class's share
costs the fraction of a server its measured capacity says. :func:`solve_milp` solves it with
HiGHS; :func:`solve_brute_force` enumerates the replica vectors by cost and decides each by an
LP (the assignment at fixed ``n``), the second exact formulation the tests compare with.
:func:`plan_violations` checks a plan independently of both.

References
----------
Griggs et al., "Mélange: Cost Efficient Large Language Model Serving by Exploiting GPU
Heterogeneity", 2024, Sec. 5 (the cost-aware bin-packing ILP over request-size buckets).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.solvers import ExactModel, Result, register_model
from slolab.solvers.base import Status

__all__ = [
    "DeploymentData",
    "DeploymentModel",
    "DeploymentPlan",
    "DeploymentResult",
    "plan_cost",
    "plan_loads",
    "plan_violations",
    "replica_bounds",
    "solve_brute_force",
    "solve_milp",
]

#: Load (in servers) a plan may exceed its replica count by and still pass the checker: the
#: solver's feasibility tolerance, relative to the count.
LOAD_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class DeploymentData:
    """The inputs of the deployment problem.

    Attributes
    ----------
    configurations : tuple of str
        Configuration names (timing presets ``MODEL/GPU/tpN``).
    prices : tuple of float
        Price of one server of each configuration per hour (> 0).
    classes : tuple of str
        Request class names.
    rates : tuple of float
        Arrival rate of each class (req/s, >= 0).
    capacity : tuple of tuple of float
        ``capacity[c][k]``: largest arrival rate of class ``k`` alone that one server of
        configuration ``c`` serves at the target (req/s, >= 0; 0: it cannot serve the class).
    """

    configurations: tuple[str, ...]
    prices: tuple[float, ...]
    classes: tuple[str, ...]
    rates: tuple[float, ...]
    capacity: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        for name in ("configurations", "prices", "classes", "rates"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(
            self, "capacity", tuple(tuple(float(v) for v in row) for row in self.capacity)
        )
        if not self.configurations:
            raise ValueError("configurations must name at least one configuration")
        if not self.classes:
            raise ValueError("classes must name at least one request class")
        for field, names in (("configurations", self.configurations), ("classes", self.classes)):
            if len(set(names)) != len(names):
                raise ValueError(f"{field} must be unique, got {list(names)}")
        if len(self.prices) != len(self.configurations):
            raise ValueError(
                f"prices must have one entry per configuration ({len(self.configurations)}), "
                f"got {len(self.prices)}"
            )
        for c, price in enumerate(self.prices):
            if not (math.isfinite(price) and price > 0):
                raise ValueError(f"prices[{c}] ({self.configurations[c]}) must be > 0, got {price}")
        if len(self.rates) != len(self.classes):
            raise ValueError(
                f"rates must have one entry per class ({len(self.classes)}), got {len(self.rates)}"
            )
        for k, rate in enumerate(self.rates):
            if not (math.isfinite(rate) and rate >= 0):
                raise ValueError(f"rates[{k}] ({self.classes[k]}) must be >= 0, got {rate}")
        if len(self.capacity) != len(self.configurations) or any(
            len(row) != len(self.classes) for row in self.capacity
        ):
            raise ValueError(
                f"capacity must be {len(self.configurations)} x {len(self.classes)} "
                "(configurations x classes)"
            )
        for c, row in enumerate(self.capacity):
            for k, value in enumerate(row):
                if not (math.isfinite(value) and value >= 0):
                    raise ValueError(
                        f"capacity[{c}][{k}] ({self.configurations[c]}, {self.classes[k]}) "
                        f"must be a finite number >= 0, got {value}"
                    )
        for k, rate in enumerate(self.rates):
            if rate > 0 and not any(row[k] > 0 for row in self.capacity):
                raise ValueError(
                    f"class {self.classes[k]!r} arrives at {rate:g} req/s and no configuration "
                    "can serve it (capacity 0 everywhere)"
                )

    def servers_needed(self, c: int, k: int) -> float:
        """Servers of configuration ``c`` that all of class ``k`` takes (inf when ``c``
        cannot serve it and it arrives)."""
        rate, mu = self.rates[k], self.capacity[c][k]
        if rate == 0:
            return 0.0
        return rate / mu if mu > 0 else math.inf

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentData:
        """The data of :meth:`to_dict` (an instance's settings hold it)."""
        return cls(
            tuple(data["configurations"]),
            tuple(float(p) for p in data["prices"]),
            tuple(data["classes"]),
            tuple(float(r) for r in data["rates"]),
            tuple(tuple(float(v) for v in row) for row in data["capacity"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "configurations": list(self.configurations),
            "prices": list(self.prices),
            "classes": list(self.classes),
            "rates": list(self.rates),
            "capacity": [list(row) for row in self.capacity],
        }


@dataclass(frozen=True, slots=True)
class DeploymentPlan:
    """Servers per configuration and where each class's traffic goes.

    Attributes
    ----------
    replicas : tuple of int
        ``replicas[c]``: servers of configuration ``c``.
    fractions : tuple of tuple of float
        ``fractions[k][c]``: share of class ``k``'s arrivals sent to configuration ``c``.
    """

    replicas: tuple[int, ...]
    fractions: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        object.__setattr__(
            self, "fractions", tuple(tuple(float(v) for v in row) for row in self.fractions)
        )

    @classmethod
    def from_dict(cls, plan: dict[str, Any]) -> DeploymentPlan:
        """The plan of :meth:`to_dict`."""
        return cls(tuple(int(n) for n in plan["replicas"]), tuple(plan["fractions"]))

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "fractions": [list(row) for row in self.fractions],
        }


def plan_cost(data: DeploymentData, plan: DeploymentPlan) -> float:
    """Price of the plan's fleet per hour: ``sum_c p_c n_c``."""
    return float(sum(p * n for p, n in zip(data.prices, plan.replicas, strict=True)))


def plan_loads(data: DeploymentData, plan: DeploymentPlan) -> tuple[float, ...]:
    """Load of each configuration in servers: ``sum_k lambda_k x_kc / mu_kc`` (inf when a
    class is sent where its capacity is 0)."""
    loads = []
    for c in range(len(data.configurations)):
        load = 0.0
        for k in range(len(data.classes)):
            share = plan.fractions[k][c]
            if share > 0 and data.rates[k] > 0:
                load += share * data.servers_needed(c, k)
        loads.append(load)
    return tuple(loads)


def plan_violations(
    data: DeploymentData, plan: DeploymentPlan, tol: float = LOAD_TOLERANCE
) -> list[str]:
    """Every rule the plan breaks, one line each (empty: the plan is feasible).

    The rules: one replica count per configuration, each an integer >= 0; one row of
    fractions per class with one entry per configuration, each in [0, 1] and summing to 1
    (within ``tol``); no class sent to a configuration that cannot serve it; each
    configuration's load ``sum_k lambda_k x_kc / mu_kc`` at most ``n_c (1 + tol) + tol``.
    """
    found: list[str] = []
    n_conf, n_class = len(data.configurations), len(data.classes)
    if len(plan.replicas) != n_conf:
        return [f"replicas has {len(plan.replicas)} entries, the data {n_conf} configurations"]
    if len(plan.fractions) != n_class or any(len(row) != n_conf for row in plan.fractions):
        return [f"fractions must be {n_class} x {n_conf} (classes x configurations)"]
    for c, n in enumerate(plan.replicas):
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            found.append(f"replicas[{c}] ({data.configurations[c]}) is not an integer: {n!r}")
        elif n < 0:
            found.append(f"replicas[{c}] ({data.configurations[c]}) is negative: {n}")
    for k, row in enumerate(plan.fractions):
        for c, share in enumerate(row):
            if not (math.isfinite(share) and -tol <= share <= 1 + tol):
                found.append(
                    f"fractions[{k}][{c}] ({data.classes[k]} to {data.configurations[c]}) is "
                    f"not in [0, 1]: {share}"
                )
            elif share > tol and data.rates[k] > 0 and data.capacity[c][k] == 0:
                found.append(
                    f"{data.classes[k]} sends {share:.4g} of its traffic to "
                    f"{data.configurations[c]}, which cannot serve it (capacity 0)"
                )
        total = sum(row)
        if abs(total - 1.0) > tol:
            found.append(f"{data.classes[k]}'s fractions sum to {total:.9g}, not 1")
    for c, load in enumerate(plan_loads(data, plan)):
        n = plan.replicas[c]
        if load > n * (1 + tol) + tol:
            found.append(
                f"{data.configurations[c]} carries a load of {load:.6g} servers on {n} replicas"
            )
    return found


def replica_bounds(
    data: DeploymentData, lower: Sequence[int] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Bounds ``(L, U)`` on the servers of each configuration that keep every optimum.

    ``U_c = ceil(sum_k lambda_k / mu_kc)`` over the classes ``c`` can serve: an optimal plan
    never buys more servers than its load needs rounded up, and the load is at most that sum.
    ``L`` is ``lower`` (default 0; the closed loop raises it where a simulation missed); ``U``
    is raised to ``L`` where ``L`` is higher.
    """
    n_conf = len(data.configurations)
    low = tuple(int(v) for v in lower) if lower is not None else (0,) * n_conf
    if len(low) != n_conf or any(v < 0 for v in low):
        raise ValueError(f"lower must be {n_conf} integers >= 0, got {lower}")
    upper = []
    for c in range(n_conf):
        need = sum(
            data.servers_needed(c, k) for k in range(len(data.classes)) if data.capacity[c][k] > 0
        )
        # any traffic at all needs a server, however light (a load below the tolerance too)
        upper.append(max(low[c], int(need > 0), math.ceil(need - LOAD_TOLERANCE)))
    return low, tuple(upper)


@dataclass(frozen=True, slots=True)
class DeploymentResult:
    """What a solver found.

    Attributes
    ----------
    status : Status
        OPTIMAL only when the solver proved it; INFEASIBLE when no plan exists within the
        bounds.
    plan : DeploymentPlan or None
        The best plan found.
    cost : float
        Its price per hour (inf without a plan).
    bound : float
        Best lower bound on the optimal cost.
    runtime_s : float
        Wall time of the solve.
    backend : str
        ``highs`` or ``brute-force``.
    """

    status: Status
    plan: DeploymentPlan | None
    cost: float
    bound: float
    runtime_s: float
    backend: str

    def to_record(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "cost": self.cost,
            "bound": self.bound,
            "runtime_s": self.runtime_s,
            "backend": self.backend,
            **(self.plan.to_dict() if self.plan is not None else {}),
        }


def _columns(data: DeploymentData) -> list[tuple[int, int]]:
    """The (class, configuration) pairs a fraction may be positive on."""
    return [
        (k, c)
        for k in range(len(data.classes))
        for c in range(len(data.configurations))
        if data.capacity[c][k] > 0
    ]


def _clean(
    data: DeploymentData, replicas: Sequence[int], x: dict[tuple[int, int], float]
) -> DeploymentPlan:
    """The plan of a solver's values: fractions clipped to [0, 1] and each class's row
    rescaled to sum to 1 (removing the solver's tolerance drift)."""
    rows = []
    for k in range(len(data.classes)):
        row = [max(0.0, min(1.0, x.get((k, c), 0.0))) for c in range(len(data.configurations))]
        total = sum(row)
        rows.append(tuple(v / total for v in row))
    return DeploymentPlan(tuple(int(n) for n in replicas), tuple(rows))


def solve_milp(
    data: DeploymentData,
    *,
    lower: Sequence[int] | None = None,
    time_limit: float | None = None,
) -> DeploymentResult:
    """The cheapest plan by the MILP of the module docstring, on HiGHS.

    Variables: ``n_c`` integer in :func:`replica_bounds`, ``x_kc`` in [0, 1] where
    ``mu_kc > 0``. Rows: :func:`_assign_rows`, :func:`_load_rows` and :func:`_served_rows`.

    Parameters
    ----------
    data : DeploymentData
    lower : sequence of int, optional
        Least servers of each configuration (the closed loop's tightened bounds).
    time_limit : float, optional
        Seconds; a run cut short is TIME_LIMIT with its incumbent and bound.
    """
    import highspy

    start = time.perf_counter()
    low, up = replica_bounds(data, lower)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    n_conf = len(data.configurations)
    for c in range(n_conf):
        h.addVar(float(low[c]), float(up[c]))
        h.changeColCost(c, float(data.prices[c]))
        h.changeColIntegrality(c, highspy.HighsVarType.kInteger)
    columns = _columns(data)
    for j, _ in enumerate(columns):
        h.addVar(0.0, 1.0)
        h.changeColCost(n_conf + j, 0.0)
    _assign_rows(h, data, columns, n_conf)
    _load_rows(h, data, columns, n_conf)
    _served_rows(h, data, columns, n_conf)
    h.run()
    runtime = time.perf_counter() - start
    model_status = h.getModelStatus()
    info = h.getInfo()
    status = _status(highspy, model_status, h.getInfo().primal_solution_status)
    if status in (Status.INFEASIBLE, Status.UNKNOWN) and info.primal_solution_status != 2:
        return DeploymentResult(
            status, None, math.inf, float(info.mip_dual_bound), runtime, "highs"
        )
    values = list(h.getSolution().col_value)
    replicas = [round(values[c]) for c in range(n_conf)]
    x = {pair: values[n_conf + j] for j, pair in enumerate(columns)}
    plan = _clean(data, replicas, x)
    cost = plan_cost(data, plan)
    bound = cost if status == Status.OPTIMAL else float(info.mip_dual_bound)
    return DeploymentResult(status, plan, cost, bound, runtime, "highs")


def _assign_rows(h: Any, data: DeploymentData, columns: list[tuple[int, int]], n_conf: int) -> None:
    """Every class fully assigned: ``sum_c x_kc = 1`` for each class ``k``."""
    for k in range(len(data.classes)):
        index = [n_conf + j for j, (kk, _) in enumerate(columns) if kk == k]
        h.addRow(1.0, 1.0, len(index), np.array(index, dtype=np.int32), np.ones(len(index)))


def _load_rows(h: Any, data: DeploymentData, columns: list[tuple[int, int]], n_conf: int) -> None:
    """Each configuration's load within its servers: ``sum_k (lambda_k / mu_kc) x_kc - n_c
    <= 0`` for each configuration ``c``."""
    for c in range(n_conf):
        index = [c]
        value = [-1.0]
        for j, (k, cc) in enumerate(columns):
            if cc == c and data.rates[k] > 0:
                index.append(n_conf + j)
                value.append(data.servers_needed(c, k))
        h.addRow(-math.inf, 0.0, len(index), np.array(index, dtype=np.int32), np.array(value))


def _served_rows(h: Any, data: DeploymentData, columns: list[tuple[int, int]], n_conf: int) -> None:
    """Traffic only where a server is bought: ``x_kc - n_c <= 0`` for each class ``k`` with
    traffic and configuration ``c``. The load rows imply it up to the solver's tolerance; a
    class far below one server of load (``lambda_k / mu_kc`` under the tolerance) would
    otherwise fit on 0 servers."""
    for j, (k, c) in enumerate(columns):
        if data.rates[k] > 0:
            index = np.array([c, n_conf + j], dtype=np.int32)
            h.addRow(-math.inf, 0.0, 2, index, np.array([-1.0, 1.0]))


def _status(highspy: Any, model_status: Any, primal_status: int) -> Status:
    kind = highspy.HighsModelStatus
    if model_status == kind.kOptimal:
        return Status.OPTIMAL
    if model_status == kind.kInfeasible:
        return Status.INFEASIBLE
    if model_status == kind.kTimeLimit:
        return Status.TIME_LIMIT
    return Status.FEASIBLE if primal_status == 2 else Status.UNKNOWN


def assignment_at(data: DeploymentData, replicas: Sequence[int]) -> DeploymentPlan | None:
    """A feasible assignment of the classes to a fixed fleet ``replicas`` (None: none exists).

    An LP (:func:`scipy.optimize.linprog`): find ``x >= 0`` with ``sum_c x_kc = 1`` and
    ``sum_k (lambda_k / mu_kc) x_kc <= n_c``; it minimises the largest load-to-servers
    excess so that a fleet that can carry the traffic is told apart from one that cannot by
    the sign of the optimum, not by a solver's infeasibility flag.
    """
    from scipy.optimize import linprog

    columns = _columns(data)
    n_conf, m = len(data.configurations), len(columns)
    # variables: x_j (j < m), then the excess s; minimise s
    cost = np.zeros(m + 1)
    cost[m] = 1.0
    a_eq = np.zeros((len(data.classes), m + 1))
    for j, (k, _) in enumerate(columns):
        a_eq[k, j] = 1.0
    a_ub = np.zeros((n_conf, m + 1))
    for j, (k, c) in enumerate(columns):
        a_ub[c, j] = data.servers_needed(c, k) if data.rates[k] > 0 else 0.0
    a_ub[:, m] = -1.0
    # traffic only where a server is bought (see _served_rows)
    bounds = [(0.0, 0.0 if replicas[c] == 0 and data.rates[k] > 0 else 1.0) for k, c in columns] + [
        (None, None)
    ]
    found = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.asarray(replicas, dtype=float),
        A_eq=a_eq,
        b_eq=np.ones(len(data.classes)),
        bounds=bounds,
        method="highs",
    )
    if found.status != 0 or found.x[m] > LOAD_TOLERANCE:
        return None
    plan = _clean(data, replicas, {pair: found.x[j] for j, pair in enumerate(columns)})
    return plan if not plan_violations(data, plan) else None


def solve_brute_force(
    data: DeploymentData,
    *,
    lower: Sequence[int] | None = None,
    max_vectors: int = 200_000,
    time_limit: float | None = None,
) -> DeploymentResult:
    """The cheapest plan by enumeration: every replica vector within :func:`replica_bounds`,
    cheapest first, until one carries the traffic (:func:`assignment_at`).

    Exact (OPTIMAL) for instances with at most ``max_vectors`` replica vectors; larger ones
    are refused (ValueError). With ``time_limit`` (seconds) the enumeration stops when it
    runs out: TIME_LIMIT with no plan, its bound the cost of the first vector not decided
    (every cheaper one was refused).
    """
    import scipy.optimize  # noqa: F401  (loaded before the clock starts: the LPs use it)

    start = time.perf_counter()
    low, up = replica_bounds(data, lower)
    count = math.prod(u - lo + 1 for lo, u in zip(low, up, strict=True))
    if count > max_vectors:
        raise ValueError(
            f"brute force would enumerate {count} replica vectors (more than {max_vectors})"
        )
    vectors = sorted(
        itertools.product(*(range(lo, u + 1) for lo, u in zip(low, up, strict=True))),
        key=lambda n: (sum(p * v for p, v in zip(data.prices, n, strict=True)), n),
    )
    for replicas in vectors:
        if time_limit is not None and time.perf_counter() - start > time_limit:
            bound = float(sum(p * v for p, v in zip(data.prices, replicas, strict=True)))
            runtime = time.perf_counter() - start
            return DeploymentResult(
                Status.TIME_LIMIT, None, math.inf, bound, runtime, "brute-force"
            )
        plan = assignment_at(data, replicas)
        if plan is not None:
            cost = plan_cost(data, plan)
            runtime = time.perf_counter() - start
            return DeploymentResult(Status.OPTIMAL, plan, cost, cost, runtime, "brute-force")
    runtime = time.perf_counter() - start
    return DeploymentResult(Status.INFEASIBLE, None, math.inf, math.inf, runtime, "brute-force")


@register_model("deployment")
class DeploymentModel(ExactModel):
    """The deployment MILP of a ``deployment`` instance (its settings hold the
    :class:`DeploymentData`, capacities measured when it was built): :func:`solve_milp` on
    the ``highs`` backend, :func:`solve_brute_force` (the enumeration) on ``brute``.

    The Result carries no schedule: its decision is the plan, in ``details["plan"]``
    (:meth:`DeploymentPlan.to_dict`), which the problem runs as a fleet in the engine
    (:mod:`slolab.problems.deployment`). Its objective is the plan's price per hour.
    """

    sense = "min"
    backends = ("highs", "brute")

    @property
    def data(self) -> DeploymentData:
        return DeploymentData.from_dict(self.instance.settings["deployment"])

    def supports(self) -> frozenset[str]:
        return frozenset({"milp", "brute"})

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        if backend.name == "highs":
            found = solve_milp(self.data, time_limit=time_limit)
        elif backend.name == "brute":
            found = solve_brute_force(self.data, time_limit=time_limit)
        else:
            raise ValueError(
                f"the deployment model runs on highs (the MILP) or brute (the enumeration), "
                f"not {backend.name!r}"
            )
        return Result(
            found.status,
            None if found.plan is None else found.cost,
            None if math.isinf(found.bound) else found.bound,
            found.runtime_s,
            backend.name,
            self.name,
            sense="min",
            details={} if found.plan is None else {"plan": found.plan.to_dict()},
        )
