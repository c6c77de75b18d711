"""Iterations: a server's decision (the policy's batch and its moves), the start of an
iteration, a static batch or a fast-forwarded decode window with their checks, and their
commits (tokens emitted, requests finished, the iteration log).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np
from slolab.sim.engine.caching import Caching
from slolab.sim.engine.servers import (
    DEPARTED,
    NO_IDS,
    STARTING,
    DecodeWindow,
    PendingIteration,
    ServerState,
)
from slolab.sim.engine.state import EV_DECIDE, EV_END
from slolab.sim.outcome import PHASE_DECODE, PHASE_PREFILL, PHASE_STATIC
from slolab.sim.policy import Batch, PolicyError
from slolab.sim.static import member_token_offsets
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    accumulate_from,
    decode_run_features,
    prefill_chunk_attention,
)

#: Most iterations a fast-forwarded decode window holds before it is extended.
WINDOW_CHUNK = 128
#: Decode batches up to this size are committed request by request (else with array indexing).
SMALL_DECODE = 16


def _repeated(ids: list[int]) -> int:
    """The first request id that ``ids`` holds twice."""
    seen: set[int] = set()
    for r in ids:
        if r in seen:
            return int(r)
        seen.add(r)
    raise ValueError("no request appears twice")


class Iterations(Caching):
    """Decisions, iteration starts, decode windows and commits (a part of the engine)."""

    # -- decisions -------------------------------------------------------------------------
    def _decide(self, server: ServerState) -> None:
        if server.state == STARTING or server.state == DEPARTED:
            return
        batch = self.policy.next_batch(server.view)
        if not isinstance(batch, Batch):
            policy = type(self.policy)
            raise PolicyError(
                f"policy {policy.__module__}:{policy.__qualname__} returned "
                f"{type(batch).__name__} on server {server.id} at t={self.now}, expected a Batch"
            )
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
                self._push(batch.wake_at_s, server, EV_DECIDE)
            return
        if batch.static:
            self._start_static(server, batch)
        elif batch.repeat and not batch.prefill:
            self._start_window(server, batch)
        else:
            self._start_iteration(server, batch)

    def _preempt(self, server: ServerState, r: int) -> None:
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
        cache = server.cache
        if cache is not None:
            self._cache_release(server, cache, r)
            self.prefix.admitted[r] = False
        if self.given_on[r]:
            self._given_release(server, r)
        server.kv -= self.kv_held(r)
        self.prefill_target[r] = self.prompt[r] + self.generated[r]
        self.prefilled[r] = 0
        self.held[r] = 0
        self.preemptions[r] += 1
        server.waiting.insert(0, r)
        server.waiting_t = None
        self.preempt_log.append((r, server.id, self.now))

    def _admit(self, server: ServerState, r: int) -> None:
        try:
            server.waiting.remove(r)
        except ValueError:
            raise PolicyError(
                f"server {server.id} t={self.now}: request {r} is not waiting here"
            ) from None
        server.waiting_t = None
        if self.first_scheduled[r] == math.inf:
            self.first_scheduled[r] = self.now

    def _start_iteration(self, server: ServerState, batch: Batch) -> None:
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
        cache = server.cache
        budget: int | None = None
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
                if cache is not None:
                    if budget is None:
                        # unreferenced cached tokens the admitted requests may take back: what
                        # the batch leaves free, each prefill entry with its chunk and a token
                        budget = (
                            server.kv_capacity
                            - (server.kv - server.kv_shared)
                            - sum(int(c) + 1 for _, c in batch.prefill)
                            - len(batch.decode)
                        )
                    budget -= self._cache_admit(server, cache, r, budget)
                    if prefilled[r]:
                        # a chunk sized for the whole prompt is cut to what the cache leaves
                        c = min(c, int(target[r] - prefilled[r]))
                elif self.given is not None and self.given[r] and not prefilled[r]:
                    c = self._given_admit(server, r, c)
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
            attn += prefill_chunk_attention(c, pre)
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
            dids = NO_IDS
            kv_read = 0
            every = pid_list
        n_seq = n_pref + len(dids)
        if n_seq > server.max_batch_size:
            raise PolicyError(
                f"server {sid} t={now}: batch of {n_seq} sequences exceeds max_batch_size {server.max_batch_size}"
            )
        if len(set(every)) != len(every):
            raise PolicyError(
                f"server {sid} t={now}: request {_repeated(every)} appears twice in one batch"
            )
        tokens = prefill_tokens + len(dids)
        if server.max_batch_tokens and tokens > server.max_batch_tokens:
            raise PolicyError(
                f"server {sid} t={now}: batch of {tokens} tokens exceeds max_batch_tokens {server.max_batch_tokens}"
            )
        used = server.kv - server.kv_shared
        if used + alloc > server.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: batch needs {alloc} KV tokens but only "
                f"{server.kv_capacity - used} of {server.kv_capacity} are free"
            )
        server.kv += alloc
        if cache is not None:
            # the resident KV fits the capacity: the running requests' and the unreferenced
            # blocks'
            cache.evict_over(used + alloc, server.kv_capacity, now)
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
        p = PendingIteration()
        p.start = now
        p.end = now + dur
        p.prefill_ids = pid_list
        p.prefill_tokens = ptok_list
        p.decode_ids = dids
        if self.record:
            p.features = np.array(row)
        p.kv = server.kv - server.kv_shared
        server.pending = p
        server.busy_s += dur
        self._push(p.end, server, EV_END)

    def _checked_decode(
        self, server: ServerState, dec: Sequence[int] | np.ndarray
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

    def _start_window(self, server: ServerState, batch: Batch) -> None:
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
                    f"server {server.id} t={now}: request {_repeated(ids.tolist())} appears "
                    "twice in one batch"
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
        free = server.kv_capacity - (server.kv - server.kv_shared)
        if free // s < 1:
            raise PolicyError(
                f"server {server.id} t={now}: batch needs {s} KV tokens but only "
                f"{free} of {server.kv_capacity} are free"
            )
        self._open_window(server, ids, batch.wake_at_s)

    def _open_window(self, server: ServerState, ids: np.ndarray, wake_at_s: float) -> None:
        """Fast-forward the decode-only batch ``ids`` from now (see the module docstring),
        until the end of the first iteration ending at or after ``wake_at_s`` at the latest."""
        now = self.now
        s = len(ids)
        gen = self.generated[ids]
        k_fin = int((self.output[ids] - gen).min())
        k_mem = (server.kv_capacity - (server.kv - server.kv_shared)) // s
        if k_mem < 1:
            # memory ran out while the batch repeated: the policy decides (e.g. preempts)
            self._decide(server)
            return
        k = min(k_fin, k_mem, WINDOW_CHUNK)
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
        cache = server.cache
        if cache is not None:
            # the window's memory is taken at its start (its later iterations' tokens too)
            cache.evict_over(server.kv - server.kv_shared + s * (k - 1), server.kv_capacity, now)
        server.window = DecodeWindow(
            ids, times[:-1], times[1:], dur, f, server.kv - server.kv_shared, extendable, wake_at_s
        )
        self._push(float(times[-1]), server, EV_END)

    def _start_static(self, server: ServerState, batch: Batch) -> None:
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
            raise PolicyError(
                f"server {sid} t={now}: request {_repeated(members)} appears twice in one batch"
            )
        # a snapshot's given cache: a member's cached prompt tokens stay outside the capacity
        given = self.given
        cached = [0 if given is None else int(given[r]) for r in members]
        alloc = int(sum(int(self.prompt[r] + self.output[r]) for r in members)) - sum(cached)
        if server.kv + alloc > server.kv_capacity:
            raise PolicyError(
                f"server {sid} t={now}: static batch needs {alloc} KV tokens but only "
                f"{server.kv_capacity - server.kv} of {server.kv_capacity} are free"
            )
        p = PendingIteration()
        p.start = now
        longest = 0.0
        for r, k in zip(members, cached, strict=True):
            self._admit(server, r)
            offs = member_token_offsets(
                server.timing, s, int(self.prompt[r]), int(self.output[r]), k
            )
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
        self._push(p.end, server, EV_END)

    # -- commits -------------------------------------------------------------------------
    def _finish(self, server: ServerState, r: int) -> None:
        if self.given_on[r]:
            self._given_release(server, r)
        server.kv -= self.kv_held(r)
        if server.cache is not None:
            self._cache_release(server, server.cache, r)
        self._retry_due = True

    def _finish_decoding(
        self, server: ServerState, done: list[int], positions: list[int] | None = None
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
        if self.given is not None:
            for r in done:
                if self.given_on[r]:
                    self._given_release(server, r)
        cache = server.cache
        if cache is not None:
            for r in done:
                self._cache_release(server, cache, r)
        self._retry_due = True
        server.decoding_changed()

    def _commit(self, server: ServerState) -> None:
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
            freed = int(sum(int(self.prompt[r] + self.output[r]) for r in p.static_ids))
            if self.given is not None:
                freed -= int(sum(int(self.given[r]) for r in p.static_ids))
            server.kv -= freed
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
        cache = server.cache
        if cache is not None:
            edge, prompt, b = self.prefix.edge, self.prefix.prompt, cache.block_tokens
        for r, c in zip(p.prefill_ids, p.prefill_tokens, strict=True):
            prefilled[r] += c
            self.held[r] += c
            if cache is not None and prefilled[r] >= edge[r]:
                # the prompt's full blocks its prefill has completed (one more at least)
                done = int(prefilled[r])
                self._cache_add(server, cache, r, (done if done < prompt[r] else prompt[r]) // b)
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
                    t_arrive = self._send_kv(server, r, end)
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

    def _send_kv(self, server: ServerState, r: int, end: float) -> float:
        """When the KV cache of request ``r``, prefilled on ``server`` by ``end``, lands on the
        decode side: its transfer starts at ``end`` or, with queued transfers
        (``Cluster.kv_transfer_queued``), once the server's link has landed its previous
        transfer, and lasts ``kv_transfer_s`` of the KV held over the link of the server's
        pool (``Pool.kv_link_bandwidth_bytes_per_s``)."""
        cluster = self.instance.cluster
        queued = cluster.kv_transfer_queued
        start = max(end, self.link_free.get(server.id, end)) if queued else end
        link = self.pools[server.pool].kv_link_bandwidth_bytes_per_s
        landing = start + float(cluster.kv_transfer_s(self.kv_held(r), link))
        if queued:
            self.link_free[server.id] = landing
        return landing

    def _commit_window(self, server: ServerState) -> None:
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
