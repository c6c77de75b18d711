"""Independent checker: every physical rule, re-derived from the iteration log alone.

:func:`check` rebuilds each request's progress (prompt tokens processed, tokens generated,
KV held) from the logged iterations and their entries, in time order, and compares what
follows with what the Outcome claims. It shares no state with the engine: only the instance
(workload, cluster, timing model) and the log.

Rules checked (each violation is one line naming the rule, server, iteration and request):

- iterations on a server do not overlap, and last a positive time;
- an iteration's duration equals the timing model at the shape re-derived from its entries,
  and the logged shape equals that re-derived shape;
- no request is served before its arrival; rejected requests are never served;
- a prefill chunk never exceeds what is left of the prompt (or of a recompute after
  preemption); decode only after the prefill is complete, at most one token per request per
  iteration, never more tokens than ``output_tokens``;
- every emitted token's time is the end of the iteration that produced it, and tokens never
  produced are ``inf``;
- KV tokens resident on a server never exceed its capacity and equal the logged figure;
- at most ``max_batch_size`` sequences and ``max_batch_tokens`` tokens per iteration;
- disaggregated: decode happens only on decode servers, after the KV transfer arrived;
- static mode: members' token times follow the static-batch timelines of
  :mod:`slolab.sim.static`, and a batch lasts as long as its longest member.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from slolab.sim.engine import warm_start_state
from slolab.sim.outcome import PHASE_DECODE, PHASE_PREFILL, PHASE_STATIC
from slolab.sim.static import member_token_offsets
from slolab.timing.base import N_FEATURES

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome

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
    timing = instance.timing
    n = len(wl)
    if outcome.n_requests != n:
        return [f"outcome has {outcome.n_requests} requests, instance has {n}"]
    v: list[str] = []

    def bad(msg: str) -> None:
        v.append(msg)

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
    kv_held: dict[int, dict[int, int]] = {s: {} for s in range(cl.servers)}
    # warm-started requests enter their server already holding their KV
    warm_queue: dict[int, list[tuple[float, int]]] = {s: [] for s in range(cl.servers)}
    warm = warm_start_state(instance)
    if warm is not None:
        running, remaining, gen0 = warm
        for r in np.flatnonzero(running).tolist():
            prefilled[r] = prompt[r] - remaining[r]
            generated[r] = gen0[r]
            expect[offs[r] : offs[r] + gen0[r]] = np.nan
            s_r = int(outcome.server[r])
            if 0 <= s_r < cl.servers:
                warm_queue[s_r].append((float(arrival[r]), r))
        for lst in warm_queue.values():
            lst.sort()
    pre_by_server: dict[int, list[tuple[float, int]]] = {s: [] for s in range(cl.servers)}
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
    last_end = dict.fromkeys(range(cl.servers), -np.inf)
    prefill_done_at = np.full(n, np.inf)
    served_on: dict[int, set[int]] = {}

    order = np.lexsort((outcome.it_server, outcome.it_start))
    eo = outcome.entry_offsets
    for i in order.tolist():
        if len(v) >= max_violations:
            break
        s = int(outcome.it_server[i])
        start, end = float(outcome.it_start[i]), float(outcome.it_end[i])
        where = f"server {s} iteration at {start:.9g}s"
        if not 0 <= s < cl.servers:
            bad(f"{where}: server index out of range")
            continue
        role = "mixed"
        if cl.mode == "disaggregated":
            role = "prefill" if s < cl.prefill_servers else "decode"
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
            target[r] = prompt[r] + generated[r]
            prefilled[r] = 0
        a, b = int(eo[i]), int(eo[i + 1])
        reqs = outcome.entry_request[a:b]
        phases = outcome.entry_phase[a:b]
        toks = outcome.entry_tokens[a:b]
        if len(set(reqs.tolist())) != len(reqs):
            bad(f"{where}: a request appears more than once")
        if len(reqs) > cl.max_batch_size:
            bad(f"{where}: {len(reqs)} sequences exceed max_batch_size {cl.max_batch_size}")
        if cl.mode == "static" or (len(phases) and (phases == PHASE_STATIC).any()):
            _check_static(
                instance,
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
        for r, ph, c in zip(reqs.tolist(), phases.tolist(), toks.tolist(), strict=True):
            served_on.setdefault(r, set()).add(s)
            if start < arrival[r] - 1e-12:
                bad(f"{where}: request {r} served before its arrival {arrival[r]:.9g}s")
            if outcome.rejected[r]:
                bad(f"{where}: rejected request {r} is served")
            if ph == PHASE_PREFILL:
                if role == "decode":
                    bad(f"{where}: decode server runs a prefill of request {r}")
                left = int(target[r] - prefilled[r])
                if not 1 <= c <= left:
                    bad(f"{where}: prefill chunk of {c} tokens for request {r} with {left} left")
                    continue
                feats[0] += c
                feats[4] += c * (prefilled[r] + (c + 1) / 2.0)
                feats[5] += 1
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
                    ready = prefill_done_at[r] + float(cl.kv_transfer_s(int(prompt[r] + 1)))
                    if start < ready - 1e-9:
                        bad(
                            f"{where}: request {r} decodes before its KV transfer arrived ({ready:.9g}s)"
                        )
                    if r not in kv_held[s]:
                        kv_held[s][r] = int(prefilled[r] + generated[r] - target[r] + prompt[r])
                feats[1] += 1
                feats[2] += 1
                feats[3] += kv_held[s][r]
                expect[offs[r] + generated[r]] = end
                generated[r] += 1
                kv_held[s][r] = kv_held[s].get(r, 0) + 1
                emitted.append(r)
            else:
                bad(f"{where}: unknown phase {ph} for request {r}")
        tokens = feats[0] + feats[1]
        if cl.max_batch_tokens and tokens > cl.max_batch_tokens:
            bad(f"{where}: {int(tokens)} tokens exceed max_batch_tokens {cl.max_batch_tokens}")
        logged = outcome.it_features[i]
        if not all(_close(float(x), float(y)) for x, y in zip(logged, feats, strict=True)):
            bad(
                f"{where}: logged shape {logged.tolist()} differs from the entries' shape {feats.tolist()}"
            )
        model_t = float(timing.times(feats[None, :])[0])
        if not _close(end - start, model_t):
            bad(f"{where}: lasts {end - start:.12g}s but the timing model gives {model_t:.12g}s")
        resident = sum(kv_held[s].values())
        if resident > cl.kv_capacity_tokens:
            bad(f"{where}: {resident} KV tokens resident exceed capacity {cl.kv_capacity_tokens}")
        if resident != int(outcome.it_kv_tokens[i]):
            bad(f"{where}: {resident} KV tokens resident but {int(outcome.it_kv_tokens[i])} logged")
        for r in emitted:
            if generated[r] >= output[r] or (role == "prefill" and prefilled[r] == target[r]):
                kv_held[s].pop(r, None)

    if len(v) < max_violations:
        _check_tokens(outcome, expect, offs, arrival, output, generated, bad)
        for r in range(n):
            servers = served_on.get(r, set())
            if outcome.rejected[r] and servers:
                bad(f"request {r}: rejected but served")
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
        if outcome.rejected[r]:
            bad(f"{where}: rejected request {r} is served")
        if generated[r] > 0:
            bad(f"{where}: request {r} is served twice")
            continue
        p, o = int(wl.prompt_tokens[r]), int(wl.output_tokens[r])
        rel = member_token_offsets(instance.timing, size, p, o)
        expect[offs[r] : offs[r] + o] = start + rel
        prefilled[r] = p
        generated[r] = o
        prefill_done_at[r] = start + rel[0]
        longest = max(longest, float(rel[-1]))
        alloc += p + o
    if not _close(end - start, longest):
        bad(f"{where}: lasts {end - start:.12g}s but its longest member takes {longest:.12g}s")
    held_before = sum(kv_held[s].values())
    if held_before + alloc > instance.cluster.kv_capacity_tokens:
        bad(
            f"{where}: {held_before + alloc} KV tokens exceed capacity {instance.cluster.kv_capacity_tokens}"
        )
    if held_before + alloc != int(outcome.it_kv_tokens[i]):
        bad(
            f"{where}: {held_before + alloc} KV tokens resident but {int(outcome.it_kv_tokens[i])} logged"
        )
