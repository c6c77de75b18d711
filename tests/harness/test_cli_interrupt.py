"""Ctrl-C on the command line: every command stops at once, prints one line, exits 130."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest
from slolab.harness.cli import EXIT_INTERRUPTED
from slolab.instances import load_instance

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


def test_ctrl_c_on_highs_in_a_long_root_lp_took_18_s(tmp_path):
    """SIGINT 3 s into HiGHS on a 40-request snapshot (root LP ~10 s, deaf to it): exit 130 at once."""
    path = tmp_path / "sa40.json"
    built = subprocess.run(
        [sys.executable, "-m", "slolab.harness.cli", "instance", "build", "--problem",
         "sa-ordering", "--n", "40", "--batch", "4", "--seed", "1", "-o", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    proc = start("-v", "solve", str(path), "--solver", "highs", "--time-limit", "60", "--quiet")
    wait_for_line(proc, "solving sa-ordering")
    time.sleep(3.0)  # the starting plan and the latency MILP are built; HiGHS is in its root LP
    code, rest, took = interrupt(proc)
    assert (code, rest) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert took < STOP_WITHIN_S


def test_ctrl_c_after_instance_build_wrote_its_file_was_swallowed_or_killed(tmp_path):
    """SIGINT right after 'wrote FILE' is printed: exit 0 with the file whole (was 130 or -2)."""
    path = tmp_path / "ta.json"
    codes = []
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-m", "slolab.harness.cli", "instance", "build", "--problem",
             "tier-autoscale", "--n", "20000", "-o", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the file is in place once this line is out
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert line.startswith(f"wrote {path}")
        codes.append((proc.returncode, err))
    # before: 130 "interrupted" for a file that was written, or death by the signal (-2)
    assert codes == [(0, "")] * 2
    assert load_instance(path).n_requests == 20_000


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_dropped_inside_a_finalizer_was_swallowed(tmp_path, monkeypatch, capsys):
    """A KeyboardInterrupt raised in a __del__ (printed, dropped) still stops the build: 130."""
    import gc

    from slolab.harness import cli

    class Dropper:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises here, inside __del__
            time.sleep(0.05)

    from slolab.problems import registry

    original = registry.Problem.build

    def build_then_drop(self, **options):
        instance = original(self, **options)
        Dropper()
        gc.collect()
        return instance

    monkeypatch.setattr(registry.Problem, "build", build_then_drop)
    out = tmp_path / "sa.json"
    code = cli.main(["instance", "build", "--problem", "sa-ordering", "--n", "4", "-o", str(out)])
    err = capsys.readouterr().err
    # the interpreter dropped the exception (pytest records it); the command still stopped
    # before writing (before: exit 0 and the file written)
    assert (code, err.splitlines()[-1]) == (EXIT_INTERRUPTED, "slolab: interrupted")
    assert not out.exists()


def test_ctrl_c_turned_into_a_type_error_exits_130(tmp_path, monkeypatch, capsys):
    """A KeyboardInterrupt raised while pybind11 converts a call's arguments comes out as a
    TypeError ("incompatible function arguments", seen from HiGHS's addRow as PuLP builds a
    model, about 1 run in 10 of the solve test above): the command still exits 130, one line,
    and writes nothing (before: exit 1 with the TypeError's traceback)."""
    from slolab.harness import cli
    from slolab.problems import registry

    original = registry.Problem.build

    def build_in_an_extension(self, **options):
        instance = original(self, **options)
        try:
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises here
            time.sleep(1.0)
        except KeyboardInterrupt:
            raise TypeError("addRow(): incompatible function arguments") from None
        return instance

    monkeypatch.setattr(registry.Problem, "build", build_in_an_extension)
    out = tmp_path / "sa.json"
    code = cli.main(["instance", "build", "--problem", "sa-ordering", "--n", "4", "-o", str(out)])
    assert (code, capsys.readouterr().err) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
    assert not out.exists()


def test_a_type_error_without_ctrl_c_is_not_an_interrupt(tmp_path, monkeypatch):
    """The same TypeError with no Ctrl-C is a fault of the code and propagates."""
    from slolab.harness import cli
    from slolab.problems import registry

    def broken(self, **options):
        raise TypeError("addRow(): incompatible function arguments")

    monkeypatch.setattr(registry.Problem, "build", broken)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        cli.main(
            ["instance", "build", "--problem", "sa-ordering", "--n", "4"]
            + ["-o", str(tmp_path / "x.json")]
        )


def test_ctrl_c_through_exec_of_a_string_ended_by_the_signal(tmp_path):
    """A KeyboardInterrupt raised inside exec("...") (as dataclasses build methods) exits 130, not -2."""
    # run with -m, as `python -m slolab.harness.cli` is (a -c script exits another way)
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import sys\n"
        "from slolab.harness import cli\n"
        "cli.cmd_presets = lambda args: exec('raise KeyboardInterrupt')\n"
        "sys.argv = ['slolab', 'presets']\n"
        "sys.exit(cli.main())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-m", "interrupted_in_exec"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    # CPython marks an interrupt that leaves exec(str) as unhandled and, at exit, ended the
    # process by SIGINT (returncode -2) although main() had caught it and returned 130
    assert (done.returncode, done.stderr) == (EXIT_INTERRUPTED, "slolab: interrupted\n")
