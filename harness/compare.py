"""Heuristics and optima side by side, on the same instance and the same metrics.

Every row's ``objective`` is recomputed from the method's Outcome by :mod:`slolab.sim.metrics`
(the one evaluator). For exact methods the solver's own objective is kept as
``solver_objective`` and must agree with the recomputed one: a mismatch raises
:class:`ObjectiveMismatchError` (it means the model or the engine is wrong).

Gaps are reported as intervals. All objectives here are maximised; the optimum lies in
``[L, U]`` with ``L`` the best objective any method achieved (every replayed schedule is
feasible) and ``U`` the smallest proved bound among exact rows (``+inf`` when none). The gap of
a method with objective ``v`` is ``1 - v / opt``, so it lies in
``[1 - v / L, 1 - v / U]``; both ends coincide when an exact row is OPTIMAL.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from slolab.harness.methods import MethodRun, get_method
from slolab.instances.records import Instance
from slolab.sim import Outcome, check, metrics

log = logging.getLogger("slolab")

OBJECTIVE_TOLERANCE = 1e-6


class ObjectiveMismatchError(AssertionError):
    """A solver's objective differs from the objective of its replayed schedule."""


def _definition(instance: Instance) -> str:
    return str(instance.settings.get("definition", "deadline"))


def _attainment(instance: Instance, table: pd.DataFrame) -> float:
    return metrics.attainment_from_table(table, _definition(instance))


def _g(instance: Instance, table: pd.DataFrame) -> float:
    return metrics.g_ratio_from_table(table)


def _admitted_value(instance: Instance, table: pd.DataFrame) -> float:
    """Value of the new (not running) requests served within their SLO at a scheduler call."""
    wl = instance.workload
    ok = table[f"met_{_definition(instance)}"].to_numpy()
    if "running" in wl:
        ok = ok & ~np.asarray(wl["running"], dtype=bool)
    return float(wl["value"][ok].sum())


#: Objective of each problem: (label, function of (instance, request table)).
OBJECTIVES: dict[str, tuple[str, Callable[[Instance, pd.DataFrame], float]]] = {
    "serving": ("attainment", _attainment),
    "sa-ordering": ("G", _g),
    "slos-admission": ("admitted value", _admitted_value),
}


def objective(instance: Instance, outcome: Outcome, table: pd.DataFrame | None = None) -> float:
    """The instance's objective recomputed from an Outcome (or its request table, if given)."""
    if instance.problem not in OBJECTIVES:
        raise ValueError(
            f"no objective for problem {instance.problem!r}; known: {', '.join(OBJECTIVES)}"
        )
    if table is None:
        table = metrics.request_table(instance, outcome)
    return float(OBJECTIVES[instance.problem][1](instance, table))


def _row(
    instance: Instance, name: str, kind: str, mr: MethodRun, run_checks: bool
) -> dict[str, Any]:
    res = mr.result
    row: dict[str, Any] = {
        "instance": instance.name,
        "problem": instance.problem,
        "requests": instance.n_requests,
        "method": name,
        "kind": kind,
        "status": mr.status,
        "objective": math.nan,
        "solver_objective": res.objective if res is not None else math.nan,
        "bound": res.bound if res is not None and res.bound is not None else math.nan,
        "runtime_s": mr.runtime_s,
        "backend": res.backend if res is not None else "",
    }
    if res is not None and row["solver_objective"] is None:
        row["solver_objective"] = math.nan
    out = mr.outcome
    if out is None:
        row["violations"] = math.nan
        return row
    table = metrics.request_table(instance, out)
    row["objective"] = objective(instance, out, table)
    row["attainment"] = metrics.attainment_from_table(table, "deadline")
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


def optimum_interval(frame: pd.DataFrame) -> tuple[float, float]:
    """``(L, U)`` around the optimum from a compare table (see the module docstring)."""
    lo = float(frame["objective"].max()) if frame["objective"].notna().any() else -math.inf
    exact = frame[frame["kind"].isin(["exact", "bound"])]
    hi = math.inf
    for _, r in exact.iterrows():
        if r["status"] == "OPTIMAL" and not math.isnan(r["objective"]):
            hi = min(hi, float(r["objective"]))
        elif not math.isnan(r["bound"]):
            hi = min(hi, float(r["bound"]))
    return lo, max(hi, lo)


def _gap(v: float, opt: float) -> float:
    if math.isnan(v):
        return math.nan
    if math.isinf(opt):
        return 1.0
    if opt <= 0:
        return 0.0
    return max(0.0, 1.0 - v / opt)


def compare(
    instance: Instance,
    methods: Sequence[str],
    *,
    seed: int = 0,
    time_limit: float = 60.0,
    threads: int = 1,
    run_checks: bool = True,
    progress: bool = False,
) -> pd.DataFrame:
    """Run ``methods`` on ``instance`` and return one row per method.

    Columns: instance, problem, requests, method, kind (heuristic / exact / bound), status,
    objective (recomputed from the Outcome), solver_objective, bound, gap_lo, gap_hi (the gap to
    the optimum as an interval), runtime_s, attainment, finished, mean_latency_s, ttft_p99_s,
    violations (checker).
    """
    if not methods:
        raise ValueError("give at least one method")
    rows = []
    it: Any = methods
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(methods, desc=f"compare {instance.name}", leave=False)
    for name in it:
        m = get_method(name, instance)
        if instance.problem not in m.problems and m.kind == "heuristic":
            raise ValueError(f"method {name!r} does not apply to problem {instance.problem!r}")
        mr = m.runner(instance, seed=seed, time_limit=time_limit, threads=threads)
        rows.append(_row(instance, name, m.kind, mr, run_checks))
    return with_gaps(pd.DataFrame(rows))


def with_gaps(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (rows of one instance) with the optimum interval and each row's gap interval.

    Sets ``optimum_lo`` and ``optimum_hi`` from :func:`optimum_interval` and ``gap_lo``,
    ``gap_hi`` for every row (see the module docstring); rows of separate runs of methods on
    one instance combine into the table a single :func:`compare` call would give.
    """
    frame = frame.copy()
    lo, hi = optimum_interval(frame)
    frame["optimum_lo"] = lo
    frame["optimum_hi"] = hi
    # opt in [lo, hi] and gap = 1 - v / opt, so gap in [1 - v / lo, 1 - v / hi]
    frame["gap_lo"] = [_gap(v, lo) if lo > 0 else math.nan for v in frame["objective"]]
    frame["gap_hi"] = [_gap(v, hi) if lo > 0 else math.nan for v in frame["objective"]]
    return frame
