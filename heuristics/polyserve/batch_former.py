"""PolyServe's batch former, :class:`PolyServePolicy`: each server's batches by its role.

References
----------
PolyServe, Sec. 3.4 (batch limits), 4.7 (continuous chunked prefill and dynamic chunking).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.baselines import AdmissionOrder, make_room_for_decode
from slolab.sim.engine.servers import decoding_kv
from slolab.sim.policy import Batch
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    prefill_chunk_attention,
)
from slolab.timing.forms import timing_lines
from slolab.timing.inverse import time_to_tokens

if TYPE_CHECKING:
    from slolab.heuristics.polyserve.controller import PolyServeController
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.timing.base import TimingModel


class PolyServePolicy:
    """Each server's batches under PolyServe (by the server's role).

    - co-located (``mixed``): every decoding request, then prefill chunks (earliest first-token
      deadline first) up to the tokens the profile allows within the tier's TPOT at the current
      KV (at least ``min_chunk_tokens``); with no request decoding (``tpot_bound="decoding"``)
      the first prompt alone, as much of it as the server's token cap allows;
    - prefill: dynamic chunking (Sec. 4.7): prompts in deadline order fill a budget of ``C``
      tokens; a prompt with fewer than ``2C`` tokens left is finished in one iteration, and then
      nothing else joins it;
    - decode: every running request plus every transferred one memory allows.

    Memory running out (outputs longer than predicted) preempts the latest admitted request
    (vLLM's recompute), as the baselines do.
    """

    name = "polyserve"

    def __init__(self, controller: PolyServeController) -> None:
        self.c = controller
        self._order = AdmissionOrder({})
        self._lines: dict[int, Any] = {}

    def start(self, instance: Instance, seed: int) -> None:
        self._order = AdmissionOrder({})

    def next_batch(self, server: Server) -> Batch:
        if server.role == "decode":
            return self._decode_batch(server)
        if server.role == "prefill":
            return self._prefill_batch(server)
        return self._colocated_batch(server)

    def _chunk_within(
        self,
        timing: TimingModel,
        tau_s: float,
        shape: tuple[int, int, int, float, int],
        prefix: int,
        most: int,
    ) -> int:
        """Largest chunk (at most ``most``) of a prompt with ``prefix`` tokens cached that keeps
        the iteration ``shape`` (decode sequences, their KV, prefill tokens, attention work and
        sequences already in it) within ``tau_s``: a closed form per line of a linear or
        roofline model (:func:`slolab.timing.time_to_tokens` for other forms)."""
        lines = self._lines.get(id(timing))
        if lines is None:
            # each line as its intercept, the coefficients it reads and half the attention
            # coefficient, in Python floats converted once per timing model (the same floats
            # as converting at every call); () without lines
            try:
                intercepts, coefs = timing_lines(timing)
                lines = (
                    [
                        (
                            b,
                            row[F_DECODE_TOKENS],
                            row[F_NUM_DECODE],
                            row[F_DECODE_KV],
                            row[F_PREFILL_TOKENS],
                            row[F_PREFILL_ATTN],
                            row[F_NUM_PREFILL],
                            row[F_PREFILL_ATTN] / 2.0,
                        )
                        for b, row in zip(intercepts.tolist(), coefs.tolist(), strict=True)
                    ],
                )
            except ValueError:
                lines = ()
            self._lines[id(timing)] = lines
        decode, decode_kv, tokens, work, seqs = shape
        if not lines:
            return time_to_tokens(
                timing,
                tau_s,
                decode,
                decode_kv,
                prefix,
                max_tokens=most,
                batch_prefill_tokens=tokens,
                batch_prefill_attention_work=work,
                batch_prefill_seqs=seqs,
            )
        (rows,) = lines
        best = most
        with_it = seqs + 1
        mid = prefix + 0.5
        for b, per_decode, per_seq, per_kv, per_token, per_work, per_prefill, quad in rows:
            base = (
                b
                + per_decode * decode
                + per_seq * decode
                + per_kv * decode_kv
                + per_token * tokens
                + per_work * work
                + per_prefill * with_it
            )
            room = tau_s - base
            if room < 0:
                return 0
            lin = per_token + per_work * mid
            if quad > 0:
                root = 2.0 * room / (lin + math.sqrt(lin * lin + 4.0 * quad * room))
            elif lin > 0:
                root = room / lin
            else:
                continue
            best = min(best, int(math.floor(root)))
        return max(best, 0)

    def _deadline_order(self, ids: Sequence[int], now: float) -> list[int]:
        """``ids`` by first-token deadline, those already past it last (they are lost; they must
        not make the others late)."""
        first = self.c.first_deadline

        def key(r: int) -> tuple[bool, float, int]:
            d = first[r]
            return (d < now, d, r)

        return sorted(ids, key=key)

    def _decode_batch(self, server: Server) -> Batch:
        """Decode every running request and admit the transferred ones (the router admitted
        them) while memory allows. When the next step does not fit (outputs longer than
        predicted), the latest admitted requests are preempted; once memory frees, the server
        recomputes their KV (a prefill of prompt and generated tokens, then they decode on):
        whole, or in chunks of the token cap when longer than the cap."""
        decode = list(server.decoding[: server.max_batch_size])
        if len(decode) > server.kv_free_tokens:
            preempt = make_room_for_decode(server, decode, self._order.of(server))
            return Batch(decode=decode, preempt=preempt)
        free = server.kv_free_tokens - len(decode)
        prefill, free = self._recompute_chunks(server, decode, free)
        admitted = bool(prefill)
        cap = server.max_batch_tokens
        for r in server.waiting:
            if len(decode) + len(prefill) >= server.max_batch_size:
                break
            left = server.remaining_prefill(r)
            need = left + 1 if left else server.kv_held(r) + 1
            tokens = len(decode) + sum(c for _, c in prefill) + max(left, 1)
            if need > free:
                break
            if cap and tokens > cap:
                room = cap - (tokens - left)
                if left > cap and room >= 1:
                    # a recompute longer than any iteration can take whole: its first chunk
                    # (all of its KV fits; the rest follows, _recompute_chunks)
                    prefill.append((r, room))
                    free -= room
                    admitted = True
                break
            if left:
                prefill.append((r, left))  # a preempted request: recompute its KV
            else:
                decode.append(r)
            free -= need
            admitted = True
        if not decode and not prefill:
            return Batch()
        full = not admitted and len(decode) == len(server.decoding)
        return Batch(prefill=prefill, decode=server.decoding_ids() if full else decode, repeat=full)

    @staticmethod
    def _recompute_chunks(
        server: Server, decode: list[int], free: int
    ) -> tuple[list[tuple[int, int]], int]:
        """The next chunks of the recomputes begun in chunks on decode server ``server`` (a
        preempted request longer than the token cap), within the cap, the batch size and
        ``free`` KV tokens; returns them and the KV tokens left free."""
        prefill: list[tuple[int, int]] = []
        budget = (server.max_batch_tokens or 1 << 62) - len(decode)
        for r in server.prefilling:
            rem = server.remaining_prefill(r)
            c = min(rem, budget)
            extra = 1 if c == rem else 0
            if c < 1 or len(decode) + len(prefill) >= server.max_batch_size or c + extra > free:
                break
            prefill.append((r, c))
            free -= c + extra
            budget -= c
        return prefill, free

    def _prefill_batch(self, server: Server) -> Batch:
        budget = self.c.params.prefill_chunk_tokens
        free = server.kv_free_tokens
        prefill: list[tuple[int, int]] = []
        tokens = 0
        waiting = set(server.waiting)
        for r in self._deadline_order(server.prefilling + server.waiting, server.now):
            left = server.remaining_prefill(r)
            room = budget - tokens
            if room <= 0 or len(prefill) >= server.max_batch_size:
                break
            if left <= room:
                take, stop = left, False
            elif left < 2 * budget and tokens + left <= 2 * budget:
                take, stop = left, True  # finish it now; nothing else joins
            else:
                take, stop = room, True
            need = left + 1 if r in waiting else take + (1 if take == left else 0)
            if need > free:
                break
            prefill.append((r, take))
            free -= take + (1 if take == left else 0)
            tokens += take
            if stop:
                break
        return Batch(prefill=prefill)

    def _colocated_batch(self, server: Server) -> Batch:
        c = self.c
        params = c.params
        tau = c.tier_taus[c.tier_of_pool[server.pool]]
        running = server.decoding
        size = server.max_batch_size
        decode = list(running[:size])
        n_decode = len(decode)
        kv_free = server.kv_free_tokens
        preempt: list[int] = []
        if n_decode > kv_free:
            preempt = make_room_for_decode(server, decode, self._order.of(server))
            n_decode = len(decode)
        decode_kv = 0
        if decode:
            if n_decode == len(running):
                # every decoding request: the server's cached array of them (the same ids in
                # order) and the KV they hold, kept by the engine
                decode_kv = decoding_kv(server)
            else:
                decode_kv = int(server.kv_held_of(np.array(decode, dtype=np.int64)).sum())
        budget = server.max_batch_tokens - n_decode if server.max_batch_tokens else 1 << 30
        cap = budget
        if params.chunk_timing == "profile":
            budget = min(budget, c.profile.max_tokens(decode_kv, tau) - n_decode)
        free = kv_free - n_decode
        if preempt:
            free += server.kv_freed_by_preempting(preempt)
        slots = size - n_decode
        prefill: list[tuple[int, int]] = []
        queued = server.waiting
        waiting = set(queued)
        tokens, work = 0, 0.0
        candidates = server.prefilling + queued
        if preempt:
            candidates = tuple(q for q in candidates if q not in preempt)
        by_model = params.chunk_timing == "model"
        # nothing decoding: no TPOT bounds this iteration (Sec. 3.4's bound is "from the
        # decode perspective"); the first prompt takes what the server's token cap allows,
        # alone (a prompt joining it would delay its first token)
        unbound = not n_decode and params.tpot_bound == "decoding"
        for r in self._deadline_order(candidates, server.now):
            if slots <= 0:
                break
            left = server.remaining_prefill(r)
            held = server.kv_held(r)
            # a prefill not started yet starts after its given cached prefix
            prefix = held - server.generated(r) + (0 if held else int(c.req.cached[r]))
            if unbound and not prefill:
                take = min(left, cap)
            else:
                take = min(left, budget - tokens)
                if by_model and take > 0:
                    shape = (n_decode, decode_kv, tokens, work, len(prefill))
                    take = self._chunk_within(server.timing, tau, shape, prefix, take)
            if take < 1 and not prefill:
                take = min(left, params.min_chunk_tokens)  # never starve the prompts
            if take < 1:
                break
            extra = 1 if take == left else 0
            need = left + 1 if r in waiting else take + extra
            if need > free:
                continue
            prefill.append((r, take))
            free -= take + extra
            tokens += take
            work += prefill_chunk_attention(take, prefix)
            slots -= 1
            if take < left or unbound:
                break  # the budget is used up, or the prompt alone as the server allows
        if not prefill and not decode:
            return Batch(preempt=preempt)
        whole = not preempt and n_decode == len(running)
        repeat = whole and not prefill and not queued and not server.prefilling
        # every decoding request: the server's cached array of them (the engine's check of a
        # batch is cheapest on it)
        return Batch(
            prefill=prefill,
            decode=server.decoding_ids() if whole else decode,
            preempt=preempt,
            repeat=repeat,
        )
