"""Scaling: plan actions and scaler ticks, the actions they apply (switch on, drain, move,
assign), server departures, and the scaler ticks passed over while they could change nothing
(idle, quiet and held spans), each the tick-by-tick run bit for bit.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator

import numpy as np
from slolab.sim.engine.servers import (
    DEPARTED,
    DRAINING,
    OFF,
    READY,
    STARTING,
    STATE_NAMES,
    ServerState,
    server_id,
)
from slolab.sim.engine.state import EV_READY, SC_PLAN, SC_TICK, EngineCore
from slolab.sim.policy import PolicyError
from slolab.sim.scaling import ClusterView, ScaleAction, ScaleEvent

#: Scaler ticks offered at once to a scaler that passes idle ticks (``skip_idle_ticks``).
SKIP_BLOCK = 1 << 16
#: Spans of fewer scaler ticks than this are summed one tick at a time (:meth:`Ticks._ticks_before`).
_SHORT_SPAN = 256
#: Scaler ticks in a row with requests held, nothing running or starting, no scaling action and
#: nothing placed, after which the scaler stops (the held requests stay unserved); and ticks in a
#: row with requests waiting on servers and nothing left to run, start or wake, after which the
#: scaler stops and the run ends stalled.
STALLED_TICKS = 100


class Ticks(EngineCore):
    """Scaler ticks, tick skipping and scaling actions (a part of the engine)."""

    def _scale_event(self) -> None:
        t, _, kind, action = heapq.heappop(self._scale_heap)
        self.now = t
        if kind == SC_TICK:
            self._quiet_tick = None
        if kind == SC_PLAN:
            self._plan_left -= 1
            assert action is not None
            self._apply(action, "plan")
            if self.held_entry or self.held_decode:
                self._retry()
            return
        assert self.scaler is not None
        idle = (
            self._next_arrival >= self.n
            and not self._transfers
            and not self._plan_left
            and all(s.empty and s.state != STARTING for s in self.live)
        )
        held = len(self.held_entry) + len(self.held_decode)
        if idle and not held:
            return  # no work left: the scaler stops
        view = ClusterView(t, self.pools, tuple(s.view for s in self.live))
        actions = self.scaler.decide(view)
        for a in actions:
            self._apply(a, "scaler")
        unplaced = False
        if held:
            self._retry()
            unplaced = not actions and len(self.held_entry) + len(self.held_decode) == held
            stalled = idle and unplaced
            self._stalled_ticks = self._stalled_ticks + 1 if stalled else 0
            if self._stalled_ticks >= STALLED_TICKS:
                # nothing runs and nothing changes: the held requests stay unserved
                return
        elif not actions and not idle and self._next_arrival >= self.n and self._stuck():
            # requests wait on servers whose policy starts nothing, and nothing else is left
            if self._stuck_ticks == 0:
                self._stall_from = t
            self._stuck_ticks += 1
            if self._stuck_ticks >= STALLED_TICKS:
                return
        else:
            self._stuck_ticks = 0
            self._stall_from = None
        nxt = t + self.scaler.interval_s
        self._quiet_from = None
        if not actions and not held:
            nxt = self._skip_idle_ticks(view, nxt)
        elif unplaced and not idle and self._held_quiet_until is not None:
            nxt = self._skip_held_ticks(view, nxt)
        self._push_scale(nxt, SC_TICK, None)
        if self._quiet_from is not None:
            self._quiet_tick = (self._quiet_from, nxt, self._seq)

    def _stuck(self) -> bool:
        """True when no transfer, plan action, iteration, start-up or server wake-up is left:
        only the scaler could still change anything."""
        servers = self.servers
        return (
            not self._transfers
            and not self._plan_left
            and all(
                s.pending is None and s.window is None and s.state != STARTING for s in self.live
            )
            and not any(version == servers[sid].version for _, _, sid, version, _ in self._heap)
        )

    def _skip_idle_ticks(self, view: ClusterView, nxt: float) -> float:
        """The next scaler tick to run: ``nxt``, or with a scaler that passes idle ticks
        (``skip_idle_ticks``) and a cluster holding no request, the first tick at or after the
        next thing that happens (an arrival, a server event, a plan action); while the cluster
        works, see :meth:`_skip_quiet_ticks`.

        The ticks skipped are the times ``nxt``, ``nxt + interval_s``, ... (each the previous
        plus ``interval_s``, as the ticks themselves are computed) before that moment; the
        scaler is given them in blocks and accounts for them as if it had decided at each (it
        refuses, False, when one of those decisions would act or depend on more than the
        tick's time). Nothing else happens at those times, so the run is the one ticking at
        every one of them.
        """
        skip = self._skip_idle
        if skip is None and self._quiet_until is None:
            return nxt
        if self._transfers:
            return self._skip_quiet_ticks(view, nxt)
        for s in self.live:
            if not s.empty or s.state == STARTING:
                return self._skip_quiet_ticks(view, nxt)
        if skip is None:
            return self._skip_quiet_ticks(view, nxt)
        i = self._next_arrival
        horizon = self.arrival_list[i] if i < self.n else math.inf
        if self._heap:
            horizon = min(horizon, self._heap[0][0])
        if self._scale_heap:
            horizon = min(horizon, self._scale_heap[0][0])
        if not nxt < horizon < math.inf:
            return nxt  # nothing to skip, or nothing comes (the scaler stops at its next tick)
        first = nxt
        if horizon - nxt < _SHORT_SPAN * self.scaler.interval_s:  # type: ignore[union-attr]
            ticks, after = self._ticks_before(nxt, horizon)
            if ticks and skip(view, np.array(ticks)):
                nxt = after
        else:
            for block, after in self._tick_blocks(nxt, horizon):
                if not len(block) or not skip(view, block):
                    break
                nxt = after
        return self._skip_quiet_ticks(view, nxt) if nxt == first else nxt

    def _skip_quiet_ticks(self, view: ClusterView, nxt: float) -> float:
        """The next scaler tick to run while the cluster works: ``nxt``, or with a scaler that
        says when its ticks can next act (``quiet_until``), the first tick at or after that
        time, the next arrival, plan action or KV transfer, whichever is first (server events
        do not bound it).

        The scaler promises that every tick before the time it gives would return no action and
        change nothing it decides by, whatever the servers do, as long as no request is routed
        or held first; arrivals bound the span, and a scaler whose requests can be held at other
        times (a disaggregated decode router, at KV transfers) gives no such time.
        """
        quiet = self._quiet_until
        if quiet is None:
            return nxt
        until = self._before_next_input(quiet(view))
        if not nxt < until < math.inf:
            return nxt
        last = self._tick_after(nxt, until)
        self._quiet_from = nxt
        return last

    def _skip_held_ticks(self, view: ClusterView, nxt: float) -> float:
        """The next scaler tick to run after a tick that held requests, acted on nothing and
        placed none, the cluster not idle: ``nxt``, or with a scaler that says until when its
        ticks would repeat that one exactly (``held_quiet_until``), the first tick at or after
        that time, the next arrival, server event, plan action or KV transfer, whichever is
        first. The scaler accounts for the ticks passed over (``pass_held_ticks``, given their
        times) as if each had run.

        No server joins, leaves or changes state before that moment but at those events; what
        moves without an event (a server's free time and KV inside a fast-forwarded decode
        window) the scaler's time accounts for. The engine's count of stalled ticks is
        untouched: a cluster that is idle never passes ticks here."""
        until = self._held_quiet_until(view)  # type: ignore[misc]
        if not nxt < until:
            return nxt
        until = self._before_next_input(until)
        if self._heap:
            until = min(until, self._heap[0][0])
        if not nxt < until < math.inf:
            return nxt
        ticks, last = self._ticks_before(nxt, until)
        self.scaler.pass_held_ticks(ticks)  # type: ignore[union-attr]
        return last

    def _before_next_input(self, until: float) -> float:
        """``until``, or the next arrival, plan action or KV transfer landing if earlier."""
        i = self._next_arrival
        if i < self.n:
            until = min(until, self.arrival_list[i])
        if self._scale_heap:
            until = min(until, self._scale_heap[0][0])
        if self._transfers:
            until = min(until, self._transfers[0][0])
        return until

    def _tick_at_transfer(self, landing: float) -> None:
        """A KV transfer started now lands at ``landing``, inside a span of quiet ticks passed
        over (:meth:`_skip_quiet_ticks` bounded the span by the transfers then known): the
        next tick becomes the first of those ticks at or after ``landing``, so that if the
        decode router holds the request there, the scaler ticks as it would have ticking
        through the span (a tick at the landing's time runs before it lands, as any tick at an
        equal time does, and sees nothing held; the skipped ticks before it are quiet)."""
        quiet = self._quiet_tick
        if quiet is None or landing >= quiet[1]:
            return
        first, _, seq = quiet
        if first < landing:
            first = self._tick_after(first, landing)
        if first >= quiet[1]:
            return
        heap = self._scale_heap
        heap[:] = [e for e in heap if e[1] != seq]
        heapq.heapify(heap)
        self._push_scale(first, SC_TICK, None)
        self._quiet_tick = (quiet[0], first, self._seq)

    def _ticks_before(self, nxt: float, until: float) -> tuple[list[float], float]:
        """The scaler's tick times from ``nxt`` on before ``until`` (finite) and the first tick
        at or after ``until``: the times of :meth:`_tick_blocks`, each the previous plus
        ``interval_s``. A span of fewer than ``_SHORT_SPAN`` intervals is summed here one tick
        at a time, the same float additions in the same order (``np.cumsum`` adds left to
        right), without the cost of building arrays for a few ticks; a longer one is read from
        :meth:`_tick_blocks`."""
        step = self.scaler.interval_s  # type: ignore[union-attr]
        if until - nxt < _SHORT_SPAN * step:
            ticks = []
            while nxt < until:
                ticks.append(nxt)
                nxt += step
            return ticks, nxt
        blocks = list(self._tick_blocks(nxt, until))
        return [t for block, _ in blocks for t in block.tolist()], blocks[-1][1]

    def _tick_after(self, nxt: float, until: float) -> float:
        """The first scaler tick at or after ``until`` (finite) from ``nxt`` on: the tick after
        of :meth:`_ticks_before`, by the same additions, without listing the ticks before it."""
        step = self.scaler.interval_s  # type: ignore[union-attr]
        if until - nxt < _SHORT_SPAN * step:
            while nxt < until:
                nxt += step
            return nxt
        *_, (_, last) = self._tick_blocks(nxt, until)
        return last

    def _tick_blocks(self, nxt: float, until: float) -> Iterator[tuple[np.ndarray, float]]:
        """The scaler's tick times from ``nxt`` on before ``until`` (finite), in blocks of at
        most ``SKIP_BLOCK``, each with the tick after it (the last: the first tick at or after
        ``until``). Each time is the previous plus ``interval_s``, as the ticks themselves are
        computed (``np.cumsum`` adds left to right).

        The ticks before ``until`` number at most ``(until - nxt) / interval_s`` plus one (plus
        one more for rounding), so a span shorter than a block is summed in a block of that
        many plus one, not of ``SKIP_BLOCK``: the same blocks and times, at the cost of the
        span (a busy cluster's quiet spans are a few ticks long)."""
        step = self.scaler.interval_s  # type: ignore[union-attr]
        size = min(int((until - nxt) / step) + 3, SKIP_BLOCK)
        while True:
            block = np.full(size, step)
            block[0] = nxt
            ticks = block.cumsum()  # the array's own methods: np.cumsum's, without its wrapper
            k = int(ticks.searchsorted(until, side="left"))
            nxt = float(ticks[k]) if k < size else float(ticks[-1]) + step
            yield ticks[:k], nxt
            if k < size:
                return

    def _apply(self, action: ScaleAction, by: str) -> None:
        """Execute a scaling action now (``by`` names its origin in error messages)."""
        if not isinstance(action, ScaleAction):
            raise PolicyError(f"{by} returned {type(action).__name__}, expected ScaleAction")
        now = self.now
        if action.kind == "on":
            k = self._pool_of(action, by)
            srv = ServerState(self, len(self.servers), k, OFF)
            self.servers.append(srv)
            self._switch_on(srv, float(self.pools[k].startup_s))  # type: ignore[arg-type]
            self.scale_events.append(ScaleEvent(now, "on", srv.id, srv.pool_name, srv.id))
        else:
            sid = action.server
            assert sid is not None
            if not 0 <= sid < len(self.servers) or not self.servers[sid].accepting:
                state = (
                    "does not exist"
                    if not 0 <= sid < len(self.servers)
                    else f"is {STATE_NAMES[self.servers[sid].state]}"
                    + (" (drained)" if self.servers[sid].drain_s < math.inf else "")
                )
                raise PolicyError(f"t={now}: {by} cannot {action.kind} server {sid}: it {state}")
            srv = self.servers[sid]
            if action.kind == "assign":
                self._assign(srv, self._pool_of(action, by), by)
                self.max_end = max(self.max_end, now)
                return
            if action.kind == "move":
                k = self._pool_of(action, by)
                if self.pools[k].timing != srv.timing_name:
                    raise PolicyError(
                        f"t={now}: {by} cannot move server {sid} to pool {action.pool!r}: "
                        "the pools run different timing models (hardware)"
                    )
                if self.pools[k].role == "decode" and self.mode != "disaggregated":
                    raise PolicyError(f"t={now}: pool {action.pool!r} cannot take server {sid}")
                nxt = ServerState(self, len(self.servers), k, OFF, origin=sid)
                self.servers.append(nxt)
                srv.move_to = nxt.id
                self.scale_events.append(ScaleEvent(now, "move", sid, nxt.pool_name, nxt.id))
            else:
                self.scale_events.append(ScaleEvent(now, "drain", sid, srv.pool_name))
            srv.drain_s = now
            if srv.state == READY:
                srv.state = DRAINING
            self._refresh_routing()
            self._maybe_depart(srv)
        self.max_end = max(self.max_end, now)
        self._retry_due = True

    def _assign(self, srv: ServerState, k: int, by: str) -> None:
        """``srv`` becomes a member of pool ``k`` now, with the requests it holds."""
        now = self.now
        here, there = self.pools[srv.pool], self.pools[k]
        if k == srv.pool:
            raise PolicyError(
                f"t={now}: {by} cannot assign server {srv.id} to pool {there.name!r}: it is "
                "already there"
            )
        same = ("role", "timing", "kv_capacity_tokens", "max_batch_size", "max_batch_tokens")
        differ = [f for f in (*same, "startup_s") if getattr(here, f) != getattr(there, f)]
        if differ:
            raise PolicyError(
                f"t={now}: {by} cannot assign server {srv.id} to pool {there.name!r}: the pools "
                f"differ in {', '.join(differ)} (assign keeps the server as it is; use move)"
            )
        srv.pool = k
        srv.pool_name = there.name
        srv.view.pool = there.name
        self.scale_events.append(ScaleEvent(now, "assign", srv.id, there.name, srv.id))
        self._retry_due = True

    def _pool_of(self, action: ScaleAction, by: str) -> int:
        k = self.pool_index.get(action.pool)  # type: ignore[arg-type]
        if k is None:
            raise PolicyError(
                f"t={self.now}: {by} names unknown pool {action.pool!r}; known: "
                f"{', '.join(self.pool_index)}"
            )
        return k

    def _switch_on(self, srv: ServerState, delay_s: float) -> None:
        now = self.now
        srv.on_s = now
        srv.ready_s = now + delay_s
        bisect.insort(self.live, srv, key=server_id)
        if delay_s > 0:
            srv.state = STARTING
            self._push(srv.ready_s, srv, EV_READY)
        else:
            srv.state = READY
        self._refresh_routing()

    def _maybe_depart(self, srv: ServerState) -> None:
        """A drained server with nothing left departs now (a moved one starts its next life)."""
        if srv.state == DEPARTED or srv.state == OFF or not srv.empty:
            return
        srv.state = DEPARTED
        srv.off_s = self.now
        srv.version += 1  # drops its pending wake-ups
        self.live.remove(srv)
        if srv.move_to >= 0:
            self._switch_on(self.servers[srv.move_to], float(self.instance.cluster.move_s))
