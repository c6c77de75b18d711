"""Pricing of the time-indexed batch network with ng-route memory (docs/sa_ordering.md, Sec. 6,
"A time-indexed batch network"): the neighbourhoods, the label-setting programme over
``(q, t, memory)`` with its dominance, the quick search tried before it, and the path of a
label. :class:`slolab.models.sa_time_index.TimeIndexedMaster` holds the network and takes these
moves (a base of it); its columns are :class:`TiColumn`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Paths added per pricing round at most (the best ending at distinct sink ticks).
PATHS_PER_ROUND = 20
#: A column prices out below this reduced cost (s).
PRICE_TOL = 1e-7
#: Labels one ng pricing round may keep before it gives up (then priced without memory).
NG_LABEL_CAP = 1_000_000
#: Candidate labels waiting at one position before they are settled (cheapest, dominance).
NG_SETTLE_EVERY = 400_000
#: Labels per node kept by the quick ng search tried before the exact programme.
NG_QUICK_LABELS = 1
#: Share of the time left one exact ng round may take before it gives up.
NG_EXACT_SHARE = 0.25
#: Least reduced cost without memory from which ``exact_first`` tries the exact programme (s).
NG_EXACT_FIRST_FROM = -10.0
#: Labels the exact programme tried first keeps at most in the second phase of ``ng_warm``.
NG_EXACT_FIRST_CAP = 200_000
#: Leaders per label and size the quick ng search extends (its most promising ones).
NG_QUICK_ARCS = 4
#: Dominance is checked against this many cheapest labels of each node.
NG_DOMINANCE_DEPTH = 4


@dataclass(frozen=True, slots=True)
class TiColumn:
    """One batch at a node: its members (sorted), start node ``(q, tick)`` (``tick`` =
    ``late`` index for the late node) and end tick, its claimed members."""

    members: tuple[int, ...]
    q: int
    tick: int
    end_tick: int
    claimed: tuple[int, ...]


def ng_neighbourhoods(exec_full_s: np.ndarray, size: int) -> np.ndarray:
    """``(N, N)`` booleans, row ``r`` = ``NG(r)``: ``r`` and the ``size - 1`` requests nearest
    it in the order of ``(e_r(B), r)`` (execution time at full batch size), by distance in
    that order, ties to the one earlier in it; empty rows for ``size = 0``.

    Requests next to each other in that order are the ones a batch takes as fillers below a
    leader and the next batch takes again (docs/sa_ordering.md, "ng-route memory")."""
    n = len(exec_full_s)
    member = np.zeros((n, n), dtype=bool)
    if size <= 0:
        return member
    rank = np.empty(n, dtype=np.int64)
    rank[np.lexsort((np.arange(n), exec_full_s))] = np.arange(n)
    for r in range(n):
        gap = np.abs(rank - rank[r])
        member[r, np.lexsort((rank, gap))[: min(size, n)]] = True
    return member


class NgPricing:
    """The ng-route moves of the time-indexed master (a base of
    :class:`~slolab.models.sa_time_index.TimeIndexedMaster`, whose attributes they read)."""

    # the master's network (set by TimeIndexedMaster.__init__)
    n: int
    b: int
    late: int
    step: float
    ratio: float
    times: np.ndarray
    execs: np.ndarray
    latest: np.ndarray
    ng_size: int
    label_cap: int
    ng_member: np.ndarray
    ng_mask: np.ndarray
    request_bit: np.ndarray
    deadline: float
    # the master's moves this pricing uses
    column: Callable[[tuple[int, ...], int, int], TiColumn]
    _arcs: Callable[[np.ndarray], list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]]]
    completion: Callable[
        [list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]]], np.ndarray
    ]

    def admits(self, path: tuple[TiColumn, ...]) -> bool:
        """Whether the memory rule admits ``path``: no batch meets the memory, which after a
        batch ``S`` with leader ``j`` (largest ``(e_r(s), r)``) is ``(M ∪ S) ∩ NG(j)``
        (every path without memory)."""
        memory = 0
        for col in path:
            s = len(col.members)
            bits = sum(1 << r for r in col.members)
            if bits & memory:
                return False
            leader = max(col.members, key=lambda r: (self.execs[r, s], r))
            memory = (memory | bits) & int(self.ng_mask[leader])
        return True

    def _ng_tables(self, duals: np.ndarray) -> list[dict[str, Any]]:
        """Per size ``s``, for each leader position ``i >= s - 1`` of the order of ``(e_r(s),
        r)``: the leader's request, value per tick, end tick per tick; its *slots* (the members
        of ``NG(j)`` below it, whose choice changes the memory) with the subsets of at most
        ``s - 1`` of them (*patterns*); and per tick the ``s - 1 + ng_size`` cheapest requests
        below it outside ``NG(j)`` (enough that ``s - 1`` remain after any memory, which has at
        most ``ng_size`` members, is taken out)."""
        n, b, late, k = self.n, self.b, self.late, self.ng_size
        pi = duals[:n]
        times = self.times
        ticks = late + 1
        slots = k - 1
        tables = []
        for s in range(1, b + 1):
            order = np.lexsort((np.arange(n), self.execs[:, s]))
            e = self.execs[order, s]
            claim = self.latest[order, s][None, :] >= times[:, None]
            value = e[None, :] - pi[order][None, :] - claim / self.ratio  # (ticks, n)
            lead = np.arange(s - 1, n)
            leaders = order[lead]
            width = s - 1 + k
            out_val = np.full((len(lead), ticks, width), math.inf)
            out_req = np.zeros((len(lead), ticks, width), dtype=np.uint64)
            slot_req = np.zeros((len(lead), slots), dtype=np.int64)
            slot_val = np.full((len(lead), ticks, slots), math.inf)
            slot_real = np.zeros((len(lead), slots), dtype=bool)
            for li, i in enumerate(lead):
                inside = self.ng_member[leaders[li], order[:i]]
                pos_in = np.flatnonzero(inside)
                slot_req[li, : len(pos_in)] = order[pos_in]
                slot_val[li, :, : len(pos_in)] = value[:, pos_in]
                slot_real[li, : len(pos_in)] = True
                pos_out = np.flatnonzero(~inside)
                take = min(width, len(pos_out))
                if take:
                    vals = value[:, pos_out]
                    idx = np.argsort(vals, axis=1, kind="stable")[:, :take]
                    out_val[li, :, :take] = np.take_along_axis(vals, idx, axis=1)
                    out_req[li, :, :take] = order[pos_out][idx]
            patterns = [
                c
                for z in range(min(s - 1, slots) + 1)
                for c in itertools.combinations(range(slots), z)
            ]
            pattern_bits = np.zeros((len(lead), len(patterns)), dtype=np.uint64)
            pattern_real = np.ones((len(lead), len(patterns)), dtype=bool)
            for p, chosen in enumerate(patterns):
                for c in chosen:
                    pattern_bits[:, p] |= np.where(
                        slot_real[:, c], self.request_bit[slot_req[:, c]], np.uint64(0)
                    )
                    pattern_real[:, p] &= slot_real[:, c]
            end = np.full((len(lead), ticks), late)
            end[:, :late] = np.minimum(
                late, np.floor((times[None, :late] + e[lead][:, None]) / self.step + 1e-12)
            )
            tables.append(
                {
                    "s": s,
                    "order": order,
                    "lead": lead,
                    "leaders": leaders,
                    "lead_exec": e[lead],
                    "lead_val": value[:, lead].T.copy(),  # (leaders, ticks)
                    "end": end,
                    "out_val": out_val,
                    "out_req": out_req,
                    "slot_req": slot_req,
                    "slot_val": slot_val,
                    "slot_real": slot_real,
                    "patterns": patterns,
                    "pattern_bits": pattern_bits,
                    "pattern_real": pattern_real,
                }
            )
        return tables

    def price_ng(
        self,
        duals: np.ndarray,
        most: int = PATHS_PER_ROUND,
        arcs: list[tuple[int, int, np.ndarray, np.ndarray, float, np.ndarray]] | None = None,
        done: np.ndarray | None = None,
        per_node: int | None = None,
        until: float = math.inf,
        label_cap: int | None = None,
    ) -> tuple[list[tuple[TiColumn, ...]], float] | None:
        """The least reduced cost over the ng-feasible paths when it is negative (else a lower
        bound on it, ``>= 0``) and the best such paths at the ``most`` best sink ticks; None
        when more than ``label_cap`` labels (default: the master's) were kept or the clock
        passed ``until`` (the caller then prices without memory, a lower bound: every
        ng-feasible path is a path).

        Labels ``(q, t, M, cost)``, ``M`` the memory. A batch ``S`` with leader ``j`` may leave
        a label when ``S ∩ M = ∅`` and gives ``M' = (M ∪ S) ∩ NG(j)``. For a leader, the
        members in ``NG(j)`` (a pattern of its slots) are enumerated, since they change
        ``M'``; the others do not, so they are the cheapest allowed (``e_r(s) - pi_r -
        [L_r(s) >= t] / lambda``). Labels at one node with the same memory keep the cheapest;
        a label is dominated by one at its node with a memory inside its own and a cost at
        most its own (every completion of the first is one of the second). A label whose cost
        plus :meth:`completion` (no memory, a lower bound) is not below ``sigma`` cannot lead
        to a negative path and is dropped."""
        n = self.n
        sigma = float(duals[n])
        if arcs is None:
            arcs = self._arcs(duals)
        if done is None:
            done = self.completion(arcs)
        plain = float(done[0, 0]) - sigma
        if plain >= -PRICE_TOL:
            return [], plain
        cap = self.label_cap if label_cap is None else label_cap
        tables = self._ng_tables(duals)
        quick = per_node is not None
        width = max(len(tab["patterns"]) for tab in tables)
        empty = (
            np.zeros(0, np.uint64),
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
        pending: list[list[tuple[np.ndarray, ...]]] = [[] for _ in range(n + 1)]
        pending[0].append(
            (
                np.zeros(1, np.uint64),
                np.zeros(1, np.int64),
                np.zeros(1),
                np.full(1, -1),
                np.zeros(1, np.int64),
            )
        )
        labels: list[tuple[np.ndarray, ...]] = []
        offsets: list[int] = []
        waiting = [0] * (n + 1)
        for q in range(n + 1):
            chunks = pending[q]
            pending[q] = []
            here = self._settle(chunks, per_node) if chunks else empty
            offsets.append(offsets[-1] + len(labels[-1][0]) if labels else 0)
            labels.append(here)
            if offsets[-1] + len(here[0]) > cap or time.perf_counter() > until:
                return None
            keys, tks, costs = here[0], here[1], here[2]
            if q == n or not len(keys):
                continue
            ids = offsets[q] + np.arange(len(keys))
            for tab in tables:
                s = tab["s"]
                if q + s > n:
                    continue
                nl = len(tab["leaders"])
                block = max(1, 400_000 // (nl * max(s - 1 + self.ng_size, len(tab["patterns"]))))
                for lo in range(0, len(keys), block):
                    sl = slice(lo, lo + block)
                    new_key, end, cand, rows, li, p = self._extend(
                        tab, keys[sl], tks[sl], costs[sl], q, done[q + s], sigma, quick
                    )
                    code = (s * (n + 1) + li) * width + p
                    pending[q + s].append((new_key, end, cand, ids[sl][rows], code))
                    waiting[q + s] += len(cand)
                    if waiting[q + s] > NG_SETTLE_EVERY:
                        pending[q + s] = [self._settle(pending[q + s], per_node)]
                        waiting[q + s] = len(pending[q + s][0][0])
                        if waiting[q + s] > cap:
                            return None
        sink_ticks, sink_costs = labels[n][1], labels[n][2]
        if not len(sink_costs):
            return [], max(0.0, plain)
        rc = sink_costs - sigma
        rc_min = float(rc.min())
        by_value = np.argsort(rc, kind="stable")
        _, first = np.unique(sink_ticks[by_value], return_index=True)
        winners = by_value[np.sort(first)]
        winners = winners[np.argsort(rc[winners], kind="stable")]
        winners = winners[rc[winners] < -PRICE_TOL][:most]
        flat = [np.concatenate([lab[i] for lab in labels]) for i in range(5)]
        paths = [self._ng_path(offsets[n] + int(x), flat, tables, width) for x in winners]
        return paths, rc_min

    def _settle(
        self, chunks: list[tuple[np.ndarray, ...]], per_node: int | None = None
    ) -> tuple[np.ndarray, ...]:
        """The labels of one position from their candidates: per (memory, tick) the cheapest,
        then those dominated at their tick by one of its ``NG_DOMINANCE_DEPTH`` cheapest (a
        memory inside theirs and a cost at most theirs) dropped; with ``per_node``, only that
        many cheapest per tick (a heuristic: it may lose the best path)."""
        keys, tks, costs, src, code = (np.concatenate([c[i] for c in chunks]) for i in range(5))
        o = np.lexsort((costs, tks, keys))
        keys, tks, costs, src, code = keys[o], tks[o], costs[o], src[o], code[o]
        first = np.ones(len(keys), dtype=bool)
        first[1:] = (keys[1:] != keys[:-1]) | (tks[1:] != tks[:-1])
        keys, tks, costs, src, code = keys[first], tks[first], costs[first], src[first], code[first]
        o = np.lexsort((costs, tks))
        keys, tks, costs, src, code = keys[o], tks[o], costs[o], src[o], code[o]
        # the rank of each label at its tick, cheapest first
        starts = np.flatnonzero(np.r_[True, tks[1:] != tks[:-1]])
        rank = np.arange(len(keys)) - np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
        keep = np.ones(len(keys), dtype=bool)
        if per_node is not None:
            keep &= rank < per_node
        else:
            group = np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
            for d in range(NG_DOMINANCE_DEPTH):
                # the label of rank d at the tick (cost at most theirs) against the later ones
                other = group + d
                later = rank > d
                inside = (keys[np.minimum(other, len(keys) - 1)] & ~keys) == 0
                keep &= ~(later & inside)
        return keys[keep], tks[keep], costs[keep], src[keep], code[keep]

    def _extend(
        self,
        tab: dict[str, Any],
        key: np.ndarray,
        tk: np.ndarray,
        cost: np.ndarray,
        q: int,
        done_next: np.ndarray,
        sigma: float,
        quick: bool,
    ) -> tuple[np.ndarray, ...]:
        """The batches of size ``tab["s"]`` out of the labels ``(key, tk, cost)`` at position
        ``q`` that can still lead to a negative path, one per leader and pattern (``quick``:
        per leader only its cheapest pattern, per label only its ``NG_QUICK_ARCS`` most
        promising leaders): their new memories, end ticks, costs, the
        labels they leave (local indices), leaders' positions in the table and patterns."""
        n, s = self.n, tab["s"]
        leaders = tab["leaders"]
        bit = self.request_bit
        one = np.uint64(1)
        lead_ok = (key[:, None] & bit[leaders][None, :]) == 0  # (L, nl)
        base = cost[:, None] + tab["lead_val"][:, tk].T + tab["lead_exec"][None, :] * (n - q - s)
        base = np.where(lead_ok, base, math.inf)
        end = tab["end"][:, tk].T  # (L, nl)
        reach = base + done_next[end] - sigma
        # the cheapest allowed outside NG(j): sums of the first c, c = 0 .. s - 1
        out_val = tab["out_val"][:, tk, :].transpose(1, 0, 2)
        out_req = tab["out_req"][:, tk, :].transpose(1, 0, 2)
        banned = ((key[:, None, None] >> out_req) & one) == one
        allowed = np.sort(np.where(banned, math.inf, out_val), axis=2)[:, :, : s - 1]
        zero = np.zeros(allowed.shape[:2] + (1,))
        sums = np.concatenate([zero, np.cumsum(allowed, axis=2)], axis=2)
        slot_req = tab["slot_req"].astype(np.uint64)
        slot_banned = ((key[:, None, None] >> slot_req[None]) & one) == one
        slot_val = np.where(slot_banned, math.inf, tab["slot_val"][:, tk, :].transpose(1, 0, 2))
        patterns = tab["patterns"]
        fill = np.empty(base.shape + (len(patterns),))
        for p, chosen in enumerate(patterns):
            fill[:, :, p] = sums[:, :, s - 1 - len(chosen)]
            if chosen:
                fill[:, :, p] += slot_val[:, :, list(chosen)].sum(axis=2)
        fill = np.where(tab["pattern_real"][None], fill, math.inf)
        if quick:
            ps = np.argmin(fill, axis=2)
            fill = np.take_along_axis(fill, ps[:, :, None], axis=2)[:, :, 0]
            worth = reach + fill
            if worth.shape[1] > NG_QUICK_ARCS:
                # per label only its few most promising leaders
                cut = np.partition(worth, NG_QUICK_ARCS - 1, axis=1)[:, NG_QUICK_ARCS - 1]
                worth = np.where(worth <= cut[:, None], worth, math.inf)
            rows, cols = np.nonzero(worth < 0)
            ps = ps[rows, cols]
            total = (base + fill)[rows, cols]
        else:
            rows, cols, ps = np.nonzero(reach[:, :, None] + fill < 0)
            total = base[rows, cols] + fill[rows, cols, ps]
        new_key = (
            (key[rows] & self.ng_mask[leaders[cols]])
            | bit[leaders[cols]]
            | tab["pattern_bits"][cols, ps]
        )
        return new_key, end[rows, cols], total, rows, cols, ps

    def _ng_path(
        self, label: int, flat: list[np.ndarray], tables: list[dict[str, Any]], width: int
    ) -> tuple[TiColumn, ...]:
        """The path of a label of :meth:`price_ng` (its batches rebuilt from the back
        pointers: the leader, the pattern's slots and the cheapest allowed others)."""
        keys, tks, _, src, code = flat
        n = self.n
        batches = []
        q = n
        while src[label] >= 0:
            prev = int(src[label])
            li_code, p = divmod(int(code[label]), width)
            s, li = divmod(li_code, n + 1)
            tab = tables[s - 1]
            memory, tick = int(keys[prev]), int(tks[prev])
            chosen = [int(tab["slot_req"][li, c]) for c in tab["patterns"][p]]
            others = [
                int(r)
                for r, v in zip(tab["out_req"][li, tick], tab["out_val"][li, tick], strict=True)
                if math.isfinite(v) and not (memory >> int(r)) & 1
            ][: s - 1 - len(chosen)]
            q -= s
            batches.append(self.column((int(tab["leaders"][li]), *chosen, *others), q, tick))
            label = prev
        return tuple(reversed(batches))
