"""The Backend interface: one solver, configured once, solving one formulation per call.

:func:`slolab.solvers.solve` builds a backend from its name and options and hands it either to
the model's own loop (:meth:`ExactModel.solve_with`) or to :meth:`Backend.solve_model`. A
custom loop (Dinkelbach iterations on a ratio objective, enumeration by count) calls
:meth:`Backend.solve_formulation` once per subproblem and reads the :class:`RawSolve` it
returns; :meth:`RawSolve.to_result` turns the final one into a :class:`Result`.

Ctrl-C: a backend interrupted stops its solver through the solver's own hook and re-raises
:class:`KeyboardInterrupt` to its caller; an interrupted search is never reported as a status.
In-process solvers run through :func:`run_interruptibly`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from slolab.sim.schedule import Schedule
from slolab.solvers.base import CpFormulation, ExactModel, MilpFormulation, Result, Status

FORMULATION_LABELS = {"milp": "MILP", "cpsat": "CP-SAT", "brute": "brute-force"}

T = TypeVar("T")

#: Seconds between two checks for Ctrl-C while a solver runs in its worker thread.
INTERRUPT_POLL_S = 0.05

#: Seconds a solver asked to stop by Ctrl-C is waited for before it is left to stop on its own
#: (HiGHS reads its interrupt flag only between the LP solves of its MIP search, so a long
#: root LP can run on for many seconds after the request).
STOP_GRACE_S = 0.5

# Worker threads of interrupted solves that were still running when KeyboardInterrupt was
# re-raised (asked to stop; each returns at its solver's next interrupt check).
_stopping: list[threading.Thread] = []

# Largest seed every backend accepts (CBC takes seed + 1, capped at 2**31 - 1).
MAX_SEED = 2**31 - 2

# Relative tolerance, in the solver's own objective units, within which a bound equal to the
# incumbent counts as a proof of optimality.
PROOF_TOLERANCE = 1e-6


@dataclass(frozen=True)
class RawSolve:
    """What one backend call on one formulation produced.

    Attributes
    ----------
    status : Status
        OPTIMAL only when the backend proved it; TIME_LIMIT when the time limit stopped the
        search (with or without an incumbent).
    objective : float or None
        The incumbent's value in the model's units (after ``objective_of``); None without one.
    bound : float or None
        Best proved bound on the optimum in the model's units (an upper bound when the
        formulation maximizes); None when the backend does not report one.
    runtime_s : float
        Wall time of the backend call (s), ``time.perf_counter()`` end minus start.
    schedule : Schedule or None
        The formulation's schedule for the incumbent; None without one.
    log : str
        One-line summary (status, nodes, iterations), followed by the full solver log when the
        backend was built with ``log=True``.
    backend : str
        Registry name of the backend.
    details : Mapping
        Plain counters (``nodes``, ``iterations``, ``solver_status``, ...), safe to pickle.
    native : object
        The backend's own solver object after the call (a ``highspy.Highs``, an OR-Tools
        ``CpSolver``) for power users; None where there is none (CBC runs as a subprocess).
    """

    status: Status
    objective: float | None
    bound: float | None
    runtime_s: float
    schedule: Schedule | None
    log: str
    backend: str
    details: Mapping[str, Any] = field(default_factory=dict)
    native: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.runtime_s >= 0:
            raise ValueError(f"runtime_s must be >= 0, got {self.runtime_s}")
        if self.status == Status.OPTIMAL and self.objective is None:
            raise ValueError("an OPTIMAL raw solve needs an objective")

    def to_result(
        self, model: ExactModel, runtime_s: float | None = None, **details: Any
    ) -> Result:
        """This solve as the :class:`Result` of ``model``.

        Parameters
        ----------
        model : ExactModel
            The model solved (gives the name and the sense).
        runtime_s : float, optional
            Runtime to report (s); defaults to this call's ``runtime_s``. A loop of several
            calls passes its total.
        **details
            Extra entries merged over this solve's ``details``.
        """
        return Result(
            status=self.status,
            objective=self.objective,
            bound=self.bound,
            runtime_s=self.runtime_s if runtime_s is None else runtime_s,
            backend=self.backend,
            model=model_label(model),
            sense=model.sense,
            schedule=self.schedule,
            log=self.log,
            details={**self.details, **details},
        )


class Backend:
    """A solver backend, configured once with threads, seed, logging and its own options.

    Subclasses set ``name`` (the registry key), ``formulation`` (the kind of formulation they
    solve: ``"milp"``, ``"cpsat"`` or ``"brute"``) and ``requires`` (packages that must import),
    and implement the matching ``solve_*`` method.

    Parameters
    ----------
    threads : int
        Worker threads the solver may use (>= 1).
    seed : int
        Random seed passed to the solver, in ``[0, 2**31 - 2]``.
    log : bool
        Keep the full solver log in :attr:`RawSolve.log` (after the summary line).
    **params
        Backend-specific options, checked when the backend is built (see docs/solvers.md).
    """

    name: ClassVar[str] = ""
    formulation: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()

    def __init__(self, threads: int = 1, seed: int = 0, log: bool = False, **params: Any) -> None:
        if isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        if (
            isinstance(seed, bool)
            or not isinstance(seed, numbers.Integral)
            or not 0 <= seed <= MAX_SEED
        ):
            raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")
        self.threads: int = int(threads)
        self.seed: int = int(seed)
        self.log: bool = bool(log)
        self.params: dict[str, Any] = dict(params)
        self._check_params()

    @classmethod
    def available(cls) -> bool:
        """True when the solver can run here; raises ImportError when a package is missing."""
        return True

    def _check_params(self) -> None:
        """Reject options the solver does not know (ValueError naming the option)."""
        if self.params:
            names = ", ".join(sorted(self.params))
            raise ValueError(f"backend {self.name!r} takes no options, got: {names}")

    def solve_milp(self, form: MilpFormulation, time_limit: float) -> RawSolve:
        """Solve one MILP formulation within ``time_limit`` seconds."""
        raise TypeError(f"backend {self.name!r} does not solve MILP formulations")

    def solve_cp(self, form: CpFormulation, time_limit: float) -> RawSolve:
        """Solve one CP-SAT formulation within ``time_limit`` seconds."""
        raise TypeError(f"backend {self.name!r} does not solve CP-SAT formulations")

    def solve_brute(self, model: ExactModel, time_limit: float) -> RawSolve:
        """Run the model's exhaustive search within ``time_limit`` seconds."""
        raise TypeError(f"backend {self.name!r} does not run brute-force searches")

    def solve_formulation(
        self, form: MilpFormulation | CpFormulation, time_limit: float
    ) -> RawSolve:
        """Solve one formulation, dispatching on its type (the entry point for custom loops)."""
        check_time_limit(time_limit)
        if isinstance(form, MilpFormulation):
            return self.solve_milp(form, time_limit)
        if isinstance(form, CpFormulation):
            return self.solve_cp(form, time_limit)
        raise TypeError(f"expected a MilpFormulation or CpFormulation, got {type(form).__name__}")

    def build_formulation(self, model: ExactModel) -> MilpFormulation | CpFormulation:
        """The formulation of ``model`` this backend solves (``model.milp()`` or ``model.cpsat()``)."""
        if self.formulation == "milp":
            return model.milp()
        if self.formulation == "cpsat":
            return model.cpsat()
        raise TypeError(f"backend {self.name!r} does not solve a formulation")

    def solve_model(self, model: ExactModel, time_limit: float) -> RawSolve:
        """Build the model's formulation for this backend and solve it once.

        ``time_limit`` bounds both: the build is stopped when it runs out (on the main
        thread, see :func:`time_limited_build`), which gives TIME_LIMIT with no incumbent
        and ``details["stopped_in"] = "build"``, and the solver gets what the build left.
        ``details["build_s"]`` is the time spent building the formulation (s).
        """
        check_time_limit(time_limit)
        if self.formulation == "brute":
            return self.solve_brute(model, time_limit)
        start = time.perf_counter()
        try:
            with time_limited_build(time_limit):
                form = self.build_formulation(model)
        except BuildTimeLimitError:
            form = None
        build_s = time.perf_counter() - start
        remaining = time_limit - build_s
        if form is None or remaining <= 0:
            return RawSolve(
                status=Status.TIME_LIMIT,
                objective=None,
                bound=None,
                runtime_s=build_s,
                schedule=None,
                log=f"{self.name}: the time limit ({time_limit:g} s) ran out while the "
                f"formulation was built ({build_s:.3g} s)",
                backend=self.name,
                details={"solver_status": "not started", "stopped_in": "build", "build_s": build_s},
            )
        raw = self.solve_formulation(form, remaining)
        return dataclasses.replace(raw, details={**raw.details, "build_s": build_s})


#: Seconds between two firings of :func:`time_limited_build`'s timer once the limit is reached.
BUILD_TIMER_REPEAT_S = 0.05


class BuildTimeLimitError(Exception):
    """The time limit ran out while a formulation was built (raised by :func:`time_limited_build`)."""


@contextmanager
def time_limited_build(seconds: float) -> Iterator[None]:
    """Raise :class:`BuildTimeLimitError` in the ``with`` block once ``seconds`` have passed.

    Building a formulation is Python code (PuLP or OR-Tools objects, one per variable and
    constraint) that checks no clock: a 100,000-request dispatch-scale window asks for about
    10^11 variables and would build for hours. A one-shot ``SIGALRM`` timer stops it. The timer
    needs the main thread of a POSIX process and a free ``ITIMER_REAL``; elsewhere the block
    runs unbounded. It fires again every :data:`BUILD_TIMER_REPEAT_S` until the block has
    ended: an exception raised while the interpreter runs a garbage-collector callback or a
    ``__del__`` is not propagated but handed to ``sys.unraisablehook``. Within the block that
    hook drops the timer's own error silently (the next firing raises it again where it
    propagates) and passes any other to the former hook with the timer held, so that a hook
    formatting a traceback is not itself interrupted.
    """
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )
    if not usable:
        yield
        return

    in_hook = False

    def expired(signum: int, frame: Any) -> None:
        if not in_hook:
            raise BuildTimeLimitError(f"time limit of {seconds:g} s reached while building")

    former_hook = sys.unraisablehook

    def unraisable(args: Any) -> None:
        nonlocal in_hook
        if isinstance(args.exc_value, BuildTimeLimitError):
            return
        in_hook = True
        try:
            former_hook(args)
        finally:
            in_hook = False

    previous = signal.signal(signal.SIGALRM, expired)
    sys.unraisablehook = unraisable
    signal.setitimer(signal.ITIMER_REAL, seconds, BUILD_TIMER_REPEAT_S)
    try:
        yield
    finally:
        while True:  # a repeat firing here is caught until the timer is off
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.0)
                signal.signal(signal.SIGALRM, previous)
                break
            except BuildTimeLimitError:
                continue
        sys.unraisablehook = former_hook


def run_interruptibly(work: Callable[[], T], stop: Callable[[], None]) -> T:
    """Run a solver call so that Ctrl-C stops it at once, then re-raise KeyboardInterrupt.

    A solver working in C++ holds up Python's SIGINT handler until it returns, or catches
    SIGINT itself and ends as if it had reached its time limit. So on the main thread
    ``work`` runs in a worker thread while this thread waits; on KeyboardInterrupt it calls
    ``stop`` (the solver's own interrupt hook, safe to call from another thread), waits for
    ``work`` to return and re-raises. Off the main thread (where no signal arrives) ``work``
    runs directly.

    A solver that has not returned :data:`STOP_GRACE_S` seconds after ``stop`` is left to
    stop on its own in its (daemon) thread, and KeyboardInterrupt is re-raised at once:
    :func:`stopping_solvers` lists such threads and :func:`wait_for_stopping_solvers` waits
    for them (before a solver with process-wide state runs again, say).

    Parameters
    ----------
    work : callable
        The solver call; its value (or exception) is this function's.
    stop : callable
        Asks the running solver to stop as soon as it can.
    """
    if threading.current_thread() is not threading.main_thread():
        return work()
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the waiting thread
            outcome["error"] = error
        finally:
            done.set()

    worker = threading.Thread(target=target, name="slolab-solver", daemon=True)
    worker.start()
    try:
        while not done.wait(INTERRUPT_POLL_S):
            pass
    except KeyboardInterrupt:
        stop()
        if not _wait_through_interrupts(done, STOP_GRACE_S):
            _stopping.append(worker)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _wait_through_interrupts(done: threading.Event, within_s: float) -> bool:
    """Wait up to ``within_s`` seconds for ``done``, even if Ctrl-C is pressed again (the
    solver is already stopping); True when it is set."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return done.wait(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            continue


def stopping_solvers() -> list[threading.Thread]:
    """Worker threads of interrupted solves still running (asked to stop, not yet returned)."""
    _stopping[:] = [thread for thread in _stopping if thread.is_alive()]
    return list(_stopping)


def wait_for_stopping_solvers() -> None:
    """Wait until every interrupted solve still running has returned."""
    for thread in stopping_solvers():
        thread.join()
    _stopping.clear()


def check_time_limit(time_limit: float) -> None:
    """Raise ValueError unless ``time_limit`` is a finite number of seconds > 0."""
    if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
        raise ValueError(f"time_limit must be a number of seconds, got {time_limit!r}")
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise ValueError(f"time_limit must be finite and > 0 seconds, got {time_limit!r}")


def proved(native_objective: float | None, native_bound: float | None) -> bool:
    """True when a bound matches the incumbent within :data:`PROOF_TOLERANCE` (native units)."""
    if native_objective is None or native_bound is None:
        return False
    if not (math.isfinite(native_objective) and math.isfinite(native_bound)):
        return False
    scale = max(1.0, abs(native_objective))
    return abs(native_bound - native_objective) <= PROOF_TOLERANCE * scale


def finite_or_none(value: float | None) -> float | None:
    """``value`` as a float, or None when missing, infinite or NaN."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def summary_line(backend: str, solver_status: str, **counters: Any) -> str:
    """``"<backend>: <status>; nodes=..., iterations=..."`` with the counters that are known."""
    known = ", ".join(f"{k}={v}" for k, v in counters.items() if v is not None)
    return f"{backend}: {solver_status}" + (f"; {known}" if known else "")


def milp_raw_solve(
    form: MilpFormulation,
    *,
    backend: str,
    status: Status,
    has_solution: bool,
    native_objective: float | None,
    native_bound: float | None,
    runtime_s: float,
    solver_status: str,
    nodes: int | None,
    iterations: int | None,
    full_log: str = "",
    native: Any = None,
) -> RawSolve:
    """The RawSolve of one MILP solve: objective and bound mapped through the formulation,
    the schedule read off the solution, a one-line log summary (plus ``full_log`` if given).
    An INFEASIBLE status carries no incumbent and no bound."""
    if status == Status.INFEASIBLE:
        has_solution, native_objective, native_bound = False, None, None
    log = summary_line(backend, solver_status, nodes=nodes, iterations=iterations)
    if full_log:
        log = f"{log}\n{full_log}"
    return RawSolve(
        status=status,
        objective=form.objective_of(native_objective)
        if native_objective is not None and has_solution
        else None,
        bound=form.objective_of(native_bound) if native_bound is not None else None,
        runtime_s=runtime_s,
        schedule=form.to_schedule() if has_solution else None,
        log=log,
        backend=backend,
        details={"solver_status": solver_status, "nodes": nodes, "iterations": iterations},
        native=native,
    )


def model_label(model: ExactModel) -> str:
    """The model's registry name, or its class name when it is not registered."""
    return model.name or type(model).__name__


def milp_objective_value(problem: Any) -> float | None:
    """Value of a solved PuLP problem's objective, constant included (0 with no objective)."""
    if problem.objective is None:
        return 0.0
    total = float(problem.objective.constant)
    for variable, coefficient in problem.objective.items():
        if coefficient == 0:
            continue
        if variable.varValue is None:
            return None
        total += coefficient * variable.varValue
    return finite_or_none(total)


def milp_objective_constant(problem: Any) -> float:
    """The constant term of a PuLP problem's objective (0 with no objective)."""
    return 0.0 if problem.objective is None else float(problem.objective.constant)
