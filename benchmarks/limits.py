"""Limits the command line keeps: time to stop on Ctrl-C, time limits on huge models, big fleets.

1. Ctrl-C during ``slolab solve FILE --solver S`` on the 40-request sa-ordering snapshot
   (``instance build --problem sa-ordering --n 40 --batch 4 --seed 1``), sent a few seconds
   into the solve: the seconds from the signal to the end of the process, and its exit status
   (130 expected). HiGHS spends its first ~10 s in a root LP that does not read the stop flag.
2. ``slolab solve FILE --time-limit L`` on a 100,000-request dispatch-scale window (about
   6e10 binaries, never built): the command's wall time and the status it reports.
3. ``slolab simulate azure_conv_2023 --servers N --limit 100``: simulated seconds and peak
   memory, against the estimate the large-fleet warning prints.

Every figure is one subprocess run, timed from outside (wall seconds, ``time.monotonic``).
Prints a table and writes ``benchmarks/out/limits.csv``. Asserts only what is stable: the
exit statuses and the reported status; the times are measured, not asserted.

Usage: ``python benchmarks/limits.py [--quick]`` (``--quick``: HiGHS only, one delay, one
time limit, one fleet size).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

OUT = Path(__file__).parent / "out"
CLI = [sys.executable, "-m", "slolab.harness.cli"]


def build(args: list[str], path: Path) -> None:
    """``slolab instance build ARGS -o PATH`` (checked)."""
    subprocess.run([*CLI, "instance", "build", *args, "-o", str(path)], check=True)


def ctrl_c_row(path: Path, solver: str, delay_s: float) -> dict:
    """Seconds from SIGINT, sent ``delay_s`` after the solve starts, to the process's end."""
    proc = subprocess.Popen(
        [*CLI, "-v", "solve", str(path), "--solver", solver, "--time-limit", "60", "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    while "solving" not in proc.stderr.readline():
        pass
    time.sleep(delay_s)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    took = time.monotonic() - sent
    assert proc.returncode == 130, proc.returncode
    return {"study": "ctrl-c", "case": f"{solver}, SIGINT {delay_s:g} s in", "seconds": took}


def time_limit_row(path: Path, limit_s: float) -> dict:
    """Wall time of ``slolab solve --time-limit`` on a model too large to build."""
    start = time.monotonic()
    done = subprocess.run(
        [*CLI, "solve", str(path), "--time-limit", str(limit_s), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    took = time.monotonic() - start
    rec = json.loads(done.stdout)
    assert rec["status"] == "TIME_LIMIT" and rec["objective"] is None, rec
    return {
        "study": "time-limit",
        "case": f"dispatch-scale n=100000, --time-limit {limit_s:g}",
        "seconds": took,
        "status": rec["status"],
    }


def fleet_row(servers: int) -> dict:
    """Simulated seconds and peak memory of 100 requests on ``servers`` servers."""
    from slolab.harness.serving import BYTES_PER_SERVER, ROUTE_S_PER_REQUEST_SERVER

    code = (
        "import json, resource, sys; from slolab.harness.cli import main; "
        f"main(['simulate', 'azure_conv_2023', '--servers', '{servers}', '--limit', '100', "
        "'--quiet', '--json']); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rec = json.loads(done.stdout)
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    return {
        "study": "fleet",
        "case": f"{servers} servers, 100 requests",
        "seconds": rec["simulate_s"],
        "estimate_s": ROUTE_S_PER_REQUEST_SERVER * servers * 100,
        "peak_mb": peak_kb / 1024,
        "estimate_state_mb": BYTES_PER_SERVER * servers / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few runs only")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sa40 = Path(tmp) / "sa40.json"
        build(["--problem", "sa-ordering", "--n", "40", "--batch", "4", "--seed", "1"], sa40)
        solvers = ["highs"] if args.quick else ["highs", "cpsat", "cbc"]
        delays = [3.0] if args.quick else [1.0, 3.0, 6.0]
        for solver in solvers:
            for delay in delays:
                rows.append(ctrl_c_row(sa40, solver, delay))
        ds = Path(tmp) / "ds100k.json"
        build(["--problem", "dispatch-scale", "--n", "100000"], ds)
        for limit in [5.0] if args.quick else [5.0, 10.0]:
            rows.append(time_limit_row(ds, limit))
    for servers in [20_000] if args.quick else [20_000, 100_000]:
        rows.append(fleet_row(servers))
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    OUT.mkdir(exist_ok=True)
    frame.to_csv(OUT / "limits.csv", index=False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"children CPU {usage.ru_utime + usage.ru_stime:.1f} s; wrote {OUT / 'limits.csv'}")


if __name__ == "__main__":
    main()
