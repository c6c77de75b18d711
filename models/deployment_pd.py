"""What to deploy, disaggregated: a prefill pool and a decode pool sized apart, each of its own
(GPU, TP) configurations, with the KV caches moved between them over each prefill server's link.

The traffic is split into request classes ``k`` arriving at ``lambda_k`` req/s. On the prefill
side, configuration ``p`` costs ``P_p`` per server-hour, one of its servers prefills class ``k``
alone at up to ``mu^P_kp`` req/s within the class's TTFT target, and its link to the decode side
carries ``B_p`` bytes/s, of which a share ``u`` is planned (queued transfers wait less on a link
that is not full); a request of class ``k`` sends ``b_k`` bytes of KV cache. On the decode side,
configuration ``d`` costs ``D_d`` and one server decodes class ``k`` at up to ``mu^D_kd`` req/s.
The plan chooses ``n_p`` prefill and ``m_d`` decode servers and the fractions ``x_kp``, ``y_kd``
of each class sent to each:

.. math::

    \\min \\sum_p P_p n_p + \\sum_d D_d m_d \\quad \\text{s.t.} \\quad
    \\sum_p x_{kp} = 1, \\;\\; \\sum_d y_{kd} = 1 \\;\\; \\forall k,

    \\sum_k \\frac{\\lambda_k x_{kp}}{\\mu^P_{kp}} \\le n_p, \\qquad
    \\sum_k \\frac{\\lambda_k b_k x_{kp}}{u B_p} \\le n_p \\;\\; \\forall p, \\qquad
    \\sum_k \\frac{\\lambda_k y_{kd}}{\\mu^D_{kd}} \\le m_d \\;\\; \\forall d,

with ``x, y >= 0``, zero where a capacity is 0, and ``n, m`` integer. No row joins the two
sides, so the problem separates: its optimum is the prefill side's plus the decode side's, each
a Mélange-style bin packing (the decode side is exactly the co-located model of
:mod:`slolab.models.deployment`, the prefill side has the link as a second load row per
configuration). :func:`solve_pd_milp` solves each side's MILP on HiGHS; :func:`solve_pd_brute_force`
enumerates each side's replica vectors by cost and decides each by an LP, the second exact
formulation the tests compare with. :func:`pd_plan_violations` checks a plan independently.

References
----------
Zhong et al., "DistServe: Disaggregating Prefill and Decoding for Goodput-optimized Large
Language Model Serving", OSDI 2024, Sec. 4 (per-phase placement: goodput per GPU of each
phase's configuration, instances replicated to the rate). Patel et al., "Splitwise: Efficient
Generative LLM Inference Using Phase Splitting", ISCA 2024, Sec. 5 (prompt and token machine
pools sized apart, of different GPU types). Griggs et al., "Mélange", 2024, Sec. 5 (the
cost-aware bin packing each side is).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from slolab.models.deployment import (
    LOAD_TOLERANCE,
    DeploymentData,
    DeploymentPlan,
    plan_cost,
    plan_violations,
)
from slolab.solvers import ExactModel, Result, register_model
from slolab.solvers.base import Status

__all__ = [
    "PDData",
    "PDModel",
    "PDPlan",
    "PDResult",
    "link_loads",
    "pd_plan_cost",
    "pd_plan_violations",
    "side_bounds",
    "solve_pd_brute_force",
    "solve_pd_milp",
]

#: Share of a prefill server's link bandwidth the plan may fill (the rest keeps the queue of
#: transfers short).
LINK_UTILIZATION = 0.7


@dataclass(frozen=True, slots=True)
class PDData:
    """The inputs of the disaggregated deployment problem.

    Attributes
    ----------
    prefill : DeploymentData
        Prefill configurations, their prices, the classes and rates, ``capacity[p][k]`` the
        prefill capacity ``mu^P`` (req/s).
    decode : DeploymentData
        Decode configurations, prices, the same classes and rates, the decode capacity ``mu^D``.
    kv_bytes : tuple of float
        Mean bytes of KV cache a request of each class sends (``(prompt + 1) x`` bytes per
        token).
    link_bandwidth : tuple of float
        Bytes/s of one server's link, per prefill configuration.
    link_utilization : float
        Share ``u`` of a link the plan may fill, in (0, 1].
    """

    prefill: DeploymentData
    decode: DeploymentData
    kv_bytes: tuple[float, ...]
    link_bandwidth: tuple[float, ...]
    link_utilization: float = LINK_UTILIZATION

    def __post_init__(self) -> None:
        object.__setattr__(self, "kv_bytes", tuple(float(v) for v in self.kv_bytes))
        object.__setattr__(self, "link_bandwidth", tuple(float(v) for v in self.link_bandwidth))
        if self.prefill.classes != self.decode.classes:
            raise ValueError("the prefill and decode sides must name the same classes")
        if self.prefill.rates != self.decode.rates:
            raise ValueError("the prefill and decode sides must give the same class rates")
        if len(self.kv_bytes) != len(self.prefill.classes):
            raise ValueError(
                f"kv_bytes must have one entry per class ({len(self.prefill.classes)}), "
                f"got {len(self.kv_bytes)}"
            )
        for k, b in enumerate(self.kv_bytes):
            if not (math.isfinite(b) and b >= 0):
                raise ValueError(f"kv_bytes[{k}] must be >= 0, got {b}")
        if len(self.link_bandwidth) != len(self.prefill.configurations):
            raise ValueError(
                "link_bandwidth must have one entry per prefill configuration "
                f"({len(self.prefill.configurations)}), got {len(self.link_bandwidth)}"
            )
        for p, bw in enumerate(self.link_bandwidth):
            if not (math.isfinite(bw) and bw > 0):
                raise ValueError(
                    f"link_bandwidth[{p}] ({self.prefill.configurations[p]}) must be > 0 B/s, "
                    f"got {bw}"
                )
        if not 0 < self.link_utilization <= 1:
            raise ValueError(f"link_utilization must be in (0, 1], got {self.link_utilization}")

    @property
    def classes(self) -> tuple[str, ...]:
        return self.prefill.classes

    def link_needed(self, p: int, k: int) -> float:
        """Prefill servers of configuration ``p`` whose links class ``k`` alone fills:
        ``lambda_k b_k / (u B_p)``."""
        rate = self.prefill.rates[k]
        return rate * self.kv_bytes[k] / (self.link_utilization * self.link_bandwidth[p])

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PDData:
        return cls(
            DeploymentData.from_dict(data["prefill"]),
            DeploymentData.from_dict(data["decode"]),
            tuple(float(v) for v in data["kv_bytes"]),
            tuple(float(v) for v in data["link_bandwidth"]),
            float(data.get("link_utilization", LINK_UTILIZATION)),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(),
            "kv_bytes": list(self.kv_bytes),
            "link_bandwidth": list(self.link_bandwidth),
            "link_utilization": self.link_utilization,
        }


@dataclass(frozen=True, slots=True)
class PDPlan:
    """Servers and class fractions per side (:class:`DeploymentPlan` each)."""

    prefill: DeploymentPlan
    decode: DeploymentPlan

    @classmethod
    def from_dict(cls, plan: dict[str, Any]) -> PDPlan:
        return cls(
            DeploymentPlan.from_dict(plan["prefill"]), DeploymentPlan.from_dict(plan["decode"])
        )

    def to_dict(self) -> dict[str, Any]:
        return {"prefill": self.prefill.to_dict(), "decode": self.decode.to_dict()}


def pd_plan_cost(data: PDData, plan: PDPlan) -> float:
    """``sum_p P_p n_p + sum_d D_d m_d``."""
    return plan_cost(data.prefill, plan.prefill) + plan_cost(data.decode, plan.decode)


def link_loads(data: PDData, plan: PDPlan) -> tuple[float, ...]:
    """Per prefill configuration, the links its share of the traffic fills, in servers:
    ``sum_k lambda_k b_k x_kp / (u B_p)``."""
    return tuple(
        sum(plan.prefill.fractions[k][p] * data.link_needed(p, k) for k in range(len(data.classes)))
        for p in range(len(data.prefill.configurations))
    )


def pd_plan_violations(data: PDData, plan: PDPlan, tol: float = LOAD_TOLERANCE) -> list[str]:
    """Every rule the plan breaks, one line each: each side's rules
    (:func:`slolab.models.deployment.plan_violations`, prefixed ``prefill:`` or ``decode:``)
    and each prefill configuration's link load within its servers."""
    found = [f"prefill: {v}" for v in plan_violations(data.prefill, plan.prefill, tol)]
    found += [f"decode: {v}" for v in plan_violations(data.decode, plan.decode, tol)]
    if found:
        return found
    for p, load in enumerate(link_loads(data, plan)):
        n = plan.prefill.replicas[p]
        if load > n * (1 + tol) + tol:
            found.append(
                f"prefill: {data.prefill.configurations[p]}'s links carry a load of "
                f"{load:.6g} servers on {n} replicas"
            )
    return found


@dataclass(frozen=True, slots=True)
class PDResult:
    """What a solver found: status (OPTIMAL only when both sides were proved), the plan, its
    cost, the lower bound (the sides' bounds summed), wall time and backend."""

    status: Status
    plan: PDPlan | None
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
            **({} if self.plan is None else self.plan.to_dict()),
        }


def _loads(data: PDData, side: str) -> list[list[list[float]]]:
    """The load rows of a side, each ``rows[c][k]``: servers of ``c`` class ``k`` fills
    alone (compute; on the prefill side also the link)."""
    part = data.prefill if side == "prefill" else data.decode
    n_conf, n_class = len(part.configurations), len(part.classes)
    rows = [
        [
            [part.servers_needed(c, k) if part.rates[k] > 0 else 0.0 for k in range(n_class)]
            for c in range(n_conf)
        ]
    ]
    if side == "prefill":
        rows.append([[data.link_needed(c, k) for k in range(n_class)] for c in range(n_conf)])
    return rows


def side_bounds(
    data: PDData, side: str, lower: Sequence[int] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Bounds ``(L, U)`` on a side's servers per configuration that keep every optimum:
    ``U_c`` is the largest of the side's load rows summed over the classes ``c`` serves,
    rounded up (a configuration carrying everything it can needs no more); ``L`` is
    ``lower`` (default 0), ``U`` raised to it."""
    part = data.prefill if side == "prefill" else data.decode
    n_conf = len(part.configurations)
    low = tuple(int(v) for v in lower) if lower is not None else (0,) * n_conf
    if len(low) != n_conf or any(v < 0 for v in low):
        raise ValueError(f"lower must be {n_conf} integers >= 0, got {lower}")
    rows = _loads(data, side)
    upper = []
    for c in range(n_conf):
        served = [k for k in range(len(part.classes)) if part.capacity[c][k] > 0]
        need = max(sum(row[c][k] for k in served) for row in rows)
        upper.append(max(low[c], math.ceil(need - LOAD_TOLERANCE)))
    return low, tuple(upper)


def _columns(part: DeploymentData) -> list[tuple[int, int]]:
    return [
        (k, c)
        for k in range(len(part.classes))
        for c in range(len(part.configurations))
        if part.capacity[c][k] > 0
    ]


def _plan_of(
    part: DeploymentData, replicas: Sequence[int], x: dict[tuple[int, int], float]
) -> DeploymentPlan:
    """Fractions clipped to [0, 1] and each class's row rescaled to sum to 1."""
    rows = []
    for k in range(len(part.classes)):
        row = [max(0.0, min(1.0, x.get((k, c), 0.0))) for c in range(len(part.configurations))]
        total = sum(row)
        rows.append(tuple(v / total for v in row))
    return DeploymentPlan(tuple(int(n) for n in replicas), tuple(rows))


def _side_milp(
    data: PDData, side: str, lower: Sequence[int] | None, time_limit: float | None
) -> tuple[Status, DeploymentPlan | None, float]:
    """One side's MILP on HiGHS: ``(status, plan, bound)``. Variables ``n_c`` (integer, in
    :func:`side_bounds`) and ``x_kc`` in [0, 1]; rows :func:`_assign_rows` and
    :func:`_load_rows`."""
    import highspy

    part = data.prefill if side == "prefill" else data.decode
    low, up = side_bounds(data, side, lower)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    n_conf = len(part.configurations)
    for c in range(n_conf):
        h.addVar(float(low[c]), float(up[c]))
        h.changeColCost(c, float(part.prices[c]))
        h.changeColIntegrality(c, highspy.HighsVarType.kInteger)
    columns = _columns(part)
    for j, _ in enumerate(columns):
        h.addVar(0.0, 1.0)
        h.changeColCost(n_conf + j, 0.0)
    _assign_rows(h, part, columns, n_conf)
    _load_rows(h, _loads(data, side), columns, n_conf)
    h.run()
    info = h.getInfo()
    status = _status(highspy, h.getModelStatus(), info.primal_solution_status)
    if info.primal_solution_status != 2:
        return (
            (status if status != Status.FEASIBLE else Status.UNKNOWN),
            None,
            float(info.mip_dual_bound),
        )
    values = list(h.getSolution().col_value)
    x = {pair: values[n_conf + j] for j, pair in enumerate(columns)}
    plan = _plan_of(part, [round(values[c]) for c in range(n_conf)], x)
    cost = plan_cost(part, plan)
    return status, plan, cost if status == Status.OPTIMAL else float(info.mip_dual_bound)


def _assign_rows(h: Any, part: DeploymentData, columns: list[tuple[int, int]], n_conf: int) -> None:
    """Every class fully assigned: ``sum_c x_kc = 1`` for each class ``k``."""
    for k in range(len(part.classes)):
        index = [n_conf + j for j, (kk, _) in enumerate(columns) if kk == k]
        h.addRow(1.0, 1.0, len(index), np.array(index, dtype=np.int32), np.ones(len(index)))


def _load_rows(
    h: Any, rows: list[list[list[float]]], columns: list[tuple[int, int]], n_conf: int
) -> None:
    """Each load row within the servers: ``sum_k a_ck x_kc - n_c <= 0`` for each configuration
    ``c`` and each row ``a`` (compute ``lambda_k / mu_kc``; on the prefill side also the link,
    ``lambda_k b_k / (u B_c)``)."""
    for row in rows:
        for c in range(n_conf):
            index, value = [c], [-1.0]
            for j, (k, cc) in enumerate(columns):
                if cc == c and row[c][k] > 0:
                    index.append(n_conf + j)
                    value.append(row[c][k])
            h.addRow(-math.inf, 0.0, len(index), np.array(index, dtype=np.int32), np.array(value))


def _status(highspy: Any, model_status: Any, primal_status: int) -> Status:
    kind = highspy.HighsModelStatus
    if model_status == kind.kOptimal:
        return Status.OPTIMAL
    if model_status == kind.kInfeasible:
        return Status.INFEASIBLE
    if model_status == kind.kTimeLimit:
        return Status.TIME_LIMIT
    return Status.FEASIBLE if primal_status == 2 else Status.UNKNOWN


def _combine(
    sides: list[tuple[Status, DeploymentPlan | None, float]],
    data: PDData,
    start: float,
    backend: str,
) -> PDResult:
    (s_p, plan_p, bound_p), (s_d, plan_d, bound_d) = sides
    runtime = time.perf_counter() - start
    if Status.INFEASIBLE in (s_p, s_d):
        return PDResult(Status.INFEASIBLE, None, math.inf, math.inf, runtime, backend)
    if plan_p is None or plan_d is None:
        return PDResult(Status.UNKNOWN, None, math.inf, bound_p + bound_d, runtime, backend)
    plan = PDPlan(plan_p, plan_d)
    if s_p == s_d == Status.OPTIMAL:
        status = Status.OPTIMAL
    elif Status.TIME_LIMIT in (s_p, s_d):
        status = Status.TIME_LIMIT
    else:
        status = Status.FEASIBLE
    cost = pd_plan_cost(data, plan)
    return PDResult(
        status,
        plan,
        cost,
        cost if status == Status.OPTIMAL else bound_p + bound_d,
        runtime,
        backend,
    )


def solve_pd_milp(
    data: PDData,
    *,
    lower_prefill: Sequence[int] | None = None,
    lower_decode: Sequence[int] | None = None,
    time_limit: float | None = None,
) -> PDResult:
    """The cheapest disaggregated plan: each side's MILP on HiGHS (the module docstring), with
    least servers per configuration ``lower_prefill`` / ``lower_decode`` (the closed loop's
    bounds). OPTIMAL only when both sides are proved; a side cut by ``time_limit`` makes the
    result TIME_LIMIT with its incumbent and the sides' bounds summed."""
    start = time.perf_counter()
    sides = [
        _side_milp(data, "prefill", lower_prefill, time_limit),
        _side_milp(data, "decode", lower_decode, time_limit),
    ]
    return _combine(sides, data, start, "highs")


def _side_assignment(data: PDData, side: str, replicas: Sequence[int]) -> DeploymentPlan | None:
    """A feasible assignment of a side's classes to the fixed servers ``replicas`` (None: none
    exists): an LP minimising the largest excess of any load row over its servers, so that
    feasibility is the sign of an optimum."""
    from scipy.optimize import linprog

    part = data.prefill if side == "prefill" else data.decode
    columns = _columns(part)
    rows = _loads(data, side)
    n_conf, m = len(part.configurations), len(columns)
    cost = np.zeros(m + 1)
    cost[m] = 1.0
    a_eq = np.zeros((len(part.classes), m + 1))
    for j, (k, _) in enumerate(columns):
        a_eq[k, j] = 1.0
    a_ub = np.zeros((len(rows) * n_conf, m + 1))
    for r, row in enumerate(rows):
        for j, (k, c) in enumerate(columns):
            a_ub[r * n_conf + c, j] = row[c][k]
    a_ub[:, m] = -1.0
    b_ub = np.tile(np.asarray(replicas, dtype=float), len(rows))
    found = linprog(
        cost,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=a_eq,
        b_eq=np.ones(len(part.classes)),
        bounds=[(0.0, 1.0)] * m + [(None, None)],
        method="highs",
    )
    if found.status != 0 or found.x[m] > LOAD_TOLERANCE:
        return None
    return _plan_of(part, replicas, {pair: found.x[j] for j, pair in enumerate(columns)})


def _side_brute(
    data: PDData, side: str, lower: Sequence[int] | None, max_vectors: int
) -> tuple[Status, DeploymentPlan | None, float]:
    part = data.prefill if side == "prefill" else data.decode
    low, up = side_bounds(data, side, lower)
    count = math.prod(u - lo + 1 for lo, u in zip(low, up, strict=True))
    if count > max_vectors:
        raise ValueError(
            f"brute force would enumerate {count} {side} replica vectors (more than {max_vectors})"
        )
    vectors = sorted(
        itertools.product(*(range(lo, u + 1) for lo, u in zip(low, up, strict=True))),
        key=lambda n: (sum(p * v for p, v in zip(part.prices, n, strict=True)), n),
    )
    for replicas in vectors:
        plan = _side_assignment(data, side, replicas)
        if plan is not None:
            cost = plan_cost(part, plan)
            return Status.OPTIMAL, plan, cost
    return Status.INFEASIBLE, None, math.inf


def solve_pd_brute_force(
    data: PDData,
    *,
    lower_prefill: Sequence[int] | None = None,
    lower_decode: Sequence[int] | None = None,
    max_vectors: int = 200_000,
) -> PDResult:
    """The cheapest plan by enumeration, side by side: every replica vector within
    :func:`side_bounds`, cheapest first, until an LP finds an assignment
    (:func:`_side_assignment`). Exact (OPTIMAL) when each side has at most ``max_vectors``
    vectors; larger ones are refused (ValueError)."""
    start = time.perf_counter()
    sides = [
        _side_brute(data, "prefill", lower_prefill, max_vectors),
        _side_brute(data, "decode", lower_decode, max_vectors),
    ]
    return _combine(sides, data, start, "brute-force")


@register_model("deployment-pd")
class PDModel(ExactModel):
    """The disaggregated deployment MILP of a ``deployment-pd`` instance (its settings hold the
    :class:`PDData` under ``deployment_pd``): :func:`solve_pd_milp` on ``highs``,
    :func:`solve_pd_brute_force` on ``brute``. The Result's decision is the plan, in
    ``details["plan"]`` (:meth:`PDPlan.to_dict`); its objective the price per hour."""

    sense = "min"

    @property
    def data(self) -> PDData:
        return PDData.from_dict(self.instance.settings["deployment_pd"])

    def supports(self) -> frozenset[str]:
        return frozenset({"milp", "brute"})

    def solve_with(self, backend: Any, time_limit: float, **params: Any) -> Result | None:
        if backend.name == "highs":
            found = solve_pd_milp(self.data, time_limit=time_limit)
        elif backend.name == "brute":
            found = solve_pd_brute_force(self.data)
        else:
            raise ValueError(
                "the deployment-pd model runs on highs (the MILP) or brute (the enumeration), "
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
