"""The engine's core loop and outcome: :class:`Engine` puts the parts together
(:mod:`~slolab.sim.engine.routing`, :mod:`~slolab.sim.engine.ticks`,
:mod:`~slolab.sim.engine.iterations` on :mod:`~slolab.sim.engine.state`), runs the events in
order and collects the :class:`~slolab.sim.outcome.Outcome`; :func:`run` is the entry point.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.plugin_loading import plugin_failure
from slolab.sim.engine.iterations import Iterations
from slolab.sim.engine.routing import Routing
from slolab.sim.engine.servers import DRAINING, READY, ServerState
from slolab.sim.engine.state import EV_READY
from slolab.sim.engine.ticks import Ticks
from slolab.sim.outcome import Outcome, ServerLives, pool_seconds
from slolab.sim.policy import Policy, Router, refuse_mode
from slolab.sim.scaling import ScalePlan, Scaler
from slolab.timing.base import N_FEATURES

if TYPE_CHECKING:
    from slolab.instances.records import Instance

log = logging.getLogger("slolab")


class Engine(Routing, Ticks, Iterations):
    """State of one simulation; use :func:`run` or :func:`replay` rather than this class.

    Its parts are its bases, each on :class:`~slolab.sim.engine.state.EngineCore` (the state
    and the shared moves): routing, scaling ticks and iterations; this class adds the core
    loop, the end of a run and the outcome.
    """

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
            elif kind == EV_READY:
                server.state = DRAINING if server.drain_s < inf else READY
                self._retry_due = True
            if self._retry_due:
                self._retry()
            self._decide(server)
            if server.drain_s < inf:
                self._maybe_depart(server)
        if bar is not None:
            bar.close()
        self._close()

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
        if self.unservable:
            first = min(self.unservable)
            log.warning(
                "%d request(s) rejected: their router found that no server could ever serve "
                "them (first: request %d: %s)",
                len(self.unservable),
                first,
                self.unservable[first],
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
                "unservable": dict(sorted(self.unservable.items())),
                **(
                    {}
                    if self.prefix is None
                    else {
                        "prefix_cache": self.prefix.record(
                            len(self.servers), [x.cache for x in self.servers]
                        )
                    }
                ),
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
    refuse_mode(policy, instance.cluster.mode)
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


#: The engine's package directory: a traceback's frames in its modules are the engine's own.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _failure_place(engine: Engine | None, exc: BaseException) -> str:
    """The simulated time and, when the engine's frame that called the plugin names one, the
    server or the routed request at which ``exc`` was raised, for a plugin failure's message
    (the engine's frames are those of its package's modules, outermost first)."""
    if engine is None:
        return "while starting"
    caller: dict[str, Any] = {}
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(tb.tb_frame.f_code.co_filename) == _PACKAGE_DIR:
        caller = tb.tb_frame.f_locals
        tb = tb.tb_next
    place = ""
    if isinstance(caller.get("server"), ServerState):
        place = f" on server {caller['server'].id}"
    elif isinstance(caller.get("r"), int) and "router" in caller:
        place = f" routing request {caller['r']}"
    return f"t={engine.now:.6g} s{place}"
