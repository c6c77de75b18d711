"""PolyServe's routing: where each request goes, and the held requests retried at every tick.

:class:`ControllerRouting` is the routing part of
:class:`~slolab.heuristics.polyserve.PolyServeController`: the entry router (a prefill server
disaggregated, a tier server co-located) and the decode router (:class:`DecodeSide`), each
placing a request on the *highest-load* server of its tier that admits it, then on tighter
tiers (lazy promotion), else holding it in its tier's queue (:class:`_HeldQueue`), which every
dispatch retries in deadline order.

References
----------
PolyServe, Sec. 4.2 (the prefill side, earliest deadline first), 4.3 (the load gradient), 4.4
(lazy promotion), 4.7 (dynamic chunking on prefill servers).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from slolab.heuristics.polyserve.admission import ADMIT, FULL, ControllerAdmission
from slolab.sim.policy import HOLD

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server


class TierRanking:
    """:meth:`PolyServeController._ranked` of ``servers``, each tier ranked when placement
    first asks for it (``get``): a placement that admits on its own tier reads the loads of
    that tier's servers only. A tier's list is the same: its servers sorted on (minus the
    load, the place in the tier's list, the index), a total order, so the same whatever order
    they are listed in."""

    __slots__ = ("controller", "servers", "members", "done")

    def __init__(self, controller: ControllerRouting, servers: Sequence[Server]) -> None:
        self.controller = controller
        self.servers = servers
        self.members = controller._members(servers)
        self.done: dict[int, list[int]] = {}

    def get(self, t: int) -> list[int] | None:
        got = self.done.get(t)
        if got is None:
            members = self.members.get(t)
            if members is None:
                return None
            servers = self.servers
            got = self.done[t] = _placement_order(
                ((k, sid, servers[k].load) for k, sid in members), self.controller._ranks()[t]
            )
        return got


def _placement_order(found: Iterable[tuple[int, int, int]], places: dict[int, int]) -> list[int]:
    """The indices of a tier's servers ``found`` as (index, server id, load) in the order
    placement tries them: highest load first, ties to the server with the earlier place in the
    tier's list (``places``; unlisted ones last), then to the lower index."""
    return [k for _, _, k in sorted((-load, places.get(sid, 1 << 30), k) for k, sid, load in found)]


class _HeldQueue:
    """Held requests of one queue (a tier's, or the prefill queue), kept sorted by (first-token
    deadline, the order they were held), so that a retry reads them in dispatch order without
    sorting: those still on time (deadline >= now) by deadline, then the late ones by deadline,
    ties in the order held (the order of the engine's held list)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[float, int, int]] = []  # (deadline, held order, request)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, deadline: float, order: int, r: int) -> None:
        insort(self.entries, (deadline, order, r))

    def positions(self, now: float) -> Iterator[int]:
        """Positions in :attr:`entries` in dispatch order at ``now`` (read lazily)."""
        split = bisect_left(self.entries, (now,))  # the first with deadline >= now
        yield from range(split, len(self.entries))
        yield from range(split)

    def remove(self, positions: list[int]) -> None:
        for i in sorted(positions, reverse=True):
            del self.entries[i]


class DecodeSide:
    """The controller seen as the decode router of a disaggregated cluster."""

    def __init__(self, controller: ControllerRouting) -> None:
        self.c = controller

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        return self.c.route_decode(request, servers, now)

    def dispatch(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        return self.c.dispatch_decode(held, servers, now)


class ControllerRouting(ControllerAdmission):
    """The routing part of :class:`~slolab.heuristics.polyserve.PolyServeController`: placement,
    the held queues and their dispatch, the tier lists placement ranks by."""

    def start_routing(self) -> None:
        """Empty the tier lists and the held queues, zero the decision counts (a new run)."""
        self._chunk_times = [
            self.profile.time(i, 0.0) for i in range(2 * self.params.prefill_chunk_tokens + 1)
        ]
        self.order: list[list[int]] = [[] for _ in self.tiers]  # servers of each tier, join order
        # the tier lists as _ranks last read them, with each server's place
        self._rank_lists: list[tuple[list[int], dict[int, int]]] = [([], {}) for _ in self.tiers]
        # (servers, their pools, the pending ids, per tier its (index, id) pairs): _members
        self._members_of: tuple[Any, list[str], set[int], dict[int, list[tuple[int, int]]]] = (
            None,
            [],
            set(),
            {},
        )
        self.prefill_order: list[int] = []
        self.pending: set[int] = set()  # servers on the pending list (Sec. 4.4)
        # per tier, as Python ints and bools (read at every tick and retry point)
        self.held_count = [0] * len(self.tiers)  # entry (CO) or decode (PD)
        self.held_prefill = 0
        # the held requests themselves, in dispatch order: per tier (the side _route_tier holds
        # on) and the prefill queue; numbered in the order held
        self._held_tiers = [_HeldQueue() for _ in self.tiers]
        self._held_prefill = _HeldQueue()
        self._held_order = 0
        self.unplaced = [False] * len(self.tiers)  # a tier left requests unplaced
        self.unplaced_prefill = False
        self._prefill_queue: tuple[float, dict[int, int]] = (-1.0, {})
        # held requests every usable server refused with FULL, and the signature then
        self._full_at: dict[int, tuple[tuple[int, int], ...]] = {}
        # the last dispatch, as held_quiet_until reads it: when it ran, and the routing
        # decisions it counted
        self._dispatched_at = -math.inf
        self._dispatch_decisions = 0
        self.decisions = 0
        self.decision_s = 0.0
        # each request's first routing decision (s): at the entry router, and disaggregated also
        # at the decode router when its KV cache arrives (retries of held requests not counted)
        self.latencies_s: list[float] = []
        # fixed for the run, read at every placement: the tiers each class may use in the order
        # tried
        self._tries = [self._candidate_tiers(j) for j in range(len(self.tiers))]

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Entry router: the prefill server (disaggregated) or the tier server (co-located) of an
        arriving request, or HOLD (its queue is not empty, or no server admits it)."""
        t0 = time.perf_counter()
        if self.mode == "disaggregated":
            k = HOLD if self.held_prefill else self._place_prefill(request, servers, now)
            if k == HOLD:
                self.held_prefill += 1
                self.unplaced_prefill = True
                self._held_prefill.add(self._deadline(request), self._held_order, request)
                self._held_order += 1
        else:
            k = self._route_tier(request, servers, now)
        return self._timed(k, t0)

    def unservable(self, request: int) -> str | None:
        """Why no server would ever admit ``request`` (the engine rejects it as it arrives), or
        None: every tier it may use (its own and, with promotion, tighter ones) refuses it for
        its batch, memory or TPOT even on an empty server (:meth:`never_admitted`; the decode
        tiers when disaggregated, before its prefill runs). Held, it would wait for good, and
        its tier would keep every server it took from the others (docs/polyserve.md, "A
        request no tier admits")."""
        return self.never_admitted(
            request, [self.tier_taus[t] for t in self._tries[self._tier_list[request]]]
        )

    def route_decode(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Decode router: a decode server of the request's tier (or a tighter one), or HOLD."""
        t0 = time.perf_counter()
        return self._timed(self._route_tier(request, servers, now), t0)

    def _route_tier(self, request: int, servers: Sequence[Server], now: float) -> int:
        """A server of the request's tier (or a tighter one), or HOLD behind its tier's queue."""
        j = int(self.req.tier[request])
        k = HOLD if self.held_count[j] else self._place(request, servers, now)
        if k == HOLD:
            self.held_count[j] += 1
            self.unplaced[j] = True
            self._held_tiers[j].add(self._deadline(request), self._held_order, request)
            self._held_order += 1
        return k

    def _deadline(self, r: int) -> float:
        """Request ``r``'s first-token deadline, arrival + TTFT (s; inf without a TTFT SLO)."""
        return self.first_deadline[r]

    def _synced(self, held: Sequence[int], queues: list[_HeldQueue]) -> list[_HeldQueue]:
        """``queues``, rebuilt from ``held`` (the engine's list, in the order held) when they
        do not hold as many requests: they hold every request this router held, and the
        engine may have rejected one instead of holding it (no server could ever fit it)."""
        if len(held) == sum(len(q) for q in queues):
            return queues
        fresh = [_HeldQueue() for _ in queues]
        for i, r in enumerate(held, start=self._held_order):
            j = int(self.req.tier[r]) if len(queues) > 1 else 0
            fresh[j].entries.append((self._deadline(r), i, int(r)))
        for q in fresh:
            q.entries.sort()
        self._held_order += len(held)
        return fresh

    def _timed(self, k: int, t0: float) -> int:
        """Count one first routing decision that started at ``t0``; return its answer ``k``."""
        spent = time.perf_counter() - t0
        self.decisions += 1
        self.decision_s += spent
        self.latencies_s.append(spent)
        return k

    def dispatch(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        """Held entry requests, earliest deadline first: disaggregated, the prefill queue (one
        queue, EDF on arrival + TTFT); co-located, each tier's queue until its head finds no
        server."""
        if self.mode == "disaggregated":
            placed = self._dispatch_queue(held, servers, now, self._place_prefill)
            self.held_prefill -= len(placed)
            self.unplaced_prefill = self.held_prefill > 0
            return placed
        return self._dispatch_tiers(held, servers, now)

    def dispatch_decode(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        return self._dispatch_tiers(held, servers, now)

    def _dispatch_tiers(
        self, held: Sequence[int], servers: Sequence[Server], now: float
    ) -> list[tuple[int, int]]:
        t0 = time.perf_counter()
        self._dispatched_at = now
        self._fresh_late = []
        self._late_hits = 0
        decisions = self.decisions
        self._held_tiers = queues = self._synced(held, self._held_tiers)
        placed: list[tuple[int, int]] = []
        # loads change only once the engine places the pairs: one look at the servers serves
        # the rankings and every signature of this dispatch
        usable = self._tier_servers(servers)
        ranked = self._ranked(servers, usable)
        for j, queue in enumerate(queues):
            if not len(queue):
                self.unplaced[j] = False
                continue
            placed += self._drain(queue, now, self._tier_placer(j, servers, now, usable, ranked))
            self.unplaced[j] = self.held_count[j] > 0
        self._dispatch_decisions = self.decisions - decisions
        self.decision_s += time.perf_counter() - t0
        return placed

    def _tier_placer(
        self,
        j: int,
        servers: Sequence[Server],
        now: float,
        usable: list[tuple[int, int, int, int]],
        ranked: dict[int, list[int]],
    ) -> Callable[[int], int]:
        """Placement of tier ``j``'s held requests within one dispatch: :meth:`_place` at the
        tier's :meth:`_signature`, which each placement refreshes (and counts off the held)."""
        signature = self._signature(j, servers, usable)

        def place(r: int) -> int:
            nonlocal signature
            k = self._place(r, servers, now, signature, ranked)
            if k != HOLD:
                self.held_count[j] -= 1
                signature = self._signature(j, servers, usable)
            return k

        return place

    def _dispatch_queue(
        self,
        held: Sequence[int],
        servers: Sequence[Server],
        now: float,
        place: Callable[[int, Sequence[Server], float], int],
    ) -> list[tuple[int, int]]:
        t0 = time.perf_counter()
        (queue,) = self._synced(held, [self._held_prefill])
        self._held_prefill = queue
        placed = self._drain(queue, now, lambda r: place(r, servers, now))
        self.decision_s += time.perf_counter() - t0
        return placed

    def _drain(
        self, queue: _HeldQueue, now: float, place: Callable[[int], int]
    ) -> list[tuple[int, int]]:
        """The dispatch loop of one held queue (a tier's or the prefill queue): its requests
        in dispatch order (on time by deadline, then late), each given to ``place`` (a server,
        or HOLD), until the params' ``dispatch_lookahead`` HOLDs in a row; the placed
        ones leave the queue. Returns the (request, server) pairs placed."""
        lookahead = self.params.dispatch_lookahead
        entries = queue.entries
        placed: list[tuple[int, int]] = []
        taken: list[int] = []
        failures = 0
        for i in queue.positions(now):
            r = entries[i][2]
            self.decisions += 1
            k = place(r)
            if k == HOLD:
                failures += 1
                if failures >= lookahead:
                    break
                continue
            failures = 0
            placed.append((r, k))
            taken.append(i)
        queue.remove(taken)
        return placed

    def _candidate_tiers(self, j: int) -> list[int]:
        """Tiers a class-``j`` request may use, in the order tried (Sec. 4.4)."""
        promotion = self.params.promotion
        if promotion == "none":
            return [j]
        tighter = list(range(j - 1, -1, -1))  # nearest tighter tier first
        return [j, *tighter] if promotion == "lazy" else [*reversed(tighter), j]

    def _place(
        self,
        r: int,
        servers: Sequence[Server],
        now: float,
        signature: tuple[tuple[int, int], ...] | None = None,
        ranked: dict[int, list[int]] | None = None,
    ) -> int:
        """Highest-load admitting server of the request's tier, then of tighter tiers; HOLD.

        ``signature``: the (server, requests departed) of every server the request may use
        (:meth:`_signature`). When every one of them refused ``r`` for its batch, memory or
        TPOT (``FULL``) at that same signature, each would refuse it again from memory
        (:meth:`_admit`): HOLD at once, without asking them. ``ranked``: :meth:`_ranked` of
        ``servers`` when the caller already has it (loads do not change within a dispatch)."""
        if signature is not None and self._full_at.get(r) == signature:
            return HOLD
        j = int(self.req.tier[r])
        by_tier = TierRanking(self, servers) if ranked is None else ranked
        late = self._late(r, now)
        all_full = True
        admit = self._admit
        for t in self._tries[j]:
            ks = by_tier.get(t)
            if not ks:
                continue
            tau = self.tier_taus[t]
            for k in ks:
                code = admit(servers[k], r, tau, late, now)
                if code == ADMIT:
                    sid = servers[k].id
                    self.placed[sid] = self.placed.get(sid, 0) + 1
                    if not late and servers[k].role == "mixed":
                        self.predicted_prefill_end_s[r] = self._predicted_end
                    self._refused.pop(r, None)
                    self._full_at.pop(r, None)
                    return k
                all_full = all_full and code == FULL
        if signature is not None and all_full:
            self._full_at[r] = signature
        return HOLD

    def _tier_servers(self, servers: Sequence[Server]) -> list[tuple[int, int, int, int]]:
        """(index in ``servers``, server id, tier, load) of every tier server, pending ones
        excepted (:meth:`_members`, tier by tier): what :meth:`_ranked` and :meth:`_signature`
        read of the servers, read once for a dispatch (no server joins, leaves or changes its
        load before the engine places the dispatch's pairs); both sort what they read."""
        return [
            (k, sid, t, servers[k].load)
            for t, members in self._members(servers).items()
            for k, sid in members
        ]

    def _ranked(
        self,
        servers: Sequence[Server],
        usable: list[tuple[int, int, int, int]] | None = None,
    ) -> dict[int, list[int]]:
        """Per tier, the indices of its servers (pending ones excepted) in the order placement
        tries them: highest load first, ties to the server that joined the tier first.

        ``usable``: :meth:`_tier_servers` of ``servers`` when the caller has it. Each server
        is sorted on (minus its load, its place in the tier's list, its index): servers the
        first two leave tied (two not yet listed) stay in index order, as in a stable sort on
        the first two over the servers in index order. A server's place is the first index of
        its id in the list, the only one (a server joins a list only when it is in none)."""
        if usable is None:
            usable = self._tier_servers(servers)
        keyed: dict[int, list[tuple[int, int, int]]] = {}
        for k, sid, t, load in usable:
            keyed.setdefault(t, []).append((k, sid, load))
        ranks = self._ranks()
        return {t: _placement_order(found, ranks[t]) for t, found in keyed.items()}

    def _members(self, servers: Sequence[Server]) -> dict[int, list[tuple[int, int]]]:
        """Per tier, (index in ``servers``, id) of its servers, pending ones excepted, in the
        order of ``servers``; kept while the servers, their pools and the pending set are the
        same (a server changes its pool in place when assigned to another)."""
        kept_servers, kept_pools, kept_pending, members = self._members_of
        pools = [s.pool for s in servers]
        if kept_servers is servers and kept_pools == pools and kept_pending == self.pending:
            return members
        tier_of_pool = self.tier_of_pool
        pending = self.pending
        members = {}
        for k, s in enumerate(servers):
            t = tier_of_pool.get(s.pool)
            if t is not None and s.id not in pending:
                members.setdefault(t, []).append((k, s.id))
        self._members_of = (servers, pools, set(pending), members)
        return members

    def _ranks(self) -> list[dict[int, int]]:
        """Per tier, each listed server's place in the tier's list (:attr:`order`; the first
        index of its id), rebuilt only for a list that changed since the last call."""
        kept = self._rank_lists
        for t, order in enumerate(self.order):
            if kept[t][0] != order:
                places: dict[int, int] = {}
                for i, sid in enumerate(order):
                    places.setdefault(sid, i)
                kept[t] = (list(order), places)
        return [places for _, places in kept]

    def _signature(
        self,
        j: int,
        servers: Sequence[Server],
        usable: list[tuple[int, int, int, int]] | None = None,
    ) -> tuple[tuple[int, int], ...]:
        """(server id, requests departed from it) of every server a class-``j`` request may use
        (its tier's and, with promotion, tighter tiers', pending ones excepted), in id order: the
        state :meth:`_admit`'s memory of ``FULL`` refusals keys on. ``usable``:
        :meth:`_tier_servers` of ``servers`` when the caller has it."""
        if usable is None:
            usable = self._tier_servers(servers)
        tiers = set(self._tries[j])
        placed = self.placed
        return tuple(
            sorted((sid, placed.get(sid, 0) - load) for _, sid, t, load in usable if t in tiers)
        )

    def _late(self, r: int, now: float) -> bool:
        """The request's next deadline has passed: it is admitted on the TPOT and memory checks
        alone (it is late anyway; it must not make others late)."""
        first = self.first_deadline[r]
        if self.mode == "disaggregated":
            return now > first + self.req.tpot[r]
        return now > first

    def _place_prefill(self, r: int, servers: Sequence[Server], now: float) -> int:
        """Highest-load (queued prefill tokens) prefill server that finishes the prompt by the
        TTFT deadline (Sec. 4.7); HOLD."""
        # queued prompt tokens per prefill server, read once per moment (within one moment only
        # this router's own placements change them, and it adds those itself)
        cached_at, cache = self._prefill_queue
        if cached_at != now or len(cache) != len(servers):
            cache = {
                k: sum(s.remaining_prefill(q) for q in s.waiting + s.prefilling)
                for k, s in enumerate(servers)
                if s.role == "prefill"
            }
            self._prefill_queue = (now, cache)
        queued = [(left, k) for k, left in cache.items()]
        if not queued:
            return HOLD
        rank = {sid: i for i, sid in enumerate(self.prefill_order)}
        queued.sort(key=lambda e: (-e[0], rank.get(servers[e[1]].id, 1 << 30)))
        deadline = self.req.arrival[r] + self.req.ttft[r]
        p = int(self.req.prompt[r])
        if now > deadline:
            k = queued[-1][1]  # lost already: the least-loaded server, behind the others
            cache[k] += p
            return k
        for left, k in queued:
            s = servers[k]
            done = s.free_at_s + self.prefill_time(left + p)
            if done <= deadline - self.params.prefill_slack_tpots * self.req.tpot[r]:
                cache[k] += p
                return k
        return HOLD

    def prefill_time(self, tokens: int) -> float:
        """Predicted time of ``tokens`` prompt tokens under dynamic chunking with budget ``C``:
        iterations of ``C`` tokens, the last two merged when fewer than ``2C`` remain."""
        c = self.params.prefill_chunk_tokens
        if tokens <= 0:
            return 0.0
        full = max(math.ceil(tokens / c) - 1, 0)
        if tokens - (full - 1) * c < 2 * c and full >= 1:
            full -= 1
        last = tokens - full * c
        times = self._chunk_times  # profile time of i prefill tokens, i <= 2C
        return full * times[c] + (
            times[last] if last < len(times) else self.profile.time(last, 0.0)
        )
