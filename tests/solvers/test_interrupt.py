"""Ctrl-C during a solve: every backend stops its solver and re-raises KeyboardInterrupt."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest
from slolab.solvers import Status, get_backend, solve
from solver_models import Knapsack, KnapsackData, hard_knapsack

SOLVERS = ["highs", "cbc", "cpsat", "brute"]


@contextmanager
def sigint_after(delay_s: float) -> Iterator[None]:
    """Send this process SIGINT (Ctrl-C) after ``delay_s`` seconds unless the block ends first."""
    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.mark.parametrize("solver", SOLVERS)
def test_ctrl_c_stops_the_solver_and_reaches_the_caller(solver):
    """SIGINT 0.5 s into a 30 s solve of the hard knapsack raises KeyboardInterrupt within 1.5 s."""
    backend = get_backend(solver)()
    model = hard_knapsack()
    # built before the clock starts, so the signal lands in the solver itself
    form = None if solver == "brute" else backend.build_formulation(model)
    start = time.perf_counter()
    with sigint_after(0.5), pytest.raises(KeyboardInterrupt):
        if form is None:
            backend.solve_brute(model, 30.0)
        else:
            backend.solve_formulation(form, 30.0)
    elapsed = time.perf_counter() - start
    # Without the hook the solve runs on: HiGHS is open at 30 s, CP-SAT proves after ~22 s.
    assert 0.5 <= elapsed < 2.0
    # CBC runs as a subprocess: none is left behind
    assert not [c for c in psutil.Process().children() if "cbc" in c.name().lower()]


@pytest.mark.parametrize("solver", SOLVERS)
def test_solver_works_after_an_interrupt(solver):
    """After an interrupted solve the same backend solves a small knapsack to its optimum."""
    with sigint_after(0.3), pytest.raises(KeyboardInterrupt):
        solve(hard_knapsack(), solver=solver, time_limit=30.0)
    data = KnapsackData((10, 13, 7, 8), ((5, 6, 3, 4),), (10,))
    result = solve(Knapsack(data), solver=solver, time_limit=10.0)
    # items 1 and 3 (weights 6 + 4 = 10) are worth 13 + 8 = 21, the best that fits
    assert (result.status, result.objective) == (Status.OPTIMAL, 21.0)


def test_ctrl_c_returns_within_the_grace_while_the_solver_ignores_its_stop_flag():
    """A solver deaf to its stop hook for 2 s (HiGHS in a root LP) gives KeyboardInterrupt at once."""
    from slolab.solvers.backend import (
        STOP_GRACE_S,
        run_interruptibly,
        stopping_solvers,
        wait_for_stopping_solvers,
    )

    start = time.perf_counter()
    with sigint_after(0.2), pytest.raises(KeyboardInterrupt):
        run_interruptibly(lambda: time.sleep(2.0), lambda: None)
    elapsed = time.perf_counter() - start
    # 0.2 s to the signal + 0.5 s of grace, well before the 2 s the worker sleeps
    assert 0.2 + STOP_GRACE_S <= elapsed < 1.5
    assert len(stopping_solvers()) == 1
    wait_for_stopping_solvers()
    # the worker returned after its 2 s and is no longer listed
    assert time.perf_counter() - start >= 2.0
    assert stopping_solvers() == []
