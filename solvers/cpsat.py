"""CP-SAT backend: an OR-Tools CP-SAT model solved in-process.

CP-SAT reports OPTIMAL only with a proof, FEASIBLE when a limit stopped it with a solution and
UNKNOWN when it stopped without one; slolab reads a FEASIBLE or UNKNOWN stop at the time limit
as TIME_LIMIT. Objectives and bounds are integers in the model's scaled units and are mapped
back with the formulation's ``objective_of``.

Ctrl-C: CP-SAT's own SIGINT handler is off (``catch_sigint_signal = False``: it would end the
search as if the time limit had struck, and the interrupt would be lost); the search runs in a
worker thread and Ctrl-C calls ``CpSolver.stop_search``, then re-raises KeyboardInterrupt.
"""

from __future__ import annotations

import time
from typing import Any

from slolab.solvers.backend import (
    Backend,
    RawSolve,
    finite_or_none,
    proved,
    run_interruptibly,
    summary_line,
)
from slolab.solvers.base import CpFormulation, Status

# A stop this close to the time limit (as a fraction of it) counts as cut by the limit. CP-SAT
# ends its search a little before its limit (0.9966-0.9975 s of a 1 s limit on an idle
# machine, earlier on a loaded one, where 0.99 once read a limit stop as FEASIBLE).
_TIME_LIMIT_FRACTION = 0.9


class CpSatBackend(Backend):
    """CP-SAT backend (OR-Tools).

    Options (``**params``) are CP-SAT ``SatParameters`` fields (for example
    ``linearization_level=2``, ``search_branching=...``). ``threads`` sets ``num_workers``
    (1 gives CP-SAT's single-thread, deterministic search) and ``seed`` sets ``random_seed``.
    A gap limit in the options that makes CP-SAT stop early with "OPTIMAL" is reported
    FEASIBLE when the bound differs from the incumbent.
    """

    name = "cpsat"
    formulation = "cpsat"
    requires = ("ortools",)

    @classmethod
    def available(cls) -> bool:
        from ortools.sat.python import cp_model  # noqa: F401

        return True

    def _check_params(self) -> None:
        from ortools.sat.python import cp_model

        probe = cp_model.CpSolver().parameters
        for option, value in self.params.items():
            try:
                setattr(probe, option, value)
            except (AttributeError, TypeError, ValueError) as error:
                raise ValueError(
                    f"CP-SAT does not accept parameter {option}={value!r}: {error}"
                ) from error

    def solve_cp(self, form: CpFormulation, time_limit: float) -> RawSolve:
        """Solve ``form.model`` with CP-SAT within ``time_limit`` seconds."""
        from ortools.sat.python import cp_model

        solver = cp_model.CpSolver()
        parameters = solver.parameters
        parameters.max_time_in_seconds = float(time_limit)
        parameters.num_workers = self.threads
        parameters.random_seed = self.seed
        parameters.catch_sigint_signal = False
        for option, value in self.params.items():
            setattr(parameters, option, value)
        lines: list[str] = []
        if self.log:
            parameters.log_search_progress = True
            parameters.log_to_stdout = False
            solver.log_callback = lines.append
        start = time.perf_counter()
        code = run_interruptibly(lambda: solver.solve(form.model), solver.stop_search)
        runtime_s = time.perf_counter() - start
        if code == cp_model.MODEL_INVALID:
            raise ValueError(f"CP-SAT rejected the model: {form.model.validate()}")
        return self._outcome(form, solver, code, runtime_s, time_limit, "\n".join(lines))

    def _outcome(
        self,
        form: CpFormulation,
        solver: Any,
        code: Any,
        runtime_s: float,
        time_limit: float,
        full_log: str,
    ) -> RawSolve:
        from ortools.sat.python import cp_model

        has_objective = form.model.has_objective()
        has_solution = code in (cp_model.OPTIMAL, cp_model.FEASIBLE)
        native_objective: float | None = None
        native_bound: float | None = None
        if has_solution:
            native_objective = float(solver.objective_value) if has_objective else 0.0
        if has_objective and code != cp_model.INFEASIBLE:
            native_bound = finite_or_none(solver.best_objective_bound)
        elif code == cp_model.OPTIMAL:
            native_bound = native_objective
        # CP-SAT's own clock starts after it has loaded the model: ours counts that too
        timed_out = max(solver.wall_time, runtime_s) >= _TIME_LIMIT_FRACTION * time_limit

        if code == cp_model.OPTIMAL:
            status = Status.OPTIMAL if proved(native_objective, native_bound) else Status.FEASIBLE
        elif code == cp_model.FEASIBLE:
            status = Status.TIME_LIMIT if timed_out else Status.FEASIBLE
        elif code == cp_model.INFEASIBLE:
            status = Status.INFEASIBLE
        else:
            status = Status.TIME_LIMIT if timed_out else Status.UNKNOWN

        solver_status = solver.status_name(code)
        branches, conflicts = solver.num_branches, solver.num_conflicts
        log = summary_line("cpsat", solver_status, branches=branches, conflicts=conflicts)
        if full_log:
            log = f"{log}\n{full_log.strip()}"
        return RawSolve(
            status=status,
            objective=form.objective_of(native_objective) if native_objective is not None else None,
            bound=form.objective_of(native_bound) if native_bound is not None else None,
            runtime_s=runtime_s,
            schedule=form.to_schedule(solver) if has_solution else None,
            log=log,
            backend=self.name,
            details={"solver_status": solver_status, "branches": branches, "conflicts": conflicts},
            native=solver,
        )
