"""CBC backend: a PuLP MILP solved by the CBC binary bundled with PuLP (``PULP_CBC_CMD``).

CBC runs as a subprocess and writes a solution file and a log. PuLP reads the solution file,
whose first line reports "Stopped on time - objective value ..." when the time limit cut the
search with an incumbent; PuLP's ``status`` then still reads "Optimal", and only
``problem.sol_status`` (``LpSolutionIntegerFeasible`` rather than ``LpSolutionOptimal``)
and the log ("Result - Stopped on time limit") tell the difference. The best bound is parsed
from the log's "Lower bound:" / "Upper bound:" line (CBC prints it without the objective's
constant term, which is added back).

Ctrl-C interrupts PuLP's wait for the subprocess; the CBC process is then terminated (it would
otherwise run on to its time limit) and KeyboardInterrupt re-raised. PuLP's files go to a
temporary directory removed in every case.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import warnings
from typing import Any

from slolab.solvers.backend import (
    Backend,
    RawSolve,
    finite_or_none,
    milp_objective_constant,
    milp_objective_value,
    milp_raw_solve,
)
from slolab.solvers.base import MilpFormulation, Status

_RESULT_LINE = re.compile(r"^Result - (.*)$", re.MULTILINE)
_BOUND_LINE = re.compile(r"^(?:Lower|Upper) bound:\s+(\S+)", re.MULTILINE)
_NODES_LINE = re.compile(r"^Enumerated nodes:\s+(\d+)", re.MULTILINE)
_ITERATIONS_LINE = re.compile(r"^Total iterations:\s+(\d+)", re.MULTILINE)
_UNKNOWN_OPTION = re.compile(r"^No match for (\S+)", re.MULTILINE)
_OPTION_VALUE = re.compile(r"^[^\s]+$")


def _cbc_solver(**kwargs: Any) -> Any:
    """A ``pulp.PULP_CBC_CMD``, without PuLP's notice about its future removal."""
    import pulp

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PULP_CBC_CMD is deprecated")
        return pulp.PULP_CBC_CMD(**kwargs)


class CbcBackend(Backend):
    """MILP backend running PuLP's bundled CBC binary.

    Options (``**params``) are CBC command-line options, passed as ``-name value`` (for example
    ``cuts="off"``, ``ratioGap=0.01``, ``maxNodes=1000``); an option CBC does not know raises
    ValueError after the run. The seed goes to both ``randomCbcSeed`` and ``randomSeed`` as
    ``seed + 1`` (CBC reads 0 as "seed from the time of day"); ``threads > 1`` turns on CBC's
    parallel branch and bound, ``threads = 1`` keeps the serial default.
    """

    name = "cbc"
    formulation = "milp"
    requires = ("pulp",)

    @classmethod
    def available(cls) -> bool:
        return bool(_cbc_solver(msg=False).available())

    def _check_params(self) -> None:
        for option, value in self.params.items():
            if not option.isidentifier():
                raise ValueError(f"CBC option names are single words, got {option!r}")
            if not _OPTION_VALUE.match(str(value)):
                raise ValueError(f"CBC option {option} needs a single-word value, got {value!r}")

    def solve_milp(self, form: MilpFormulation, time_limit: float) -> RawSolve:
        """Solve ``form.problem`` with CBC within ``time_limit`` seconds."""
        options = [f"randomCbcSeed {self.seed + 1}", f"randomSeed {self.seed + 1}"]
        options += [f"{option} {value}" for option, value in self.params.items()]
        with tempfile.TemporaryDirectory() as tmp:
            log_path = os.path.join(tmp, "cbc.log")
            solver = _cbc_solver(
                msg=False,
                timeLimit=float(time_limit),
                threads=self.threads if self.threads > 1 else None,
                logPath=log_path,
                options=options,
            )
            solver.tmpDir = tmp
            start = time.perf_counter()
            try:
                form.problem.solve(solver)
            except KeyboardInterrupt:
                _stop_subprocesses(solver.path)
                raise
            runtime_s = time.perf_counter() - start
            with open(log_path) as handle:
                full_log = handle.read()
        unknown = sorted(set(_UNKNOWN_OPTION.findall(full_log)) & set(self.params))
        if unknown:
            raise ValueError(f"CBC does not know the option(s): {', '.join(unknown)}")
        return self._outcome(form, full_log, runtime_s)

    def _outcome(self, form: MilpFormulation, full_log: str, runtime_s: float) -> RawSolve:
        import pulp

        problem = form.problem
        results = _RESULT_LINE.findall(full_log)
        result_line = results[-1].strip() if results else ""
        stopped_on_time = "time" in result_line.lower()
        solution = problem.sol_status
        native_objective = None
        if solution in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            native_objective = milp_objective_value(problem)
        has_solution = native_objective is not None
        native_bound = None
        bounds = _BOUND_LINE.findall(full_log)
        if bounds:
            parsed = finite_or_none(_to_float(bounds[-1]))
            if parsed is not None:
                native_bound = parsed + milp_objective_constant(problem)

        if solution == pulp.LpSolutionOptimal and has_solution:
            if "gap" in result_line.lower():
                status = Status.FEASIBLE
            else:
                native_bound = native_objective
                status = Status.OPTIMAL
        elif solution == pulp.LpSolutionIntegerFeasible and has_solution:
            status = Status.TIME_LIMIT if stopped_on_time else Status.FEASIBLE
        elif problem.status == pulp.LpStatusInfeasible or solution == pulp.LpSolutionInfeasible:
            status = Status.INFEASIBLE
        elif stopped_on_time:
            status = Status.TIME_LIMIT
        else:
            status = Status.UNKNOWN
        nodes = _last_int(_NODES_LINE, full_log)
        iterations = _last_int(_ITERATIONS_LINE, full_log)
        return milp_raw_solve(
            form,
            backend=self.name,
            status=status,
            has_solution=has_solution,
            native_objective=native_objective,
            native_bound=native_bound,
            runtime_s=runtime_s,
            solver_status=result_line or pulp.LpStatus.get(problem.status, "Undefined"),
            nodes=nodes,
            iterations=iterations,
            full_log=full_log.strip() if self.log else "",
        )


def _stop_subprocesses(executable: str) -> None:
    """Terminate this process's children running ``executable`` (kill those still up after 1 s)."""
    import psutil

    running = []
    for child in psutil.Process().children():
        try:
            if child.cmdline()[:1] == [executable]:
                child.terminate()
                running.append(child)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(running, timeout=1.0)
    for child in alive:
        child.kill()
    psutil.wait_procs(alive, timeout=1.0)


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _last_int(pattern: re.Pattern[str], text: str) -> int | None:
    found = pattern.findall(text)
    return int(found[-1]) if found else None
