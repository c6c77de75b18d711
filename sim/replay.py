"""Replay an explicit Schedule (and a scaling plan) through the engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from slolab.sim.engine import Server, run
from slolab.sim.outcome import Outcome
from slolab.sim.policy import HOLD, Batch, PolicyError
from slolab.sim.scaling import ScalePlan
from slolab.sim.schedule import Schedule

if TYPE_CHECKING:
    from slolab.instances.records import Instance


class _FollowRouting:
    """Routes each request to its scheduled server; a request whose server is not switched on
    yet waits in the central queue until that server pulls it."""

    central = True

    def __init__(self, routing: list[int], plan: ScalePlan | None) -> None:
        self.routing = routing
        # when each server the plan adds is switched on, in id order (initial servers: 0)
        self.on_s: dict[int, float] = {}
        if plan is not None:
            self._ons = [t for t, a in plan.actions if a.kind != "drain"]
        else:
            self._ons = []

    def start(self, instance: Instance, seed: int) -> None:
        n0 = instance.cluster.servers
        self.on_s = {n0 + k: t for k, t in enumerate(self._ons)}

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        s = self.routing[request]
        if s < 0:
            return 0
        for k, server in enumerate(servers):
            if server.id == s:
                return k
        if self.on_s.get(s, -math.inf) > now:
            return HOLD
        raise PolicyError(
            f"t={now}: the schedule puts request {request} on server {s}, which does not "
            "accept new requests then (drained or departed)"
        )


class SchedulePolicy:
    """Runs each server's planned iterations in order.

    An iteration starts at ``max(previous end, not_before_s, arrival of each of its
    requests)``; requests the schedule rejects are declined when they reach their server.
    A request the schedule never runs stays unfinished (``settles``: the engine neither
    rejects it as stalled nor requires every request to end).
    """

    settles = False
    modes = ("colocated", "static")

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
        held = set(server.held)
        pull = [r for r, _, _ in it.entries if r in held]
        static = [r for r, ph, _ in it.entries if ph == "static"]
        if static:
            if len(static) != len(it.entries):
                raise PolicyError(
                    f"server {server.id} iteration {k}: static entries mixed with others"
                )
            return Batch(static=static, reject=reject, pull=pull)
        prefill = [(r, t) for r, ph, t in it.entries if ph == "prefill"]
        decode = [r for r, ph, _ in it.entries if ph == "decode"]
        return Batch(prefill=prefill, decode=decode, reject=reject, pull=pull)


def replay(
    instance: Instance,
    schedule: Schedule,
    *,
    record_iterations: bool = True,
    plan: ScalePlan | None = None,
) -> Outcome:
    """Run ``schedule`` on ``instance`` exactly as planned and return the Outcome.

    Supports the colocated and static modes. Every decision comes from the schedule (and the
    scaling ``plan``); a request scheduled on a server the plan switches on after the request
    arrives waits in the central queue until that server pulls it for its first iteration.
    The engine supplies the times (timing model, start-up delays) and
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
        When servers are switched on, drained or moved (default: the schedule's own
        ``plan``). A request must reach a server that accepts new work when it arrives
        (switched on, not drained); a server's iterations start once it is ready.
    """
    if plan is None:
        plan = schedule.plan
    if instance.cluster.mode == "disaggregated":
        raise ValueError("replay supports the colocated and static modes, not disaggregated")
    routing = schedule.routing(instance.n_requests)
    out = run(
        instance,
        SchedulePolicy(schedule, plan),
        _FollowRouting(routing, plan),
        seed=0,
        record_iterations=record_iterations,
        plan=plan,
    )
    if math.isinf(out.end_s):
        raise PolicyError("replay did not finish")
    return out
