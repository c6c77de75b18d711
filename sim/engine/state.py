"""The run's state: requests' progress, servers, central queues, event queues, iteration log.

:class:`EngineCore` builds it from an instance and holds the few moves every part of the
engine makes (push an event, wake a server, cut a window short, the KV a request holds or
needs); routing, scaling ticks and iterations are written on it in their own modules and
:class:`slolab.sim.engine.loop.Engine` puts them together.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np
from slolab.instances.records import cached_prompt_tokens
from slolab.sim.engine.servers import READY, STARTING, Server, ServerState
from slolab.sim.metrics import deadline_slos
from slolab.sim.policy import Policy, Router
from slolab.sim.prefix_cache import PrefixCaching
from slolab.sim.scaling import ScaleAction, ScaleEvent, ScalePlan, Scaler
from slolab.timing.base import TimingModel
from slolab.timing.presets import preset

if TYPE_CHECKING:
    from slolab.instances.records import Instance


#: Kinds of server events: an iteration (or window) ends, a decision is due, a start-up ends.
EV_END, EV_DECIDE, EV_READY = 0, 1, 2
#: Kinds of scaling events: a plan's action, a scaler tick.
SC_PLAN, SC_TICK = 0, 1


class EngineCore:
    """The state of one simulation and the moves its parts share (see the module docstring).

    The parts' methods that call one another across modules are declared here for the type
    checker only; the engine's class resolves them through its bases at no cost per call.
    """

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
        # requests a router rejected as unservable (its ``unservable`` hook), with its reason
        self.unservable: dict[int, str] = {}
        self._unservable_entry = getattr(router, "unservable", None)
        self._unservable_decode = getattr(decode_router, "unservable", None)
        self.forward_log: list[tuple[int, int, int, float]] = []
        self.routed = np.full(n, np.inf)
        self.first_scheduled = np.full(n, np.inf)
        self.prefill_done = np.full(n, np.inf)
        self.transfer_done = np.full(n, np.inf)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.warm = warm_start_state(instance)
        # prefix caching (None: off); servers of a prefill or mixed role each keep a cache
        self.prefix = (
            PrefixCaching(instance) if cl.prefix_block_tokens and cl.mode != "static" else None
        )
        # a snapshot's given prefix cache (None: none, or every request's is 0): each request's
        # cached prompt tokens, and whether the server running it holds them now (outside its
        # capacity: counted in ``kv`` and ``kv_shared`` both)
        given = cached_prompt_tokens(wl)
        self.given: np.ndarray | None = given if given.any() else None
        self.given_on = np.zeros(n, dtype=bool)
        self.now = 0.0
        self.servers: list[ServerState] = []
        for k, p in enumerate(self.pools):
            for _ in range(p.servers):
                srv = ServerState(self, len(self.servers), k, READY)
                srv.on_s = srv.ready_s = 0.0
                self.servers.append(srv)
        # servers switched on and not departed, by id
        self.live: list[ServerState] = list(self.servers)
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
        # per prefill server id: when its link is free (the last transfer it sent lands), with
        # queued KV transfers (Cluster.kv_transfer_queued)
        self.link_free: dict[int, float] = {}
        # scaling: timed plan actions and scaler ticks, before everything else at equal times
        self._scale_heap: list[tuple[float, int, int, ScaleAction | None]] = []
        self._plan_left = 0
        self._next_arrival = 0
        if plan is not None:
            for t, action in plan.actions:
                self._push_scale(float(t), SC_PLAN, action)
                self._plan_left += 1
        if scaler is not None:
            if not scaler.interval_s > 0:
                raise ValueError(
                    f"scaler interval_s must be > 0 (inf: only at time 0), got {scaler.interval_s}"
                )
            self._push_scale(0.0, SC_TICK, None)
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
        prompt and every output token, or on a prefill server its prompt and first token (less
        a snapshot's given cache, held outside the capacity)."""
        if role == "prefill":
            return self.prompt_list[r] + 1
        if self.given is not None:
            return self.prompt_list[r] + self.output_list[r] - int(self.given[r])
        return self.prompt_list[r] + self.output_list[r]

    # -- events --------------------------------------------------------------------------
    def _push(self, t: float, server: ServerState, kind: int) -> None:
        server.version += 1
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, server.id, server.version, kind))

    def _push_scale(self, t: float, kind: int, action: ScaleAction | None) -> None:
        self._seq += 1
        heapq.heappush(self._scale_heap, (t, self._seq, kind, action))

    def _wake(self, server: ServerState) -> None:
        """A request reached ``server``: decide now if idle, else cut a window short.

        An idle server's pending wake-up (if any) is replaced by a decision now; a starting
        server decides when it becomes ready.
        """
        if server.window is not None:
            self._truncate(server)
        elif server.pending is None and server.state != STARTING:
            self._push(self.now, server, EV_DECIDE)

    def _truncate(self, server: ServerState) -> None:
        w = server.window
        assert w is not None
        keep = int(w.starts[: w.keep].searchsorted(self.now, side="left"))
        keep = max(keep, 1)
        if keep < w.keep:
            w.keep = keep
            self._push(float(w.ends[keep - 1]), server, EV_END)
        w.extendable = False

    # -- central queues ------------------------------------------------------------------
    def held_view(self, decode: bool) -> tuple[int, ...]:
        """The requests held on the entry (or decode) side, as a cached tuple."""
        side = int(decode)
        t = self._central_t[side]
        if t is None:
            t = self._central_t[side] = tuple(self.central[side])
        return t

    # -- scaling ---------------------------------------------------------------------------
    def _refresh_routing(self) -> None:
        """The servers routers see: those accepting new work, by id."""
        live = [s for s in self.live if s.accepting]
        self.entry_views = tuple(s.view for s in live if s.role != "decode")
        self.decode_views = tuple(s.view for s in live if s.role == "decode")

    if TYPE_CHECKING:
        # defined by the parts (routing, ticks, iterations), called across them

        def _retry(self) -> None: ...

        def _forward(self, server: ServerState, r: int, target: int) -> None: ...

        def _pull(self, server: ServerState, r: int) -> None: ...

        def _apply(self, action: ScaleAction, by: str) -> None: ...

        def _tick_at_transfer(self, landing: float) -> None: ...


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
