"""Replay an explicit Schedule through the engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slolab.sim.engine import Server, run
from slolab.sim.outcome import Outcome
from slolab.sim.policy import Batch, PolicyError
from slolab.sim.schedule import Schedule

if TYPE_CHECKING:
    from slolab.instances.records import Instance


class _FollowRouting:
    def __init__(self, routing: list[int]) -> None:
        self.routing = routing

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        s = self.routing[request]
        return 0 if s < 0 else s


class SchedulePolicy:
    """Runs each server's planned iterations in order.

    An iteration starts at ``max(previous end, not_before_s, arrival of each of its
    requests)``; requests the schedule rejects are declined when they reach their server.
    """

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._next: list[int] = []

    def start(self, instance: Instance, seed: int) -> None:
        if self.schedule.servers != instance.cluster.servers:
            raise ValueError(
                f"schedule has {self.schedule.servers} servers, instance has {instance.cluster.servers}"
            )
        self._next = [0] * self.schedule.servers

    def next_batch(self, server: Server) -> Batch:
        reject = [r for r in server.waiting if r in self.schedule.rejected]
        plan = self.schedule.iterations[server.id]
        k = self._next[server.id]
        if k >= len(plan):
            return Batch(reject=reject)
        it = plan[k]
        e = server.engine
        ready_at = max([it.not_before_s] + [float(e.arrival[r]) for r, _, _ in it.entries])
        if ready_at > server.now:
            return Batch(reject=reject, wake_at_s=ready_at)
        self._next[server.id] = k + 1
        static = [r for r, ph, _ in it.entries if ph == "static"]
        if static:
            if len(static) != len(it.entries):
                raise PolicyError(
                    f"server {server.id} iteration {k}: static entries mixed with others"
                )
            return Batch(static=static, reject=reject)
        prefill = [(r, t) for r, ph, t in it.entries if ph == "prefill"]
        decode = [r for r, ph, _ in it.entries if ph == "decode"]
        return Batch(prefill=prefill, decode=decode, reject=reject)


def replay(instance: Instance, schedule: Schedule, *, record_iterations: bool = True) -> Outcome:
    """Run ``schedule`` on ``instance`` exactly as planned and return the Outcome.

    Supports the colocated and static modes. Every decision comes from the schedule; the
    engine supplies the times (timing model) and enforces its rules, so a schedule that breaks
    one (a decode before its prefill, memory over capacity, ...) raises
    :class:`slolab.sim.policy.PolicyError`.
    """
    if instance.cluster.mode == "disaggregated":
        raise ValueError("replay supports the colocated and static modes, not disaggregated")
    routing = schedule.routing(instance.n_requests)
    out = run(
        instance,
        SchedulePolicy(schedule),
        _FollowRouting(routing),
        seed=0,
        record_iterations=record_iterations,
    )
    if math.isinf(out.end_s):
        raise PolicyError("replay did not finish")
    return out
