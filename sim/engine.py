"""Token-level discrete-event engine.

Each server runs iterations back to back. An iteration's duration is its server's timing model
applied to its shape; its tokens are emitted at its end (a prefill emits the request's next
token when its last chunk completes). Three modes (``instance.cluster.mode``):

- ``colocated``: continuous batching with chunked prefill (prefill chunks and decode tokens in
  one iteration);
- ``static``: a static batch runs to completion before the next starts; member timelines come
  from :mod:`slolab.sim.static`;
- ``disaggregated``: prefill servers run prefill only, decode servers decode only; a finished
  prefill emits the first token, then the KV cache moves to a decode server
  (``cluster.kv_transfer_s(prompt + 1)`` seconds) and the request waits there.

Pools and elasticity: every server belongs to a pool (:class:`slolab.instances.Pool`; a fixed
cluster has the pools its mode implies) with its own limits and timing. Servers are switched
on, drained and moved between pools by a scaler, by a policy (``Batch.scale``) or by a plan
(:mod:`slolab.sim.scaling`): a switched-on server pays from then and serves after its start-up
delay; a drained one takes no new work and departs when its last request finishes. Routers see
only servers that accept new work (starting or ready).

Event order at equal times: scaling actions first, then KV transfers and arrivals, then server
decisions, so a decision at time t sees every request that arrived by t and a router at t sees
the cluster as the actions at t left it.

KV accounting per server, in tokens: a request holds ``prefilled + generated`` tokens (its
processed prompt tokens and the output tokens emitted so far, counted from the iteration that
produces them); memory is allocated at an iteration's start and released when the request
finishes, is preempted, or (disaggregated prefill servers) leaves for its decode server. A
request its server could never hold (``prompt + output`` tokens, ``prompt + 1`` on a prefill
server, above the server's capacity) is rejected on arrival and counted in
``Outcome.rejected_kv``, with a warning.

Speed: a decode-only batch the policy marks ``repeat=True`` is fast-forwarded in one vectorised
window until the first of its requests finishes or memory runs out, or (with ``wake_at_s``)
until the first iteration ending at or after that time; a request routed to the server (or a
KV transfer reaching it), a request held in the central queue of its side under a central
router, and a request another server takes from that queue, cut the window after the
iteration in progress. The result is
identical to asking the policy at every iteration, bit for bit: the window's iteration ends are
its durations accumulated from its start left to right (``np.cumsum``), the floats that
stepping ``end = start + duration`` one iteration at a time gives, and every timing form times
a row the same way whatever rows are beside it.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.plugin_loading import plugin_failure
from slolab.sim.metrics import deadline_slos, token_deadline_s
from slolab.sim.outcome import (
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASE_STATIC,
    Outcome,
    ServerLives,
    pool_seconds,
)
from slolab.sim.policy import HOLD, Batch, Policy, PolicyError, Router
from slolab.sim.scaling import ClusterView, ScaleAction, ScaleEvent, ScalePlan, Scaler
from slolab.sim.static import member_token_offsets
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    TimingModel,
    accumulate_from,
    decode_run_features,
)
from slolab.timing.forms import row_timer
from slolab.timing.presets import preset

if TYPE_CHECKING:
    from slolab.instances.records import Instance

log = logging.getLogger("slolab")

_EV_END, _EV_DECIDE, _EV_READY = 0, 1, 2
_SC_PLAN, _SC_TICK = 0, 1
_WINDOW_CHUNK = 128
#: Scaler ticks offered at once to a scaler that passes idle ticks (``skip_idle_ticks``).
_SKIP_BLOCK = 1 << 16
#: Spans of fewer scaler ticks than this are summed one tick at a time (:meth:`Engine._ticks_before`).
_SHORT_SPAN = 256
#: Scaler ticks in a row with requests held, nothing running or starting, no scaling action and
#: nothing placed, after which the scaler stops (the held requests stay unserved); and ticks in a
#: row with requests waiting on servers and nothing left to run, start or wake, after which the
#: scaler stops and the run ends stalled.
STALLED_TICKS = 100
_EMPTY_I = np.zeros(0, dtype=np.int64)
#: Decode batches up to this size are committed request by request (else with array indexing).
SMALL_DECODE = 16
_NO_FEATURES = np.zeros(N_FEATURES)
_NO_FEATURES.setflags(write=False)


class _Window:
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


class _Pending:
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
        self.decode_ids = _EMPTY_I
        self.static_ids: list[int] = []
        self.static_offsets: list[np.ndarray] = []
        # the iteration's feature vector, kept for the iteration log only (read-only zeros)
        self.features = _NO_FEATURES
        self.kv = 0


# server states (a server is one life of a device in one pool)
_OFF, _STARTING, _READY, _DRAINING, _DEPARTED = range(5)
_STATE_NAMES = ("off", "starting", "ready", "draining", "departed")


def _server_id(srv: _Srv) -> int:
    return srv.id


class _Srv:
    """The engine's state of one server (policies see it through :class:`Server`)."""

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
        self.window: _Window | None = None
        self.pending: _Pending | None = None
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
        return (self.state == _STARTING or self.state == _READY) and self.drain_s == math.inf

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
        return _STATE_NAMES[self._s.state]

    @property
    def accepting(self) -> bool:
        """True while it may receive new requests (starting or ready, not draining)."""
        return self._s.accepting

    @property
    def ready(self) -> bool:
        """True once it serves (ready or draining)."""
        st = self._s.state
        return st == _READY or st == _DRAINING

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

    @property
    def _state_key(self) -> tuple[object, ...]:
        """A value that compares equal to one read earlier only while this server's queues
        (:attr:`waiting`, :attr:`prefilling`, :attr:`decoding`) and its requests' progress
        (:meth:`remaining_prefill`, :meth:`generated`, :meth:`kv_held`) are unchanged since.

        Those counts change only when an iteration (or a fast-forwarded window) commits, when a
        request is preempted, or when one starts warm; the queues change by the policy's and
        the routers' moves. Each commit ends the iteration or window in progress (recorded
        here as that object itself, which the key keeps alive) and every iteration or window
        that starts pushes its end event, which renews the server's event version; the queues
        are compared by content. What depends on the time within an iteration
        (:attr:`kv_used_tokens`, :attr:`free_at_s`) is not covered. It exposes the engine's own
        bookkeeping, so it stays out of the plugin API; PolyServe's admission keys what it
        reads of a server on it."""
        s = self._s
        return (s.version, s.pending, s.window, self.waiting, self.prefilling, self.decoding)

    def decoding_ids(self) -> np.ndarray:
        """The decoding requests as a read-only int array (cached until the set changes)."""
        s = self._s
        if s.decoding_arr is None:
            arr = np.array(s.decoding, dtype=np.int64)
            arr.setflags(write=False)
            s.decoding_arr = arr
        return s.decoding_arr

    @property
    def _decoding_kv(self) -> int:
        """KV tokens the decoding requests hold (``int(kv_held_of(decoding_ids()).sum())``),
        kept by the engine as they change. It exposes the engine's own bookkeeping, so it
        stays out of the plugin API, as :attr:`_state_key` does."""
        return self._s.decoding_kv

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
        if s.state == _STARTING:
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
            return s.kv
        started = int(w.starts[: w.keep].searchsorted(self._e.now, side="right"))
        return s.kv + len(w.ids) * max(started - 1, 0)

    @property
    def kv_free_tokens(self) -> int:
        return self._s.kv_capacity - self.kv_used_tokens

    def kv_held(self, r: int) -> int:
        """KV tokens request ``r`` holds: its processed prompt plus its generated tokens."""
        return int(self._e.held[r])

    # -- requests ------------------------------------------------------------------------
    def remaining_prefill(self, r: int) -> int:
        """Prompt (or recompute) tokens request ``r`` still has to prefill."""
        e = self._e
        return int(e.prefill_target[r] - e.prefilled[r])

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


class Engine:
    """State of one simulation; use :func:`run` or :func:`replay` rather than this class."""

    def __init__(
        self,
        instance: Instance,
        policy: Policy,
        router: Router | None,
        decode_router: Router | None,
        seed: int,
        record_iterations: bool,
        scaler: Scaler | None = None,
        plan: ScalePlan | None = None,
    ):
        cl = instance.cluster
        wl = instance.workload
        self.instance = instance
        self.policy = policy
        self.router = router
        self.decode_router = decode_router
        self.scaler = scaler
        self.seed = seed
        self.record = record_iterations
        self.mode = cl.mode
        self.pools = cl.resolved_pools()
        self.pool_index = {p.name: i for i, p in enumerate(self.pools)}
        named: dict[str, TimingModel] = {}
        for p in self.pools:
            if p.timing is not None and p.timing not in named:
                named[p.timing] = preset(p.timing)
        self.pool_timing = [
            instance.timing if p.timing is None else named[p.timing] for p in self.pools
        ]
        n = len(wl)
        self.n = n
        self.arrival = wl.arrival_s
        self.prompt = wl.prompt_tokens
        self.output = wl.output_tokens
        self.arrival_list: list[float] = self.arrival.tolist()
        self.prompt_list: list[int] = self.prompt.tolist()
        self.output_list: list[int] = self.output.tolist()
        ttft, tpot = deadline_slos(wl)
        self.ttft_list: list[float] = ttft.tolist()
        self.tpot_list: list[float] = tpot.tolist()
        self.prefill_target = self.prompt.astype(np.int64).copy()
        self.prefilled = np.zeros(n, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(self.output, out=self.offsets[1:])
        self.token_times = np.full(int(self.offsets[-1]), np.inf)
        self.server_of = np.full(n, -1, dtype=np.int64)
        self.prefill_server_of = np.full(n, -1, dtype=np.int64)
        self.rejected = np.zeros(n, dtype=bool)
        self.rejected_kv = np.zeros(n, dtype=bool)
        self.rejected_stalled = np.zeros(n, dtype=bool)
        self.rejected_at = np.full(n, np.inf)
        self.forward_log: list[tuple[int, int, int, float]] = []
        self.routed = np.full(n, np.inf)
        self.first_scheduled = np.full(n, np.inf)
        self.prefill_done = np.full(n, np.inf)
        self.transfer_done = np.full(n, np.inf)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.warm = warm_start_state(instance)
        self.now = 0.0
        self.servers: list[_Srv] = []
        for k, p in enumerate(self.pools):
            for _ in range(p.servers):
                srv = _Srv(self, len(self.servers), k, _READY)
                srv.on_s = srv.ready_s = 0.0
                self.servers.append(srv)
        # servers switched on and not departed, by id
        self.live: list[_Srv] = list(self.servers)
        self.entry_views: tuple[Server, ...] = ()
        self.decode_views: tuple[Server, ...] = ()
        # central queues (entry side, decode side): requests a router held (HOLD), in the order
        # held, until a server pulls them (a router with central = True) or the router places
        # them at a retry point (any other router)
        self.central: tuple[list[int], list[int]] = ([], [])
        self._central_t: list[tuple[int, ...] | None] = [(), ()]
        self.held_entry, self.held_decode = self.central
        # whether something happened since the last offer that may let held requests be placed,
        # and the scaler ticks in a row in which nothing ran, changed or was placed
        self._retry_due = False
        self._stalled_ticks = 0
        # the scaler ticks in a row at which requests waited on servers and nothing but the
        # scaler could act, and the time of the first of them
        self._stuck_ticks = 0
        self._stall_from: float | None = None
        self._refresh_routing()
        # the largest KV capacity of any decode pool: a request that needs more is rejected on
        # arrival (disaggregated)
        self.decode_kv_max = max(
            (int(p.kv_capacity_tokens) for p in self.pools if p.role == "decode"),  # type: ignore[arg-type]
            default=0,
        )
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._transfers: list[tuple[float, int, int]] = []
        # scaling: timed plan actions and scaler ticks, before everything else at equal times
        self._scale_heap: list[tuple[float, int, int, ScaleAction | None]] = []
        self._plan_left = 0
        self._next_arrival = 0
        if plan is not None:
            for t, action in plan.actions:
                self._push_scale(float(t), _SC_PLAN, action)
                self._plan_left += 1
        if scaler is not None:
            if not scaler.interval_s > 0:
                raise ValueError(
                    f"scaler interval_s must be > 0 (inf: only at time 0), got {scaler.interval_s}"
                )
            self._push_scale(0.0, _SC_TICK, None)
        self._skip_idle = getattr(scaler, "skip_idle_ticks", None)
        self._quiet_until = getattr(scaler, "quiet_until", None)
        self._held_quiet_until = getattr(scaler, "held_quiet_until", None)
        # quiet ticks passed over: the first of them, set by _skip_quiet_ticks; and while the
        # next tick is one after such a span, (that first tick, the next tick, its heap seq)
        self._quiet_from: float | None = None
        self._quiet_tick: tuple[float, float, int] | None = None
        self.scale_events: list[ScaleEvent] = []
        # iteration log (lists of arrays, concatenated at the end)
        self.log_server: list[np.ndarray] = []
        self.log_start: list[np.ndarray] = []
        self.log_end: list[np.ndarray] = []
        self.log_features: list[np.ndarray] = []
        self.log_kv: list[np.ndarray] = []
        self.log_entry_count: list[np.ndarray] = []
        self.log_entry_request: list[np.ndarray] = []
        self.log_entry_phase: list[np.ndarray] = []
        self.log_entry_tokens: list[np.ndarray] = []
        self.preempt_log: list[tuple[int, int, float]] = []
        self.max_end = 0.0
        self.iterations = 0
        self.stopped = False
        # end a stalled run by rejecting its waiting requests (False: a policy's ``settles``)
        self.settle = True

    # -- KV accounting -------------------------------------------------------------------
    def kv_held(self, r: int) -> int:
        """KV tokens request ``r`` holds: its processed prompt plus its generated tokens.

        After a recompute preemption the re-prefill covers the prompt and the tokens generated
        before it, which are not counted twice. Kept up to date in ``held`` as iterations
        commit.
        """
        return int(self.held[r])

    def kv_held_sum(self, ids: np.ndarray) -> int:
        """Sum of :meth:`kv_held` over ``ids`` (the KV read by their decode attention)."""
        return sum(self.held[ids].tolist())

    def kv_needed(self, role: str, r: int) -> int:
        """KV tokens request ``r`` must hold at once to complete on a server of ``role``: its
        prompt and every output token, or on a prefill server its prompt and first token."""
        if role == "prefill":
            return self.prompt_list[r] + 1
        return self.prompt_list[r] + self.output_list[r]

    # -- events --------------------------------------------------------------------------
    def _push(self, t: float, server: _Srv, kind: int) -> None:
        server.version += 1
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, server.id, server.version, kind))

    def _push_scale(self, t: float, kind: int, action: ScaleAction | None) -> None:
        self._seq += 1
        heapq.heappush(self._scale_heap, (t, self._seq, kind, action))

    def _wake(self, server: _Srv) -> None:
        """A request reached ``server``: decide now if idle, else cut a window short.

        An idle server's pending wake-up (if any) is replaced by a decision now; a starting
        server decides when it becomes ready.
        """
        if server.window is not None:
            self._truncate(server)
        elif server.pending is None and server.state != _STARTING:
            self._push(self.now, server, _EV_DECIDE)

    def _truncate(self, server: _Srv) -> None:
        w = server.window
        assert w is not None
        keep = int(w.starts[: w.keep].searchsorted(self.now, side="left"))
        keep = max(keep, 1)
        if keep < w.keep:
            w.keep = keep
            self._push(float(w.ends[keep - 1]), server, _EV_END)
        w.extendable = False

    # -- main loop -------------------------------------------------------------------------
    def unemitted_floor_s(self) -> float:
        """A time no output token still to come is emitted before: now, or the start of a
        fast-forwarded decode window or a static batch in progress (their tokens are written
        when they commit, with times after their start)."""
        floor = self.now
        for srv in self.live:
            w = srv.window
            if w is not None:
                floor = min(floor, float(w.starts[0]))
            elif srv.pending is not None and srv.pending.static_ids:
                floor = min(floor, srv.pending.start)
        return floor

    def run(
        self,
        progress: bool = False,
        stop: Callable[[Engine], bool] | None = None,
        stop_every: int = 1_000,
    ) -> None:
        n = self.n
        arrival = self.arrival_list
        heap = self._heap
        scale_heap = self._scale_heap
        transfers = self._transfers
        servers = self.servers
        inf = math.inf
        i = 0
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, desc="simulate", unit="req", leave=False, mininterval=0.5)
        tick = max(n // 200, 1)
        events = 0
        self.stopped = False
        while True:
            t_arr = arrival[i] if i < n else inf
            t_tr = transfers[0][0] if transfers else inf
            t_ev = heap[0][0] if heap else inf
            if scale_heap:
                t_sc = scale_heap[0][0]
                if t_sc <= t_arr and t_sc <= t_tr and t_sc <= t_ev:
                    self._next_arrival = i
                    self._scale_event()
                    continue
            if t_tr <= t_arr and t_tr <= t_ev and t_tr < inf:
                t, _, r = heapq.heappop(transfers)
                self.now = t
                self._arrive_decode(r)
                continue
            if t_arr <= t_ev and t_arr < inf:
                self.now = t_arr
                self._arrive(i)
                i += 1
                if bar is not None and i % tick == 0:
                    bar.update(tick)
                continue
            if not heap:
                break
            if stop is not None:
                # server events only: scaler ticks and arrivals settle no request
                events += 1
                if events >= stop_every:
                    events = 0
                    if stop(self):
                        self.stopped = True
                        break
            t, _, sid, version, kind = heapq.heappop(heap)
            server = servers[sid]
            if version != server.version:
                continue
            self.now = t
            if server.window is not None:
                w = server.window
                self._commit_window(server)
                if w.extendable:
                    self._open_window(server, w.ids, w.wake_at_s)
                    continue
            elif server.pending is not None:
                self._commit(server)
            elif kind == _EV_READY:
                server.state = _DRAINING if server.drain_s < inf else _READY
                self._retry_due = True
            if self._retry_due:
                self._retry()
            self._decide(server)
            if server.drain_s < inf:
                self._maybe_depart(server)
        if bar is not None:
            bar.close()
        self._close()

    def _arrive(self, r: int) -> None:
        views = self.entry_views
        if self.router is None:
            if not views:
                raise PolicyError(
                    f"t={self.now}: request {r} arrived but no server accepts new requests "
                    "(every entry server is drained)"
                )
            k = 0 if len(views) == 1 else r % len(views)
        elif not views and getattr(self.router, "central", False):
            self._hold(r, decode=False)
            return
        else:
            k = self._route(self.router, views, r, "")
            if k == HOLD:
                self._hold(r, decode=False)
                return
        self._place(views[k]._s, r)

    def _place(self, server: _Srv, r: int) -> None:
        """Request ``r`` joins ``server`` (its entry server) now."""
        if self.warm is not None and self.warm[0][r]:
            self._place_warm(server, r)
        elif self._too_large(server, r):
            return
        else:
            server.waiting.append(r)
            server.waiting_t = None
        self.routed[r] = self.now
        if server.role == "prefill":
            self.prefill_server_of[r] = server.id
        else:
            self.server_of[r] = server.id
            self.prefill_server_of[r] = server.id
        self._wake(server)

    def _too_large(self, server: _Srv, r: int) -> bool:
        """Reject request ``r`` (True) when ``server`` could never hold it (nor, disaggregated,
        any decode pool)."""
        need = self.kv_needed(server.role, r)
        if need <= server.kv_capacity:
            if server.role != "prefill" or self.kv_needed("decode", r) <= self.decode_kv_max:
                return False
        self.rejected[r] = True
        self.rejected_kv[r] = True
        self.rejected_at[r] = self.now
        return True

    def _too_large_anywhere(self, r: int) -> bool:
        """Reject a held request ``r`` (True) when no pool of its side could ever hold it."""
        for p in self.pools:
            if p.role == "decode" or self.kv_needed(p.role, r) > int(p.kv_capacity_tokens):  # type: ignore[arg-type]
                continue
            if p.role != "prefill" or self.kv_needed("decode", r) <= self.decode_kv_max:
                return False
        self.rejected[r] = True
        self.rejected_kv[r] = True
        self.rejected_at[r] = self.now
        return True

    def _route(self, router: Router, views: tuple[Server, ...], r: int, kind: str) -> int:
        """The index in ``views`` that ``router`` picks for request ``r`` (or HOLD); PolicyError
        when it is out of range (``kind``: "" or "decode ", for the message)."""
        k = router.route(r, views, self.now)
        if k == HOLD:
            return HOLD
        if not 0 <= k < len(views):
            if not views:
                raise PolicyError(
                    f"t={self.now}: {kind}request {r} arrived but no server accepts new requests "
                    f"(every {kind or 'entry '}server is drained); the router chose {k}"
                )
            raise PolicyError(
                f"{kind}router chose server {k} for request {r}; "
                f"{kind}servers are 0..{len(views) - 1}"
            )
        return k

    # -- held requests -----------------------------------------------------------------------
    def _retry(self) -> None:
        """Offer the held requests to their routers again (a retry point was reached)."""
        self._retry_due = False
        router, decode_router = self.router, self.decode_router
        if self.held_entry and router is not None and not getattr(router, "central", False):
            self._offer(router, self.held_entry, self.entry_views, decode=False)
        if (
            self.held_decode
            and decode_router is not None
            and not getattr(decode_router, "central", False)
        ):
            self._offer(decode_router, self.held_decode, self.decode_views, decode=True)

    def _offer(
        self, router: Router, held: list[int], views: tuple[Server, ...], decode: bool
    ) -> int:
        """Offer ``held`` to ``router`` (its ``dispatch`` if it has one); place what it routes.
        Returns how many were placed."""
        kind = "decode " if decode else ""
        place = self._place_decode if decode else self._place
        dispatch = getattr(router, "dispatch", None)
        if dispatch is None:
            # one at a time, each placed before the next is offered (the router sees it)
            placed = 0
            for r in list(held):
                k = self._route(router, views, r, kind)
                if k != HOLD:
                    held.remove(r)
                    self._central_t[int(decode)] = None
                    place(views[k]._s, r)
                    placed += 1
            return placed
        pairs = [(int(r), int(k)) for r, k in dispatch(tuple(held), views, self.now)]
        if not pairs:
            return 0
        waiting = set(held)
        for r, k in pairs:
            if r not in waiting:
                raise PolicyError(
                    f"t={self.now}: {kind}router dispatched request {r}, which it does not hold"
                )
            if not 0 <= k < len(views):
                raise PolicyError(
                    f"{kind}router chose server {k} for request {r}; "
                    f"{kind}servers are 0..{len(views) - 1}"
                )
            waiting.discard(r)
        held[:] = [r for r in held if r in waiting]
        self._central_t[int(decode)] = None
        for r, k in pairs:
            place(views[k]._s, r)
        return len(pairs)

    def _place_warm(self, server: _Srv, r: int) -> None:
        """Admit a warm-started request as it was when the run began (see warm_start_state)."""
        _, remaining, generated = self.warm  # type: ignore[misc]
        if server.role != "mixed":
            raise ValueError(
                f"request {r} is warm-started (running); only colocated mode supports that"
            )
        g = int(generated[r])
        self.prefilled[r] = self.prompt[r] - remaining[r]
        self.generated[r] = g
        self.held[r] = self.prefilled[r] + g
        self.token_times[self.offsets[r] : self.offsets[r] + g] = np.nan
        self.first_scheduled[r] = self.now
        if server.kv + int(self.held[r]) > server.kv_capacity:
            raise ValueError(
                f"warm-started request {r} holds {int(self.held[r])} KV tokens; server {server.id} "
                f"has {server.kv_capacity - server.kv} free"
            )
        server.kv += int(self.held[r])
        if remaining[r] > 0:
            server.prefilling.append(r)
            server.prefilling_t = None
        else:
            self.prefill_done[r] = np.nan
            server.decoding.append(r)
            server.decoding_kv += int(self.held[r])
            server.decoding_changed()

    def _arrive_decode(self, r: int) -> None:
        views = self.decode_views
        need = self.kv_needed("decode", r)
        if self.decode_router is None:
            fits = [j for j in range(len(views)) if views[j]._s.kv_capacity >= need]
            if not fits:
                raise PolicyError(
                    f"t={self.now}: no decode server accepting new requests can hold request {r} "
                    f"({need} KV tokens)"
                )
            k = min(fits, key=lambda j: (views[j].load, j))
        else:
            k = self._route(self.decode_router, views, r, "decode ")
            if k == HOLD:
                self._hold(r, decode=True)
                return
        self._place_decode(views[k]._s, r)

    def _place_decode(self, server: _Srv, r: int) -> None:
        """Request ``r``, its prefill done, joins decode server ``server`` now."""
        need = self.kv_needed("decode", r)
        if need > server.kv_capacity:
            raise PolicyError(
                f"decode router chose server {server.id} (KV capacity {server.kv_capacity}) for "
                f"request {r}, which needs {need} KV tokens"
            )
        self.transfer_done[r] = self.now
        self.server_of[r] = server.id
        server.waiting.append(r)
        server.waiting_t = None
        self._wake(server)

    # -- scaling ---------------------------------------------------------------------------
    def _refresh_routing(self) -> None:
        """The servers routers see: those accepting new work, by id."""
        live = [s for s in self.live if s.accepting]
        self.entry_views = tuple(s.view for s in live if s.role != "decode")
        self.decode_views = tuple(s.view for s in live if s.role == "decode")

    def _scale_event(self) -> None:
        t, _, kind, action = heapq.heappop(self._scale_heap)
        self.now = t
        if kind == _SC_TICK:
            self._quiet_tick = None
        if kind == _SC_PLAN:
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
            and all(s.empty and s.state != _STARTING for s in self.live)
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
        self._push_scale(nxt, _SC_TICK, None)
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
                s.pending is None and s.window is None and s.state != _STARTING for s in self.live
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
            if not s.empty or s.state == _STARTING:
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
        self._push_scale(first, _SC_TICK, None)
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
        most ``_SKIP_BLOCK``, each with the tick after it (the last: the first tick at or after
        ``until``). Each time is the previous plus ``interval_s``, as the ticks themselves are
        computed (``np.cumsum`` adds left to right).

        The ticks before ``until`` number at most ``(until - nxt) / interval_s`` plus one (plus
        one more for rounding), so a span shorter than a block is summed in a block of that
        many plus one, not of ``_SKIP_BLOCK``: the same blocks and times, at the cost of the
        span (a busy cluster's quiet spans are a few ticks long)."""
        step = self.scaler.interval_s  # type: ignore[union-attr]
        size = min(int((until - nxt) / step) + 3, _SKIP_BLOCK)
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
            srv = _Srv(self, len(self.servers), k, _OFF)
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
                    else f"is {_STATE_NAMES[self.servers[sid].state]}"
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
                nxt = _Srv(self, len(self.servers), k, _OFF, origin=sid)
                self.servers.append(nxt)
                srv.move_to = nxt.id
                self.scale_events.append(ScaleEvent(now, "move", sid, nxt.pool_name, nxt.id))
            else:
                self.scale_events.append(ScaleEvent(now, "drain", sid, srv.pool_name))
            srv.drain_s = now
            if srv.state == _READY:
                srv.state = _DRAINING
            self._refresh_routing()
            self._maybe_depart(srv)
        self.max_end = max(self.max_end, now)
        self._retry_due = True

    def _assign(self, srv: _Srv, k: int, by: str) -> None:
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

    def _switch_on(self, srv: _Srv, delay_s: float) -> None:
        now = self.now
        srv.on_s = now
        srv.ready_s = now + delay_s
        bisect.insort(self.live, srv, key=_server_id)
        if delay_s > 0:
            srv.state = _STARTING
            self._push(srv.ready_s, srv, _EV_READY)
        else:
            srv.state = _READY
        self._refresh_routing()

    def _maybe_depart(self, srv: _Srv) -> None:
        """A drained server with nothing left departs now (a moved one starts its next life)."""
        if srv.state == _DEPARTED or srv.state == _OFF or not srv.empty:
            return
        srv.state = _DEPARTED
        srv.off_s = self.now
        srv.version += 1  # drops its pending wake-ups
        self.live.remove(srv)
        if srv.move_to >= 0:
            self._switch_on(self.servers[srv.move_to], float(self.instance.cluster.move_s))

    def _close(self) -> None:
        """End of the run: servers still on are switched off at the run's end."""
        for srv in self.live:
            srv.off_s = max(self.max_end, srv.on_s)
        left = len(self.central[0]) + len(self.central[1])
        self.rejected_held = 0
        if left and not self.stopped:
            # nothing runs and nothing changes: they would wait forever; they are rejected,
            # at the time the run ends, and counted (Outcome.info["rejected_held"])
            for r in self.central[0] + self.central[1]:
                self.rejected[r] = True
                self.rejected_at[r] = max(self.now, float(self.arrival_list[r]))
            self.rejected_held = left
            log.warning(
                "%d request(s) held in a central queue never reached a server (first: "
                "request %d): rejected, no server took them by the end of the run",
                left,
                (self.central[0] or self.central[1])[0],
            )
            self.central[0].clear()
            self.central[1].clear()
        self.stalled = 0
        self.stall = ""
        if self.settle and not self.stopped:
            self._reject_stalled()

    def _reject_stalled(self) -> None:
        """Reject the requests the run left neither finished nor rejected (nothing was left to
        make them progress: no arrival, iteration, transfer or scaling action), at the time
        the run stalled, and say why (``Outcome.info["stalled"]`` and ``["stall"]``)."""
        unfinished = ~np.isfinite(self.token_times[self.offsets[1:] - 1]) & ~self.rejected
        if not unfinished.any():
            return
        ids = np.flatnonzero(unfinished)
        stall_s = self.now if self._stall_from is None else self._stall_from
        first = int(ids[0])
        where = (
            self.server_of[first] if self.server_of[first] >= 0 else self.prefill_server_of[first]
        )
        self.rejected[ids] = True
        self.rejected_stalled[ids] = True
        self.rejected_at[ids] = np.maximum(stall_s, self.arrival[ids])
        self.stalled = len(ids)
        policy = type(self.policy)
        self.stall = (
            f"policy {policy.__module__}:{policy.__qualname__} stalled at t={stall_s:.6g} s: "
            f"{len(ids)} request(s) waiting with no arrival, iteration or scaling action left "
            f"(first: request {first} on server {int(where)}); they are rejected"
        )
        log.info("%s", self.stall)

    # -- decisions -------------------------------------------------------------------------
    def _decide(self, server: _Srv) -> None:
        if server.state == _STARTING or server.state == _DEPARTED:
            return
        batch = self.policy.next_batch(server.view)
        if not isinstance(batch, Batch):
            raise PolicyError(f"policy returned {type(batch).__name__}, expected Batch")
        now = self.now
        for r in batch.reject:
            r = int(r)
            try:
                server.waiting.remove(r)
            except ValueError:
                raise PolicyError(
                    f"server {server.id} t={now}: cannot reject request {r}: not waiting here"
                ) from None
            server.waiting_t = None
            self.rejected[r] = True
            self.rejected_at[r] = now
        for r in batch.preempt:
            self._preempt(server, int(r))
        for r, target in batch.forward:
            self._forward(server, int(r), int(target))
        for r in batch.pull:
            self._pull(server, int(r))
        for action in batch.scale:
            self._apply(action, f"policy on server {server.id}")
        if batch.empty:
            if batch.wake_at_s < math.inf:
                if not batch.wake_at_s > now:
                    raise PolicyError(
                        f"server {server.id} t={now}: wake_at_s {batch.wake_at_s} is not in the future"
                    )
                self._push(batch.wake_at_s, server, _EV_DECIDE)
            return
        if batch.static:
            self._start_static(server, batch)
        elif batch.repeat and not batch.prefill:
            self._start_window(server, batch)
        else:
            self._start_iteration(server, batch)

    # -- central queues ------------------------------------------------------------------
    def held_view(self, decode: bool) -> tuple[int, ...]:
        """The requests held on the entry (or decode) side, as a cached tuple."""
        side = int(decode)
        t = self._central_t[side]
        if t is None:
            t = self._central_t[side] = tuple(self.central[side])
        return t

    def _hold(self, r: int, decode: bool) -> None:
        """Keep request ``r`` in its side's central queue (an entry request no pool could ever
        hold is rejected instead); with a ``central`` router wake that side's servers (each may
        pull it)."""
        if not decode and self._too_large_anywhere(r):
            return
        side = int(decode)
        self.central[side].append(r)
        self._central_t[side] = None
        if getattr(self.decode_router if decode else self.router, "central", False):
            for view in self.decode_views if decode else self.entry_views:
                self._wake(view._s)

    def _pull(self, server: _Srv, r: int) -> None:
        """Move request ``r`` from the central queue of ``server``'s side to the end of its
        queue (the request is routed, or for a decode server transferred, now)."""
        now = self.now
        decode = server.role == "decode"
        queue = self.central[int(decode)]
        try:
            queue.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: it is not held on the "
                f"{'decode' if decode else 'entry'} side"
            ) from None
        self._central_t[int(decode)] = None
        if not server.accepting:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: the server does not "
                "accept new requests"
            )
        need = self.kv_needed(server.role, r)
        if need > server.kv_capacity:
            raise PolicyError(
                f"server {server.id} t={now}: cannot pull request {r}: it needs {need} KV tokens, "
                f"the server holds {server.kv_capacity}"
            )
        server.waiting.append(r)
        server.waiting_t = None
        # the other servers of this side see a shorter central queue from now: a window in
        # progress there is cut after its iteration in progress (its policy may read the queue)
        for view in self.decode_views if decode else self.entry_views:
            other = view._s
            if other.window is not None and other is not server:
                self._truncate(other)
        if decode:
            self.transfer_done[r] = now
            self.server_of[r] = server.id
            return
        self.routed[r] = now
        self.prefill_server_of[r] = server.id
        if server.role != "prefill":
            self.server_of[r] = server.id

    def _forward(self, server: _Srv, r: int, target: int) -> None:
        now = self.now
        if not 0 <= target < len(self.servers) or target == server.id:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}"
            )
        dest = self.servers[target]
        if dest.role != server.role:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to a {dest.role} server"
            )
        if not dest.accepting:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}: "
                "it does not accept new requests"
            )
        if self.kv_needed(dest.role, r) > dest.kv_capacity:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r} to server {target}: "
                f"it needs {self.kv_needed(dest.role, r)} KV tokens, the server holds "
                f"{dest.kv_capacity}"
            )
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r}: not waiting here"
            ) from None
        server.waiting_t = None
        dest.waiting.append(r)
        dest.waiting_t = None
        self.routed[r] = now
        self.forward_log.append((r, server.id, target, now))
        self.server_of[r] = target
        if self.prefill_server_of[r] == server.id:
            self.prefill_server_of[r] = target
        self._wake(dest)

    def _preempt(self, server: _Srv, r: int) -> None:
        if r in server.decoding:
            server.decoding.remove(r)
            server.decoding_kv -= self.kv_held(r)
            server.decoding_changed()
        elif r in server.prefilling:
            server.prefilling.remove(r)
            server.prefilling_t = None
        else:
            raise PolicyError(
                f"server {server.id} t={self.now}: cannot preempt request {r}: not running here"
            )
        server.kv -= self.kv_held(r)
        self.prefill_target[r] = self.prompt[r] + self.generated[r]
        self.prefilled[r] = 0
        self.held[r] = 0
        self.preemptions[r] += 1
        server.waiting.insert(0, r)
        server.waiting_t = None
        self.preempt_log.append((r, server.id, self.now))

    def _admit(self, server: _Srv, r: int) -> None:
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={self.now}: request {r} is not waiting here"
            ) from None
        server.waiting_t = None
        if self.first_scheduled[r] == math.inf:
            self.first_scheduled[r] = self.now

    def _start_iteration(self, server: _Srv, batch: Batch) -> None:
        now = self.now
        sid = server.id
        prefilled = self.prefilled
        target = self.prefill_target
        n_pref = len(batch.prefill)
        pid_list: list[int] = []
        ptok_list: list[int] = []
        prefill_tokens = 0
        alloc = 0
        attn = 0.0
        for r, c in batch.prefill:
            r = int(r)
            c = int(c)
            if server.role == "decode" and prefilled[r] >= target[r]:
                raise PolicyError(
                    f"server {sid} t={now}: decode server cannot prefill request {r} (a decode "
                    "server only recomputes the requests it preempted)"
                )
            if r in server.prefilling:
                pass
            elif r in server.waiting:
                self._admit(server, r)
                server.prefilling.append(r)
                server.prefilling_t = None
            else:
                raise PolicyError(
                    f"server {sid} t={now}: request {r} cannot prefill here (not waiting or prefilling)"
                )
            pre = int(prefilled[r])
            remaining = int(target[r]) - pre
            if not 1 <= c <= remaining:
                raise PolicyError(
                    f"server {sid} t={now}: prefill chunk of request {r} must be in 1..{remaining}, got {c}"
                )
            pid_list.append(r)
            ptok_list.append(c)
            prefill_tokens += c
            attn += c * (pre + (c + 1) / 2.0)
            alloc += c + (1 if c == remaining else 0)
        dec = batch.decode
        if len(dec):
            if dec is server.decoding_arr:
                # the server's own array of its decoding requests (Server.decoding_ids, cached
                # until they change; a prefill server has none): each decodes here, once, and
                # none is a prefill entry (a request waits, prefills or decodes)
                dids = dec
                kv_read = server.decoding_kv
                every = pid_list
            else:
                dids, kv_read = self._checked_decode(server, dec)
                every = pid_list + dids.tolist()
            alloc += len(dids)
        else:
            dids = _EMPTY_I
            kv_read = 0
            every = pid_list
        n_seq = n_pref + len(dids)
        if n_seq > server.max_batch_size:
            raise PolicyError(
                f"server {sid} t={now}: batch of {n_seq} sequences exceeds max_batch_size {server.max_batch_size}"
            )
        if len(set(every)) != len(every):
            raise PolicyError(f"server {sid} t={now}: a request appears twice in one batch")
        tokens = prefill_tokens + len(dids)
        if server.max_batch_tokens and tokens > server.max_batch_tokens:
            raise PolicyError(
                f"server {sid} t={now}: batch of {tokens} tokens exceeds max_batch_tokens {server.max_batch_tokens}"
            )
        if server.kv + alloc > server.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: batch needs {alloc} KV tokens but only "
                f"{server.kv_capacity - server.kv} of {server.kv_capacity} are free"
            )
        server.kv += alloc
        row = [0.0] * N_FEATURES
        row[F_PREFILL_TOKENS] = float(prefill_tokens)
        row[F_DECODE_TOKENS] = row[F_NUM_DECODE] = float(len(dids))
        row[F_DECODE_KV] = float(kv_read)
        row[F_PREFILL_ATTN] = attn
        row[F_NUM_PREFILL] = float(n_pref)
        dur = float(server.time_of_row(row))
        if not dur > 0:
            raise PolicyError(
                f"server {sid} t={now}: timing model gave a non-positive iteration time {dur}"
            )
        p = _Pending()
        p.start = now
        p.end = now + dur
        p.prefill_ids = pid_list
        p.prefill_tokens = ptok_list
        p.decode_ids = dids
        if self.record:
            p.features = np.array(row)
        p.kv = server.kv
        server.pending = p
        server.busy_s += dur
        self._push(p.end, server, _EV_END)

    def _checked_decode(
        self, server: _Srv, dec: Sequence[int] | np.ndarray
    ) -> tuple[np.ndarray, int]:
        """The decode entries ``dec`` of a batch on ``server`` as an array, and the KV tokens
        they hold; PolicyError unless each decodes there (a decode server admits a waiting
        request whose prefill is done)."""
        sid = server.id
        dids = np.asarray(dec, dtype=np.int64)
        if server.role == "prefill":
            raise PolicyError(f"server {sid} t={self.now}: prefill server cannot decode")
        dlist = dids.tolist()
        dset = set(server.decoding)
        for r in () if dset.issuperset(dlist) else dlist:
            if r not in dset:
                if (
                    server.role == "decode"
                    and r in server.waiting
                    and self.prefilled[r] == self.prefill_target[r]
                ):
                    self._admit(server, r)
                    server.decoding.append(r)
                    server.decoding_kv += self.kv_held(r)
                    server.decoding_changed()
                    server.kv += self.kv_held(r)
                else:
                    raise PolicyError(
                        f"server {sid} t={self.now}: request {r} is not decoding here"
                    )
        return dids, self.kv_held_sum(dids)

    def _start_window(self, server: _Srv, batch: Batch) -> None:
        now = self.now
        ids = batch.decode
        if ids is not server.decoding_arr:
            ids = np.asarray(ids, dtype=np.int64)
            dset = set(server.decoding)
            if any(r not in dset for r in ids.tolist()):
                self._start_iteration(server, batch)
                return
            if len(set(ids.tolist())) != len(ids):
                raise PolicyError(
                    f"server {server.id} t={now}: a request appears twice in one batch"
                )
        s = len(ids)
        if s > server.max_batch_size:
            raise PolicyError(
                f"server {server.id} t={now}: batch of {s} sequences exceeds max_batch_size {server.max_batch_size}"
            )
        if server.max_batch_tokens and s > server.max_batch_tokens:
            raise PolicyError(
                f"server {server.id} t={now}: batch of {s} tokens exceeds max_batch_tokens {server.max_batch_tokens}"
            )
        if (server.kv_capacity - server.kv) // s < 1:
            raise PolicyError(
                f"server {server.id} t={now}: batch needs {s} KV tokens but only "
                f"{server.kv_capacity - server.kv} of {server.kv_capacity} are free"
            )
        self._open_window(server, ids, batch.wake_at_s)

    def _open_window(self, server: _Srv, ids: np.ndarray, wake_at_s: float) -> None:
        """Fast-forward the decode-only batch ``ids`` from now (see the module docstring),
        until the end of the first iteration ending at or after ``wake_at_s`` at the latest."""
        now = self.now
        s = len(ids)
        gen = self.generated[ids]
        k_fin = int((self.output[ids] - gen).min())
        k_mem = (server.kv_capacity - server.kv) // s
        if k_mem < 1:
            # memory ran out while the batch repeated: the policy decides (e.g. preempts)
            self._decide(server)
            return
        k = min(k_fin, k_mem, _WINDOW_CHUNK)
        kv_read = server.decoding_kv if ids is server.decoding_arr else self.kv_held_sum(ids)
        f = decode_run_features(s, kv_read, k)
        dur = server.timing.times(f)
        if not (dur > 0).all():
            raise PolicyError(
                f"server {server.id} t={now}: timing model gave a non-positive iteration time"
            )
        # one iteration at a time each starts at the previous one's end: ``end = start + dur``;
        # accumulating from ``now`` left to right gives those floats exactly
        times = accumulate_from(now, dur)
        extendable = k < min(k_fin, k_mem)
        if times[-1] >= wake_at_s:
            # the policy asked to decide again at the first iteration end at or after it
            k = int(times[1:].searchsorted(wake_at_s, side="left")) + 1
            times = times[: k + 1]
            dur = dur[:k]
            f = f[:k]
            extendable = False
        server.kv += s
        server.window = _Window(
            ids, times[:-1], times[1:], dur, f, server.kv, extendable, wake_at_s
        )
        self._push(float(times[-1]), server, _EV_END)

    def _start_static(self, server: _Srv, batch: Batch) -> None:
        now = self.now
        sid = server.id
        if server.role != "static":
            raise PolicyError(f"server {sid} t={now}: static batches need cluster mode 'static'")
        if batch.prefill or len(batch.decode):
            raise PolicyError(
                f"server {sid} t={now}: a static batch cannot carry prefill or decode entries"
            )
        members = [int(r) for r in batch.static]
        s = len(members)
        if s > server.max_batch_size:
            raise PolicyError(
                f"server {sid} t={now}: static batch of {s} exceeds max_batch_size {server.max_batch_size}"
            )
        if len(set(members)) != s:
            raise PolicyError(f"server {sid} t={now}: a request appears twice in one batch")
        alloc = int(sum(int(self.prompt[r] + self.output[r]) for r in members))
        if server.kv + alloc > server.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: static batch needs {alloc} KV tokens but only "
                f"{server.kv_capacity - server.kv} of {server.kv_capacity} are free"
            )
        p = _Pending()
        p.start = now
        longest = 0.0
        for r in members:
            self._admit(server, r)
            offs = member_token_offsets(server.timing, s, int(self.prompt[r]), int(self.output[r]))
            p.static_ids.append(r)
            p.static_offsets.append(offs)
            longest = max(longest, float(offs[-1]))
        if not longest > 0:
            raise PolicyError(f"server {sid} t={now}: timing model gave a non-positive batch time")
        server.kv += alloc
        p.end = now + longest
        p.kv = server.kv
        p.features = np.zeros(N_FEATURES)
        server.pending = p
        server.busy_s += longest
        self._push(p.end, server, _EV_END)

    # -- commits -------------------------------------------------------------------------
    def _finish(self, server: _Srv, r: int) -> None:
        server.kv -= self.kv_held(r)
        self._retry_due = True

    def _finish_decoding(
        self, server: _Srv, done: list[int], positions: list[int] | None = None
    ) -> None:
        """The decoding requests ``done`` (distinct) of ``server`` emitted their last token;
        ``positions``: their places in ``server.decoding``, rising, when known (the entries of
        a batch that was the server's cached ``decoding_ids()`` array)."""
        decoding = server.decoding
        if positions is None:
            for r in done:
                decoding.remove(r)
        else:
            for i in reversed(positions):
                del decoding[i]
        held = self.held
        for r in done:
            h = int(held[r])
            server.kv -= h
            server.decoding_kv -= h
        self._retry_due = True
        server.decoding_changed()

    def _commit(self, server: _Srv) -> None:
        p = server.pending
        assert p is not None
        server.pending = None
        end = p.end
        self.max_end = max(self.max_end, end)
        self.iterations += 1
        if p.static_ids:
            for r, offs in zip(p.static_ids, p.static_offsets, strict=True):
                a = self.offsets[r]
                self.token_times[a : a + len(offs)] = p.start + offs
                self.prefill_done[r] = p.start + offs[0]
                self.prefilled[r] = self.prompt[r]
                self.generated[r] = self.output[r]
                self.held[r] = self.prompt[r] + self.output[r]
            server.kv -= int(sum(int(self.prompt[r] + self.output[r]) for r in p.static_ids))
            if self.record:
                m = len(p.static_ids)
                ids = np.array(p.static_ids, dtype=np.int64)
                self._log(
                    server.id,
                    np.array([p.start]),
                    np.array([end]),
                    p.features[None, :],
                    np.array([p.kv]),
                    np.array([m]),
                    ids,
                    np.full(m, PHASE_STATIC, dtype=np.int8),
                    self.output[ids].astype(np.int64),
                )
            return
        prefilled = self.prefilled
        gen = self.generated
        out = self.output
        # decode tokens
        dids = p.decode_ids
        if len(dids) > SMALL_DECODE:
            emitted = gen[dids]
            self.token_times[self.offsets[dids] + emitted] = end
            emitted += 1
            gen[dids] = emitted
            self.held[dids] += 1
            at = np.flatnonzero(emitted >= out[dids]).tolist()
            done = dids[at].tolist() if at else []
        elif len(dids):
            # the same updates request by request (numpy's calls cost more on a few ids)
            token_times, offsets, held = self.token_times, self.offsets, self.held
            at, done = [], []
            for i, r in enumerate(dids.tolist()):
                g = gen[r]
                token_times[offsets[r] + g] = end
                gen[r] = g + 1
                held[r] += 1
                if g + 1 >= out[r]:
                    at.append(i)
                    done.append(r)
        else:
            done = []
        # each decode entry is a decoding request of this server (checked at the start)
        server.decoding_kv += len(dids)
        if done:
            # the server's cached array lists its decoding requests in their order
            self._finish_decoding(server, done, at if dids is server.decoding_arr else None)
        # prefill chunks
        for r, c in zip(p.prefill_ids, p.prefill_tokens, strict=True):
            prefilled[r] += c
            self.held[r] += c
            if prefilled[r] == self.prefill_target[r]:
                self.token_times[self.offsets[r] + gen[r]] = end
                gen[r] += 1
                self.held[r] += 1
                if self.prefill_done[r] == math.inf:
                    self.prefill_done[r] = end
                server.prefilling.remove(r)
                server.prefilling_t = None
                if gen[r] >= out[r]:
                    self._finish(server, r)
                elif server.role == "prefill":
                    self._finish(server, r)
                    t_arrive = end + float(self.instance.cluster.kv_transfer_s(self.kv_held(r)))
                    heapq.heappush(self._transfers, (t_arrive, r, r))
                    self._tick_at_transfer(t_arrive)
                else:
                    server.decoding.append(r)
                    server.decoding_kv += int(self.held[r])
                    server.decoding_changed()
        if self.record:
            n_p, n_d = len(p.prefill_ids), len(dids)
            self._log(
                server.id,
                np.array([p.start]),
                np.array([end]),
                p.features[None, :],
                np.array([p.kv]),
                np.array([n_p + n_d]),
                np.concatenate([np.array(p.prefill_ids, dtype=np.int64), dids]),
                np.concatenate(
                    [
                        np.full(n_p, PHASE_PREFILL, dtype=np.int8),
                        np.full(n_d, PHASE_DECODE, dtype=np.int8),
                    ]
                ),
                np.concatenate(
                    [np.array(p.prefill_tokens, dtype=np.int64), np.ones(n_d, dtype=np.int64)]
                ),
            )

    def _commit_window(self, server: _Srv) -> None:
        w = server.window
        assert w is not None
        server.window = None
        k = w.keep
        ids = w.ids
        s = len(ids)
        self.max_end = max(self.max_end, float(w.ends[k - 1]))
        self.iterations += k
        gen = self.generated
        pos = (self.offsets[ids] + gen[ids])[None, :] + np.arange(k)[:, None]
        self.token_times[pos] = w.ends[:k, None]
        gen[ids] += k
        self.held[ids] += k
        server.decoding_kv += s * k
        server.kv += s * (k - 1)
        # busy time added iteration by iteration (left to right), as one step at a time does
        server.busy_s = float(accumulate_from(server.busy_s, w.durations[:k])[-1])
        if self.record:
            self._log(
                server.id,
                w.starts[:k].copy(),
                w.ends[:k].copy(),
                w.features[:k],
                w.kv0 + s * np.arange(k),
                np.full(k, s),
                np.tile(ids, k),
                np.full(k * s, PHASE_DECODE, dtype=np.int8),
                np.ones(k * s, dtype=np.int64),
            )
        at = np.flatnonzero(gen[ids] >= self.output[ids]).tolist()
        if at:
            cached = ids is server.decoding_arr
            self._finish_decoding(server, ids[at].tolist(), at if cached else None)

    def _log(
        self,
        sid: int,
        starts: np.ndarray,
        ends: np.ndarray,
        features: np.ndarray,
        kv: np.ndarray,
        counts: np.ndarray,
        req: np.ndarray,
        phase: np.ndarray,
        tokens: np.ndarray,
    ) -> None:
        self.log_server.append(np.full(len(starts), sid, dtype=np.int64))
        self.log_start.append(starts)
        self.log_end.append(ends)
        self.log_features.append(features)
        self.log_kv.append(np.asarray(kv, dtype=np.int64))
        self.log_entry_count.append(np.asarray(counts, dtype=np.int64))
        self.log_entry_request.append(req)
        self.log_entry_phase.append(phase)
        self.log_entry_tokens.append(tokens)

    # -- result ----------------------------------------------------------------------------
    def outcome(self, wall_s: float) -> Outcome:
        def cat(parts: list[np.ndarray], dtype: Any, width: int = 0) -> np.ndarray:
            if parts:
                return np.concatenate(parts).astype(dtype, copy=False)
            return np.zeros((0, width) if width else 0, dtype=dtype)

        counts = cat(self.log_entry_count, np.int64)
        entry_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=entry_offsets[1:])
        it_end = cat(self.log_end, float)
        order = None
        it_server = cat(self.log_server, np.int64)
        it_start = cat(self.log_start, float)
        if len(it_start):
            order = np.lexsort((it_server, it_start))
        feats = cat(self.log_features, float, N_FEATURES).reshape(-1, N_FEATURES)
        kv = cat(self.log_kv, np.int64)
        req = cat(self.log_entry_request, np.int64)
        phase = cat(self.log_entry_phase, np.int8)
        tok = cat(self.log_entry_tokens, np.int64)
        if order is not None and not np.array_equal(order, np.arange(len(order))):
            # entries move with their iterations (sorted by start time, then server)
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            it_of_entry = np.repeat(np.arange(len(counts)), counts)
            idx = np.argsort(rank[it_of_entry], kind="stable")
            req, phase, tok = req[idx], phase[idx], tok[idx]
            counts = counts[order]
            entry_offsets = np.zeros(len(counts) + 1, dtype=np.int64)
            np.cumsum(counts, out=entry_offsets[1:])
            it_server, it_start, it_end, feats, kv = (
                it_server[order],
                it_start[order],
                it_end[order],
                feats[order],
                kv[order],
            )
        pre = self.preempt_log
        srv = self.servers
        on = np.array([x.on_s for x in srv], dtype=float)
        off = np.array([x.off_s for x in srv], dtype=float)
        pool = np.array([x.first_pool for x in srv], dtype=np.int64)
        life = np.where(np.isfinite(on), off - on, 0.0)
        if self.rejected_kv.any():
            first = int(np.flatnonzero(self.rejected_kv)[0])
            log.warning(
                "%d request(s) rejected: they need more KV memory than their server has "
                "(first: request %d, %d prompt + %d output tokens)",
                int(self.rejected_kv.sum()),
                first,
                self.prompt_list[first],
                self.output_list[first],
            )
        return Outcome(
            server=self.server_of,
            prefill_server=self.prefill_server_of,
            rejected=self.rejected,
            first_scheduled_s=self.first_scheduled,
            prefill_done_s=self.prefill_done,
            token_offsets=self.offsets,
            token_times=self.token_times,
            preemptions=self.preemptions,
            busy_s=np.array([s.busy_s for s in self.servers]),
            it_server=it_server,
            it_start=it_start,
            it_end=it_end,
            it_features=feats,
            it_kv_tokens=kv,
            entry_offsets=entry_offsets,
            entry_request=req,
            entry_phase=phase,
            entry_tokens=tok,
            preempt_request=np.array([p[0] for p in pre], dtype=np.int64),
            preempt_server=np.array([p[1] for p in pre], dtype=np.int64),
            preempt_s=np.array([p[2] for p in pre], dtype=float),
            transfer_done_s=self.transfer_done,
            end_s=self.max_end,
            wall_s=wall_s,
            recorded_iterations=self.record,
            info={
                "iterations": self.iterations,
                "stopped_early": self.stopped,
                "rejected_held": self.rejected_held,
                "stalled": self.stalled,
                "stall": self.stall,
                "stalled_requests": np.flatnonzero(self.rejected_stalled),
            },
            rejected_kv=self.rejected_kv,
            rejected_s=self.rejected_at,
            forward_request=np.array([f[0] for f in self.forward_log], dtype=np.int64),
            forward_from=np.array([f[1] for f in self.forward_log], dtype=np.int64),
            forward_to=np.array([f[2] for f in self.forward_log], dtype=np.int64),
            forward_s=np.array([f[3] for f in self.forward_log], dtype=float),
            routed_s=self.routed,
            pool_names=tuple(p.name for p in self.pools),
            server_pool=pool,
            server_on_s=on,
            server_ready_s=np.array([x.ready_s for x in srv], dtype=float),
            server_drain_s=np.array([x.drain_s for x in srv], dtype=float),
            server_off_s=off,
            server_origin=np.array([x.origin for x in srv], dtype=np.int64),
            scale_events=tuple(self.scale_events),
            cost_server_s=math.fsum(life.tolist()),
            cost_by_pool=pool_seconds(
                ServerLives(pool, on, on, on, off, pool, tuple(p.name for p in self.pools)),
                self.scale_events,
            ),
        )


def warm_start_state(instance: Instance) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(running, remaining_prefill, generated)`` of warm-started requests, or None.

    A workload with a boolean column ``running`` describes a snapshot: running requests were
    admitted before the run began. On arrival each enters its server already admitted, holding
    the KV of its processed prompt and generated tokens, with ``remaining_prefill_tokens`` of its
    prompt left (0: decoding) and ``generated_tokens`` already emitted (default 1 when decoding,
    else 0). Tokens emitted before the run have NaN times; the metrics count them as on time.
    """
    wl = instance.workload
    if "running" not in wl or not np.asarray(wl["running"], dtype=bool).any():
        return None
    running = np.asarray(wl["running"], dtype=bool)
    prompt = wl.prompt_tokens
    if "remaining_prefill_tokens" in wl:
        remaining = np.where(
            running, np.asarray(wl["remaining_prefill_tokens"], dtype=np.int64), prompt
        )
    else:
        remaining = np.where(running, 0, prompt)
    if "generated_tokens" in wl:
        generated = np.where(running, np.asarray(wl["generated_tokens"], dtype=np.int64), 0)
    else:
        generated = np.where(running & (remaining == 0), 1, 0)
    bad = running & ((remaining < 0) | (remaining > prompt))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"remaining_prefill_tokens must be in [0, prompt_tokens], got {remaining[r]} (row {r})"
        )
    bad = running & (
        (generated < 0)
        | (generated >= wl.output_tokens)
        | ((remaining > 0) & (generated > 0))
        | ((remaining == 0) & (generated < 1))
    )
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"generated_tokens of a running request must be >= 1 and < output_tokens once its prompt is done, "
            f"0 before, got {generated[r]} with {remaining[r]} prompt tokens left (row {r})"
        )
    return running, remaining.astype(np.int64), generated.astype(np.int64)


def run(
    instance: Instance,
    policy: Policy,
    router: Router | None = None,
    *,
    seed: int,
    decode_router: Router | None = None,
    record_iterations: bool = True,
    progress: bool = False,
    scaler: Scaler | None = None,
    plan: ScalePlan | None = None,
    stop: Callable[[Engine], bool] | None = None,
) -> Outcome:
    """Simulate ``instance`` under ``policy`` (and ``router``) and return the Outcome.

    Parameters
    ----------
    instance : Instance
        Workload, cluster (mode, servers, memory) and timing model.
    policy : Policy
        Chooses each server's next batch.
    router : Router, optional
        Chooses the server of each arriving request (the prefill server when disaggregated);
        default: round robin by request index.
    seed : int
        Passed to the ``start`` of the policy, the routers and the scaler (their random choices
        use it).
    decode_router : Router, optional
        Disaggregated mode: chooses the decode server when a KV transfer completes; default
        the decode server with the fewest requests (lowest index on ties).
    record_iterations : bool
        Keep the iteration log (needed by :func:`slolab.sim.check`); turning it off saves
        memory on very large runs.
    progress : bool
        Show a progress bar over arrivals.
    scaler : Scaler, optional
        Decides, every ``scaler.interval_s``, which servers to switch on, drain or move
        (:mod:`slolab.sim.scaling`); default none (the cluster stays as it starts, unless the
        policy or ``plan`` scales it).
    plan : ScalePlan, optional
        Scaling actions at given times (for example a plan an exact model decided, or
        ``ScalePlan.from_outcome`` of an earlier run).
    stop : callable, optional
        ``stop(engine) -> bool``, asked every ``stop.every`` server events (1,000 if it has no
        such attribute; arrivals and scaler ticks are not counted): True ends the run there, leaving the requests not yet finished unfinished
        (``outcome.info["stopped_early"]``). :class:`slolab.sim.verdict.AttainmentWatch` stops a
        run whose attainment verdict is already certain.

    A stalled run (requests waiting, nothing left to run: ``info["stalled"]``) ends with its
    waiting requests rejected, and every request must end finished or rejected
    (:class:`UnsettledRunError` otherwise), unless the policy's ``settles`` attribute is False
    (a replay of a schedule that covers part of the workload leaves the rest unfinished).
    """
    if not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {seed!r}")
    t0 = time.perf_counter()
    engine: Engine | None = None
    try:
        policy.start(instance, int(seed))
        for part in (router, decode_router, scaler):
            if part is not None:
                part.start(instance, int(seed))
        engine = Engine(
            instance, policy, router, decode_router, int(seed), record_iterations, scaler, plan
        )
        engine.settle = bool(getattr(policy, "settles", True))
        engine.run(progress=progress, stop=stop, stop_every=int(getattr(stop, "every", 1_000)))
    except Exception as exc:
        plugins = {"policy": policy, "router": router, "decode router": decode_router}
        failure = plugin_failure(exc, {**plugins, "scaler": scaler}, _failure_place(engine, exc))
        if failure is None:
            raise
        raise failure from exc
    wall = time.perf_counter() - t0
    out = engine.outcome(wall)
    if engine.settle and not engine.stopped:
        require_settled(out)
    log.debug("simulated %d requests in %.3f s (%d iterations)", engine.n, wall, out.n_iterations)
    return out


class UnsettledRunError(RuntimeError):
    """A run ended with requests neither finished nor rejected (an engine fault: the engine
    rejects the requests of a stalled run, so every request ends one way or the other)."""


def require_settled(outcome: Outcome) -> None:
    """Check ``finished + rejected == requests``; :class:`UnsettledRunError` naming the counts
    and the first unsettled request otherwise (a request both finished and rejected counts
    twice and fails it too)."""
    finished = outcome.finished
    n_finished, n_rejected = int(finished.sum()), int(outcome.rejected.sum())
    if n_finished + n_rejected != outcome.n_requests:
        odd = np.flatnonzero(finished == outcome.rejected)
        raise UnsettledRunError(
            f"run ended with finished {n_finished} + rejected {n_rejected} != requests "
            f"{outcome.n_requests} (first request neither or both: {int(odd[0])})"
        )


def _failure_place(engine: Engine | None, exc: BaseException) -> str:
    """The simulated time and, when the engine's frame that called the plugin names one, the
    server or the routed request at which ``exc`` was raised, for a plugin failure's message."""
    if engine is None:
        return "while starting"
    caller: dict[str, Any] = {}
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        caller = tb.tb_frame.f_locals
        tb = tb.tb_next
    place = ""
    if isinstance(caller.get("server"), _Srv):
        place = f" on server {caller['server'].id}"
    elif isinstance(caller.get("r"), int) and "router" in caller:
        place = f" routing request {caller['r']}"
    return f"t={engine.now:.6g} s{place}"
