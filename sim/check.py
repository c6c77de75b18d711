"""Independent checker: every physical rule, re-derived from the iteration log alone.

:func:`check` rebuilds each request's progress (prompt tokens processed, tokens generated,
KV held) from the logged iterations and their entries, in time order, and compares what
follows with what the Outcome claims. It shares no state with the engine: only the instance
(workload, cluster, timing model) and the log.

Rules checked (each violation is one line naming the rule, server, iteration and request):

- iterations on a server do not overlap, and last a positive time;
- an iteration's duration equals the timing model at the shape re-derived from its entries,
  and the logged shape equals that re-derived shape;
- no request is served before its arrival; a rejected request is never served after its
  rejection (``rejected_s``; without it, never): it may have received service before (a
  stalled run rejects requests partly prefilled, a run's end rejects held decode requests
  whose prefill ran), and it never meets its SLO (:mod:`slolab.sim.metrics`);
- a prefill chunk never exceeds what is left of the prompt (or of a recompute after
  preemption); decode only after the prefill is complete, at most one token per request per
  iteration, never more tokens than ``output_tokens``;
- every emitted token's time is the end of the iteration that produced it, and tokens never
  produced are ``inf``;
- KV tokens resident on a server never exceed its capacity and equal the logged figure;
- prefix caching (:mod:`slolab.sim.check_prefix`): a request never skips more prefill than
  its cached prefix when it started, only unreferenced blocks are evicted, and the resident
  blocks count against the capacity (shared ones once);
- a snapshot's given cache (the workload's ``cached_tokens``): every start of a request's
  prefill skips exactly its cached tokens, which stay outside the capacity;
- at most ``max_batch_size`` sequences and ``max_batch_tokens`` tokens per iteration;
- disaggregated: decode happens only on decode servers, after the KV transfer arrived; a
  decode server prefills only to recompute a request it preempted;
- static mode: members' token times follow the static-batch timelines of
  :mod:`slolab.sim.static`, and a batch lasts as long as its longest member;
- each server uses its pool's role, limits and timing model;
- servers' lives (:mod:`slolab.sim.scaling`): no iteration before a server is ready or after it
  departed; a server is ready its pool's start-up delay after it was switched on (a moved one:
  the cluster's ``move_s`` after its previous life departed, which is when it is switched on);
  a drained server departs exactly when its last request finishes (its last iteration, forward
  or rejection of a request it still holds: a prefill server lets a request go when its prefill
  ends; or the drain itself when it was empty) and leaves no request unfinished; a
  server never drained stays on until the run's end; no request is routed, forwarded or
  transferred to a server before it is switched on or once it is drained; the cost
  (``cost_server_s`` and ``cost_by_pool``) equals the sum of the servers' on-intervals.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from slolab.instances.records import cached_prompt_tokens
from slolab.sim.check_prefix import CacheReplay, caching_servers
from slolab.sim.engine import warm_start_state
from slolab.sim.outcome import (
    PHASE_DECODE,
    PHASE_PREFILL,
    PHASE_STATIC,
    ServerLives,
    pool_seconds,
    server_lives,
)
from slolab.sim.prefix_cache import cache_log
from slolab.sim.static import member_token_offsets
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    F_NUM_PREFILL,
    F_PREFILL_ATTN,
    F_PREFILL_TOKENS,
    N_FEATURES,
    prefill_chunk_attention,
)
from slolab.timing.presets import preset

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome
    from slolab.timing.base import TimingModel

_REL = 1e-9


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(1.0, abs(a), abs(b))


def check(instance: Instance, outcome: Outcome, max_violations: int = 100) -> list[str]:
    """Return the list of rule violations in ``outcome`` (empty when it is physically valid).

    Raises ValueError when the outcome was produced without its iteration log.
    """
    if not outcome.recorded_iterations:
        raise ValueError(
            "outcome has no iteration log: run with record_iterations=True to check it"
        )
    wl = instance.workload
    cl = instance.cluster
    n = len(wl)
    if outcome.n_requests != n:
        return [f"outcome has {outcome.n_requests} requests, instance has {n}"]
    v: list[str] = []

    def bad(msg: str) -> None:
        v.append(msg)

    lives = server_lives(cl, outcome)
    pools = {p.name: p for p in cl.resolved_pools()}
    unknown = [name for name in lives.pool_names if name not in pools]
    if unknown:
        return [f"outcome names pool {unknown[0]!r}, the cluster has {', '.join(pools)}"]
    n_servers = len(lives.pool)
    server_pools = [pools[lives.pool_names[k]] for k in lives.pool.tolist()]
    timings: dict[str | None, TimingModel] = {None: instance.timing}
    for p in pools.values():
        if p.timing is not None and p.timing not in timings:
            timings[p.timing] = preset(p.timing)
    timing_of = [timings[p.timing] for p in server_pools]
    role_of = [p.role for p in server_pools]
    kv_cap = [int(p.kv_capacity_tokens) for p in server_pools]  # type: ignore[arg-type]

    arrival = wl.arrival_s
    prompt = wl.prompt_tokens
    output = wl.output_tokens
    target = prompt.astype(np.int64).copy()
    prefilled = np.zeros(n, dtype=np.int64)
    generated = np.zeros(n, dtype=np.int64)
    expect = np.full(len(outcome.token_times), np.inf)
    offs = np.concatenate([[0], np.cumsum(output)])
    if not np.array_equal(offs, outcome.token_offsets):
        return ["token_offsets do not match the workload's output_tokens"]
    kv_held: dict[int, dict[int, int]] = {s: {} for s in range(n_servers)}
    # a snapshot's given cache: each request's cached prompt tokens, skipped at every start of
    # its prefill, held (read by its decode steps) outside the capacity while it runs
    given = cached_prompt_tokens(wl).tolist()
    given_held: dict[int, dict[int, int]] = {s: {} for s in range(n_servers)}
    caching = bool(cl.prefix_block_tokens) and cl.mode != "static"
    if caching != (cache_log(outcome) is not None):
        return [
            "the cluster caches prefixes but the outcome has no prefix-cache log"
            if caching
            else "the outcome has a prefix-cache log but the cluster caches no prefixes"
        ]
    cache = CacheReplay(instance, outcome, n_servers) if caching else None
    caches = caching_servers(role_of) & caching
    # warm-started requests enter their server already holding their KV
    warm_queue: dict[int, list[tuple[float, int]]] = {s: [] for s in range(n_servers)}
    warm = warm_start_state(instance)
    if warm is not None:
        running, remaining, gen0 = warm
        for r in np.flatnonzero(running).tolist():
            if cache is not None:
                cache.admitted[r] = True
            prefilled[r] = prompt[r] - remaining[r]
            generated[r] = gen0[r]
            expect[offs[r] : offs[r] + gen0[r]] = np.nan
            s_r = int(outcome.server[r])
            if 0 <= s_r < n_servers:
                warm_queue[s_r].append((float(arrival[r]), r))
        for lst in warm_queue.values():
            lst.sort()
    pre_by_server: dict[int, list[tuple[float, int]]] = {s: [] for s in range(n_servers)}
    for r, s, t in zip(
        outcome.preempt_request.tolist(),
        outcome.preempt_server.tolist(),
        outcome.preempt_s.tolist(),
        strict=True,
    ):
        pre_by_server[s].append((t, r))
    for lst in pre_by_server.values():
        lst.sort()
    pre_pos = dict.fromkeys(pre_by_server, 0)
    # requests preempted on each server: the only prefill a decode server may run (recompute)
    recompute: dict[int, set[int]] = {s: set() for s in range(n_servers)}
    last_end = dict.fromkeys(range(n_servers), -np.inf)
    prefill_done_at = np.full(n, np.inf)
    # when each request's KV cache lands on the decode side, its prefill server's link
    # recomputed (queued transfers: one at a time per prefill server, first done first sent)
    kv_landing = np.full(n, np.inf)
    link_free: dict[int, float] = {}
    served_on: dict[int, set[int]] = {}

    order = np.lexsort((outcome.it_server, outcome.it_start))
    eo = outcome.entry_offsets
    for i in order.tolist():
        if len(v) >= max_violations:
            break
        s = int(outcome.it_server[i])
        start, end = float(outcome.it_start[i]), float(outcome.it_end[i])
        where = f"server {s} iteration at {start:.9g}s"
        if not 0 <= s < n_servers:
            bad(f"{where}: server index out of range")
            continue
        role = role_of[s]
        pool = server_pools[s]
        timing = timing_of[s]
        if start < lives.ready_s[s] - _REL * max(1.0, abs(start)):
            bad(f"{where}: runs before the server was ready ({lives.ready_s[s]:.9g}s)")
        if end > lives.off_s[s] + _REL * max(1.0, abs(end)):
            bad(f"{where}: runs after the server departed ({lives.off_s[s]:.9g}s)")
        if start < last_end[s] - _REL * max(1.0, abs(start)):
            bad(
                f"{where}: starts before the previous iteration on the server ended ({last_end[s]:.9g}s)"
            )
        if not end > start:
            bad(f"{where}: non-positive duration ({end - start})")
        last_end[s] = end
        while warm_queue[s] and warm_queue[s][0][0] <= start + 1e-12:
            _, r = warm_queue[s].pop(0)
            kv_held[s][r] = int(prefilled[r] + generated[r])
        # preemptions decided on this server up to this iteration's start
        plist = pre_by_server[s]
        while pre_pos[s] < len(plist) and plist[pre_pos[s]][0] <= start + 1e-12:
            _, r = plist[pre_pos[s]]
            pre_pos[s] += 1
            if r not in kv_held[s]:
                bad(f"server {s}: request {r} preempted but holds no KV there")
                continue
            del kv_held[s][r]
            given_held[s].pop(r, None)
            target[r] = prompt[r] + generated[r]
            prefilled[r] = 0
            recompute[s].add(r)
            if caches[s]:
                cache.preempted(s, r)  # type: ignore[union-attr]
        cached_here = bool(caches[s])
        if cached_here:
            cache.evict_until(s, start, bad)  # type: ignore[union-attr]
        a, b = int(eo[i]), int(eo[i + 1])
        reqs = outcome.entry_request[a:b]
        phases = outcome.entry_phase[a:b]
        toks = outcome.entry_tokens[a:b]
        if len(set(reqs.tolist())) != len(reqs):
            bad(f"{where}: a request appears more than once")
        if len(reqs) > pool.max_batch_size:  # type: ignore[operator]
            bad(f"{where}: {len(reqs)} sequences exceed max_batch_size {pool.max_batch_size}")
        if role == "static" or (len(phases) and (phases == PHASE_STATIC).any()):
            _check_static(
                instance,
                timing,
                kv_cap[s],
                outcome,
                i,
                s,
                start,
                end,
                reqs,
                phases,
                kv_held,
                expect,
                prefilled,
                generated,
                prefill_done_at,
                bad,
            )
            for r in reqs.tolist():
                served_on.setdefault(r, set()).add(s)
            continue
        feats = np.zeros(N_FEATURES)
        emitted: list[int] = []
        chunked: list[int] = []
        for r, ph, c in zip(reqs.tolist(), phases.tolist(), toks.tolist(), strict=True):
            served_on.setdefault(r, set()).add(s)
            if start < arrival[r] - 1e-12:
                bad(f"{where}: request {r} served before its arrival {arrival[r]:.9g}s")
            if _served_after_rejection(outcome, r, end):
                bad(f"{where}: rejected request {r} is served after its rejection")
            if ph == PHASE_PREFILL:
                if role == "decode" and r not in recompute[s]:
                    bad(f"{where}: decode server runs a prefill of request {r}")
                if cached_here and not cache.admitted[r]:  # type: ignore[union-attr]
                    skip = cache.admit(s, r, start, bad)  # type: ignore[union-attr]
                    if skip:
                        prefilled[r] = skip
                        kv_held[s][r] = skip
                    chunked.append(r)
                elif cached_here:
                    chunked.append(r)
                elif given[r] and not prefilled[r] and r not in kv_held[s]:
                    # the start of its prefill: the given cache's tokens are not computed
                    prefilled[r] = given[r]
                    kv_held[s][r] = given_held[s][r] = given[r]
                left = int(target[r] - prefilled[r])
                if not 1 <= c <= left:
                    bad(f"{where}: prefill chunk of {c} tokens for request {r} with {left} left")
                    continue
                feats[F_PREFILL_TOKENS] += c
                feats[F_PREFILL_ATTN] += prefill_chunk_attention(c, int(prefilled[r]))
                feats[F_NUM_PREFILL] += 1
                held = kv_held[s].get(r, 0)
                prefilled[r] += c
                held += c
                if prefilled[r] == target[r]:
                    if generated[r] >= output[r]:
                        bad(f"{where}: request {r} emits more than {output[r]} tokens")
                        continue
                    expect[offs[r] + generated[r]] = end
                    generated[r] += 1
                    held += 1
                    prefill_done_at[r] = min(prefill_done_at[r], end)
                    emitted.append(r)
                    if role == "prefill" and generated[r] < output[r]:
                        sent = max(end, link_free.get(s, end)) if cl.kv_transfer_queued else end
                        kv_landing[r] = sent + float(
                            cl.kv_transfer_s(int(prompt[r] + 1), pool.kv_link_bandwidth_bytes_per_s)
                        )
                        if cl.kv_transfer_queued:
                            link_free[s] = float(kv_landing[r])
                kv_held[s][r] = held
            elif ph == PHASE_DECODE:
                if role == "prefill":
                    bad(f"{where}: prefill server decodes request {r}")
                if c != 1:
                    bad(f"{where}: decode entry of request {r} carries {c} tokens")
                if prefilled[r] != target[r] or generated[r] < 1:
                    bad(f"{where}: request {r} decodes before its prefill completed")
                    continue
                if generated[r] >= output[r]:
                    bad(f"{where}: request {r} emits more than {output[r]} tokens")
                    continue
                if role == "decode":
                    ready = float(kv_landing[r])
                    if not math.isfinite(ready):
                        ready = prefill_done_at[r] + float(cl.kv_transfer_s(int(prompt[r] + 1)))
                    if start < ready - 1e-9:
                        bad(
                            f"{where}: request {r} decodes before its KV transfer arrived ({ready:.9g}s)"
                        )
                    if r not in kv_held[s]:
                        kv_held[s][r] = int(prefilled[r] + generated[r] - target[r] + prompt[r])
                feats[F_DECODE_TOKENS] += 1
                feats[F_NUM_DECODE] += 1
                feats[F_DECODE_KV] += kv_held[s][r]
                expect[offs[r] + generated[r]] = end
                generated[r] += 1
                kv_held[s][r] = kv_held[s].get(r, 0) + 1
                emitted.append(r)
            else:
                bad(f"{where}: unknown phase {ph} for request {r}")
        tokens = feats[F_PREFILL_TOKENS] + feats[F_DECODE_TOKENS]
        if pool.max_batch_tokens and tokens > pool.max_batch_tokens:
            bad(f"{where}: {int(tokens)} tokens exceed max_batch_tokens {pool.max_batch_tokens}")
        logged = outcome.it_features[i]
        if not all(_close(float(x), float(y)) for x, y in zip(logged, feats, strict=True)):
            bad(
                f"{where}: logged shape {logged.tolist()} differs from the entries' shape {feats.tolist()}"
            )
        model_t = float(timing.times(feats[None, :])[0])
        if not _close(end - start, model_t):
            bad(f"{where}: lasts {end - start:.12g}s but the timing model gives {model_t:.12g}s")
        resident = sum(kv_held[s].values()) - sum(given_held[s].values())
        unreferenced = 0
        if cached_here:
            resident -= cache.shared[s]  # type: ignore[union-attr]
            unreferenced = cache.unreferenced[s]  # type: ignore[union-attr]
        if resident + unreferenced > kv_cap[s]:
            bad(
                f"{where}: {resident} KV tokens resident"
                + (f" and {unreferenced} cached" if unreferenced else "")
                + f" exceed capacity {kv_cap[s]}"
            )
        if resident != int(outcome.it_kv_tokens[i]):
            bad(f"{where}: {resident} KV tokens resident but {int(outcome.it_kv_tokens[i])} logged")
        for r in chunked:
            cache.computed(s, r, int(prefilled[r]))  # type: ignore[union-attr]
        for r in emitted:
            if generated[r] >= output[r] or (role == "prefill" and prefilled[r] == target[r]):
                kv_held[s].pop(r, None)
                given_held[s].pop(r, None)
                if cached_here:
                    cache.release(s, r)  # type: ignore[union-attr]

    if cache is not None and len(v) < max_violations:
        cache.leftover(bad)
    if len(v) < max_violations and cl.mode == "disaggregated":
        joined = outcome.transfer_done_s
        early = np.flatnonzero(np.isfinite(kv_landing) & (joined < kv_landing - 1e-9))
        if len(early):
            r = int(early[0])
            bad(
                f"request {r}: joins a decode server at {joined[r]:.9g}s before its KV transfer "
                f"lands ({kv_landing[r]:.9g}s, its prefill server's link recomputed)"
            )
    if len(v) < max_violations:
        _check_lives(instance, outcome, lives, server_pools, last_end, bad)
    if len(v) < max_violations:
        _check_tokens(outcome, expect, offs, arrival, output, generated, bad)
        for r in range(n):
            servers = served_on.get(r, set())
            if not servers:
                continue
            expected = {int(outcome.server[r]), int(outcome.prefill_server[r])}
            if not servers <= expected:
                bad(
                    f"request {r}: served on {sorted(servers)} but the outcome says {sorted(expected)}"
                )
            if len(v) >= max_violations:
                break
    return v[:max_violations]


def _check_lives(
    instance: Instance,
    outcome: Outcome,
    lives: ServerLives,
    server_pools: list,
    last_end: dict[int, float],
    bad,
) -> None:
    """The rules of servers' lives and of the cost (see the module docstring)."""
    cl = instance.cluster
    on, ready, drain, off = lives.on_s, lives.ready_s, lives.drain_s, lives.off_s
    end_s = float(outcome.end_s)
    n_servers = len(on)
    finished = outcome.finished
    # when each server lost its last request without an iteration: forwarded away or rejected
    released = np.full(n_servers, -np.inf)
    if outcome.forward_s is not None:
        assert outcome.forward_from is not None
        for src, t in zip(outcome.forward_from.tolist(), outcome.forward_s.tolist(), strict=True):
            if 0 <= src < n_servers:
                released[src] = max(released[src], t)
    if outcome.rejected_s is not None:
        for r in np.flatnonzero(np.isfinite(outcome.rejected_s)).tolist():
            # its prefill server let it go when its prefill ended (a held decode request
            # rejected at the run's end had left it long before)
            holders = {int(outcome.server[r])}
            if not np.isfinite(outcome.prefill_done_s[r]):
                holders.add(int(outcome.prefill_server[r]))
            for s in holders:
                if 0 <= s < n_servers:
                    released[s] = max(released[s], float(outcome.rejected_s[r]))
    for s in range(n_servers):
        where = f"server {s} ({lives.pool_names[lives.pool[s]]})"
        if not math.isfinite(on[s]):
            if math.isfinite(off[s]) or np.isfinite(last_end[s]):
                bad(f"{where}: never switched on but runs or departs")
            continue
        origin = int(lives.origin[s])
        delay = float(cl.move_s) if origin >= 0 else float(server_pools[s].startup_s)
        if s < cl.servers:
            delay = 0.0  # on and ready when the run began
        if not _close(float(ready[s] - on[s]), delay):
            bad(
                f"{where}: ready {ready[s] - on[s]:.9g}s after it was switched on, its start-up "
                f"takes {delay:.9g}s"
            )
        if origin >= 0 and (not 0 <= origin < n_servers or not _close(on[s], off[origin])):
            bad(f"{where}: a moved server must start when server {origin} departs")
        if not off[s] >= on[s]:
            bad(f"{where}: departs at {off[s]:.9g}s before it was switched on ({on[s]:.9g}s)")
        if not math.isfinite(drain[s]):
            if not _close(float(off[s]), end_s):
                bad(
                    f"{where}: never drained but off at {off[s]:.9g}s, not the run's end {end_s:.9g}s"
                )
            continue
        if drain[s] < on[s]:
            bad(f"{where}: drained at {drain[s]:.9g}s before it was switched on")
        last = max(float(drain[s]), float(last_end[s]), float(released[s]))
        if not _close(float(off[s]), last):
            bad(
                f"{where}: drained, departs at {off[s]:.9g}s but its last request left at "
                f"{last:.9g}s"
            )
    # requests left on a departed server
    drained = np.append(np.isfinite(drain), False)  # index -1 (no server): not drained
    for servers, done in (
        (outcome.server, finished),
        (outcome.prefill_server, np.isfinite(outcome.prefill_done_s)),
    ):
        idx = np.where((servers >= 0) & (servers < n_servers), servers, -1)
        left = np.flatnonzero(drained[idx] & ~done & ~outcome.rejected)
        if len(left):
            r, s = int(left[0]), int(idx[left[0]])
            bad(
                f"request {r}: left unfinished on server {s}, which departed at {off[s]:.9g}s "
                f"({len(left)} such requests)"
            )
    # routing only to servers switched on and not drained
    checks = []
    if outcome.routed_s is not None:
        checks.append(("routed to", outcome.prefill_server, outcome.routed_s))
    if cl.mode == "disaggregated":
        checks.append(("transferred to", outcome.server, outcome.transfer_done_s))
    for what, servers, times in checks:
        rows = np.flatnonzero(np.isfinite(times) & (servers >= 0) & (servers < n_servers))
        s_of, t_of = servers[rows], times[rows]
        outside = (t_of < on[s_of]) | (t_of >= drain[s_of])
        if outside.any():
            j = int(np.flatnonzero(outside)[0])
            r, s, t = int(rows[j]), int(s_of[j]), float(t_of[j])
            bad(
                f"request {r}: {what} server {s} at {t:.9g}s, outside its service "
                f"[{on[s]:.9g}s, drained {drain[s]:.9g}s)"
            )
    if outcome.forward_s is not None:
        assert outcome.forward_to is not None and outcome.forward_request is not None
        for r, dst, t in zip(
            outcome.forward_request.tolist(),
            outcome.forward_to.tolist(),
            outcome.forward_s.tolist(),
            strict=True,
        ):
            if 0 <= dst < n_servers and not on[dst] <= t < drain[dst]:
                bad(f"request {r}: forwarded to server {dst} at {t:.9g}s, which is drained or off")
    # cost
    if outcome.server_on_s is not None:
        spans = np.where(np.isfinite(on), off - on, 0.0)
        total = math.fsum(spans.tolist())
        if not _close(float(outcome.cost_server_s), total):
            bad(
                f"cost_server_s is {outcome.cost_server_s!r} but the servers' on-intervals sum "
                f"to {total!r}"
            )
        for name, pool_cost in pool_seconds(lives, outcome.scale_events).items():
            claimed = outcome.cost_by_pool.get(name, math.nan)
            if not _close(float(claimed), pool_cost):
                bad(
                    f"cost of pool {name!r} is {claimed!r} but its servers' on-intervals sum to {pool_cost!r}"
                )


def _served_after_rejection(outcome: Outcome, r: int, end: float) -> bool:
    """True when request ``r`` is rejected and an iteration serving it ends (at ``end``) after
    its rejection (any iteration, when the outcome records no rejection times)."""
    if not outcome.rejected[r]:
        return False
    if outcome.rejected_s is None:
        return True
    return end > float(outcome.rejected_s[r]) + 1e-12 * max(1.0, abs(end))


def _check_tokens(outcome, expect, offs, arrival, output, generated, bad) -> None:
    times = outcome.token_times
    same = (
        (times == expect)
        | (np.isinf(times) & np.isinf(expect))
        | (np.isnan(times) & np.isnan(expect))
    )
    close = np.isclose(times, expect, rtol=_REL, atol=0.0)
    wrong = ~(same | close)
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        r = int(np.searchsorted(offs, k, side="right") - 1)
        bad(
            f"request {r} token {k - offs[r] + 1}: outcome says {float(times[k])!r}, the iterations give "
            f"{float(expect[k])!r} ({int(wrong.sum())} tokens differ)"
        )
    req_of = np.repeat(np.arange(len(output)), output)
    early = np.isfinite(times) & (times < arrival[req_of] - 1e-12)
    if early.any():
        k = int(np.flatnonzero(early)[0])
        bad(f"request {int(req_of[k])}: a token at {float(times[k])!r} precedes its arrival")


def _check_static(
    instance,
    timing,
    kv_capacity,
    outcome,
    i,
    s,
    start,
    end,
    reqs,
    phases,
    kv_held,
    expect,
    prefilled,
    generated,
    prefill_done_at,
    bad,
) -> None:
    wl = instance.workload
    cached = cached_prompt_tokens(wl)
    where = f"server {s} static batch at {start:.9g}s"
    if not (phases == PHASE_STATIC).all():
        bad(f"{where}: mixes static members with other entries")
        return
    size = len(reqs)
    offs = outcome.token_offsets
    longest = 0.0
    alloc = 0
    for r in reqs.tolist():
        if start < wl.arrival_s[r] - 1e-12:
            bad(f"{where}: request {r} served before its arrival {wl.arrival_s[r]:.9g}s")
        if _served_after_rejection(outcome, r, end):
            bad(f"{where}: rejected request {r} is served after its rejection")
        if generated[r] > 0:
            bad(f"{where}: request {r} is served twice")
            continue
        p, o = int(wl.prompt_tokens[r]), int(wl.output_tokens[r])
        k = int(cached[r])  # a snapshot's given cache, outside the capacity
        rel = member_token_offsets(timing, size, p, o, k)
        expect[offs[r] : offs[r] + o] = start + rel
        prefilled[r] = p
        generated[r] = o
        prefill_done_at[r] = start + rel[0]
        longest = max(longest, float(rel[-1]))
        alloc += p + o - k
    if not _close(end - start, longest):
        bad(f"{where}: lasts {end - start:.12g}s but its longest member takes {longest:.12g}s")
    held_before = sum(kv_held[s].values())
    if held_before + alloc > kv_capacity:
        bad(f"{where}: {held_before + alloc} KV tokens exceed capacity {kv_capacity}")
    if held_before + alloc != int(outcome.it_kv_tokens[i]):
        bad(
            f"{where}: {held_before + alloc} KV tokens resident but {int(outcome.it_kv_tokens[i])} logged"
        )
