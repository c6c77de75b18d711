"""Decision time against queue length, per online policy and router.

For each policy and queue length N (64, 256, 1,024, 4,096 by default), the first N requests of
the Mooncake conversation trace (PolyServe's SLOs) arrive within a few milliseconds on
``--servers`` servers, so the queue holds about N requests while the first batches run. The
run's own decisions are timed as they happen (nothing is called twice on one state): every
``next_batch`` of the policy and every ``route`` / ``dispatch`` of its router, each with the
queue its caller sees (``next_batch``: the server's waiting requests plus the held ones of its
side; a router: the held requests plus the waiting ones of every server it chooses among).
Only decisions that see at least half of N are kept, and the run stops once ``--repeats`` of
each kind seen are kept (or the run ends).

Each row: policy, router, decision kind, N, the median queue the timed decisions saw, the
number timed, median and p99 time (microseconds), the load average (the machine may be
shared). Per policy and kind, the exponent b of ``time ~ queue^b`` (least squares on the
logarithms, for the median and for the p99) is printed after the table: b near 0 is a decision whose cost does
not grow with the queue, near 1 a linear scan.

Prints a table and writes ``benchmarks/out/decisions.csv``.

Usage: ``python benchmarks/decisions.py [--sizes 64 256 1024 4096] [--policies sarathi
polyserve] [--servers 1] [--repeats 30]``
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from slolab.harness.serving import ServingSetup

OUT = Path(__file__).parent / "out"
#: (policy, router by name or None for the policy's own)
CASES: list[tuple[str, str | None]] = [
    ("sarathi", None),
    ("slos-serve", None),
    ("polyserve", None),
    ("hyperflexis", None),
    ("slide-batching", "go-routing"),
]
#: Arrival rate that puts N requests in the queue before the first batches finish (req/s).
BURST_RATE = 1e6


class _Timer:
    """Timed decisions of one run: (kind, queue seen, seconds)."""

    def __init__(self, n: int, repeats: int) -> None:
        self.n = n
        self.repeats = repeats
        self.rows: list[tuple[str, int, float]] = []
        self.kept: dict[str, int] = {}

    def record(self, kind: str, queue: int, seconds: float) -> None:
        if 2 * queue >= self.n:
            self.rows.append((kind, queue, seconds))
            self.kept[kind] = self.kept.get(kind, 0) + 1

    def done(self) -> bool:
        """Every kind of decision seen so far (next_batch among them) timed ``repeats`` times."""
        kept = self.kept
        return "next_batch" in kept and all(count >= self.repeats for count in kept.values())


def _wrap_policy(policy: Any, timer: _Timer) -> None:
    inner: Callable[[Any], Any] = policy.next_batch

    def next_batch(server: Any) -> Any:
        queue = len(server.waiting) + len(server.held)
        t0 = time.perf_counter()
        batch = inner(server)
        timer.record("next_batch", queue, time.perf_counter() - t0)
        return batch

    policy.next_batch = next_batch


def _waiting(servers: Any) -> int:
    return sum(len(s.waiting) for s in servers)


def _wrap_router(router: Any, timer: _Timer) -> None:
    route = getattr(router, "route", None)
    if route is not None:

        def timed_route(request: int, servers: Any, now: float) -> int:
            queue = _waiting(servers) + (len(servers[0].held) if len(servers) else 0)
            t0 = time.perf_counter()
            chosen: int = route(request, servers, now)
            timer.record("route", queue, time.perf_counter() - t0)
            return chosen

        router.route = timed_route
    dispatch = getattr(router, "dispatch", None)
    if dispatch is not None:

        def timed_dispatch(held: Any, servers: Any, now: float) -> Any:
            queue = len(held) + _waiting(servers)
            t0 = time.perf_counter()
            placed = dispatch(held, servers, now)
            timer.record("dispatch", queue, time.perf_counter() - t0)
            return placed

        router.dispatch = timed_dispatch


def measure(policy: str, router: str | None, n: int, servers: int, repeats: int) -> list[dict]:
    """Timed decisions of ``policy`` with ``n`` requests queued, one row per decision kind."""
    from slolab.sim import run

    setup = ServingSetup(
        "mooncake_conversation", policy=policy, router=router, servers=servers, limit=n
    )
    instance, sched = setup.prepare(setup.instance(rate=BURST_RATE))
    timer = _Timer(n, repeats)
    _wrap_policy(sched.policy, timer)
    if sched.router is not None:
        _wrap_router(sched.router, timer)

    def stop(engine: Any) -> bool:
        return timer.done()

    stop.every = 1  # type: ignore[attr-defined]
    load = os.getloadavg()[0]
    run(
        instance,
        sched.policy,
        sched.router,
        seed=0,
        decode_router=sched.decode_router,
        scaler=sched.scaler,
        record_iterations=False,
        stop=stop,
    )
    frame = pd.DataFrame(timer.rows, columns=["kind", "queue", "seconds"])
    rows = []
    for kind, part in frame.groupby("kind"):
        us = part["seconds"].to_numpy() * 1e6
        rows.append(
            {
                "policy": policy,
                "router": setup.router_name,
                "kind": kind,
                "n": n,
                "queue_median": float(np.median(part["queue"])),
                "timed": len(part),
                "median_us": float(np.median(us)),
                "p99_us": float(np.percentile(us, 99)),
                "load_1min": load,
            }
        )
    return rows


def exponents(frame: pd.DataFrame) -> pd.DataFrame:
    """Per policy and kind, b of ``time ~ queue^b`` for the median and the p99 time, fitted by
    least squares on the logarithms."""
    fits = []
    for (policy, kind), part in frame.groupby(["policy", "kind"]):
        part = part[(part["queue_median"] > 0) & (part["median_us"] > 0)]
        if len(part) < 2:
            continue
        x = np.log(part["queue_median"])
        fit = {"policy": policy, "kind": kind}
        for column in ("median_us", "p99_us"):
            b = np.polyfit(x, np.log(part[column]), 1)[0]
            fit["exponent_" + column.removesuffix("_us")] = round(float(b), 2)
        fits.append(fit)
    return pd.DataFrame(fits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument(
        "--policies", nargs="+", default=[p for p, _ in CASES], help="among the cases"
    )
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    rows: list[dict] = []
    for policy, router in CASES:
        if policy not in args.policies:
            continue
        for n in args.sizes:
            rows.extend(measure(policy, router, n, args.servers, args.repeats))
            frame = pd.DataFrame(rows)
            frame.to_csv(OUT / "decisions.csv", index=False)
    frame = pd.DataFrame(rows)
    print(frame.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    print()
    print(exponents(frame).to_string(index=False))
    print(f"\nwrote {OUT / 'decisions.csv'}")


if __name__ == "__main__":
    main()
