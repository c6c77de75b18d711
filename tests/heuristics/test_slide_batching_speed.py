"""SlideBatching's vectorised waiting reads and early exit decide exactly as the former code."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics.policies import make_router
from slolab.heuristics.proserve import (
    BUDGET_TOL_S,
    FLOOR_QUEUE,
    SlideBatching,
    _Queue,
    kv_held_tokens,
    next_token,
    remaining_prefill_tokens,
)
from slolab.problems.tdg_horizon import proserve_instance
from slolab.sim import Batch, check, run

_INT = np.int64


class FormerSlideBatching(SlideBatching):
    """SlideBatching as written before: every waiting request's prefill read one at a time
    from the server, every line increment turned into a list, the whole order walked."""

    def _queue(self, server: Any) -> _Queue | None:
        data, est = self._data, self._est
        assert data is not None and est is not None
        dec = server.decoding_ids()
        pre_list = server.prefilling + server.waiting
        ids = np.concatenate([dec, np.asarray(pre_list, dtype=_INT)]).astype(_INT, copy=False)
        if len(ids) == 0:
            return None
        n_dec = len(dec)
        decode = np.zeros(len(ids), dtype=bool)
        decode[:n_dec] = True
        waiting = np.zeros(len(ids), dtype=bool)
        waiting[n_dec + len(server.prefilling) :] = True
        _, deadline, weight = next_token(data, server, ids)
        prefix = kv_held_tokens(server, ids)
        rem = np.zeros(len(ids), dtype=_INT)
        rem[n_dec:] = remaining_prefill_tokens(server, pre_list)
        features = np.concatenate(
            [
                est.decode_features(prefix[:n_dec]),
                est.chunk_features(rem[n_dec:], prefix[n_dec:]),
            ]
        )
        exec_s = est.exec_s(features)
        return _Queue(
            ids, decode, waiting, deadline - server.now, weight, prefix, rem, exec_s, features
        )

    def next_batch(self, server: Any) -> Batch:
        from slolab.heuristics.baselines import _decode_server_batch

        if server.role == "decode":
            return _decode_server_batch(server)
        q = self._queue(server)
        if q is None:
            return Batch()
        est = self._est
        assert est is not None
        budget = self.budget_s(q.remain_s)
        order = self.order(q, budget, server.role)
        admitted = self._order.order.setdefault(server.id, [])
        free = server.kv_free_tokens
        slots = server.max_batch_size
        tokens_left = server.max_batch_tokens or (1 << 62)
        lines, feats = est.empty()
        batch_s = est.batch_s(lines, feats)
        inc = est.line_increments(q.rows).tolist() if est.lined else None
        decode: list[int] = []
        prefill: list[tuple[int, int]] = []
        smallest = est.smallest_item_s(q.exec_s[q.decode]) if est.affine else 0.0
        for i in order.tolist():
            if budget - batch_s < smallest or slots <= 0 or tokens_left <= 0:
                break
            r = int(q.ids[i])
            if q.decode[i]:
                if free < 1:
                    continue
                new_s = est.time_with(lines, feats, inc[i] if inc else (), q.rows[i])
                if new_s > budget + BUDGET_TOL_S:
                    continue
                decode.append(r)
                if inc:
                    lines = [v + d for v, d in zip(lines, inc[i], strict=True)]
                else:
                    feats = feats + q.rows[i]
                batch_s = new_s
                free -= 1
                tokens_left -= 1
                slots -= 1
                continue
            rem = int(q.rem_prefill[i])
            if q.waiting[i] and rem + 1 > free:
                continue
            cap = min(rem, tokens_left, rem if q.waiting[i] else free - 1)
            c = est.max_chunk(lines, feats, budget, int(q.prefix[i]), cap)
            if c <= 0:
                continue
            prefill.append((r, c))
            lines, feats = est.add(
                lines, feats, est.chunk_features(np.array([c]), np.array([q.prefix[i]]))[0]
            )
            batch_s = est.batch_s(lines, feats)
            free -= c + (1 if c == rem else 0)
            tokens_left -= c
            slots -= 1
            if q.waiting[i]:
                admitted.append(r)
        if not decode and not prefill:
            return self._progress(server, q, order, self._order.of(server))
        return Batch(prefill=prefill, decode=decode)


def both_runs(inst: Any, router: str) -> tuple[Any, Any]:
    """The instance run by SlideBatching and by the former code, the same router and seed."""
    outs = [
        run(inst, policy, make_router(router), seed=0)
        for policy in (SlideBatching(), FormerSlideBatching())
    ]
    return outs[0], outs[1]


def assert_same(inst: Any, new: Any, old: Any) -> None:
    """Every token at the same time, the same preemptions, and a clean checker list."""
    assert np.array_equal(new.token_times, old.token_times)
    assert np.array_equal(new.preemptions, old.preemptions)
    assert check(inst, new) == []


@pytest.fixture(scope="module")
def mooncake() -> Any:
    """200 Mooncake requests, Poisson arrivals at 20 req/s on 8 servers (roofline timing)."""
    setup = ServingSetup(
        "mooncake_conversation", policy="slide-batching", servers=8, limit=200, arrivals="poisson"
    )
    return setup.instance(20.0)


def test_mooncake_overloaded_same_token_times(mooncake: Any) -> None:
    """Overloaded Mooncake run (capacity about 6.6 req/s at 200 requests): identical runs; few
    decode batches repeat, as waiting prompts fit and are prefilled at almost every iteration."""
    fast_policy, former_policy = Counted(SlideBatching()), Counted(FormerSlideBatching())
    new = run(mooncake, fast_policy, make_router("least-loaded"), seed=0)
    old = run(mooncake, former_policy, make_router("least-loaded"), seed=0)
    assert_same(mooncake, new, old)
    assert new.finished.all()
    # measured: 11,477 calls (54 repeated batches) against 13,780, one per iteration or more
    assert former_policy.decisions >= old.n_iterations
    assert fast_policy.repeats > 0
    assert fast_policy.decisions * 1.15 < former_policy.decisions


def test_azure_code_same_token_times() -> None:
    """200 Azure code requests, ProServe's SLOs, 2 servers (affine timing): identical runs."""
    inst = proserve_instance("azure_code_2023", seed=0, n=200, rate=12.0, servers=2)
    new, old = both_runs(inst, "go-routing")
    assert_same(inst, new, old)


def test_preempted_requests_same_token_times() -> None:
    """A 6,000-token KV cache forces recompute preemptions: identical runs, and some happen."""
    inst = proserve_instance(
        "azure_conv_2023", seed=1, n=120, rate=30.0, servers=1, kv_capacity_tokens=6_000
    )
    new, old = both_runs(inst, "least-loaded")
    assert_same(inst, new, old)
    assert int(new.preemptions.sum()) > 0


class CountedExits(SlideBatching):
    """SlideBatching that counts the calls whose queue is long enough for the early exit."""

    def __init__(self) -> None:
        super().__init__()
        self.long_queues = 0

    def _queue(self, server: Any) -> _Queue | None:
        q = super()._queue(server)
        self.long_queues += int(q is not None and len(q.ids) > FLOOR_QUEUE)
        return q


def test_burst_on_one_server_same_token_times() -> None:
    """150 Mooncake requests at 100 req/s on one server queue far past the early exit's
    threshold of 64: identical runs."""
    setup = ServingSetup(
        "mooncake_conversation", policy="slide-batching", servers=1, limit=150, arrivals="poisson"
    )
    inst = setup.instance(100.0)
    counted = CountedExits()
    new = run(inst, counted, make_router("least-loaded"), seed=0)
    old = run(inst, FormerSlideBatching(), make_router("least-loaded"), seed=0)
    assert_same(inst, new, old)
    assert counted.long_queues > 0


class CheckedReads(SlideBatching):
    """SlideBatching that compares its queue's prefill reads with the server's, per request."""

    def __init__(self) -> None:
        super().__init__()
        self.recomputes = 0

    def _queue(self, server: Any) -> _Queue | None:
        q = super()._queue(server)
        if q is not None:
            ids = q.ids[~q.decode].tolist()
            assert np.array_equal(q.rem_prefill[~q.decode], remaining_prefill_tokens(server, ids))
            self.recomputes += int((q.waiting & (server.generated_of(q.ids) > 0)).sum())
        return q


def test_waiting_prefill_reads_equal_the_servers() -> None:
    """With preemptions, every waiting request's prefill (prompt plus the tokens generated
    before its preemption) equals the server's own count, recomputed requests included."""
    inst = proserve_instance(
        "azure_conv_2023", seed=1, n=120, rate=30.0, servers=1, kv_capacity_tokens=6_000
    )
    policy = CheckedReads()
    run(inst, policy, make_router("least-loaded"), seed=0)
    assert policy.recomputes > 0


class Counted:
    """Wraps a policy: counts its calls and those marked ``repeat=True``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.decisions = 0
        self.repeats = 0

    def start(self, instance: Any, seed: int) -> None:
        self.inner.start(instance, seed)

    def next_batch(self, server: Any) -> Batch:
        batch = self.inner.next_batch(server)
        self.decisions += 1
        self.repeats += batch.repeat
        return batch


def _mooncake(rate: float, servers: int, limit: int) -> Any:
    setup = ServingSetup(
        "mooncake_conversation",
        policy="slide-batching",
        servers=servers,
        limit=limit,
        arrivals="poisson",
    )
    return setup.instance(rate)


@pytest.mark.parametrize(
    ("case", "router", "fewer"),
    [
        # light load, 100 Mooncake requests at 2 req/s on 8 servers: decode batches repeat
        # from one arrival to the next (measured: 1,652 calls against 34,383)
        ("mooncake-light", "least-loaded", 20),
        # Azure code, affine timing and GoRouting (277 against 1,358)
        ("azure-code", "go-routing", 4),
        # a 6,000-token KV cache: queued prompts that do not fit, preemptions (502 against 4,474)
        ("preempted", "least-loaded", 8),
    ],
)
def test_repeated_decode_batches_give_the_tokens_of_one_call_per_iteration(
    case: str, router: str, fewer: float
) -> None:
    """SlideBatching with repeated decode batches against the former code (a call at every
    iteration): every token and preemption bit for bit, with fewer calls."""
    inst = {
        "mooncake-light": lambda: _mooncake(2.0, 8, 100),
        "azure-code": lambda: proserve_instance(
            "azure_code_2023", seed=0, n=200, rate=12.0, servers=2
        ),
        "preempted": lambda: proserve_instance(
            "azure_conv_2023", seed=1, n=120, rate=30.0, servers=1, kv_capacity_tokens=6_000
        ),
    }[case]()
    fast_policy, former_policy = Counted(SlideBatching()), Counted(FormerSlideBatching())
    new = run(inst, fast_policy, make_router(router), seed=0)
    old = run(inst, former_policy, make_router(router), seed=0)
    assert_same(inst, new, old)
    # the former code is asked at every iteration (and at idle wake-ups); the repeated
    # batches cut the calls by the factor measured (rounded down)
    assert former_policy.repeats == 0
    assert former_policy.decisions >= old.n_iterations
    assert fast_policy.repeats > 0
    assert fast_policy.decisions * fewer < former_policy.decisions
