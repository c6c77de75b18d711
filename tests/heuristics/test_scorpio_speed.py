"""SCORPIO's fast decisions against the plain ones: every token at the same time.

``PlainScorpio`` keeps SCORPIO's decision rule as it was written before its decisions were
made fast (a full sort of the waiting list, one prefill time per waiting request and a
fresh virtual batch size per candidate at every decision); the seeded runs below must give
bit-identical token times, rejections and finish times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics.baselines import make_room_for_decode
from slolab.heuristics.hyperflexis import decode_step_s, prefill_s
from slolab.heuristics.scorpio import ScorpioPolicy
from slolab.sim import check
from slolab.sim.engine import Server
from slolab.sim.policy import Batch


class PlainScorpio(ScorpioPolicy):
    """SCORPIO's decision rule, every quantity recomputed at every decision."""

    def _plain_virtual(self, ids: Sequence[int], t_min: float) -> float:
        return sum(min(t_min / self.tpot[r], 1.0) if self.tpot[r] > 0 else 1.0 for r in ids)

    def next_batch(self, server: Server) -> Batch:
        now = server.now
        order = self._order.of(server)
        for r in server.decoding:
            self._first.setdefault(r, now)
        room = server.max_batch_tokens or 1 << 62
        if server.prefilling:
            r = server.prefilling[0]
            return Batch(prefill=[(r, min(server.remaining_prefill(r), room))])
        waiting = sorted(
            server.waiting, key=lambda r: (server.arrival(r) + self.ttft[r], server.arrival(r))
        )
        late = [
            r
            for r in waiting
            if now + prefill_s(server.timing, [server.remaining_prefill(r)])
            > server.arrival(r) + self.ttft[r]
        ]
        turned_away = [r for r in late if not server.generated(r)]
        rejected: list[int] = []
        if self.reject_unattainable and turned_away:
            rejected = turned_away
            late = [r for r in late if server.generated(r)]
            waiting = [r for r in waiting if r not in set(rejected)]
        lateset = set(late)
        queue = [r for r in waiting if r not in lateset] + late
        running = list(server.decoding)
        free = server.kv_free_tokens - len(running)
        kv_running = sum(server.kv_held(q) for q in running)
        prefill: list[tuple[int, int]] = []
        for r in queue:
            if len(running) + len(prefill) >= server.max_batch_size:
                break
            need = server.remaining_prefill(r)
            if need + 1 > free:
                break
            take = min(need, room)
            if take < need and prefill:
                break
            members = running + [q for q, _ in prefill] + [r]
            t_min = min((self.tpot[q] for q in members if self.tpot[q] > 0), default=math.inf)
            vbs = math.ceil(self._plain_virtual(members, t_min))
            kv = kv_running + sum(server.prompt(q) + 1 for q, _ in prefill) + need + 1
            if running and decode_step_s(server.timing, vbs, kv) > t_min:
                break
            prefill.append((r, take))
            free -= need + 1
            room -= take
            if take < need:
                break
        if prefill:
            order.extend(r for r, _ in prefill)
            return Batch(prefill=prefill, reject=rejected)
        if not running:
            return Batch(reject=rejected)
        t_min = min((self.tpot[r] for r in running if self.tpot[r] > 0), default=math.inf)
        if decode_step_s(server.timing, len(running), kv_running) <= t_min:
            decode = running[: server.max_batch_size]
        else:

            def pace(r: int) -> float:
                if self.tpot[r] <= 0:
                    return -math.inf
                return self._first[r] + server.generated(r) * self.tpot[r]

            decode, kv = [], 0
            for r in sorted(running, key=pace):
                held = server.kv_held(r)
                step = decode_step_s(server.timing, len(decode) + 1, kv + held)
                if decode and (step > t_min or len(decode) >= server.max_batch_size):
                    break
                decode.append(r)
                kv += held
        preempt = make_room_for_decode(server, decode, order)
        return Batch(decode=decode, preempt=preempt, reject=rejected)


def scorpio_setup(trace: str, *, limit: int, servers: int, timing: str) -> ServingSetup:
    """SCORPIO on ``trace`` with PolyServe's SLOs and Poisson arrivals."""
    return ServingSetup(
        trace,
        policy="scorpio",
        servers=servers,
        limit=limit,
        slos="polyserve",
        arrivals="poisson",
        timing=timing,
    )


def both(trace: str, *, limit: int, servers: int, rate: float, reject: bool, timing: str):
    """The instance at ``rate`` and its outcomes under the fast and the plain rule."""
    setup = scorpio_setup(trace, limit=limit, servers=servers, timing=timing)
    instance, sched = setup.prepare(setup.instance(rate))
    fast = dataclasses.replace(sched, policy=ScorpioPolicy(reject_unattainable=reject))
    plain = dataclasses.replace(sched, policy=PlainScorpio(reject_unattainable=reject))
    return instance, fast.run(instance, seed=0), plain.run(instance, seed=0)


ROOFLINE, PHASE_SUM = "llama2-7b-h100", "opt-13b-a100-distserve"


@pytest.mark.parametrize(
    ("trace", "limit", "servers", "rate", "reject", "timing"),
    [
        ("mooncake_conversation", 200, 8, 4.5, False, ROOFLINE),
        ("azure_conv_2023", 150, 2, 80.0, False, ROOFLINE),
        ("mooncake_conversation", 200, 8, 8.0, True, ROOFLINE),
        # a phase sum has no lines: its decode steps are evaluated, not bisected
        ("azure_conv_2023", 150, 2, 10.0, False, PHASE_SUM),
    ],
)
def test_fast_decisions_give_the_same_tokens_as_the_plain_rule(
    trace, limit, servers, rate, reject, timing
):
    """Seeded overloaded runs (SLO attainment 0.84, 0.75, 0.41 and 0.36): every token time,
    rejection and finish identical (bit for bit) to the plain rule's, and the checker finds
    nothing."""
    instance, fast, plain = both(
        trace, limit=limit, servers=servers, rate=rate, reject=reject, timing=timing
    )
    assert np.array_equal(fast.token_times, plain.token_times)
    assert np.array_equal(fast.token_offsets, plain.token_offsets)
    assert np.array_equal(fast.rejected, plain.rejected)
    assert np.array_equal(fast.last_token_s, plain.last_token_s)
    assert check(instance, fast) == []
    emitted = np.isfinite(fast.token_times)
    if reject:
        # the rejecting runs turn some requests away at this load (their tokens never come)
        assert 0 < fast.rejected.sum() < limit
    else:
        # every request is served to its last token
        assert not fast.rejected.any() and emitted.all()


@pytest.mark.parametrize(("rate", "reject"), [(3.5, False), (5.0, False), (6.0, True)])
def test_a_chunked_prompt_keeps_the_kv_it_was_admitted_with(rate, reject):
    """Regression: a prompt longer than the token cap went on in chunks while prompts admitted
    meanwhile took its KV cache ("batch needs 2048 KV tokens but only 721 of 200000 are
    free", 200 Mooncake requests at 3.5 and 5 req/s); and a request preempted after its tokens
    was rejected as unattainable (the checker: "rejected request is served"); and a decision
    that only rejected left the server's decoding requests unserved for good (41 of 200 at 6
    req/s). The runs now end with every request finished or turned away before any token,
    checker clean."""
    instance, fast, plain = both(
        "mooncake_conversation", limit=200, servers=8, rate=rate, reject=reject, timing=ROOFLINE
    )
    assert np.array_equal(fast.token_times, plain.token_times)
    assert check(instance, fast) == []
    finished = np.isfinite(fast.last_token_s)
    assert np.all(finished | fast.rejected)
    assert fast.rejected.any() == reject  # only the rejecting run turns requests away


class Counted:
    """Wraps a policy: counts its decisions and those marked ``repeat=True``."""

    def __init__(self, inner):
        self.inner = inner
        self.decisions = 0
        self.repeats = 0

    def start(self, instance, seed):
        self.inner.start(instance, seed)

    def next_batch(self, server):
        batch = self.inner.next_batch(server)
        self.decisions += 1
        self.repeats += batch.repeat
        return batch


@pytest.mark.parametrize(
    ("trace", "limit", "servers", "rate", "reject", "timing", "fewer"),
    [
        # light load: short queues, decode batches repeat from one arrival to the next
        # (measured: 1,091 decisions against 37,551)
        ("mooncake_conversation", 100, 8, 1.0, False, ROOFLINE, 30),
        # overloaded: the batches repeat beside queues whose heads do not fit (1,848 against
        # 28,072; 1,628 against 15,536 rejecting; 298 against 1,210 on Azure)
        ("mooncake_conversation", 200, 8, 4.5, False, ROOFLINE, 15),
        ("mooncake_conversation", 200, 8, 8.0, True, ROOFLINE, 9),
        ("azure_conv_2023", 150, 2, 80.0, False, ROOFLINE, 4),
        # a phase sum is no maximum of lines: batches repeat only with nothing queued
        # (1,913 against 3,058)
        ("azure_conv_2023", 150, 2, 10.0, False, PHASE_SUM, 1.5),
    ],
)
def test_repeated_decode_batches_give_the_tokens_of_one_decision_per_iteration(
    trace, limit, servers, rate, reject, timing, fewer
):
    """SCORPIO with repeated decode batches against the plain rule (a decision at every
    iteration): every token, rejection and finish bit for bit, with fewer decisions."""
    setup = scorpio_setup(trace, limit=limit, servers=servers, timing=timing)
    instance, sched = setup.prepare(setup.instance(rate))
    fast_policy = Counted(ScorpioPolicy(reject_unattainable=reject))
    plain_policy = Counted(PlainScorpio(reject_unattainable=reject))
    fast = dataclasses.replace(sched, policy=fast_policy).run(instance, seed=0)
    plain = dataclasses.replace(sched, policy=plain_policy).run(instance, seed=0)
    assert np.array_equal(fast.token_times, plain.token_times)
    assert np.array_equal(fast.rejected, plain.rejected)
    assert np.array_equal(fast.last_token_s, plain.last_token_s)
    assert check(instance, fast) == []
    # the plain rule decides at every iteration (and at idle wake-ups): at least one decision
    # per iteration; the repeated batches cut that by the factor measured (rounded down)
    assert plain_policy.repeats == 0
    assert plain_policy.decisions >= plain.n_iterations
    assert fast_policy.repeats > 0
    assert fast_policy.decisions * fewer < plain_policy.decisions
