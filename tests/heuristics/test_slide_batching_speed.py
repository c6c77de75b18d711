"""SlideBatching's faster decisions (short queues on Python floats, vectorised reads, early
exits, repeated decode batches) decide exactly as the former code."""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.harness.serving import ServingSetup
from slolab.heuristics import proserve
from slolab.heuristics.baselines import decode_server_batch, make_room_for_decode
from slolab.heuristics.policies import make_router
from slolab.heuristics.proserve import (
    BUDGET_TOL_S,
    FLOOR_QUEUE,
    LINE_FLOOR_MARGIN_S,
    LatencyEstimator,
    SlideBatching,
    SlideBatchingParams,
    _Queue,
    capture_point,
    chunk_row,
    decode_row,
    decode_steps_within_until_s,
    kv_held_tokens,
    next_token,
    numpy_sum,
    queue_features,
    remaining_prefill_tokens,
)
from slolab.problems.tdg_horizon import proserve_instance
from slolab.sim import Batch, check, run

_INT = np.int64


@dataclass
class _RefQueue:
    """The queue of one call as the reference builds it: numpy arrays."""

    ids: np.ndarray
    decode: np.ndarray  # bool: decoding (else prefilling or waiting)
    waiting: np.ndarray  # bool: not admitted yet
    remain_s: np.ndarray
    weight: np.ndarray
    prefix: np.ndarray
    rem_prefill: np.ndarray
    exec_s: np.ndarray
    rows: np.ndarray = field(repr=False)
    #: ``rows @ est.coef`` when already computed (None: not yet)
    inc: np.ndarray | None = field(default=None, repr=False)


class ReferenceSlideBatching(SlideBatching):
    """SlideBatching before short queues were built on Python floats and before decode batches
    repeated beyond ``eta``: every queue on numpy arrays, and its order, filling loop and
    repeat rule as they were."""

    def _queue(self, server: Any) -> _RefQueue | None:
        # the numpy build, unchanged (FormerSlideBatching checks it against its own reads)
        if server.load == 0:
            return None
        q = self._long_queue(server)
        a = q.arrays
        assert a is not None
        prefix, rem = np.asarray(q.prefix, dtype=_INT), np.asarray(q.rem_prefill, dtype=_INT)
        return _RefQueue(
            a.ids, a.decode, a.waiting, a.remain_s, a.weight, prefix, rem, a.exec_s, q.rows, a.inc
        )

    def budget_s(self, remain_s: np.ndarray) -> float:
        """``t_budget = max(min remain, eta)`` (Algorithm 1, lines 6-7)."""
        return max(float(remain_s.min()), self._eta_s)

    def _urgent(self, q: _RefQueue, budget_s: float, role: str) -> np.ndarray:
        """URGENT mask: ``remain < gamma * phi(r, Q)`` (Algorithm 1, lines 8-12)."""
        est = self._est
        assert est is not None
        gamma = self.params.gamma
        if role == "prefill":
            return q.remain_s < gamma * (q.exec_s.sum() + len(q.ids) * est.t_c)
        steps = budget_s / (budget_s - est.t_c) if budget_s > est.t_c else math.inf
        if math.isinf(budget_s):
            steps = 1.0
        if self.params.phi == "aggressive":
            return q.remain_s < gamma * steps * float(q.exec_s.sum())
        by_deadline = np.argsort(q.remain_s, kind="stable")
        phi = np.empty(len(q.ids))
        phi[by_deadline] = steps * np.cumsum(q.exec_s[by_deadline])
        return q.remain_s < gamma * phi

    def order(self, q: _RefQueue, budget_s: float, role: str) -> np.ndarray:
        """Positions of the queue in service order (Algorithm 1, line 13)."""
        density = q.weight / np.maximum(q.exec_s, 1e-12)
        if self.params.order == "deadline":
            return np.lexsort((np.arange(len(q.ids)), q.remain_s))
        if self.params.order == "density":
            return np.lexsort((q.remain_s, -density))
        urgent = self._urgent(q, budget_s, role)
        # URGENT first by decreasing density, then NORMAL by increasing remaining time
        key = np.where(urgent, -density, q.remain_s)
        return np.lexsort((np.arange(len(q.ids)), key, ~urgent))

    def next_batch(self, server: Any) -> Batch:
        if server.role == "decode":
            return decode_server_batch(server)
        q = self._queue(server)
        if q is None:
            return Batch()
        est = self._est
        assert est is not None
        budget = self.budget_s(q.remain_s)
        order = self.order(q, budget, server.role)
        if self.capture:
            self.captured.append(capture_point(server, q.ids, budget, self._eta_s))
        # admissions in order (synchronised with the running set only when preempting)
        admitted = self._order.order.setdefault(server.id, [])
        free = server.kv_free_tokens
        slots = server.max_batch_size
        tokens_left = server.max_batch_tokens or (1 << 62)
        lines, feats = est.empty()
        batch_s = est.batch_s(lines, feats)
        inc_rows = q.inc
        if inc_rows is None and est.lined:
            inc_rows = est.line_increments(q.rows)
        decode: list[int] = []
        prefill: list[tuple[int, int]] = []
        # affine time: once the budget left is below the cheapest item, nothing else fits
        smallest = est.smallest_item_s(q.exec_s[q.decode]) if est.affine else 0.0
        # lines: once one line is over the budget by more than its cheapest item, nothing fits
        floors = self._line_floors(q, inc_rows, budget) if len(q.ids) > FLOOR_QUEUE else None
        full = False
        # the queue's columns as Python lists: one conversion, not one per item visited
        ids, is_decode, is_waiting = q.ids.tolist(), q.decode.tolist(), q.waiting.tolist()
        rem_prefill, prefix = q.rem_prefill.tolist(), q.prefix.tolist()
        for i in order.tolist():
            if full or budget - batch_s < smallest or slots <= 0 or tokens_left <= 0:
                break
            r = ids[i]
            if is_decode[i]:
                if free < 1:
                    continue
                inc = inc_rows[i].tolist() if inc_rows is not None else ()
                new_s = est.time_with(lines, feats, inc, q.rows[i])
                if new_s > budget + BUDGET_TOL_S:
                    continue
                decode.append(r)
                if inc:
                    lines = [v + d for v, d in zip(lines, inc, strict=True)]
                    if floors:
                        full = any(v + f > budget for v, f in zip(lines, floors, strict=True))
                else:
                    feats = feats + q.rows[i]
                batch_s = new_s
                free -= 1
                tokens_left -= 1
                slots -= 1
                continue
            rem = rem_prefill[i]
            if is_waiting[i] and rem + 1 > free:
                continue
            cap = min(rem, tokens_left, rem if is_waiting[i] else free - 1)
            c = est.max_chunk(lines, feats, budget, prefix[i], cap)
            if c <= 0:
                continue
            prefill.append((r, c))
            lines, feats = est.add(
                lines, feats, est.chunk_features(np.array([c]), np.array([prefix[i]]))[0]
            )
            batch_s = est.batch_s(lines, feats)
            if floors:
                full = any(v + f > budget for v, f in zip(lines, floors, strict=True))
            free -= c + (1 if c == rem else 0)
            tokens_left -= c
            slots -= 1
            if is_waiting[i]:
                admitted.append(r)
        if not decode and not prefill:
            return self._progress(server, q, order, self._order.of(server))
        if not prefill and len(decode) == len(server.decoding) and batch_s <= self._eta_s:
            wake = self._repeat_until_s(server, q)
            if wake is not None:
                return Batch(decode=server.decoding_ids(), repeat=True, wake_at_s=wake)
        return Batch(prefill=prefill, decode=decode)

    def _repeat_until_s(self, server: Any, q: _RefQueue) -> float | None:
        """Up to when the decision to decode every decoding request, and nothing else, stays
        the same (the class docstring's argument); None when that is not shown."""
        est = self._est
        assert est is not None
        if not may_repeat(self, server):
            return None
        if q.waiting.any() and int(q.rem_prefill[q.waiting].min()) + 1 <= server.kv_free_tokens:
            return None
        kv = int(q.prefix[q.decode].sum())
        limit = self._eta_s - LINE_FLOOR_MARGIN_S
        return decode_steps_within_until_s(est.timing, server.now, int(q.decode.sum()), kv, limit)

    def _line_floors(
        self, q: _RefQueue, inc: np.ndarray | None, budget_s: float
    ) -> list[float] | None:
        """Per line, the least any item of the queue adds to it, less a margin: a line whose
        time plus its floor exceeds ``budget_s`` admits no further item (an early exit of the
        filling loop that cannot change its outcome); None when no such bound holds (a timing
        model without lines, a negative coefficient, or an infinite budget).

        A decode token adds its own increment; a prefill chunk adds at least one token with no
        cached prefix, ``c_pt + c_np + c_attn`` (the attention work ``c (prefix + (c + 1) / 2)``
        is at least 1). The margin (1 ns plus the fitting tolerance) exceeds any rounding of the
        fits' own arithmetic, so an item the fits would accept is never cut off.
        """
        floors = self._chunk_floors
        if inc is None or floors is None or not math.isfinite(budget_s):
            return None
        if q.decode.any():
            least = inc[q.decode].min(axis=0).tolist()
            floors = [min(f, d) for f, d in zip(floors, least, strict=True)]
        return [f - BUDGET_TOL_S - LINE_FLOOR_MARGIN_S for f in floors]

    def _progress(self, server: Any, q: _RefQueue, order: np.ndarray, admitted: list[int]) -> Batch:
        """Nothing fits the budget: serve the first request in order that memory allows."""
        free = server.kv_free_tokens
        for i in order.tolist():
            r = int(q.ids[i])
            if q.decode[i]:
                if free >= 1:
                    return Batch(decode=[r])
                continue
            rem = int(q.rem_prefill[i])
            if (rem + 1 if q.waiting[i] else 2) <= free:
                if q.waiting[i]:
                    admitted.append(r)
                return Batch(prefill=[(r, 1)])
        if server.decoding:
            decode = list(server.decoding[:1])
            preempt = make_room_for_decode(server, decode, admitted)
            return Batch(decode=decode, preempt=preempt) if decode else Batch(preempt=preempt)
        return Batch()


def may_repeat(policy: SlideBatching, server: Any) -> bool:
    """The repeat rules' first conditions: no capture, lines with non-negative coefficients,
    nothing prefilling, and the server timed by the policy's own model."""
    est = policy._est
    assert est is not None
    if policy.capture or policy._chunk_floors is None or server.prefilling:
        return False
    return server.timing is est.timing or server.timing == est.timing


class FormerSlideBatching(ReferenceSlideBatching):
    """SlideBatching as first written: every waiting request's prefill read one at a time from
    the server, the whole order walked, and a call at every iteration (no repeated batches)."""

    def _queue(self, server: Any) -> _RefQueue | None:
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
        return _RefQueue(
            ids, decode, waiting, deadline - server.now, weight, prefix, rem, exec_s, features
        )

    def _line_floors(self, q: _RefQueue, inc: Any, budget_s: float) -> list[float] | None:
        return None  # the whole order walked

    def _repeat_until_s(self, server: Any, q: _RefQueue) -> float | None:
        return None  # asked at every iteration


def both_runs(inst: Any, router: str) -> tuple[Any, Any]:
    """The instance run by SlideBatching and by the former code, the same router and seed."""
    outs = [
        run(inst, policy, make_router(router), seed=0)
        for policy in (SlideBatching(), FormerSlideBatching())
    ]
    return outs[0], outs[1]


#: The Mooncake runs below compare with the former code as their counts were recorded, with
#: caching off (the serving default caches Mooncake's blocks: with it on the two decide alike
#: too, :func:`test_fast_path_read_waiting_prompts_whole_under_prefix_caching`).
NO_CACHE = "off"


def assert_same(inst: Any, new: Any, old: Any) -> None:
    """Every token at the same time, the same preemptions, and a clean checker list."""
    assert np.array_equal(new.token_times, old.token_times)
    assert np.array_equal(new.preemptions, old.preemptions)
    assert check(inst, new) == []


@pytest.fixture(scope="module")
def mooncake() -> Any:
    """200 Mooncake requests, Poisson arrivals at 20 req/s on 8 servers (roofline timing)."""
    setup = ServingSetup(
        "mooncake_conversation",
        policy="slide-batching",
        servers=8,
        limit=200,
        arrivals="poisson",
        prefix_cache=NO_CACHE,
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


@pytest.mark.parametrize(("servers", "limit", "rate"), [(1, 150, 100.0), (8, 200, 20.0)])
def test_fast_path_read_waiting_prompts_whole_under_prefix_caching(servers, limit, rate):
    """Mooncake with the default 512-token prefix cache (a burst on one server, an overload on
    8): identical runs. The fast path used to take a waiting request's prefill as its whole
    prompt, the former code as the server reads it (less its cached prefix), and the runs
    parted at their third iteration."""
    setup = ServingSetup(
        "mooncake_conversation",
        policy="slide-batching",
        servers=servers,
        limit=limit,
        arrivals="poisson",
    )
    inst = setup.instance(rate)
    assert inst.cluster.prefix_block_tokens == 512
    new = run(inst, SlideBatching(), make_router("least-loaded"), seed=0)
    old = run(inst, FormerSlideBatching(), make_router("least-loaded"), seed=0)
    assert_same(inst, new, old)


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
        "mooncake_conversation",
        policy="slide-batching",
        servers=1,
        limit=150,
        arrivals="poisson",
        prefix_cache=NO_CACHE,
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
        # recomputed waiting requests seen in short (Python) and long (numpy) queues
        self.recomputes = {"short": 0, "long": 0}

    def _queue(self, server: Any) -> _Queue | None:
        q = super()._queue(server)
        if q is not None:
            queued = [i for i, d in enumerate(q.decode) if not d]
            ids = [q.ids[i] for i in queued]
            assert [q.rem_prefill[i] for i in queued] == remaining_prefill_tokens(
                server, ids
            ).tolist()
            kind = "long" if q.arrays is not None else "short"
            self.recomputes[kind] += sum(
                w and server.generated(r) > 0 for r, w in zip(q.ids, q.waiting, strict=True)
            )
        return q


def test_waiting_prefill_reads_equal_the_servers() -> None:
    """With preemptions, every waiting request's prefill (prompt plus the tokens generated
    before its preemption) equals the server's own count, recomputed requests included."""
    inst = proserve_instance(
        "azure_conv_2023", seed=1, n=120, rate=30.0, servers=1, kv_capacity_tokens=6_000
    )
    policy = CheckedReads()
    run(inst, policy, make_router("least-loaded"), seed=0)
    # measured: 646 recomputed waiting requests seen in short queues, 1,293 in long ones
    assert policy.recomputes["short"] > 0
    assert policy.recomputes["long"] > 0


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
        prefix_cache=NO_CACHE,
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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_subnormal=False),
        max_size=300,
    )
)
def test_numpy_sum_is_numpys_sum(values: list[float]) -> None:
    """The Python pairwise sum gives np.sum's float for any length (0 to 300 values)."""
    assert numpy_sum(values) == float(np.asarray(values, dtype=float).sum())


def test_numpy_sum_differs_from_a_left_to_right_sum() -> None:
    """From 8 values numpy adds in eight running sums: the left-to-right sum can differ."""
    values = [1.0] + [2.0**-53] * 8
    # left to right each 2^-53 is lost against 1.0 (a tie rounded to even); numpy first sums
    # the eight small ones pairwise (2^-50 in all, kept) and the 1.0 in its own running sum
    assert math.fsum(values) == 1.0 + 2.0**-50
    assert numpy_sum(values) == float(np.asarray(values).sum()) == 1.0 + 2.0**-50
    assert functools.reduce(operator.add, values) == 1.0


@pytest.fixture(scope="module")
def near_capacity() -> Any:
    """300 Mooncake requests, Poisson arrivals at 4.3 req/s on 8 servers: the capacity
    search's regime (its 4,000-request capacity is 4.312 req/s)."""
    return _mooncake(4.3, 8, 300)


def test_near_capacity_same_token_times_as_the_reference(near_capacity: Any) -> None:
    """Near the capacity decode steps outgrow ``eta`` while the budgets (the least remaining
    time) stay larger: those batches repeat too, with every token of the reference (which
    repeats within ``eta`` only) and of one call per iteration, bit for bit; every short
    queue's order and every repeated batch's wake-up time are the former code's."""
    checked = CheckedParts()
    new_policy, ref_policy = Counted(checked), Counted(ReferenceSlideBatching())
    former_policy = Counted(FormerSlideBatching())
    new = run(near_capacity, new_policy, make_router("least-loaded"), seed=0)
    ref = run(near_capacity, ref_policy, make_router("least-loaded"), seed=0)
    former = run(near_capacity, former_policy, make_router("least-loaded"), seed=0)
    assert_same(near_capacity, new, ref)
    assert_same(near_capacity, new, former)
    # measured: 5,317 calls (533 repeated) against the reference's 8,682 (473 repeated) and
    # 42,720 with one call per iteration
    assert new_policy.decisions * 1.4 < ref_policy.decisions
    # measured: 5,295 short orders (of the 5,317 calls) and 533 wake-up times compared
    assert checked.orders > 5_000
    assert checked.repeats > 500


@pytest.mark.parametrize(
    "params",
    [
        SlideBatchingParams(),
        SlideBatchingParams(gamma=3.0),
        SlideBatchingParams(phi="conservative"),
        SlideBatchingParams(order="deadline"),
        SlideBatchingParams(order="density"),
    ],
    ids=["slide", "gamma-3", "conservative", "deadline", "density"],
)
def test_short_and_long_queues_decide_as_the_reference(
    params: SlideBatchingParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ordering (the ablations, phi_c, a larger gamma) on 150 Mooncake requests at 100
    req/s on 2 servers (queues from 1 to past 64): queues built on Python floats, on numpy
    arrays alone (the short-queue limit set to 0), and the reference give the same tokens."""
    inst = _mooncake(100.0, 2, 150)
    ref = run(inst, ReferenceSlideBatching(params), make_router("least-loaded"), seed=0)
    new = run(inst, SlideBatching(params), make_router("least-loaded"), seed=0)
    monkeypatch.setattr(proserve, "SHORT_QUEUE", 0)
    long_only = run(inst, SlideBatching(params), make_router("least-loaded"), seed=0)
    assert_same(inst, new, ref)
    assert_same(inst, long_only, ref)


# -- the parts of a call made cheaper, against their former code -----------------------------


def former_short_order(policy: SlideBatching, q: _Queue, budget_s: float, role: str) -> list[int]:
    """``_short_order`` as it was: the density of every request, URGENT flags, tuple keys."""
    remain = q.remain_s
    positions = range(len(remain))
    density = [w / max(e, 1e-12) for w, e in zip(q.weight, q.exec_s, strict=True)]
    if policy.params.order == "deadline":
        return sorted(positions, key=remain.__getitem__)
    if policy.params.order == "density":
        return sorted(positions, key=lambda i: (-density[i], remain[i]))
    urgent = policy._short_urgent(q, budget_s, role)
    keys = [
        (False, -d) if u else (True, v) for u, d, v in zip(urgent, density, remain, strict=True)
    ]
    return sorted(positions, key=keys.__getitem__)


def former_max_chunk(
    est: LatencyEstimator, lines: list[float], budget_s: float, prefix: int, cap: int
) -> int:
    """``LatencyEstimator.max_chunk`` on lines as it was (per-line terms read in the loop)."""
    if cap <= 0:
        return 0
    best = cap
    for v, c_pt, c_np, c_attn in zip(lines, est._c_pt, est._c_np, est._c_attn, strict=True):
        left = budget_s - v - c_np
        a = c_attn / 2.0
        b = c_pt + c_attn * (prefix + 0.5)
        if left + BUDGET_TOL_S < a + b:
            return 0
        if math.isinf(left):
            c = cap
        elif a > 0:
            c = int(math.floor(2.0 * left / (b + math.sqrt(b * b + 4.0 * a * left)) + 1e-9))
        elif b > 0:
            c = int(math.floor(left / b + 1e-9))
        else:
            c = cap
        best = min(best, c)

    def over(c: int) -> bool:
        work = c * (prefix + (c + 1) / 2.0)
        return any(
            v + c_pt * c + c_np + c_attn * work > budget_s + BUDGET_TOL_S
            for v, c_pt, c_np, c_attn in zip(lines, est._c_pt, est._c_np, est._c_attn, strict=True)
        )

    while best > 0 and over(best):
        best -= 1
    return max(best, 0)


def former_repeat_until_s(policy: SlideBatching, server: Any, q: _Queue) -> float | None:
    """``SlideBatching._repeat_until_s`` as it was: one ``(steps, queue)`` matrix of remaining
    times, every queued request a column, minimised along the queue."""
    est = policy._est
    assert est is not None
    if not may_repeat(policy, server):
        return None
    free = server.kv_free_tokens
    if any(w and rem + 1 <= free for w, rem in zip(q.waiting, q.rem_prefill, strict=True)):
        return None
    ids = np.asarray(q.ids, dtype=_INT)
    decode = np.asarray(q.decode, dtype=bool)
    gen = np.asarray(q.generated, dtype=_INT)
    first_due, tpot = policy._static[ids, 0], policy._static[ids, 1]
    eta, margin = policy._eta_s, LINE_FLOOR_MARGIN_S

    def limits_s(starts: np.ndarray) -> np.ndarray:
        emitted = gen + np.arange(len(starts))[:, None] * decode
        remain = (first_due + emitted * tpot) - starts[:, None]
        return np.maximum(remain.min(axis=1), eta) - margin

    kv = sum(p for p, d in zip(q.prefix, q.decode, strict=True) if d)
    n_dec = len(server.decoding)
    return decode_steps_within_until_s(est.timing, server.now, n_dec, kv, limits_s)


class CheckedParts(SlideBatching):
    """SlideBatching that asks the former order and repeat rule at every call and asserts the
    same answers (the wake-up time to the bit), counting the calls compared."""

    def __init__(self, params: SlideBatchingParams | None = None) -> None:
        super().__init__(params)
        self.orders = 0
        self.repeats = 0

    def order(self, q: _Queue, budget_s: float, role: str) -> list[int]:
        got = super().order(q, budget_s, role)
        if q.arrays is None:
            assert got == former_short_order(self, q, budget_s, role)
            self.orders += 1
        return got

    def _repeat_until_s(self, server: Any, q: _Queue) -> float | None:
        got = super()._repeat_until_s(server, q)
        former = former_repeat_until_s(self, server, q)
        assert got == former
        self.repeats += got is not None
        return got


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=12).flatmap(
        lambda n: st.tuples(
            st.integers(min_value=0, max_value=n),
            st.lists(st.integers(min_value=0, max_value=40_000), min_size=n, max_size=n),
            st.lists(st.integers(min_value=1, max_value=40_000), min_size=n, max_size=n),
        )
    )
)
def test_queue_features_are_the_rows_array(case: tuple[int, list[int], list[int]]) -> None:
    """The flat build of a queue's feature rows is ``np.array`` of the row lists, bit for bit,
    C-ordered, so ``features @ coef`` is the same product."""
    n_dec, prefix, rem = case
    rem = [0] * n_dec + rem[n_dec:]
    rows = [decode_row(p) for p in prefix[:n_dec]]
    rows += [chunk_row(c, p) for c, p in zip(rem[n_dec:], prefix[n_dec:], strict=True)]
    expected = np.array(rows)
    got = queue_features(prefix, rem, n_dec)
    assert got.shape == expected.shape
    assert got.flags.c_contiguous
    assert np.array_equal(got, expected)


@pytest.fixture(scope="module")
def estimator(near_capacity: Any) -> LatencyEstimator:
    """The near-capacity instance's estimator (a two-line roofline)."""
    est = LatencyEstimator(near_capacity.timing)
    assert len(est.intercepts) == 2
    return est


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=0.2), min_size=2, max_size=2),
    st.floats(min_value=1e-3, max_value=0.3),
    st.integers(min_value=0, max_value=60_000),
    st.integers(min_value=-1, max_value=20_000),
)
def test_max_chunk_as_the_former_code(
    estimator: LatencyEstimator, lines: list[float], budget_s: float, prefix: int, cap: int
) -> None:
    """GETMAXCHUNK with its per-line terms read once gives the former chunk on random
    states of the two-line roofline (the chunks are integers: equal means identical)."""
    assert estimator.max_chunk(lines, np.zeros(0), budget_s, prefix, cap) == former_max_chunk(
        estimator, lines, budget_s, prefix, cap
    )
