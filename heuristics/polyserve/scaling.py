"""PolyServe's autoscaling: tiers grow from, and return servers to, a best-effort pool.

:class:`ControllerScaling` is the scaling part of
:class:`~slolab.heuristics.polyserve.PolyServeController`, the engine's scaler: every tick a
tier that left requests unplaced takes a pending server running its requests, else a
best-effort server; periodically each tier's last server goes to the pending list once none of
its requests is of its tier, and back to the best-effort pool once empty. It also tells the
engine which ticks it may skip or pass over (the same run either way).

References
----------
PolyServe, Sec. 4.3 (autoscaling, the best-effort pool), 4.4 (the pending list).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.heuristics.polyserve.routing import ControllerRouting
from slolab.heuristics.polyserve.tiers import PREFILL_POOL
from slolab.sim.scaling import ClusterView, ScaleAction

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server


class ControllerScaling(ControllerRouting):
    """The scaling part of :class:`~slolab.heuristics.polyserve.PolyServeController`: the
    scaler's ticks, and the ticks the engine may skip or pass over."""

    #: let the engine pass over ticks that would repeat the last one exactly while requests
    #: are held (held_quiet_until, pass_held_ticks; the same run either way): on in the
    #: registered scheduler (polyserve_scheduler); off, every such tick runs
    skip_held_ticks: bool

    def start_scaling(self, instance: Instance) -> None:
        """Read the fleet size; the first scale-down check is due at once (a new run)."""
        self.fleet = int(instance.settings.get("servers", instance.cluster.servers))
        self.next_scale_down = 0.0
        # the last tick, as held_quiet_until reads it: when its decide ran changing nothing it
        # decides by (-inf: it changed something)
        self._decided_quiet_at = -math.inf

    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        """Every tick: keep the tier lists; a tier (or the prefill pool) that left requests
        unplaced takes a pending server running its requests, else a best-effort server; every
        ``scale_down_s``: each tier's last server goes to the pending list once none of its
        requests is of its tier, and returns to the best-effort pool once empty."""
        now = cluster.now
        live = {s.id: s for s in cluster.servers}
        self._sync(cluster)
        pending = len(self.pending)
        for sid in sorted(self.pending):
            # an empty pending server runs no other tier's request any more: it serves its own
            # tier again while that tier holds requests (else the scale-down check drains it)
            s = live[sid]
            if s.load == 0 and self.held_count[self.tier_of_pool[s.pool]] > 0:
                self.pending.discard(sid)
        quiet = len(self.pending) == pending
        actions: list[ScaleAction] = []
        reclaimed: list[ScaleAction] = []  # at most one prefill server reclaimed per tick
        on = len(cluster.servers)
        for j in range(len(self.tiers)):
            if not (self.unplaced[j] and self.held_count[j] > 0):
                continue
            pool = self.pools[j]
            if any(live[i].state == "starting" for i in self.order[j] if i in live):
                continue  # one start-up at a time per tier
            joiner = self._pending_with(j, live)
            if joiner is not None:
                self.pending.discard(joiner)
                src = self.tier_of_pool[live[joiner].pool]
                self.order[src].remove(joiner)
                self.order[j].append(joiner)
                actions.append(ScaleAction.assign(joiner, pool))
            elif on < self.fleet:
                actions.append(ScaleAction.on(pool))
                on += 1
            elif (idle := self._idle_elsewhere(j, live, actions)) is not None:
                # the fleet is full but a server of a tier with nothing held is empty: it goes
                # back to the best-effort pool now, for this tier at the next tick (waiting for
                # the periodic scale-down check would leave this tier's requests held)
                actions.append(ScaleAction.drain(idle))
            elif self.mode == "disaggregated" and not self.unplaced_prefill and not reclaimed:
                reclaimed = self._reclaim_prefill(live)
                actions += reclaimed
            self.unplaced[j] = False
        if self.mode == "disaggregated" and self.unplaced_prefill and self.held_prefill > 0:
            starting = any(live[i].state == "starting" for i in self.prefill_order if i in live)
            if not starting and on < self.fleet:
                actions.append(ScaleAction.on(PREFILL_POOL))
                on += 1
            self.unplaced_prefill = False
        if now >= self.next_scale_down:
            quiet = False
            self.next_scale_down = now + self.params.scale_down_s
            # a server reclaimed or handed over this tick is already draining: not drained twice
            drained = {a.server for a in actions if a.kind == "drain"}
            actions += [a for a in self._scale_down(live) if a.server not in drained]
        self._decided_quiet_at = now if quiet and not actions else -math.inf
        return actions

    def skip_idle_ticks(self, cluster: ClusterView, ticks: np.ndarray) -> bool:
        """Account for scaler ticks at ``ticks`` on an idle cluster (no request anywhere) and
        let the engine skip them (:class:`slolab.sim.scaling.Scaler`): True when no server of
        PolyServe's pools is on and nothing is held, where every :meth:`decide` returns no
        action and changes only the time of the next scale-down check, advanced here as those
        calls would have; False otherwise (a check would still drain an empty server)."""
        if any(self.held_count) or self.held_prefill or self.pending:
            return False
        ours = self.tier_of_pool.keys() | {PREFILL_POOL}
        if any(s.pool in ours for s in cluster.servers):
            return False
        due = self.next_scale_down
        step = self.params.scale_down_s
        while True:
            # the check runs at the first tick at or after it is due, and is due again then + step
            k = int(ticks.searchsorted(due, side="left"))  # the method: no wrapper call
            if k >= len(ticks):
                break
            due = float(ticks[k]) + step
        self.next_scale_down = due
        return True

    def quiet_until(self, cluster: ClusterView) -> float:
        """Until when every tick returns no action and changes nothing it decides by (the
        engine may skip those ticks, :class:`slolab.sim.scaling.Scaler`): with no request held
        (entry, prefill or decode), the next scale-down check (a tick acts only for held
        requests or at a check); -inf otherwise. Requests are held only as they arrive, which
        ends the span, and disaggregated also as their KV cache reaches the decode side: the
        engine brings the next tick back to the first one at or after a KV transfer that lands
        in the span. The lists of each tier's servers are brought up to date at the next tick
        that runs, in the same order."""
        if any(self.held_count) or self.held_prefill:
            return -math.inf
        return self.next_scale_down

    def held_quiet_until(self, cluster: ClusterView) -> float:
        """Until when every tick would repeat the one just run with requests held (the engine
        may pass over those ticks, :class:`slolab.sim.scaling.Scaler`; co-located only, -inf
        otherwise or with :attr:`skip_held_ticks` off).

        The tick just run must have decided nothing and changed nothing it decides by (no
        action, no pending server released, no scale-down check), its dispatch placed nothing,
        and every ``TOO_LATE`` refusal of that dispatch must have been asked afresh (one
        remembered from an earlier moment may have been given on a server that has changed
        since). While the servers do not change (the engine bounds the span by every server
        event, arrival, plan action and KV transfer), every later tick asks the same servers
        about the same requests and gets the same answers: a busy server's answer reads its
        free time, queue and KV, which stay put but inside a fast-forwarded decode window,
        where they move at its next iteration end (its free time); an empty server's free
        time is the tick's time, and a deadline refusal there stays one as it grows; ``FULL``
        answers come from memory. That holds until the first of: the next scale-down check, a
        held request's first-token deadline (it turns late, and the dispatch order changes, at
        the first tick after it), and for each server that refused on the deadline, its free
        time if busy and each prompt queued there reaching its first-token deadline (the
        admission counts it ahead of every request from then on). A deadline bound is returned
        as the next float above it: a tick at the deadline itself still sees it unpassed
        (docs/planning.md, "Held ticks passed over")."""
        now = cluster.now
        if (
            not self.skip_held_ticks
            or self.mode == "disaggregated"
            or self._decided_quiet_at != now
            or self._dispatched_at != now
            or self._late_hits
        ):
            return -math.inf
        until = self.next_scale_down
        for queue in self._held_tiers:
            entries = queue.entries
            split = bisect_left(entries, (now,))  # the first still on time
            if split < len(entries):
                until = min(until, math.nextafter(entries[split][0], math.inf))
        asked = {sid for _, sid in self._fresh_late}
        first = self.first_deadline
        for s in cluster.servers:
            if s.id not in asked:
                continue  # not asked, or its refusal is FULL and comes from memory
            if s.busy:
                # the free time moves at the next iteration end (within a fast-forwarded decode
                # window, with the KV in use, without a server event)
                until = min(until, s.free_at_s)
            if s.load:
                for q in s.prefilling + s.waiting:
                    if first[q] >= now:
                        until = min(until, math.nextafter(first[q], math.inf))
        return until

    def pass_held_ticks(self, ticks: Sequence[float]) -> None:
        """Account for the ticks at ``ticks`` (after the one :meth:`held_quiet_until` read, and
        before the time it gave) as if each had run: each counts the routing decisions of the
        last dispatch again, and each re-asks a ``TOO_LATE`` refusal of that dispatch once it
        is a tick old (:meth:`_admit`'s own comparison, ``now < at + tick_s`` answering from
        memory), so every such memory entry ends with the time of its last re-ask."""
        self.decisions += self._dispatch_decisions * len(ticks)
        if not self._fresh_late:
            return
        times = list(ticks)
        tick_s = self.params.tick_s
        # each tick re-asks the entry the one before it wrote: from the first re-ask on, the
        # last tick does (the usual case, tested on the times themselves); else step through
        every = all(b >= a + tick_s for a, b in zip(times, times[1:], strict=False))
        for r, sid in self._fresh_late:
            seen = self._refused[r]
            departed, at_s, code = seen[sid]
            k = bisect_left(times, at_s + tick_s)
            if k == len(times):
                continue
            if every:
                at_s = times[-1]
            else:
                while k < len(times):
                    at_s = times[k]
                    k = bisect_left(times, at_s + tick_s, k + 1)
            seen[sid] = (departed, at_s, code)

    def _idle_elsewhere(
        self, j: int, live: dict[int, Server], actions: list[ScaleAction]
    ) -> int | None:
        """An empty server of another tier that holds no request (not yet drained), or None."""
        drained = {a.server for a in actions if a.kind == "drain"}
        for t, members in enumerate(self.order):
            if t == j or self.held_count[t]:
                continue
            for sid in members:
                s = live.get(sid)
                if s is not None and s.accepting and s.load == 0 and sid not in drained:
                    return sid
        return None

    def _reclaim_prefill(self, live: dict[int, Server]) -> list[ScaleAction]:
        """A decode tier needs a server and the fleet is full: drain the prefill server with the
        fewest prompt tokens queued (prefill servers may leave at any time, Sec. 4.3; this one
        finishes its queue first), keeping one; its device returns to the best-effort pool."""
        members = [i for i in self.prefill_order if i in live and live[i].accepting]
        if len(members) <= 1:
            return []

        def queued(sid: int) -> int:
            s = live[sid]
            return sum(s.remaining_prefill(q) for q in s.waiting + s.prefilling)

        victim = min(members, key=lambda sid: (queued(sid), -sid))
        return [ScaleAction.drain(victim)]

    def _sync(self, cluster: ClusterView) -> None:
        """Servers switched on since the last look join the end of their tier's list; departed
        ones leave the lists."""
        live = {s.id for s in cluster.servers}
        listed = set(self.prefill_order).union(*self.order)
        for s in cluster.servers:
            if s.id in listed or not s.accepting:
                continue
            if s.pool == PREFILL_POOL:
                self.prefill_order.append(s.id)
            elif s.pool in self.tier_of_pool:
                self.order[self.tier_of_pool[s.pool]].append(s.id)
        if not listed <= live:  # a listed server departed (else every list stays as it is)
            for lst in (*self.order, self.prefill_order):
                lst[:] = [i for i in lst if i in live]
        self.pending &= live

    def _pending_with(self, j: int, live: dict[int, Server]) -> int | None:
        """A pending server running class-``j`` requests (Sec. 4.4), or None."""
        for sid in sorted(self.pending):
            s = live.get(sid)
            if s is None or not s.accepting:
                continue
            ids = list(s.waiting) + list(s.prefilling) + list(s.decoding)
            if ids and (self.req.tier[np.array(ids, dtype=np.int64)] == j).any():
                return sid
        return None

    def _scale_down(self, live: dict[int, Server]) -> list[ScaleAction]:
        actions: list[ScaleAction] = []
        for j in range(len(self.tiers)):
            if self.held_count[j]:
                continue
            members = [i for i in self.order[j] if i in live and live[i].accepting]
            for sid in list(self.pending):
                s = live.get(sid)
                if s is not None and s.accepting and s.load == 0 and sid in members:
                    actions.append(ScaleAction.drain(sid))
                    self.pending.discard(sid)
                    members.remove(sid)
            last = next((i for i in reversed(members) if i not in self.pending), None)
            if last is None:
                continue
            s = live[last]
            if s.load == 0:
                actions.append(ScaleAction.drain(last))
                continue
            tier = self._tier_list
            if not any(
                tier[r] == j for queue in (s.waiting, s.prefilling, s.decoding) for r in queue
            ):
                self.pending.add(last)
        if self.mode == "disaggregated" and not self.held_prefill:
            members = [i for i in self.prefill_order if i in live and live[i].accepting]
            if members and live[members[-1]].load == 0:
                actions.append(ScaleAction.drain(members[-1]))
        return actions
