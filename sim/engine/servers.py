"""The engine's state of each server and the read-only view policies, routers and scalers get.

A server is one life of a device in one pool: :class:`ServerState` holds its queues (waiting,
prefilling, decoding), its KV tokens, its iteration or fast-forwarded decode window in progress
(:class:`PendingIteration`, :class:`DecodeWindow`) and its life (off, starting, ready, draining, departed);
:class:`Server` is what the plugins see of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from slolab.sim.metrics import token_deadline_s
from slolab.timing.base import N_FEATURES, TimingModel
from slolab.timing.forms import row_timer

if TYPE_CHECKING:
    # a server reads the run's state, which the engine's core holds (an Engine is one)
    from slolab.sim.engine.state import EngineCore as Engine

#: An empty array of request ids (an iteration without decode entries).
NO_IDS = np.zeros(0, dtype=np.int64)
_NO_FEATURES = np.zeros(N_FEATURES)
_NO_FEATURES.setflags(write=False)


class DecodeWindow:
    """A fast-forwarded run of identical decode-only iterations (pending until committed)."""

    __slots__ = (
        "ids",
        "starts",
        "ends",
        "durations",
        "features",
        "kv0",
        "keep",
        "extendable",
        "wake_at_s",
    )

    def __init__(
        self,
        ids: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        durations: np.ndarray,
        features: np.ndarray,
        kv0: int,
        extendable: bool,
        wake_at_s: float,
    ):
        self.ids = ids
        self.starts = starts
        self.ends = ends
        self.durations = durations
        self.features = features
        self.kv0 = kv0
        self.keep = len(ends)
        # the window stopped at its chunk length, not at a finish or at the memory limit: if it
        # runs to its end uncut, the same batch continues without asking the policy again
        self.extendable = extendable
        # the policy is asked again at the end of the first iteration ending at or after it
        self.wake_at_s = wake_at_s


class PendingIteration:
    """One started iteration whose tokens are emitted at its end."""

    __slots__ = (
        "start",
        "end",
        "prefill_ids",
        "prefill_tokens",
        "decode_ids",
        "static_ids",
        "static_offsets",
        "features",
        "kv",
    )

    def __init__(self) -> None:
        self.start = 0.0
        self.end = 0.0
        self.prefill_ids: list[int] = []
        self.prefill_tokens: list[int] = []
        self.decode_ids = NO_IDS
        self.static_ids: list[int] = []
        self.static_offsets: list[np.ndarray] = []
        # the iteration's feature vector, kept for the iteration log only (read-only zeros)
        self.features = _NO_FEATURES
        self.kv = 0


#: Server states (a server is one life of a device in one pool), and their names.
OFF, STARTING, READY, DRAINING, DEPARTED = range(5)
STATE_NAMES = ("off", "starting", "ready", "draining", "departed")


def server_id(srv: ServerState) -> int:
    """A server's id (the key that keeps the live servers in id order)."""
    return srv.id


class ServerState:
    """The engine's state of one server (policies see it through :class:`Server`); the
    engine's modules share it."""

    __slots__ = (
        "id",
        "pool",
        "pool_name",
        "role",
        "timing",
        "timing_name",
        "kv_capacity",
        "max_batch_size",
        "max_batch_tokens",
        "waiting",
        "prefilling",
        "decoding",
        "waiting_t",
        "prefilling_t",
        "decoding_t",
        "decoding_arr",
        "decoding_kv",
        "kv",
        "window",
        "pending",
        "version",
        "busy_s",
        "state",
        "on_s",
        "ready_s",
        "drain_s",
        "off_s",
        "origin",
        "move_to",
        "first_pool",
        "view",
        "time_of_row",
        "cache",
        "kv_shared",
    )

    def __init__(self, engine: Engine, sid: int, pool: int, state: int, origin: int = -1) -> None:
        p = engine.pools[pool]
        self.id = sid
        self.pool = pool
        self.pool_name = p.name
        self.role = p.role
        self.timing = engine.pool_timing[pool]
        # one iteration's time from its feature row as a list (the floats of ``timing.times``)
        self.time_of_row = row_timer(self.timing)
        self.timing_name = p.timing
        self.kv_capacity = int(p.kv_capacity_tokens)  # type: ignore[arg-type]
        self.max_batch_size = int(p.max_batch_size)  # type: ignore[arg-type]
        self.max_batch_tokens = int(p.max_batch_tokens)  # type: ignore[arg-type]
        self.waiting: list[int] = []
        self.prefilling: list[int] = []
        self.decoding: list[int] = []
        self.waiting_t: tuple[int, ...] | None = None
        self.prefilling_t: tuple[int, ...] | None = None
        self.decoding_t: tuple[int, ...] | None = None
        self.decoding_arr: np.ndarray | None = None
        # the KV tokens its decoding requests hold (the sum of ``held`` over ``decoding``), kept
        # up to date wherever either changes
        self.decoding_kv = 0
        self.kv = 0
        # prefix caching: its block cache (None: off, or a decode or static server) and the KV
        # tokens ``kv`` counts more than once (blocks several running requests share); the KV
        # resident for its requests is ``kv - kv_shared``
        prefix = engine.prefix
        self.cache = (
            prefix.new_cache(sid)
            if prefix is not None and self.role in ("mixed", "prefill")
            else None
        )
        self.kv_shared = 0
        self.window: DecodeWindow | None = None
        self.pending: PendingIteration | None = None
        self.version = 0
        self.busy_s = 0.0
        self.state = state
        self.on_s = math.inf
        self.ready_s = math.inf
        self.drain_s = math.inf
        self.off_s = math.inf
        self.origin = origin
        self.move_to = -1
        self.first_pool = pool
        self.view = Server(self, engine)

    def decoding_changed(self) -> None:
        self.decoding_arr = None
        self.decoding_t = None

    @property
    def accepting(self) -> bool:
        """Starting or ready and not drained: may receive new requests."""
        return (self.state == STARTING or self.state == READY) and self.drain_s == math.inf

    @property
    def empty(self) -> bool:
        """Nothing queued, running or in progress."""
        return (
            self.pending is None
            and self.window is None
            and not self.waiting
            and not self.prefilling
            and not self.decoding
        )


#: The name :class:`Server`'s constructor gives the state it views: the plugin API records
#: that signature, so the name stays as it was recorded.
_Srv = ServerState


class Server:
    """A server as policies, routers and scalers see it: a read-only view.

    Attributes
    ----------
    id : int
        The server's id: the cluster's initial servers are ``0 .. servers - 1`` in pool order,
        servers switched on later (or moved) take the next ids in order.
    pool : str
        Name of its pool.
    role : str
        ``"mixed"`` (colocated), ``"static"``, ``"prefill"`` or ``"decode"``.
    """

    __slots__ = ("_s", "_e", "id", "pool", "role")

    def __init__(self, srv: _Srv, engine: Engine) -> None:
        self._s = srv
        self._e = engine
        self.id = srv.id
        self.pool = srv.pool_name
        self.role = srv.role

    # -- time and life -------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current simulation time (s)."""
        return self._e.now

    @property
    def state(self) -> str:
        """``"starting"``, ``"ready"``, ``"draining"`` or ``"departed"``."""
        return STATE_NAMES[self._s.state]

    @property
    def accepting(self) -> bool:
        """True while it may receive new requests (starting or ready, not draining)."""
        return self._s.accepting

    @property
    def ready(self) -> bool:
        """True once it serves (ready or draining)."""
        st = self._s.state
        return st == READY or st == DRAINING

    @property
    def ready_at_s(self) -> float:
        """When it becomes (or became) ready to serve (s)."""
        return self._s.ready_s

    @property
    def on_s(self) -> float:
        """When it was switched on (s)."""
        return self._s.on_s

    @property
    def peers(self) -> tuple[Server, ...]:
        """Servers that accept new requests on its side of the cluster (entry servers, or
        decode servers when it decodes), by id; itself included while it accepts work."""
        e = self._e
        return e.decode_views if self.role == "decode" else e.entry_views

    @property
    def held(self) -> tuple[int, ...]:
        """Requests held in the central queue of its side (entry, or decode when it decodes),
        in the order they were held: a router returned :data:`slolab.sim.HOLD` for them and
        no server has pulled them yet (see :attr:`slolab.sim.Batch.pull`)."""
        e = self._e
        return e.held_view(self.role == "decode")

    # -- hardware ------------------------------------------------------------------------
    @property
    def timing(self) -> TimingModel:
        """Its timing model (its pool's)."""
        return self._s.timing

    @property
    def kv_capacity_tokens(self) -> int:
        return self._s.kv_capacity

    @property
    def max_batch_size(self) -> int:
        return self._s.max_batch_size

    @property
    def max_batch_tokens(self) -> int:
        """Most tokens per iteration (0: unlimited)."""
        return self._s.max_batch_tokens

    # -- queues --------------------------------------------------------------------------
    @property
    def waiting(self) -> tuple[int, ...]:
        """Requests routed here and not admitted yet, in arrival order (preempted requests go
        back to the front)."""
        s = self._s
        t = s.waiting_t
        if t is None:
            t = s.waiting_t = tuple(s.waiting)
        return t

    @property
    def prefilling(self) -> tuple[int, ...]:
        """Admitted requests with prompt (or recompute) tokens left."""
        s = self._s
        t = s.prefilling_t
        if t is None:
            t = s.prefilling_t = tuple(s.prefilling)
        return t

    @property
    def decoding(self) -> tuple[int, ...]:
        """Admitted requests generating tokens."""
        s = self._s
        t = s.decoding_t
        if t is None:
            t = s.decoding_t = tuple(s.decoding)
        return t

    def decoding_ids(self) -> np.ndarray:
        """The decoding requests as a read-only int array (cached until the set changes)."""
        s = self._s
        if s.decoding_arr is None:
            arr = np.array(s.decoding, dtype=np.int64)
            arr.setflags(write=False)
            s.decoding_arr = arr
        return s.decoding_arr

    @property
    def load(self) -> int:
        """Requests queued or running here."""
        s = self._s
        return len(s.waiting) + len(s.prefilling) + len(s.decoding)

    @property
    def busy(self) -> bool:
        """True while an iteration (or window) is in progress."""
        s = self._s
        return s.pending is not None or s.window is not None

    @property
    def free_at_s(self) -> float:
        """When it can start a new iteration: the end of the iteration in progress (also inside
        a fast-forwarded window), its ready time while starting, else now (s)."""
        s = self._s
        now = self._e.now
        if s.state == STARTING:
            return s.ready_s
        p = s.pending
        if p is not None:
            return p.end
        w = s.window
        if w is not None:
            ends = w.ends
            i = int(ends[: w.keep].searchsorted(now, side="right"))
            return float(ends[i]) if i < w.keep else now
        return now

    @property
    def busy_s(self) -> float:
        """Time spent running iterations up to now (s)."""
        s = self._s
        now = self._e.now
        busy = s.busy_s
        p = s.pending
        if p is not None and p.end > now:
            busy -= p.end - now
        w = s.window
        if w is not None:
            busy += min(now, float(w.ends[w.keep - 1])) - float(w.starts[0])
        return busy

    # -- memory --------------------------------------------------------------------------
    @property
    def kv_used_tokens(self) -> int:
        """KV tokens resident now (exact, also inside a fast-forwarded window)."""
        s = self._s
        w = s.window
        if w is None:
            return s.kv - s.kv_shared
        started = int(w.starts[: w.keep].searchsorted(self._e.now, side="right"))
        return s.kv - s.kv_shared + len(w.ids) * max(started - 1, 0)

    @property
    def kv_free_tokens(self) -> int:
        return self._s.kv_capacity - self.kv_used_tokens

    def kv_held(self, r: int) -> int:
        """KV tokens request ``r`` holds: its processed prompt plus its generated tokens."""
        return int(self._e.held[r])

    def kv_freed_by_preempting(self, victims: Sequence[int]) -> int:
        """KV tokens preempting all of ``victims`` (running here) would free now: what they
        hold, less the cached prompt blocks that other running requests also use (those stay
        resident; a block only victims use becomes unreferenced, free to take back). With
        caching off, the sum of :meth:`kv_held`."""
        e = self._e
        freed = sum(int(e.held[r]) for r in victims)
        if e.given is not None:
            # a given cache's tokens stay cached, outside the capacity
            freed -= sum(int(e.given[r]) for r in victims if e.given_on[r])
        cache = self._s.cache
        if cache is None or not victims:
            return freed
        uses: dict[int, int] = {}
        for r in victims:
            for key in e.prefix.pinned_keys(r):  # type: ignore[union-attr]
                uses[key] = uses.get(key, 0) + 1
        ref = cache.ref
        # a block of u users, v of them victims, is counted v times in the victims' holdings:
        # with u > v it stays in use (none of the v frees), with u == v it is one block (the
        # v - 1 further counts were shared, never resident twice)
        kept = sum(v if ref[key] > v else v - 1 for key, v in uses.items())
        return freed - kept * cache.block_tokens

    # -- requests ------------------------------------------------------------------------
    def remaining_prefill(self, r: int) -> int:
        """Prompt (or recompute) tokens request ``r`` still has to prefill (here, for a request
        not admitted yet: less the prefix this server's prefix cache holds now)."""
        e = self._e
        pre = e.prefilled[r]
        left = int(e.prefill_target[r] - pre)
        cache = self._s.cache
        if cache is not None and not e.prefix.admitted[r] and pre == 0:  # type: ignore[union-attr]
            left -= e.prefix.cached_tokens(cache, r)  # type: ignore[union-attr]
        elif e.given is not None and pre == 0:
            left -= int(e.given[r])
        return left

    def generated(self, r: int) -> int:
        """Output tokens request ``r`` has emitted so far."""
        return int(self._e.generated[r])

    def arrival(self, r: int) -> float:
        """Arrival time of request ``r`` (s)."""
        return self._e.arrival_list[r]

    def prompt(self, r: int) -> int:
        """Prompt tokens of request ``r``."""
        return self._e.prompt_list[r]

    def output(self, r: int) -> int:
        """Output tokens of request ``r``."""
        return self._e.output_list[r]

    def generated_of(self, ids: np.ndarray) -> np.ndarray:
        """Output tokens each request of ``ids`` has emitted so far (a new array)."""
        return self._e.generated[np.asarray(ids, dtype=np.int64)]

    def kv_held_of(self, ids: np.ndarray) -> np.ndarray:
        """KV tokens each request of ``ids`` holds (a new array)."""
        return self._e.held[np.asarray(ids, dtype=np.int64)]

    def prompt_of(self, ids: np.ndarray) -> np.ndarray:
        """Prompt tokens of each request of ``ids`` (a new array)."""
        return self._e.prompt[np.asarray(ids, dtype=np.int64)]

    def token_deadline(self, r: int, token: int) -> float:
        """Deadline of token ``token`` (1-based) of request ``r``
        (:func:`slolab.sim.metrics.token_deadline_s`; inf without a TTFT SLO)."""
        e = self._e
        return token_deadline_s(e.arrival_list[r], e.ttft_list[r], e.tpot_list[r], token)

    def next_token_deadline(self, r: int) -> float:
        """Deadline of request ``r``'s next token."""
        e = self._e
        return token_deadline_s(
            e.arrival_list[r], e.ttft_list[r], e.tpot_list[r], int(e.generated[r]) + 1
        )

    def __repr__(self) -> str:
        s = self._s
        return (
            f"Server({self.id}, {self.pool}, {self.role}, {self.state}, "
            f"waiting={len(s.waiting)}, prefilling={len(s.prefilling)}, "
            f"decoding={len(s.decoding)}, kv={s.kv})"
        )


def state_of(view: Server) -> ServerState:
    """The engine's state of the server ``view`` shows (for the engine's own modules)."""
    return view._s


# The engine's bookkeeping a policy may read to skip repeated work: kept out of the plugin
# API (a plugin sees :class:`Server`), so they are functions beside the view, not its members.
def state_key(server: Server) -> tuple[object, ...]:
    """A value that compares equal to one read earlier only while the server's queues
    (:attr:`Server.waiting`, :attr:`Server.prefilling`, :attr:`Server.decoding`) and its
    requests' progress (:meth:`Server.remaining_prefill`, :meth:`Server.generated`,
    :meth:`Server.kv_held`) are unchanged since.

    Those counts change only when an iteration (or a fast-forwarded window) commits, when a
    request is preempted, or when one starts warm; the queues change by the policy's and the
    routers' moves. Each commit ends the iteration or window in progress (recorded here as that
    object itself, which the key keeps alive) and every iteration or window that starts pushes
    its end event, which renews the server's event version; the queues are compared by
    content. What depends on the time within an iteration (:attr:`Server.kv_used_tokens`,
    :attr:`Server.free_at_s`) is not covered. PolyServe's admission keys what it reads of a
    server on it."""
    s = server._s
    return (s.version, s.pending, s.window, server.waiting, server.prefilling, server.decoding)


def cached_prefix_tokens(server: Server, r: int) -> int:
    """Tokens of request ``r``'s prompt resident in the server's prefix cache now (its longest
    cached prefix, at most ``prompt - 1`` tokens; 0 without a cache): what a cache-aware
    router reads."""
    s = server._s
    prefix = server._e.prefix
    if s.cache is None or prefix is None:
        return 0
    return prefix.cached_tokens(s.cache, r)


def decoding_kv(server: Server) -> int:
    """KV tokens the server's decoding requests hold
    (``int(server.kv_held_of(server.decoding_ids()).sum())``), kept by the engine as they
    change."""
    return server._s.decoding_kv
