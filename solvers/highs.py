"""HiGHS backend: a PuLP MILP solved by PuLP's ``HiGHS`` interface (the in-process highspy API).

PuLP copies the problem into a ``highspy.Highs`` object (``problem.solverModel``), runs it and
writes the values back into the PuLP variables. Status, dual bound and counters are read from
that ``Highs`` object directly, because PuLP folds every stop (time limit, interrupt, ...) into
its "Optimal" status. The run itself goes through :func:`run_highs`, so Ctrl-C stops HiGHS
through its user-interrupt callback and reaches the caller as KeyboardInterrupt.
"""

from __future__ import annotations

import functools
import os
import tempfile
import threading
import time
from typing import Any

from slolab.solvers.backend import (
    Backend,
    RawSolve,
    finite_or_none,
    milp_objective_constant,
    milp_objective_value,
    milp_raw_solve,
    proved,
    run_interruptibly,
    wait_for_stopping_solvers,
)
from slolab.solvers.base import MilpFormulation, Status

# HiGHS's thread pool is global to the process and keeps the size it was first given; a solve
# asking for another size fails unless the pool is reset first. This records the current size.
_pool_threads: int | None = None

# HiGHS stops other than the time limit: a solution found so far is FEASIBLE, not proved.
_OTHER_LIMITS = frozenset(
    {
        "kIterationLimit",
        "kSolutionLimit",
        "kObjectiveBound",
        "kObjectiveTarget",
        "kInterrupt",
        "kMemoryLimit",
        "kHighsInterrupt",
    }
)


def run_highs(highs: Any) -> None:
    """Run a ``highspy.Highs`` so that Ctrl-C stops it within a fraction of a second.

    The solve runs in a worker thread (:func:`~slolab.solvers.backend.run_interruptibly`).
    On Ctrl-C, highspy's ``cancelSolve`` raises its stop flag and ``HandleUserInterrupt``
    starts the simplex, IPM and MIP interrupt callbacks that read it, so HiGHS returns at its
    next interrupt check; KeyboardInterrupt is then re-raised. The callbacks are started only
    on Ctrl-C: a Python callback on every interrupt check would slow every solve. Like
    highspy's own threaded solve, the worker resets its HiGHS scheduler before it ends.

    HiGHS's MIP search reads the flag between LP solves only, not inside one: the root LP
    of a large model (21,381 simplex iterations, about 10 s, for a 40-request sa-ordering
    snapshot) runs to its end first. So KeyboardInterrupt is re-raised after
    :data:`~slolab.solvers.backend.STOP_GRACE_S` even if HiGHS has not returned, and the next
    solve first waits for it (HiGHS's thread pool is global to the process).
    """
    import highspy

    def work() -> None:
        try:
            highs.run()
        finally:
            highspy.Highs.resetGlobalScheduler(False)

    run_interruptibly(work, functools.partial(cancel_highs, highs))


def cancel_highs(highs: Any) -> None:
    """Ask a running ``highspy.Highs`` solve to stop (safe from another thread): raise its stop
    flag and start the interrupt callbacks that read it (:func:`run_highs`)."""
    highs.cancelSolve()
    highs.HandleUserInterrupt = True


def run_highs_for(highs: Any, seconds: float) -> bool:
    """:func:`run_highs` for at most about ``seconds``: HiGHS's own limit (its clock runs over
    every solve of the same model, so the limit is set past its run time so far) and a timer
    that stops it, since a warm re-solve or a MILP checks that limit only between its steps.
    A solve the timer stopped ends with HiGHS's interrupt status, or with none when it was
    stopped before HiGHS set one. True when the timer fired."""
    seconds = float(max(seconds, 1e-3))
    highs.setOptionValue("time_limit", highs.getRunTime() + seconds)
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        cancel_highs(highs)

    timer = threading.Timer(seconds, stop)
    timer.start()
    try:
        run_highs(highs)
    finally:
        timer.cancel()
    return fired.is_set()


def lp_round(highs: Any, seconds: float, what: str) -> bool:
    """One round of a loop re-solving an LP (cuts or columns added between rounds): run it for
    at most about ``seconds`` (:func:`run_highs_for`). True when it ended OPTIMAL, False when
    the time limit or an interrupt stopped it (or the timer did before HiGHS set any status);
    any other end raises, naming ``what``."""
    import highspy

    stopped = run_highs_for(highs, seconds)
    code = highs.getModelStatus()
    if code in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt):
        return False
    if code == highspy.HighsModelStatus.kNotset and stopped:
        # the timer stopped it before HiGHS set any status (seen under load, on a short
        # budget): as a time limit
        return False
    if code != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"{what}: HiGHS ended with {highs.modelStatusToString(code)}")
    return True


def backend_highs(backend: Any) -> Any:
    """A ``highspy.Highs`` with the backend's log flag, threads and seed."""
    import highspy

    highs = highspy.Highs()
    highs.setOptionValue("output_flag", bool(backend.log))
    highs.setOptionValue("threads", int(backend.threads))
    highs.setOptionValue("random_seed", int(backend.seed))
    return highs


def highs_lp(
    matrix: Any,
    cost: Any,
    col_lo: Any,
    col_hi: Any,
    row_lo: Any,
    row_hi: Any,
    *,
    maximize: bool = False,
) -> Any:
    """A ``highspy.HighsLp`` of ``row_lo <= matrix x <= row_hi``, ``col_lo <= x <= col_hi``,
    objective ``cost x`` (minimised, or maximised with ``maximize``); ``matrix`` is a SciPy
    sparse matrix, passed column-wise without a copy when it is already CSC."""
    import highspy

    csc = matrix.tocsc()
    model = highspy.HighsLp()
    model.num_col_ = int(csc.shape[1])
    model.num_row_ = int(csc.shape[0])
    model.col_cost_ = cost
    model.col_lower_ = col_lo
    model.col_upper_ = col_hi
    model.row_lower_ = row_lo
    model.row_upper_ = row_hi
    if maximize:
        model.sense_ = highspy.ObjSense.kMaximize
    model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    model.a_matrix_.start_ = csc.indptr
    model.a_matrix_.index_ = csc.indices
    model.a_matrix_.value_ = csc.data
    return model


def _use_threads(threads: int) -> None:
    """Make HiGHS's global thread pool ``threads`` wide (reset only when the size changes)."""
    global _pool_threads
    import highspy

    wait_for_stopping_solvers()  # an interrupted solve still returning uses the pool
    if _pool_threads != threads:
        highspy.Highs.resetGlobalScheduler(True)
        _pool_threads = threads


class HighsBackend(Backend):
    """MILP backend running HiGHS in-process through PuLP.

    Options (``**params``) are HiGHS options, set with ``Highs.setOptionValue`` (for example
    ``presolve="off"``, ``mip_feasibility_tolerance=1e-7``). slolab sets ``mip_rel_gap=0`` so
    that OPTIMAL means the gap is closed (HiGHS's default stops at a relative gap of 1e-4);
    pass ``mip_rel_gap`` to change it: a result whose bound then differs from the incumbent is
    reported FEASIBLE, not OPTIMAL. A model HiGHS can only call "infeasible or unbounded" is
    UNKNOWN (``details["solver_status"]`` says so; solving again with ``presolve="off"`` tells
    the two apart).
    """

    name = "highs"
    formulation = "milp"
    requires = ("pulp", "highspy")

    @classmethod
    def available(cls) -> bool:
        import highspy  # noqa: F401
        import pulp

        return "HiGHS" in pulp.listSolvers(onlyAvailable=True)

    def _check_params(self) -> None:
        import highspy

        probe = highspy.Highs()
        probe.setOptionValue("output_flag", False)
        for option, value in self.params.items():
            if probe.setOptionValue(option, value) != highspy.HighsStatus.kOk:
                raise ValueError(f"HiGHS does not accept option {option}={value!r}")

    def solve_milp(self, form: MilpFormulation, time_limit: float) -> RawSolve:
        """Solve ``form.problem`` with HiGHS within ``time_limit`` seconds."""

        options: dict[str, Any] = {"mip_rel_gap": 0.0, "random_seed": self.seed}
        options.update(self.params)
        with tempfile.TemporaryDirectory() as tmp:
            log_path = os.path.join(tmp, "highs.log")
            if self.log:
                options.update(output_flag=True, log_to_console=False, log_file=log_path)
            solver = _interruptible_highs()(
                msg=False, timeLimit=float(time_limit), threads=self.threads, **options
            )
            _use_threads(self.threads)
            start = time.perf_counter()
            form.problem.solve(solver)
            runtime_s = time.perf_counter() - start
            full_log = _read(log_path) if self.log else ""
        return self._outcome(form, form.problem.solverModel, runtime_s, full_log)

    def _outcome(
        self, form: MilpFormulation, highs: Any, runtime_s: float, full_log: str
    ) -> RawSolve:
        import highspy
        import pulp

        problem = form.problem
        models = highspy.HighsModelStatus
        code = highs.getModelStatus()
        info = highs.getInfo()
        feasible = highspy.SolutionStatus.kSolutionStatusFeasible
        has_solution = info.primal_solution_status == feasible
        native_objective = milp_objective_value(problem) if has_solution else None
        if native_objective is None:
            has_solution = False
        native_bound = None
        if problem.isMIP():
            sign = -1.0 if problem.sense == pulp.LpMaximize else 1.0
            dual = finite_or_none(info.mip_dual_bound)
            if dual is not None and info.mip_node_count >= 0:
                native_bound = sign * dual + milp_objective_constant(problem)
        elif code == models.kOptimal:
            native_bound = native_objective

        if code in (models.kLoadError, models.kModelError):
            raise ValueError(f"HiGHS rejected the model: {highs.modelStatusToString(code)}")
        if code == models.kOptimal:
            status = Status.OPTIMAL if proved(native_objective, native_bound) else Status.FEASIBLE
        elif code == models.kInfeasible:
            status = Status.INFEASIBLE
        elif code == models.kTimeLimit:
            status = Status.TIME_LIMIT
        elif code.name in _OTHER_LIMITS:
            status = Status.FEASIBLE if has_solution else Status.UNKNOWN
        else:
            status = Status.UNKNOWN
        return milp_raw_solve(
            form,
            backend=self.name,
            status=status,
            has_solution=has_solution,
            native_objective=native_objective,
            native_bound=native_bound,
            runtime_s=runtime_s,
            solver_status=highs.modelStatusToString(code),
            nodes=info.mip_node_count if info.mip_node_count >= 0 else None,
            iterations=info.simplex_iteration_count,
            full_log=full_log,
            native=highs,
        )


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        return handle.read().strip()


@functools.cache
def _interruptible_highs() -> type:
    """PuLP's HiGHS interface with the solve run through :func:`run_highs` (built on first use,
    so that importing this module does not import PuLP)."""
    import pulp

    class InterruptibleHiGHS(pulp.HiGHS):  # type: ignore[misc, valid-type]
        def callSolver(self, lp: Any) -> None:  # noqa: N802 (PuLP's name)
            run_highs(lp.solverModel)

    return InterruptibleHiGHS
