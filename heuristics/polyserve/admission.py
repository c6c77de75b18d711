"""PolyServe's admission: whether a server can take a request and still meet every deadline
it has promised (Sec. 4.5-4.7), and the memory of refusals that retries read.

:class:`ControllerAdmission` is the admission part of
:class:`~slolab.heuristics.polyserve.PolyServeController`: the checks of a disaggregated decode
server (:meth:`~ControllerAdmission.admit_decode`) and of a co-located one
(:meth:`~ControllerAdmission.admit_colocated`), each server's KV-peak base and queued prompts
kept per server state, and :meth:`~ControllerAdmission._admit`, the check with its memory of
refusals, which routing calls.

References
----------
PolyServe, Sec. 4.5 (profile-based admission), 4.6 (wait-time-aware admission), 4.7 (chunked
prefill within the TPOT).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.polyserve.profile import MEMO_ENTRIES, KvPeakBase, remember
from slolab.heuristics.polyserve.tiers import ControllerBase
from slolab.sim.engine.servers import state_key
from slolab.timing.base import (
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    prefill_chunk_attention,
)
from slolab.timing.forms import row_timer

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

#: Admission outcomes: admitted; refused for batch, memory or TPOT; refused on a deadline.
ADMIT, FULL, TOO_LATE = 0, 1, 2
#: Integer-valued float sums below this are exact in any order (every partial sum is exact).
_EXACT_INTEGERS = 1 << 52


class QueuedPrompts:
    """The prompts queued on a co-located server (prefilling and waiting) as the admission
    reads them, for one server state: ``(first-token deadline, tokens left, tokens done)``
    sorted, and over each prefix of that order the tokens left, the longest prompt and the
    prefill attention work. The prompts ahead of a request are such a prefix (those due by its
    deadline, or before now when that is later), so each check bisects instead of walking the
    queue.

    The work of a prompt, ``left (done + (left + 1) / 2)``, is an integer (``left (left + 1)``
    is even), kept as one: while every sum of them stays below ``_EXACT_INTEGERS`` the float
    sum the admission formed in queue order is exact, so it equals the integer sum in any
    order (docs/polyserve.md, "Admission inputs kept per server state"); beyond, it is
    formed as before."""

    __slots__ = ("in_order", "rows", "deadlines", "ahead", "longest", "work", "headroom")

    def __init__(self, rows: list[tuple[float, int, int]]) -> None:
        self.in_order = rows
        self.rows = sorted(rows)
        self.deadlines = [dq for dq, _, _ in self.rows]
        self.ahead = ahead = [0]
        self.longest = longest = [0]
        self.work = work = [0]
        for _, left, done in self.rows:
            ahead.append(ahead[-1] + left)
            longest.append(max(longest[-1], done + left))
            work.append(work[-1] + left * done + left * (left + 1) // 2)
        # how much more integer work (the request's own) keeps every float step exact
        self.headroom = _EXACT_INTEGERS - work[-1] if longest[-1] < _EXACT_INTEGERS else 0

    def ahead_of(
        self, deadline: float, now: float, prompt: int, charged: bool
    ) -> tuple[int, int, int, float]:
        """For a request of ``prompt`` tokens due at ``deadline``: how many rows are ahead of
        it (those due by its deadline, and those due before ``now``, late already, which the
        server prefills first), their tokens left, the longest prompt (the request's own
        included) and their attention work; with ``charged`` false the longest is the
        request's prompt and the work 0.0, as when prefill attention is not charged."""
        i = (
            bisect_left(self.deadlines, now)
            if now > deadline
            else bisect_right(self.deadlines, deadline)
        )
        if not charged:
            return i, self.ahead[i], prompt, 0.0
        if prompt * (prompt + 1) // 2 < self.headroom:
            work = float(self.work[i])
        else:
            work = 0.0
            for dq, left, done in self.in_order:
                if dq <= deadline or dq < now:
                    work += prefill_chunk_attention(left, done)
        return i, self.ahead[i], max(prompt, self.longest[i]), work


class ControllerAdmission(ControllerBase):
    """The admission part of :class:`~slolab.heuristics.polyserve.PolyServeController`: the
    checks, what they keep per server state, and the memory of refusals."""

    def start_admission(self, instance: Instance) -> None:
        """Forget every refusal, prediction and kept server state (a new run)."""
        self.placed: dict[int, int] = {}  # requests placed on each server (tier or decode)
        self._refused: dict[int, dict[int, tuple[int, float, int]]] = {}
        # the last dispatch's (request, server id) pairs refused TOO_LATE afresh, and how many
        # TOO_LATE refusals it answered from an earlier moment's memory (held_quiet_until)
        self._fresh_late: list[tuple[int, int]] = []
        self._late_hits = 0
        # co-located: when the admission predicted each request placed on time to end its
        # prompt (s; its first token), for comparing with the replay
        self.predicted_prefill_end_s: dict[int, float] = {}
        self._predicted_end = math.nan
        # co-located prefill chunks by (KV peak, TPOT, decode batch, longest prompt)
        self._chunks: dict[tuple[float, float, int, int], int] = {}
        # per server id, what the admission reads of it, with the server state read at
        # (state_key(server)): its KV-peak base and (co-located) its queued prompts
        self._bases: dict[int, tuple[tuple[object, ...], KvPeakBase]] = {}
        self._queues: dict[int, tuple[tuple[object, ...], QueuedPrompts]] = {}
        # the admission's parts on a server with no request, by (request, TPOT, late, KV used)
        self._empty: dict[tuple[int, float, bool, int], tuple[int, float, int, float, float, float]]
        self._empty = {}
        # with tpot_bound="decoding", the same for the prefill as the server allows
        self._unbound = self.params.tpot_bound == "decoding"
        self._row_time = row_timer(instance.timing)
        self._idle: dict[tuple[int, float, bool, int], tuple[int, tuple[float, ...], float]]
        self._idle = {}

    def _peak_with(
        self, s: Server, context: float, generated: float, key: tuple[Any, ...] | None = None
    ) -> float:
        """Predicted KV peak of ``s`` with one more request (``context`` tokens, ``generated``
        emitted); every request's output is predicted as ``d_hat``.

        Decoding requests count at their KV, queued and prefilling ones at their prompt plus
        what they emitted (their whole prompt will be resident). The server's part is read
        once per server state (:meth:`_peak_base`; ``key``: the server's ``state_key`` when
        the caller has read it)."""
        return self._peak_base(s, key).with_one(context, max(self.d_hat - generated, 1.0))

    def _peak_base(self, s: Server, key: tuple[Any, ...] | None = None) -> KvPeakBase:
        """The server's requests as :func:`kv_peak` reads them (contexts, and remaining steps
        ``max(d_hat - emitted, 1)``), kept while the server's state is unchanged, and carried
        across queue moves that only add requests (:meth:`_carried_base`). ``key``: the
        server's ``state_key`` when the caller has read it."""
        if key is None:
            key = state_key(s)
        got = self._bases.get(s.id)
        if got is not None:
            if got[0] == key:
                return got[1]
            carried = self._carried_base(s, got[0], got[1], key)
            if carried is not None:
                self._bases[s.id] = (key, carried)
                return carried
        dec = s.decoding_ids()
        rest = np.array(s.waiting + s.prefilling, dtype=np.int64)
        gen_rest = s.generated_of(rest)
        ctx = np.concatenate([s.kv_held_of(dec), s.prompt_of(rest) + gen_rest]).astype(float)
        gen = np.concatenate([s.generated_of(dec), gen_rest]).astype(float)
        base = KvPeakBase(ctx, np.maximum(self.d_hat - gen, 1.0))
        self._bases[s.id] = (key, base)
        return base

    def _carried_base(
        self, s: Server, was: tuple[Any, ...], base: KvPeakBase, key: tuple[Any, ...]
    ) -> KvPeakBase | None:
        """``base`` (read at key ``was``) with the requests queued on ``s`` since, or None when
        more than that changed. The same event version, iteration and window in progress and
        decoding requests mean no commit and no preemption in between, so every request read
        then has the same contexts and emitted tokens; a queue move that only adds requests
        (placements) adds theirs, each with at least every other's remaining steps
        (:meth:`KvPeakBase.plus`)."""
        # state_key(server): (event version, iteration, window, waiting, prefilling, decoding)
        version, iteration, window, waiting, prefilling, decoding = key
        if (
            was[0] != version
            or was[1] is not iteration
            or was[2] is not window
            or was[5] != decoding
        ):
            return None
        before = set(was[3])
        before.update(was[4])
        queued = waiting + prefilling
        added = [r for r in queued if r not in before]
        if len(queued) - len(added) != len(before):
            return None  # a request left the queues
        for r in added:
            generated = float(s.generated(r))
            remaining = max(self.d_hat - generated, 1.0)
            if remaining < base.top:
                return None
            base = base.plus(float(s.prompt(r)) + generated, remaining)
        return base

    def _queued_prompts(self, s: Server, key: tuple[Any, ...]) -> QueuedPrompts:
        """The server's queued prompts as the co-located admission reads them (tokens done
        only when prefill attention is charged), kept while the server's state (``key``, its
        ``state_key``) is unchanged."""
        got = self._queues.get(s.id)
        if got is not None and got[0] == key:
            return got[1]
        first = self.first_deadline
        charged = self.attention_s > 0
        rows = []
        cached = self.req.cached
        for q in s.prefilling + s.waiting:
            done = 0
            if charged:
                # a prefill not started yet starts after its given cached prefix
                held = s.kv_held(q)
                done = held - s.generated(q) + (0 if held else int(cached[q]))
            rows.append((first[q], s.remaining_prefill(q), done))
        queue = QueuedPrompts(rows)
        self._queues[s.id] = (key, queue)
        return queue

    def admit_decode(self, s: Server, r: int, tau_s: float, late: bool = False) -> bool:
        """Disaggregated decode admission (Sec. 4.5-4.6): with ``r`` the server's predicted peak
        KV fits memory, the iteration at the current batch and that peak stays within the tier's
        TPOT, and (unless late) ``r``'s second token, out at the end of the iteration after the
        one in progress, meets its deadline ``arrival + TTFT + TPOT``."""
        return self._admit_decode(s, r, tau_s, late) == ADMIT

    def _admit_decode(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        b = s.load + 1
        if b > self.max_seqs or (self.max_tokens and b > self.max_tokens):
            return FULL
        p = float(self.req.prompt[r])
        kv_now = s.kv_used_tokens + sum(s.kv_held(q) for q in s.waiting) + p + 1
        if self.profile.time(b, kv_now) > tau_s or kv_now > self.kv_admit:
            return FULL  # cheap necessary check: the peak is at least the current KV
        peak = self._peak_with(s, p + 1.0, 1.0)
        if peak > self.kv_admit or self.profile.time(b, peak) > tau_s:
            return FULL
        if late:
            return ADMIT
        deadline = self.req.arrival[r] + self.req.ttft[r] + self.req.tpot[r]
        return ADMIT if s.free_at_s + self.profile.time(b, kv_now) <= deadline else TOO_LATE

    def admit_colocated(self, s: Server, r: int, tau_s: float, late: bool = False) -> bool:
        """Co-located admission (Sec. 4.5-4.7): with ``r`` the predicted peak KV fits, the decode
        batch at that peak leaves a prefill chunk ``c >= 1`` within the tier's TPOT (the chunk the
        whole prefill can keep as the KV grows), and (unless late) ``r``'s prompt, after the
        prompts queued on the server with earlier first-token deadlines, finishes by its TTFT
        deadline, ``free_at + ceil((ahead + p) / c) t(B + c, peak) + a W``, and so does every
        queued prompt with a later deadline (the server prefills in deadline order).

        With ``chunk_timing="model"`` the batch former charges prefill attention, so the
        prediction does too: ``a`` is the model's seconds per unit of attention work
        (:func:`prefill_attention_s`), ``c`` also pays the attention of the chunk that ends the
        longest prompt counted (:meth:`Profile.max_chunk`), and ``W`` is those prompts'
        attention work (the same however they are chunked). With ``"profile"`` (the paper's
        batch former, prefill attention ignored) ``a = 0``: the table alone, as in the paper."""
        return self._admit_colocated(s, r, tau_s, late) == ADMIT

    def _admit_colocated(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        if not s.load:
            return self._admit_empty(s, r, tau_s, late)
        return self._admit_queued(s, r, tau_s, late)

    def _admit_queued(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """The co-located admission read from the server's queue and decodes (on an empty
        server too, where :meth:`_admit_empty` gives the same answer)."""
        if not s.load and self._unbound:
            return self._admit_idle(s, r, tau_s, late)
        b = s.load + 1
        if b > self.max_seqs:
            return FULL
        p = float(self.req.prompt[r])
        # the tokens r's prefill computes (outside its given cached prefix k)
        k = int(self.req.cached[r])
        left = p - k
        kv_now = s.kv_used_tokens + p
        if kv_now > self.kv_admit:
            return FULL
        read = self._read_time
        decode_s = read(float(b), kv_now)
        if decode_s > tau_s:
            return FULL
        first = self.first_deadline  # arrival + TTFT of every request
        deadline = first[r]
        free_at = s.free_at_s
        if not late:
            # cheap necessary check: the chunk is at most the one the current KV allows and
            # every iteration carries at least the b decode tokens; r's prompt alone already
            # too late settles it before the queue is read (the queue only adds iterations)
            most = self.profile.max_tokens(kv_now, tau_s) - b
            if most < 1:
                return FULL
            if free_at + math.ceil(left / most) * decode_s > deadline:
                return TOO_LATE
        # prompts ahead of r (the server prefills by deadline, lost ones last) and behind it;
        # with prefill attention charged, the longest of them (its last chunk pays the most)
        # and their attention work (c (prefix + (c + 1) / 2) summed over chunks: the same
        # however they are chunked, slolab.timing.base.prefill_attention_work)
        # (read once per server state, QueuedPrompts)
        key = state_key(s)  # read once for the queue and the KV peak
        queue = self._queued_prompts(s, key)
        charged = self.attention_s > 0
        i, queued, longest, work = queue.ahead_of(deadline, s.now, int(p), charged)
        if not late and free_at + math.ceil((queued + left) / most) * decode_s > deadline:
            return TOO_LATE
        peak = self._peak_with(s, p, 0.0, key)
        if peak > self.kv_admit:
            return FULL
        chunk = self._prefill_chunk(peak, tau_s, b, longest)
        if chunk < 1:
            return FULL
        if late:
            return ADMIT
        step = read(float(b + chunk), peak)
        tokens = queued + left
        if charged:
            work += prefill_chunk_attention(left, k)
        end = free_at + math.ceil(tokens / chunk) * step + self.attention_s * work
        if end > deadline:
            return TOO_LATE
        self._predicted_end = end
        for dq, left, done in queue.rows[i:]:  # r must not make a later-deadline prompt late
            if charged:
                if done + left > longest:  # a longer prompt: smaller chunks from here on
                    longest = done + left
                    chunk = self._prefill_chunk(peak, tau_s, b, longest)
                    if chunk < 1:
                        return TOO_LATE
                    step = read(float(b + chunk), peak)
                work += prefill_chunk_attention(left, done)
            tokens += left
            if free_at + math.ceil(tokens / chunk) * step + self.attention_s * work > dq:
                return TOO_LATE
        return ADMIT

    def _admit_empty(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """:meth:`_admit_colocated` on a server with no request (``s.load == 0``), to the bit.

        On such a server the admission reads the server only through its KV in use and its
        free time: the batch is ``b = 1``, no prompt is queued ahead of ``r`` or behind it, and
        the KV peak is that of ``r`` alone. Every check but the two deadline tests is then a
        function of ``(r, tau_s, late, KV in use)``, and so are the two durations those tests
        add to the free time: ``ceil(p / most) t(1, KV)`` (the queue check with nothing queued
        adds the same) and ``ceil(p / c) t(1 + c, peak)`` plus the attention term. They are
        remembered by those arguments (:meth:`_empty_parts`), and each ask adds the server's
        free time to them in the order, and with the operations, of the general path, so the
        answer and the predicted end are the same floats. A held request asks every empty
        server of its tiers at every retry; this makes each such ask a lookup."""
        if self._unbound:
            return self._admit_idle(s, r, tau_s, late)
        key = (r, tau_s, late, s.kv_used_tokens)
        parts = self._empty.get(key)
        if parts is None:
            parts = self._empty_parts(s, r, tau_s, late)
            remember(self._empty, key, parts, MEMO_ENTRIES)
        before, alone_s, after, steps_s, attention_s, deadline = parts
        if before != ADMIT:
            return before
        free_at = s.free_at_s
        if not late and free_at + alone_s > deadline:
            return TOO_LATE
        if after != ADMIT or late:
            return after
        end = free_at + steps_s + attention_s
        if end > deadline:
            return TOO_LATE
        self._predicted_end = end
        return ADMIT

    def _admit_idle(self, s: Server, r: int, tau_s: float, late: bool) -> int:
        """Co-located admission on a server with no request when only a decoding request bounds
        an iteration by the TPOT (``tpot_bound="decoding"``): ``r``'s prompt is prefilled as
        the server allows, in chunks of its token cap (the whole prompt without one), each
        iteration carrying that chunk alone, so its first token comes out at the free time plus
        those iterations' durations under the engine's own timing model
        (:meth:`_idle_prefill_s`), added in the engine's order: the same float as the replay.

        Before that: the batch, memory and TPOT checks of the general path (``r`` alone
        decoding within the tier's TPOT at its KV now and at its predicted peak), which refuse
        it ``FULL``. Remembered like :meth:`_admit_empty`'s parts, by (request, TPOT, late, KV
        in use)."""
        key = (r, tau_s, late, s.kv_used_tokens)
        parts = self._idle.get(key)
        if parts is None:
            parts = self._idle_parts(s, r, tau_s)
            remember(self._idle, key, parts, MEMO_ENTRIES)
        code, durations, deadline = parts
        if code != ADMIT or late:
            return code
        end = s.free_at_s
        for d in durations:
            end += d
        if end > deadline:
            return TOO_LATE
        self._predicted_end = end
        return ADMIT

    def _idle_parts(self, s: Server, r: int, tau_s: float) -> tuple[int, tuple[float, ...], float]:
        """:meth:`_admit_idle`'s parts: the code of its checks, the prefill's iteration
        durations, ``r``'s first-token deadline."""
        deadline = self.req.arrival[r] + self.req.ttft[r]
        if self._alone_code(s.kv_used_tokens, r, tau_s) != ADMIT:
            return FULL, (), deadline
        return (
            ADMIT,
            self._idle_prefill_s(int(self.req.prompt[r]), int(self.req.cached[r])),
            deadline,
        )

    def _alone_code(self, kv_used: int, r: int, tau_s: float) -> int:
        """The batch, memory and TPOT checks of a co-located server with no request and
        ``kv_used`` KV tokens in use (``FULL`` or ``ADMIT``): ``r`` alone decoding within
        ``tau_s`` at its KV now and at its predicted peak, with a prefill chunk ``c >= 1``
        beside its decode. :meth:`_admit_idle` and, once ``r`` is late, :meth:`_admit_empty`
        refuse ``r`` exactly on these."""
        p = float(self.req.prompt[r])
        kv_now = kv_used + p
        if 1 > self.max_seqs or kv_now > self.kv_admit or self.profile.time(1, kv_now) > tau_s:
            return FULL
        peak = p + (max(self.d_hat - 0.0, 1.0) - 1.0)
        if peak > self.kv_admit or self._prefill_chunk(peak, tau_s, 1, int(p)) < 1:
            return FULL
        return ADMIT

    def _decode_alone_code(self, r: int, tau_s: float) -> int:
        """:meth:`_admit_decode`'s batch, memory and TPOT checks on an empty decode server
        (``FULL`` or ``ADMIT``): ``r`` alone, its prompt and first token resident, within
        ``tau_s`` at that KV and at its predicted peak."""
        if 1 > self.max_seqs or (self.max_tokens and 1 > self.max_tokens):
            return FULL
        kv_now = float(self.req.prompt[r]) + 1
        if self.profile.time(1, kv_now) > tau_s or kv_now > self.kv_admit:
            return FULL
        # KvPeakBase.with_one on an empty server: r's own group, context + (steps - 1)
        peak = kv_now + (max(self.d_hat - 1.0, 1.0) - 1.0)
        if peak > self.kv_admit or self.profile.time(1, peak) > tau_s:
            return FULL
        return ADMIT

    def never_admitted(self, r: int, taus: list[float]) -> str | None:
        """Why no server of a tier of TPOT ``taus`` (s) would ever admit ``r``, or None.

        A server with no request (co-located: no KV in use) is where ``r`` is easiest to
        admit: with others on it the batch, the KV now and at the peak only grow and the prefill
        chunk only shrinks. Refused there for its batch, memory or TPOT (``FULL``; co-located,
        as when it is late and no deadline counts), every server of those tiers refuses it for
        good, whatever the cluster does: the reason says which check, on the loosest tier."""
        if self.mode == "disaggregated":
            if any(self._decode_alone_code(r, tau) == ADMIT for tau in taus):
                return None
        elif any(self._alone_code(0, r, tau) == ADMIT for tau in taus):
            return None
        return self._refusal_reason(r, max(taus))

    def _refusal_reason(self, r: int, tau_s: float) -> str:
        """The check an empty server of TPOT ``tau_s`` refuses ``r`` on, in words."""
        decode = self.mode == "disaggregated"
        p = int(self.req.prompt[r])
        kv_now = p + 1 if decode else p
        reserve = f"{self.kv_capacity:,} less the {self.params.kv_reserve:.0%} reserve"
        fills = f"the {self.kv_admit:,.0f} KV tokens PolyServe's admission fills ({reserve})"
        tier = f"the {tau_s * 1e3:.4g} ms TPOT of its loosest tier"
        peak = kv_now + (max(self.d_hat - float(decode), 1.0) - 1.0)
        side = "an empty decode server" if decode else "an empty server"
        if 1 > self.max_seqs or (decode and self.max_tokens and 1 > self.max_tokens):
            why = "a server's batch holds no request"
        elif kv_now > self.kv_admit:
            if decode:
                why = f"its prompt and first token ({kv_now:,} tokens) exceed {fills}"
            else:
                why = f"its prompt ({kv_now:,} tokens) exceeds {fills}"
        elif self.profile.time(1, kv_now) > tau_s:
            step = self.profile.time(1, kv_now)
            why = f"its decode alone at {kv_now:,} KV tokens takes {step * 1e3:.4g} ms, over {tier}"
        elif peak > self.kv_admit:
            why = (
                f"its predicted KV peak ({peak:,.0f} tokens, at {self.d_hat:.4g} mean output "
                f"tokens) exceeds {fills}"
            )
        elif decode:
            step = self.profile.time(1, peak)
            why = f"its decode alone at its predicted KV peak ({peak:,.0f} tokens) takes "
            why += f"{step * 1e3:.4g} ms, over {tier}"
        else:
            why = f"no prefill chunk fits beside its decode within {tier} at its predicted KV "
            why += f"peak ({peak:,.0f} tokens)"
        return f"PolyServe's admission refuses it on every tier it may use, even on {side}: {why}"

    def _idle_prefill_s(self, prompt: int, cached: int = 0) -> tuple[float, ...]:
        """The iteration durations (s) of a lone ``prompt``-token prefill with nothing
        decoding, its first ``cached`` tokens in the given cache, as the batch former takes it
        (:class:`PolyServePolicy`: chunks of the token cap, the whole uncached part without
        one) and the engine times it: each row's prefill tokens ``c``, one prefill sequence,
        attention work ``c (prefix + (c + 1) / 2)``, the prefix from ``cached`` on."""
        cap = self.max_tokens or prompt - cached
        durations = []
        done = cached
        while done < prompt:
            c = min(cap, prompt - done)
            row = [0.0] * N_FEATURES
            row[F_PREFILL_TOKENS] = float(c)
            row[F_PREFILL_ATTN] = 0.0 + prefill_chunk_attention(c, done)
            row[F_NUM_PREFILL] = 1.0
            durations.append(float(self._row_time(row)))
            done += c
        return tuple(durations)

    def _empty_parts(
        self, s: Server, r: int, tau_s: float, late: bool
    ) -> tuple[int, float, int, float, float, float]:
        """The parts of :meth:`_admit_empty` that do not depend on the free time: the code of
        the checks before the first deadline test (``ADMIT`` when they pass), the duration
        that test adds, the code of the checks between the two tests, the two terms the second
        test adds (the iterations, then the attention), and ``r``'s first-token deadline."""
        p = float(self.req.prompt[r])
        # the tokens r's prefill computes (outside its given cached prefix k)
        k = int(self.req.cached[r])
        left = p - k
        deadline = self.req.arrival[r] + self.req.ttft[r]
        kv_now = s.kv_used_tokens + p
        full = (FULL, 0.0, FULL, 0.0, 0.0, deadline)
        if 1 > self.max_seqs or kv_now > self.kv_admit:
            return full
        decode_s = self.profile.time(1, kv_now)
        if decode_s > tau_s:
            return full
        alone_s = 0.0
        if not late:
            most = self.profile.max_tokens(kv_now, tau_s) - 1
            if most < 1:
                return full
            alone_s = math.ceil(left / most) * decode_s
        # the KV peak with no other request (KvPeakBase.with_one on the server's empty base):
        # r alone, its context plus its remaining steps less one
        peak = p + (max(self.d_hat - 0.0, 1.0) - 1.0)
        if peak > self.kv_admit:
            return ADMIT, alone_s, FULL, 0.0, 0.0, deadline
        chunk = self._prefill_chunk(peak, tau_s, 1, int(p))
        if chunk < 1:
            return ADMIT, alone_s, FULL, 0.0, 0.0, deadline
        steps_s = math.ceil(left / chunk) * self.profile.time(1 + chunk, peak)
        work = prefill_chunk_attention(left, k) if self.attention_s > 0 else 0.0
        return ADMIT, alone_s, ADMIT, steps_s, self.attention_s * work, deadline

    def _prefill_chunk(self, peak: float, tau_s: float, b: int, longest: int) -> int:
        """The co-located prefill chunk a server can keep beside ``b`` decode tokens at the KV
        peak ``peak`` within ``tau_s`` (Sec. 4.7: a chunk the whole prefill can maintain): by
        the profile's (batch, KV) time plus, when the batch former charges it
        (``chunk_timing="model"``), the prefill attention of the chunk that ends the
        ``longest`` prompt (:func:`chunk_attention_work`), so the chunk the batch former will
        take, not a larger one. May be below 1 (no chunk fits).

        Remembered by its arguments: a pure function of them (the profile, the attention rate
        and the token cap are fixed for the run), and held requests ask the same servers the
        same question at every retry while the KV peak they predict stays put."""
        key = (peak, tau_s, b, longest)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self.profile.max_chunk(peak, tau_s, b, self.attention_s, longest)
            if self.max_tokens:
                chunk = min(chunk, self.max_tokens - b)
            remember(self._chunks, key, chunk, MEMO_ENTRIES)
        return chunk

    def _admit(self, s: Server, r: int, tau_s: float, late: bool, now: float) -> int:
        """Admission with a memory of failures: a server that refused ``r`` for its batch, memory
        or TPOT (``FULL``) refuses it again until a request leaves it (the prediction only grows
        while requests only join and grow); one that refused it on its deadline (``TOO_LATE``)
        is asked again after a tick, as PolyServe's tick-driven scheduler would. Returns the
        admission code (``ADMIT``, or why not).

        The reasons are part of the decisions: once ``r``'s deadline has passed it is admitted
        as lost, and a ``FULL`` refusal from before (same departures) or a ``TOO_LATE`` one
        less than a tick old still refuses it. An attempt skipped without its reason would
        ask such a server afresh (docs/planning.md, "Long prompts: the verdict")."""
        sid = s.id
        load = s.load
        departed = self.placed.get(sid, 0) - load
        seen = self._refused.get(r)
        if seen is not None and sid in seen:
            at_departed, at_s, reason = seen[sid]
            if at_departed == departed:
                if reason == FULL:
                    return reason
                if now < at_s + self.params.tick_s:
                    self._late_hits += 1
                    return reason
        if s.role != "mixed":
            code = self._admit_decode(s, r, tau_s, late)
        elif load:
            code = self._admit_queued(s, r, tau_s, late)
        else:
            code = self._admit_empty(s, r, tau_s, late)
        if code != ADMIT:
            if seen is None:  # nothing in between touches the memory: seen is r's entry
                seen = self._refused[r] = {}
            seen[sid] = (departed, now, code)
            if code == TOO_LATE:
                self._fresh_late.append((r, sid))
        return code
