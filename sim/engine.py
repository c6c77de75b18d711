"""Token-level discrete-event engine.

Each server runs iterations back to back. An iteration's duration is the timing model applied
to its shape; its tokens are emitted at its end (a prefill emits the request's next token when
its last chunk completes). Three modes (``instance.cluster.mode``):

- ``colocated``: continuous batching with chunked prefill (prefill chunks and decode tokens in
  one iteration);
- ``static``: a static batch runs to completion before the next starts; member timelines come
  from :mod:`slolab.sim.static`;
- ``disaggregated``: servers ``[0, prefill_servers)`` run prefill only, the others decode only;
  a finished prefill emits the first token, then the KV cache moves to a decode server
  (``cluster.kv_transfer_s(prompt + 1)`` seconds) and the request waits there.

Event order at equal times: arrivals (and KV transfers) first, then server decisions, so a
decision at time t sees every request that arrived by t.

KV accounting per server, in tokens: a request holds ``prefilled + generated`` tokens (its
processed prompt tokens and the output tokens emitted so far, counted from the iteration that
produces them); memory is allocated at an iteration's start and released when the request
finishes, is preempted, or (disaggregated prefill servers) leaves for its decode server.

Speed: a decode-only batch the policy marks ``repeat=True`` is fast-forwarded in one vectorised
window until the first of its requests finishes or memory runs out; a request routed to the
server (or a KV transfer reaching it) cuts the window after the iteration in progress. The
result is identical to asking the policy at every iteration.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.sim.outcome import PHASE_DECODE, PHASE_PREFILL, PHASE_STATIC, Outcome
from slolab.sim.policy import Batch, Policy, PolicyError, Router
from slolab.sim.static import member_token_offsets
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance

log = logging.getLogger("slolab")

_EV_END, _EV_DECIDE = 0, 1
_WINDOW_CHUNK = 128
_EMPTY_I = np.zeros(0, dtype=np.int64)


class _Window:
    """A fast-forwarded run of identical decode-only iterations (pending until committed)."""

    __slots__ = ("ids", "starts", "ends", "features", "kv0", "keep", "extendable")

    def __init__(
        self,
        ids: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        features: np.ndarray,
        kv0: int,
        extendable: bool,
    ):
        self.ids = ids
        self.starts = starts
        self.ends = ends
        self.features = features
        self.kv0 = kv0
        self.keep = len(ends)
        # the window stopped at its chunk length, not at a finish or at the memory limit: if it
        # runs to its end uncut, the same batch continues without asking the policy again
        self.extendable = extendable


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
        self.prefill_ids = _EMPTY_I
        self.prefill_tokens = _EMPTY_I
        self.decode_ids = _EMPTY_I
        self.static_ids: list[int] = []
        self.static_offsets: list[np.ndarray] = []
        self.features = np.zeros(N_FEATURES)
        self.kv = 0


class Server:
    """A server as policies and routers see it (read-only by convention).

    Attributes
    ----------
    id : int
        Index of the server in the cluster.
    role : str
        ``"mixed"`` (colocated), ``"static"``, ``"prefill"`` or ``"decode"``.
    waiting : list of int
        Requests routed here and not admitted yet, in arrival order (preempted requests go
        back to the front).
    prefilling, decoding : list of int
        Admitted requests with prompt tokens left / generating tokens.
    """

    __slots__ = (
        "id",
        "role",
        "waiting",
        "prefilling",
        "decoding",
        "_decoding_arr",
        "_kv",
        "_engine",
        "_window",
        "_pending",
        "_version",
        "_scheduled",
        "busy_s",
    )

    def __init__(self, engine: Engine, sid: int, role: str) -> None:
        self.id = sid
        self.role = role
        self.waiting: list[int] = []
        self.prefilling: list[int] = []
        self.decoding: list[int] = []
        self._decoding_arr: np.ndarray | None = None
        self._kv = 0
        self._engine = engine
        self._window: _Window | None = None
        self._pending: _Pending | None = None
        self._version = 0
        self._scheduled = False
        self.busy_s = 0.0

    # -- views ---------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """Current simulation time (s)."""
        return self._engine.now

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def kv_capacity_tokens(self) -> int:
        return self._engine.kv_capacity

    @property
    def kv_used_tokens(self) -> int:
        """KV tokens resident now (exact, also inside a fast-forwarded window)."""
        w = self._window
        if w is None:
            return self._kv
        started = int(np.searchsorted(w.starts[: w.keep], self._engine.now, side="right"))
        return self._kv + len(w.ids) * max(started - 1, 0)

    @property
    def kv_free_tokens(self) -> int:
        return self._engine.kv_capacity - self.kv_used_tokens

    @property
    def max_batch_size(self) -> int:
        return self._engine.max_batch_size

    @property
    def max_batch_tokens(self) -> int:
        return self._engine.max_batch_tokens

    @property
    def busy(self) -> bool:
        """True while an iteration (or window) is in progress."""
        return self._pending is not None or self._window is not None

    @property
    def load(self) -> int:
        """Requests queued or running here."""
        return len(self.waiting) + len(self.prefilling) + len(self.decoding)

    def decoding_ids(self) -> np.ndarray:
        """The decoding requests as an int array (cached until the set changes)."""
        if self._decoding_arr is None:
            self._decoding_arr = np.array(self.decoding, dtype=np.int64)
        return self._decoding_arr

    def remaining_prefill(self, r: int) -> int:
        """Prompt (or recompute) tokens request ``r`` still has to prefill."""
        e = self._engine
        return int(e.prefill_target[r] - e.prefilled[r])

    def __repr__(self) -> str:
        return (
            f"Server({self.id}, {self.role}, waiting={len(self.waiting)}, "
            f"prefilling={len(self.prefilling)}, decoding={len(self.decoding)}, kv={self._kv})"
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
    ):
        cl = instance.cluster
        wl = instance.workload
        self.instance = instance
        self.timing = instance.timing
        self.policy = policy
        self.router = router
        self.decode_router = decode_router
        self.seed = seed
        self.record = record_iterations
        self.mode = cl.mode
        self.kv_capacity = int(cl.kv_capacity_tokens)
        self.max_batch_size = int(cl.max_batch_size)
        self.max_batch_tokens = int(cl.max_batch_tokens)
        n = len(wl)
        self.n = n
        self.arrival = wl.arrival_s
        self.prompt = wl.prompt_tokens
        self.output = wl.output_tokens
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
        self.first_scheduled = np.full(n, np.inf)
        self.prefill_done = np.full(n, np.inf)
        self.transfer_done = np.full(n, np.inf)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.warm = warm_start_state(instance)
        self.now = 0.0
        if self.mode == "colocated":
            roles = ["mixed"] * cl.servers
        elif self.mode == "static":
            roles = ["static"] * cl.servers
        else:
            roles = ["prefill"] * cl.prefill_servers + ["decode"] * cl.decode_servers
        self.servers = [Server(self, i, role) for i, role in enumerate(roles)]
        self.entry_pools = [s for s in self.servers if s.role != "decode"]
        self.decode_pool = [s for s in self.servers if s.role == "decode"]
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._transfers: list[tuple[float, int, int]] = []
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
        return int(self.held[ids].sum())

    # -- events --------------------------------------------------------------------------
    def _push(self, t: float, server: Server, kind: int) -> None:
        server._version += 1
        server._scheduled = True
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, server.id, server._version, kind))

    def _wake(self, server: Server) -> None:
        """A request reached ``server``: decide now if idle, else cut a window short.

        An idle server's pending wake-up (if any) is replaced by a decision now.
        """
        if server._window is not None:
            self._truncate(server)
        elif server._pending is None:
            self._push(self.now, server, _EV_DECIDE)

    def _truncate(self, server: Server) -> None:
        w = server._window
        assert w is not None
        keep = int(np.searchsorted(w.starts[: w.keep], self.now, side="left"))
        keep = max(keep, 1)
        if keep < w.keep:
            w.keep = keep
            self._push(float(w.ends[keep - 1]), server, _EV_END)
        w.extendable = False

    # -- main loop -------------------------------------------------------------------------
    def run(self, progress: bool = False) -> None:
        n = self.n
        arrival = self.arrival
        heap = self._heap
        i = 0
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, desc="simulate", unit="req", leave=False, mininterval=0.5)
        tick = max(n // 200, 1)
        while True:
            t_arr = float(arrival[i]) if i < n else math.inf
            t_tr = self._transfers[0][0] if self._transfers else math.inf
            t_ev = heap[0][0] if heap else math.inf
            if t_tr <= t_arr and t_tr <= t_ev and t_tr < math.inf:
                t, _, r = heapq.heappop(self._transfers)
                self.now = t
                self._arrive_decode(r)
                continue
            if t_arr <= t_ev and t_arr < math.inf:
                self.now = t_arr
                self._arrive(i)
                i += 1
                if bar is not None and i % tick == 0:
                    bar.update(tick)
                continue
            if not heap:
                break
            t, _, sid, version, kind = heapq.heappop(heap)
            server = self.servers[sid]
            if version != server._version:
                continue
            self.now = t
            server._scheduled = False
            if server._window is not None:
                w = server._window
                self._commit_window(server)
                if w.extendable:
                    self._open_window(server, w.ids)
                    continue
            elif server._pending is not None:
                self._commit(server)
            self._decide(server)
        if bar is not None:
            bar.close()

    def _arrive(self, r: int) -> None:
        pool = self.entry_pools
        if self.router is None:
            k = 0 if len(pool) == 1 else r % len(pool)
        else:
            k = self._route(self.router, pool, r, "")
        server = pool[k]
        if self.warm is not None and self.warm[0][r]:
            self._place_warm(server, r)
        else:
            server.waiting.append(r)
        if server.role == "prefill":
            self.prefill_server_of[r] = server.id
        else:
            self.server_of[r] = server.id
            self.prefill_server_of[r] = server.id
        self._wake(server)

    def _route(self, router: Router, pool: list[Server], r: int, kind: str) -> int:
        """The index in ``pool`` that ``router`` picks for request ``r``; PolicyError when it is
        out of range (``kind``: "" or "decode ", for the message)."""
        k = router.route(r, pool, self.now)
        if not 0 <= k < len(pool):
            raise PolicyError(
                f"{kind}router chose server {k} for request {r}; "
                f"{kind}servers are 0..{len(pool) - 1}"
            )
        return k

    def _place_warm(self, server: Server, r: int) -> None:
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
        if server._kv + int(self.held[r]) > self.kv_capacity:
            raise ValueError(
                f"warm-started request {r} holds {int(self.held[r])} KV tokens; server {server.id} "
                f"has {self.kv_capacity - server._kv} free"
            )
        server._kv += int(self.held[r])
        if remaining[r] > 0:
            server.prefilling.append(r)
        else:
            self.prefill_done[r] = np.nan
            server.decoding.append(r)
            server._decoding_arr = None

    def _arrive_decode(self, r: int) -> None:
        pool = self.decode_pool
        if self.decode_router is None:
            k = min(range(len(pool)), key=lambda j: (pool[j].load, j))
        else:
            k = self._route(self.decode_router, pool, r, "decode ")
        server = pool[k]
        self.transfer_done[r] = self.now
        self.server_of[r] = server.id
        server.waiting.append(r)
        self._wake(server)

    # -- decisions -------------------------------------------------------------------------
    def _decide(self, server: Server) -> None:
        batch = self.policy.next_batch(server)
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
            self.rejected[r] = True
        for r in batch.preempt:
            self._preempt(server, int(r))
        for r, target in batch.forward:
            self._forward(server, int(r), int(target))
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

    def _forward(self, server: Server, r: int, target: int) -> None:
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
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={now}: cannot forward request {r}: not waiting here"
            ) from None
        dest.waiting.append(r)
        self.server_of[r] = target
        if self.prefill_server_of[r] == server.id:
            self.prefill_server_of[r] = target
        self._wake(dest)

    def _preempt(self, server: Server, r: int) -> None:
        if r in server.decoding:
            server.decoding.remove(r)
            server._decoding_arr = None
        elif r in server.prefilling:
            server.prefilling.remove(r)
        else:
            raise PolicyError(
                f"server {server.id} t={self.now}: cannot preempt request {r}: not running here"
            )
        server._kv -= self.kv_held(r)
        self.prefill_target[r] = self.prompt[r] + self.generated[r]
        self.prefilled[r] = 0
        self.held[r] = 0
        self.preemptions[r] += 1
        server.waiting.insert(0, r)
        self.preempt_log.append((r, server.id, self.now))

    def _admit(self, server: Server, r: int) -> None:
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={self.now}: request {r} is not waiting here"
            ) from None
        if self.first_scheduled[r] == math.inf:
            self.first_scheduled[r] = self.now

    def _start_iteration(self, server: Server, batch: Batch) -> None:
        now = self.now
        sid = server.id
        prefilled = self.prefilled
        target = self.prefill_target
        n_pref = len(batch.prefill)
        pids = np.empty(n_pref, dtype=np.int64)
        ptok = np.empty(n_pref, dtype=np.int64)
        alloc = 0
        attn = 0.0
        for j, (r, c) in enumerate(batch.prefill):
            r = int(r)
            c = int(c)
            if server.role == "decode":
                raise PolicyError(f"server {sid} t={now}: decode server cannot prefill request {r}")
            if r in server.prefilling:
                pass
            elif r in server.waiting:
                self._admit(server, r)
                server.prefilling.append(r)
            else:
                raise PolicyError(
                    f"server {sid} t={now}: request {r} cannot prefill here (not waiting or prefilling)"
                )
            remaining = int(target[r] - prefilled[r])
            if not 1 <= c <= remaining:
                raise PolicyError(
                    f"server {sid} t={now}: prefill chunk of request {r} must be in 1..{remaining}, got {c}"
                )
            pids[j] = r
            ptok[j] = c
            pre = int(prefilled[r])
            attn += c * (pre + (c + 1) / 2.0)
            alloc += c + (1 if c == remaining else 0)
        dec = batch.decode
        if len(dec):
            dids = np.asarray(dec, dtype=np.int64)
            if server.role == "prefill":
                raise PolicyError(f"server {sid} t={now}: prefill server cannot decode")
            dset = set(server.decoding)
            for r in dids.tolist():
                if r not in dset:
                    if server.role == "decode" and r in server.waiting:
                        self._admit(server, r)
                        server.decoding.append(r)
                        server._decoding_arr = None
                        server._kv += self.kv_held(r)
                    else:
                        raise PolicyError(f"server {sid} t={now}: request {r} is not decoding here")
            kv_read = self.kv_held_sum(dids)
            alloc += len(dids)
        else:
            dids = _EMPTY_I
            kv_read = 0
        n_seq = n_pref + len(dids)
        if n_seq > self.max_batch_size:
            raise PolicyError(
                f"server {sid} t={now}: batch of {n_seq} sequences exceeds max_batch_size {self.max_batch_size}"
            )
        every = pids.tolist() + dids.tolist()
        if len(set(every)) != len(every):
            raise PolicyError(f"server {sid} t={now}: a request appears twice in one batch")
        tokens = int(ptok.sum()) + len(dids)
        if self.max_batch_tokens and tokens > self.max_batch_tokens:
            raise PolicyError(
                f"server {sid} t={now}: batch of {tokens} tokens exceeds max_batch_tokens {self.max_batch_tokens}"
            )
        if server._kv + alloc > self.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: batch needs {alloc} KV tokens but only "
                f"{self.kv_capacity - server._kv} of {self.kv_capacity} are free"
            )
        server._kv += alloc
        f = np.zeros(N_FEATURES)
        f[F_PREFILL_TOKENS] = ptok.sum()
        f[F_DECODE_TOKENS] = len(dids)
        f[F_NUM_DECODE] = len(dids)
        f[F_DECODE_KV] = kv_read
        f[F_PREFILL_ATTN] = attn
        f[F_NUM_PREFILL] = n_pref
        dur = float(self.timing.times(f[None, :])[0])
        if not dur > 0:
            raise PolicyError(
                f"server {sid} t={now}: timing model gave a non-positive iteration time {dur}"
            )
        p = _Pending()
        p.start = now
        p.end = now + dur
        p.prefill_ids = pids
        p.prefill_tokens = ptok
        p.decode_ids = dids
        p.features = f
        p.kv = server._kv
        server._pending = p
        server.busy_s += dur
        self._push(p.end, server, _EV_END)

    def _start_window(self, server: Server, batch: Batch) -> None:
        now = self.now
        ids = batch.decode
        if ids is not server._decoding_arr:
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
        if s > self.max_batch_size:
            raise PolicyError(
                f"server {server.id} t={now}: batch of {s} sequences exceeds max_batch_size {self.max_batch_size}"
            )
        if self.max_batch_tokens and s > self.max_batch_tokens:
            raise PolicyError(
                f"server {server.id} t={now}: batch of {s} tokens exceeds max_batch_tokens {self.max_batch_tokens}"
            )
        if (self.kv_capacity - server._kv) // s < 1:
            raise PolicyError(
                f"server {server.id} t={now}: batch needs {s} KV tokens but only "
                f"{self.kv_capacity - server._kv} of {self.kv_capacity} are free"
            )
        self._open_window(server, ids)

    def _open_window(self, server: Server, ids: np.ndarray) -> None:
        """Fast-forward the decode-only batch ``ids`` from now (see the module docstring)."""
        now = self.now
        s = len(ids)
        gen = self.generated[ids]
        k_fin = int((self.output[ids] - gen).min())
        k_mem = (self.kv_capacity - server._kv) // s
        if k_mem < 1:
            # memory ran out while the batch repeated: the policy decides (e.g. preempts)
            self._decide(server)
            return
        k = min(k_fin, k_mem, _WINDOW_CHUNK)
        base = self.kv_held_sum(ids)
        f = np.zeros((k, N_FEATURES))
        f[:, F_DECODE_TOKENS] = s
        f[:, F_NUM_DECODE] = s
        f[:, F_DECODE_KV] = base + s * np.arange(k)
        dur = self.timing.times(f)
        if not np.all(dur > 0):
            raise PolicyError(
                f"server {server.id} t={now}: timing model gave a non-positive iteration time"
            )
        ends = now + np.cumsum(dur)
        starts = np.empty(k)
        starts[0] = now
        starts[1:] = ends[:-1]
        server._kv += s
        server._window = _Window(ids, starts, ends, f, server._kv, extendable=k < min(k_fin, k_mem))
        self._push(float(ends[-1]), server, _EV_END)

    def _start_static(self, server: Server, batch: Batch) -> None:
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
        if s > self.max_batch_size:
            raise PolicyError(
                f"server {sid} t={now}: static batch of {s} exceeds max_batch_size {self.max_batch_size}"
            )
        if len(set(members)) != s:
            raise PolicyError(f"server {sid} t={now}: a request appears twice in one batch")
        alloc = int(sum(int(self.prompt[r] + self.output[r]) for r in members))
        if server._kv + alloc > self.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: static batch needs {alloc} KV tokens but only "
                f"{self.kv_capacity - server._kv} of {self.kv_capacity} are free"
            )
        p = _Pending()
        p.start = now
        longest = 0.0
        for r in members:
            self._admit(server, r)
            offs = member_token_offsets(self.timing, s, int(self.prompt[r]), int(self.output[r]))
            p.static_ids.append(r)
            p.static_offsets.append(offs)
            longest = max(longest, float(offs[-1]))
        if not longest > 0:
            raise PolicyError(f"server {sid} t={now}: timing model gave a non-positive batch time")
        server._kv += alloc
        p.end = now + longest
        p.kv = server._kv
        p.features = np.zeros(N_FEATURES)
        server._pending = p
        server.busy_s += longest
        self._push(p.end, server, _EV_END)

    # -- commits -------------------------------------------------------------------------
    def _finish(self, server: Server, r: int) -> None:
        server._kv -= self.kv_held(r)

    def _commit(self, server: Server) -> None:
        p = server._pending
        assert p is not None
        server._pending = None
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
            server._kv -= int(sum(int(self.prompt[r] + self.output[r]) for r in p.static_ids))
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
        if len(dids):
            pos = self.offsets[dids] + gen[dids]
            self.token_times[pos] = end
            gen[dids] += 1
            self.held[dids] += 1
            done = dids[gen[dids] >= out[dids]]
            if len(done):
                for r in done.tolist():
                    server.decoding.remove(r)
                    self._finish(server, r)
                server._decoding_arr = None
        # prefill chunks
        for r, c in zip(p.prefill_ids.tolist(), p.prefill_tokens.tolist(), strict=True):
            prefilled[r] += c
            self.held[r] += c
            if prefilled[r] == self.prefill_target[r]:
                self.token_times[self.offsets[r] + gen[r]] = end
                gen[r] += 1
                self.held[r] += 1
                if self.prefill_done[r] == math.inf:
                    self.prefill_done[r] = end
                server.prefilling.remove(r)
                if gen[r] >= out[r]:
                    self._finish(server, r)
                elif server.role == "prefill":
                    self._finish(server, r)
                    t_arrive = end + float(self.instance.cluster.kv_transfer_s(self.kv_held(r)))
                    heapq.heappush(self._transfers, (t_arrive, r, r))
                else:
                    server.decoding.append(r)
                    server._decoding_arr = None
        if self.record:
            n_p, n_d = len(p.prefill_ids), len(dids)
            self._log(
                server.id,
                np.array([p.start]),
                np.array([end]),
                p.features[None, :],
                np.array([p.kv]),
                np.array([n_p + n_d]),
                np.concatenate([p.prefill_ids, dids]),
                np.concatenate(
                    [
                        np.full(n_p, PHASE_PREFILL, dtype=np.int8),
                        np.full(n_d, PHASE_DECODE, dtype=np.int8),
                    ]
                ),
                np.concatenate([p.prefill_tokens, np.ones(n_d, dtype=np.int64)]),
            )

    def _commit_window(self, server: Server) -> None:
        w = server._window
        assert w is not None
        server._window = None
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
        server._kv += s * (k - 1)
        server.busy_s += float(w.ends[k - 1] - w.starts[0])
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
        done = ids[gen[ids] >= self.output[ids]]
        if len(done):
            for r in done.tolist():
                server.decoding.remove(r)
                self._finish(server, r)
            server._decoding_arr = None

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
            info={"iterations": self.iterations},
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
        Passed to ``policy.start`` and ``router.start`` (their random choices use it).
    decode_router : Router, optional
        Disaggregated mode: chooses the decode server when a KV transfer completes; default
        the decode server with the fewest requests (lowest index on ties).
    record_iterations : bool
        Keep the iteration log (needed by :func:`slolab.sim.check`); turning it off saves
        memory on very large runs.
    progress : bool
        Show a progress bar over arrivals.
    """
    if not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int, got {seed!r}")
    t0 = time.perf_counter()
    policy.start(instance, int(seed))
    for rt in (router, decode_router):
        if rt is not None:
            rt.start(instance, int(seed))
    engine = Engine(instance, policy, router, decode_router, int(seed), record_iterations)
    engine.run(progress=progress)
    wall = time.perf_counter() - t0
    out = engine.outcome(wall)
    log.debug("simulated %d requests in %.3f s (%d iterations)", engine.n, wall, out.n_iterations)
    return out
