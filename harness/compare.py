"""Heuristics and optima side by side, on the same instance and the same metrics.

Every row's ``objective`` is recomputed from the method's Outcome by :mod:`slolab.sim.metrics`
(the one evaluator). For exact methods the solver's own objective is kept as
``solver_objective`` and must agree with the recomputed one: a mismatch raises
:class:`ObjectiveMismatchError` (it means the model or the engine is wrong).

Gaps are reported as intervals, and are relative distances to the optimum (0 = optimal).
When the objective is maximised, the optimum lies in ``[L, U]`` with ``L`` the best objective
any method achieved (every replayed schedule is feasible) and ``U`` the smallest proved bound
among exact rows (``+inf`` when none); a method with objective ``v`` has gap ``1 - v / opt``,
so it lies in ``[gap_lo, gap_hi] = [1 - v / L, 1 - v / U]``. When it is minimised, ``U`` is the
best objective achieved, ``L`` the largest proved bound (``-inf`` when none), and the gap
``v / opt - 1`` lies in ``[v / U - 1, v / L - 1]`` (``+inf`` when ``L <= 0``).
Both ends coincide when an exact row is OPTIMAL.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from slolab.harness.methods import MethodRun, resolve_methods
from slolab.instances.records import Instance
from slolab.problems import get_problem
from slolab.sim import Outcome, check, metrics

log = logging.getLogger("slolab")

OBJECTIVE_TOLERANCE = 1e-6


class ObjectiveMismatchError(AssertionError):
    """A solver's objective differs from the objective of its replayed schedule."""


def objective(instance: Instance, outcome: Outcome, table: pd.DataFrame | None = None) -> float:
    """The instance's objective (its problem's, see :mod:`slolab.problems`) from an Outcome.

    ``table`` is the Outcome's :func:`slolab.sim.metrics.request_table`, if already computed.
    """
    if table is None:
        table = metrics.request_table(instance, outcome)
    return get_problem(instance.problem).objective(instance, outcome, table)


DETAILS_MAX_ITEMS = 10_000
_DROP = object()


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data (dicts, lists, numbers, strings, None), or ``_DROP``.

    Arrays and sequences longer than :data:`DETAILS_MAX_ITEMS` and objects with no plain form
    (a schedule, a solver handle) are dropped, so a row's details stay small and printable.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist() if value.size <= DETAILS_MAX_ITEMS else _DROP
        return value
    if isinstance(value, dict):
        out = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _DROP}
    if isinstance(value, list | tuple):
        if len(value) > DETAILS_MAX_ITEMS:
            return _DROP
        items = [_plain(v) for v in value]
        return [v for v in items if v is not _DROP]
    return _DROP


def run_details(mr: MethodRun) -> dict[str, Any]:
    """What a method reported beyond its objective, as plain data (see :func:`_plain`).

    The solver's ``Result.details`` (a bound's families and levels, a search's steps) and the
    runner's own (a heuristic's decision time), the runner's winning on a shared key.
    """
    merged = dict(mr.result.details) if mr.result is not None else {}
    merged.update(mr.details)
    plain = _plain(merged)
    return plain if isinstance(plain, dict) else {}


def _row(
    instance: Instance,
    name: str,
    kind: str,
    mr: MethodRun,
    run_checks: bool,
    details: bool = False,
) -> dict[str, Any]:
    res = mr.result
    objective_spec = get_problem(instance.problem).objective
    row: dict[str, Any] = {
        "instance": instance.name,
        "problem": instance.problem,
        "requests": instance.n_requests,
        "method": name,
        "kind": kind,
        "status": mr.status,
        "objective_name": objective_spec.name,
        "objective": math.nan,
        "sense": objective_spec.sense,
        "solver_objective": res.objective if res is not None else math.nan,
        "bound": res.bound if res is not None and res.bound is not None else math.nan,
        "runtime_s": mr.runtime_s,
        "backend": res.backend if res is not None else "",
    }
    if res is not None and row["solver_objective"] is None:
        row["solver_objective"] = math.nan
    if details:
        row["details"] = run_details(mr)
    out = mr.outcome
    if out is None:
        row["violations"] = math.nan
        return row
    if mr.instance is not None:
        instance = mr.instance  # the method ran on its own cluster layout
    table = metrics.request_table(instance, out)
    row["objective"] = objective(instance, out, table)
    row["attainment"] = metrics.attainment_from_table(table, "deadline")
    row["cost_server_s"] = metrics.server_seconds(instance, out)
    row["finished"] = int(table["finished"].sum())
    e2e = table["e2e_s"].to_numpy()
    e2e = e2e[np.isfinite(e2e)]
    row["mean_latency_s"] = float(e2e.mean()) if len(e2e) else math.nan
    ttft = table["ttft_s"].to_numpy()
    ttft = ttft[np.isfinite(ttft)]
    row["ttft_p99_s"] = float(np.percentile(ttft, 99)) if len(ttft) else math.nan
    if run_checks:
        violations = check(instance, out)
        row["violations"] = len(violations)
        if violations:
            log.warning(
                "%s on %s: %d checker violations, first: %s",
                name,
                instance.name,
                len(violations),
                violations[0],
            )
    if res is not None and res.objective is not None:
        a, b = float(res.objective), row["objective"]
        if abs(a - b) > OBJECTIVE_TOLERANCE * max(1.0, abs(a), abs(b)):
            raise ObjectiveMismatchError(
                f"{name} on {instance.name}: solver objective {a!r} but its replayed schedule "
                f"scores {b!r}"
            )
    return row


def optimum_interval(frame: pd.DataFrame, sense: str = "max") -> tuple[float, float]:
    """``(L, U)`` around the optimum from a compare table (see the module docstring)."""
    values = frame["objective"]
    exact = frame[frame["kind"].isin(["exact", "bound"])]
    proved: list[float] = []
    for _, r in exact.iterrows():
        if r["status"] == "OPTIMAL" and not math.isnan(r["objective"]):
            proved.append(float(r["objective"]))
        elif not math.isnan(r["bound"]):
            proved.append(float(r["bound"]))
    if sense == "max":
        lo = float(values.max()) if values.notna().any() else -math.inf
        hi = min(proved, default=math.inf)
        return lo, max(hi, lo)
    hi = float(values.min()) if values.notna().any() else math.inf
    lo = max(proved, default=-math.inf)
    return min(lo, hi), hi


def _gap(v: float, opt: float, sense: str) -> float:
    """Relative distance of ``v`` to a candidate optimum ``opt`` (NaN when undefined)."""
    if math.isnan(v) or math.isnan(opt):
        return math.nan
    if sense == "max":
        if math.isinf(opt):
            return 1.0
        return max(0.0, 1.0 - v / opt) if opt > 0 else math.nan
    if opt <= 0 or math.isinf(opt):
        return 0.0 if v <= opt else math.inf
    return max(0.0, v / opt - 1.0)


def compare(
    instance: Instance,
    methods: Sequence[str],
    *,
    seed: int = 0,
    time_limit: float = 60.0,
    threads: int = 1,
    run_checks: bool = True,
    progress: bool = False,
    details: bool = False,
) -> pd.DataFrame:
    """Run ``methods`` on ``instance`` and return one row per method.

    Every method name is resolved (and an unknown one reported) before any method runs.
    ``time_limit`` bounds each exact method (building its model included); a heuristic runs
    its whole simulation (with ``progress``, a bar of the arrivals simulated).

    Columns: instance, problem, requests, method, kind (heuristic / exact / bound), status,
    objective_name, objective (recomputed from the Outcome), sense (max / min),
    solver_objective, bound, gap_lo, gap_hi (the relative gap to the optimum as an interval: 0
    is optimal), gap (that gap once the interval is a point, NaN while it is not), optimum_lo, optimum_hi, runtime_s, attainment, cost_server_s (server-seconds
    of the run, :func:`slolab.sim.metrics.server_seconds`), finished, mean_latency_s,
    ttft_p99_s, violations (checker); with ``details``, also details (what the method reported
    beyond its objective, as plain data: :func:`run_details`).
    """
    resolved = resolve_methods(list(methods), instance)
    rows = []
    it: Any = resolved
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(resolved, desc=f"compare {instance.name}", leave=False)
    for m in it:
        mr = m.runner(
            instance, seed=seed, time_limit=time_limit, threads=threads, progress=progress
        )
        rows.append(_row(instance, m.name, m.kind, mr, run_checks, details))
    return with_gaps(pd.DataFrame(rows))


def with_gaps(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows of one instance) with the optimum interval and each row's gap interval.

    Sets ``optimum_lo`` and ``optimum_hi`` from :func:`optimum_interval` and ``gap_lo``,
    ``gap_hi`` for every row (see the module docstring), for the objective's ``sense`` column;
    rows of separate runs of methods on one instance combine into the table a single
    :func:`compare` call would give.
    """
    frame = frame.copy()
    sense = str(frame["sense"].iloc[0]) if "sense" in frame.columns and len(frame) else "max"
    lo, hi = optimum_interval(frame, sense)
    frame["optimum_lo"] = lo
    frame["optimum_hi"] = hi
    # max: opt in [lo, hi], gap = 1 - v / opt in [1 - v / lo, 1 - v / hi]
    # min: opt in [lo, hi], gap = v / opt - 1 in [v / hi - 1, v / lo - 1]
    near, far = (lo, hi) if sense == "max" else (hi, lo)
    ends = [(_gap(v, near, sense), _gap(v, far, sense)) for v in frame["objective"]]
    # a negative objective (attainment minus the price of cost) turns the two ends round
    ends = [(b, a) if a > b else (a, b) for a, b in ends]
    frame["gap_lo"] = [a for a, _ in ends]
    frame["gap_hi"] = [b for _, b in ends]
    frame["gap"] = [
        lo if lo == hi or abs(lo - hi) <= 1e-12 else math.nan
        for lo, hi in zip(frame["gap_lo"], frame["gap_hi"], strict=True)
    ]
    return frame
