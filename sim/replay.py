"""Replay an explicit Schedule (and a scaling plan) through the engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slolab.sim.engine import Server, run
from slolab.sim.outcome import Outcome
from slolab.sim.policy import Batch, PolicyError
from slolab.sim.scaling import ScalePlan
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
        if s < 0:
            return 0
        for k, server in enumerate(servers):
            if server.id == s:
                return k
        raise PolicyError(
            f"t={now}: the schedule puts request {request} on server {s}, which does not "
            "accept new requests then (not switched on yet, drained or departed)"
        )


class SchedulePolicy:
    """Runs each server's planned iterations in order.

    An iteration starts at ``max(previous end, not_before_s, arrival of each of its
    requests)``; requests the schedule rejects are declined when they reach their server.
    """

    def __init__(self, schedule: Schedule, plan: ScalePlan | None = None) -> None:
        self.schedule = schedule
        self.plan = plan
        self._next: list[int] = []

    def start(self, instance: Instance, seed: int) -> None:
        # servers: the cluster's initial ones, then one per 'on' or 'move' of the plan
        added = sum(1 for _, a in self.plan.actions if a.kind in ("on", "move")) if self.plan else 0
        servers = instance.cluster.servers + added
        if self.schedule.servers != servers:
            where = f" ({instance.cluster.servers} + {added} the plan adds)" if added else ""
            raise ValueError(
                f"schedule has {self.schedule.servers} servers, instance has {servers}{where}"
            )
        self._next = [0] * self.schedule.servers

    def next_batch(self, server: Server) -> Batch:
        reject = [r for r in server.waiting if r in self.schedule.rejected]
        plan = self.schedule.iterations[server.id]
        k = self._next[server.id]
        if k >= len(plan):
            return Batch(reject=reject)
        it = plan[k]
        ready_at = max([it.not_before_s] + [server.arrival(r) for r, _, _ in it.entries])
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


def replay(
    instance: Instance,
    schedule: Schedule,
    *,
    record_iterations: bool = True,
    plan: ScalePlan | None = None,
) -> Outcome:
    """Run ``schedule`` on ``instance`` exactly as planned and return the Outcome.

    Supports the colocated and static modes. Every decision comes from the schedule (and the
    scaling ``plan``); the engine supplies the times (timing model, start-up delays) and
    enforces its rules, so a schedule that breaks one (a decode before its prefill, memory over
    capacity, an iteration on a server not ready yet, ...) raises
    :class:`slolab.sim.policy.PolicyError`.

    Parameters
    ----------
    instance : Instance
        The instance the schedule was made for.
    schedule : Schedule
        Per-server iterations; with a ``plan``, the servers the plan switches on (or moves)
        follow the initial ones in the order of its actions (see :mod:`slolab.sim.scaling`).
    record_iterations : bool
        Keep the iteration log (for :func:`slolab.sim.check`).
    plan : ScalePlan, optional
        When servers are switched on, drained or moved. A request must reach a server that
        accepts new work when it arrives (switched on, not drained); a server's iterations
        start once it is ready.
    """
    if instance.cluster.mode == "disaggregated":
        raise ValueError("replay supports the colocated and static modes, not disaggregated")
    routing = schedule.routing(instance.n_requests)
    out = run(
        instance,
        SchedulePolicy(schedule, plan),
        _FollowRouting(routing),
        seed=0,
        record_iterations=record_iterations,
        plan=plan,
    )
    if math.isinf(out.end_s):
        raise PolicyError("replay did not finish")
    return out
