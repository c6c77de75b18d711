"""Ctrl-C on the command line: every command stops at once, prints one line, exits 130."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time

import psutil
import pytest
from slolab.harness.cli import EXIT_INTERRUPTED

#: Seconds from Ctrl-C to the end of the process, interpreter teardown included (about 0.7 s
#: of it on a loaded 2-core machine; the solvers themselves stop within a second).
STOP_WITHIN_S = 2.5


def start(*args: str) -> subprocess.Popen[str]:
    """``slolab ARGS`` as a subprocess with stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "slolab.harness.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_line(proc: subprocess.Popen[str], marker: str, timeout_s: float = 60.0) -> None:
    """Read stderr until a line containing ``marker`` (the command reached that point)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        if marker in line:
            return
    proc.kill()
    pytest.fail(f"the command never printed {marker!r}")


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, float]:
    """Send SIGINT; the exit status, the rest of stderr and the seconds the command took to stop."""
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, rest = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the command ignored Ctrl-C for 30 s")
    return proc.returncode, rest, time.monotonic() - sent


@pytest.mark.parametrize("solver", ["highs", "cpsat", "cbc"])
def test_ctrl_c_during_solve_exits_130_with_one_line(solver):
    """SIGINT while the solver runs on the 20-request snapshot (HiGHS needs 115 s): exit 130 at once."""
    proc = start("-v", "solve", "sa-azure-n20-b4", "--solver", solver, "--time-limit", "60")
    wait_for_line(proc, "solving sa-ordering")
    time.sleep(0.3)  # into the search
    code, rest, took = interrupt(proc)
    # together, so that a wrong status shows what the command printed
    assert (code, rest) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert took < STOP_WITHIN_S


def test_ctrl_c_inside_branch_and_price_exits_130_with_one_line():
    """SIGINT while SCIP runs branch-and-price on the 40-request snapshot: exit 130 at once."""
    proc = start(
        "-v", "solve", "sa-azure-n40-b4", "--model", "sa-ordering-bp", "--time-limit", "20"
    )
    wait_for_line(proc, "branch-and-price on SCIP")
    time.sleep(0.3)  # into the search
    code, rest, took = interrupt(proc)
    assert (code, rest) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert took < STOP_WITHIN_S


def test_ctrl_c_during_compare_is_not_an_unknown_row():
    """CP-SAT interrupted inside compare ends the run with 130, not a row UNKNOWN and exit 0."""
    proc = start(
        "-v", "compare", "sa-azure-n20-b4", "--methods", "cpsat", "--time-limit", "60", "--quiet"
    )
    wait_for_line(proc, "solving sa-ordering")
    time.sleep(0.3)
    code, rest, took = interrupt(proc)
    assert (code, rest) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert took < STOP_WITHIN_S


def test_ctrl_c_during_capacity_exits_130_with_one_line(tmp_path):
    """SIGINT 3 s into a capacity search of the whole conv trace: one line, no traceback, 130."""
    proc = start("capacity", "azure_conv_2023", "--servers", "1", "--quiet")
    time.sleep(3.0)  # reading the trace or simulating the first probe (each takes seconds)
    assert proc.poll() is None
    code, rest, took = interrupt(proc)
    assert (code, rest) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert took < STOP_WITHIN_S


def test_ctrl_c_leaves_no_cbc_process():
    """The CBC subprocess of an interrupted solve is terminated with it."""
    proc = start("-v", "solve", "sa-azure-n20-b4", "--solver", "cbc", "--time-limit", "60")
    wait_for_line(proc, "solving sa-ordering")
    cbc = []
    deadline = time.monotonic() + 20.0
    while not cbc and time.monotonic() < deadline:  # PuLP writes the MPS file, then starts CBC
        time.sleep(0.1)
        cbc = [c for c in psutil.Process(proc.pid).children() if c.name() == "cbc"]
    assert cbc, "CBC never started"
    code, _, _ = interrupt(proc)
    assert code == EXIT_INTERRUPTED
    _, alive = psutil.wait_procs(cbc, timeout=2.0)
    assert alive == []
