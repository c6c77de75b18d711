"""Co-located PolyServe's admission reads the profile's chunk and the KV peak with fewer Python
calls (:meth:`Profile.max_chunk`, :func:`chunk_attention_work`, :func:`kv_peak`) and reads each
server's KV-peak inputs and queued prompts once per server state (:class:`KvPeakBase`,
:class:`QueuedPrompts`): the same floats, so every token time and decision of seeded runs is
the former one."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics import polyserve as ps
from slolab.heuristics.policies import make_scheduler
from slolab.heuristics.polyserve import (
    H200_LLAMA31_8B_KV_TOKENS,
    KvPeakBase,
    Profile,
    QueuedPrompts,
    chunk_attention_work,
    kv_peak,
    last_fitting,
    last_fitting_near,
    prefill_attention_s,
)
from slolab.models import tier_partition as tp
from slolab.problems.tier_partition import stream_instance
from slolab.sim import check
from slolab.sim.engine.servers import state_key
from test_polyserve_dispatch_view import former_ranked
from test_polyserve_held_index import load_former, outcome_fingerprint
from test_polyserve_held_retries import FORMER as MOONCAKE
from test_polyserve_held_retries import mooncake_run

#: Outcome digest (every recorded array, token times included, and the scaling events) and
#: routing decisions of the code before these changes on the Azure conversation stream (2,000
#: requests at 60 % of the fluid rate of 16 co-located servers, PolyServe's scaler on); the
#: Mooncake runs at 1 and 2 req/s on 8 servers are test_polyserve_held_retries.py's. Since a
#: prompt alone on a server is prefilled as the server allows (``tpot_bound="decoding"``) the
#: run is 33c5b28d2b84abd9... with 2,012 decisions under every iteration within the TPOT and
#: this one by default.
#: Kept as fingerprints in the .json beside this file (decisions exactly, times within 1e-10:
#: tests/fingerprint.py), recorded where the digests still held.
FORMER = load_former(__file__)["azure"]


def former_chunk_attention_work(chunk: int, longest: int) -> float:
    """:func:`chunk_attention_work` as the former code computed it (divmod on every call)."""
    if chunk <= 0:
        return 0.0
    whole, rest = divmod(int(chunk), int(longest))
    return whole * longest * (longest + 1) / 2.0 + rest * (2 * longest - rest + 1) / 2.0


def former_kv_peak(contexts: np.ndarray, remaining: np.ndarray) -> float:
    """:func:`kv_peak` as the former code computed it (through NumPy's function wrappers)."""
    n = len(contexts)
    if n == 0:
        return 0.0
    order = np.argsort(remaining, kind="stable")
    suffix = np.cumsum(contexts[order][::-1])[::-1]
    return float(np.max(suffix + (n - np.arange(n)) * (remaining[order] - 1.0)))


def former_column(profile, kv_tokens):
    """The table's times at ``kv_tokens`` KV tokens by batch grid index, as the former code
    read them (a closure over the two KV grid columns)."""
    lo_col, hi_col, ty = profile._column_parts(kv_tokens)

    def at(i):
        return lo_col[i] + ty * (hi_col[i] - lo_col[i])

    return at


def former_max_chunk(profile, kv_tokens, budget_s, batch, attention_s, longest):
    """:meth:`Profile.max_chunk` as the former code computed it (two bisections every call)."""

    def cost(x):
        return attention_s * chunk_attention_work(int(x) - batch, longest) if x > batch else 0.0

    xs = profile._xs_list
    at = former_column(profile, kv_tokens)
    lo = profile._segment(lambda i: at(i) + cost(xs[i]) <= budget_s)
    if lo < 0:
        return -batch
    t0 = at(lo)
    slope = (at(lo + 1) - t0) / (xs[lo + 1] - xs[lo])
    x_lo = int(xs[lo])
    if lo + 2 < len(xs):
        x_hi = int(xs[lo + 1])
    else:
        x_hi = x_lo + (int((budget_s - t0) / slope) + 1 if slope > 0 else 1)

    def within(x):
        return profile.table.scalar_time(float(x), float(kv_tokens)) + cost(x) <= budget_s

    x = last_fitting(x_lo, x_hi, lambda x: t0 + slope * (x - x_lo) + cost(x) <= budget_s)
    if within(x) and not within(x + 1):
        return x - batch
    while x_lo > 0 and not within(x_lo):
        x_lo -= 1
    return last_fitting(x_lo, x_hi, within) - batch


def former_max_tokens(profile, kv_tokens, budget_s):
    """:meth:`Profile.max_tokens` as the former code computed it (a bisection every call)."""
    at = former_column(profile, kv_tokens)
    lo = profile._segment(lambda i: at(i) <= budget_s)
    if lo < 0:
        return 0
    xs = profile._xs_list
    t0, t1 = at(lo), at(lo + 1)
    slope = (t1 - t0) / (xs[lo + 1] - xs[lo])
    if slope <= 0:
        return int(xs[lo + 1])
    return max(int(math.floor(xs[lo] + (budget_s - t0) / slope + 1e-9)), 0)


def former_queue_walk(rows, deadline, now, prompt, charged):
    """The co-located admission's walk over a server's queued prompts as the former code did it
    (``rows``: (first-token deadline, tokens left, tokens done) in queue order): tokens ahead,
    the longest prompt, their attention work, and the prompts behind, sorted."""
    ahead, behind = 0, []
    longest, work = prompt, 0.0
    for dq, left, done in rows:
        done = done if charged else 0
        if dq <= deadline or dq < now:
            ahead += left
            if charged:
                longest = max(longest, done + left)
                work += left * (done + (left + 1) / 2.0)
        else:
            behind.append((dq, left, done))
    return ahead, longest, work, sorted(behind)


def test_chunk_work_and_kv_peak_equal_the_former_floats():
    """2,000 random (chunk, longest) pairs and 300 random request sets (seeded): the same
    floats as the former computations, ties in the remaining steps included."""
    rng = np.random.default_rng(6)
    for chunk, longest in rng.integers(-3, 5_000, size=(2_000, 2)):
        longest = max(int(longest), 1)
        assert chunk_attention_work(int(chunk), longest) == former_chunk_attention_work(
            int(chunk), longest
        )
    for _ in range(300):
        n = int(rng.integers(1, 60))
        contexts = rng.integers(1, 9_000, n).astype(float)
        remaining = np.maximum(rng.choice([3.5, 17.25, 200.0], n) - rng.integers(0, 20, n), 1.0)
        assert kv_peak(contexts, remaining) == former_kv_peak(contexts, remaining)


TIMING = make_scheduler(
    "polyserve",
    stream_instance("azure_conv_2023", 50, 1.0, seed=0, servers=4, mode="colocated"),
    mode="colocated",
    servers=4,
).instance.timing
PROFILE = Profile(TIMING, H200_LLAMA31_8B_KV_TOKENS)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    calls=st.lists(
        st.tuples(
            st.floats(0.0, 1.1 * H200_LLAMA31_8B_KV_TOKENS),
            st.sampled_from([0.02, 0.03, 0.05, 0.1]),
            st.sampled_from([1, 37, 120, 300]),
            st.sampled_from([1, 700, 4_000, 30_000]),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_max_chunk_equals_the_former_search(calls):
    """Sequences of chunk and token searches on one profile (its times rise: each starts from
    the last answer for the same batch and budget, often repeated here), also beyond the KV
    grid: the former searches' answers every time."""
    attention = prefill_attention_s(TIMING)
    assert PROFILE._rising and attention > 0
    for kv, budget, batch, longest in calls:
        expected = former_max_chunk(PROFILE, kv, budget, batch, attention, longest)
        assert PROFILE.max_chunk(kv, budget, batch, attention, longest) == expected
        assert PROFILE._max_tokens_at(kv, budget) == former_max_tokens(PROFILE, kv, budget)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    lo=st.integers(0, 50),
    width=st.integers(0, 300),
    boundary=st.integers(0, 300),
    guess=st.integers(-20, 400),
)
def test_search_from_a_guess_finds_the_bisection_answer(lo, width, boundary, guess):
    """A monotone predicate true from lo up to a boundary: the search outwards from any guess
    returns what the bisection returns, and asks fewer points when the guess is the answer."""
    hi = lo + width
    asked = []

    def fits(x):
        asked.append(x)
        return x <= lo + boundary

    expected = last_fitting(lo, hi, fits)
    bisection_asks = len(asked)
    asked.clear()
    assert last_fitting_near(lo, hi, guess, fits) == expected
    if guess == expected and width > 8:
        assert len(asked) <= min(bisection_asks, 2)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    contexts=st.lists(st.integers(0, 900_000), max_size=40),
    emitted=st.lists(st.integers(0, 400), max_size=40),
    context=st.integers(1, 900_000),
    generated=st.integers(0, 3),
    d_hat=st.sampled_from([1.0, 2.5, 37.25, 211.5]),
)
def test_kv_peak_base_with_one_request_is_the_former_peak(
    contexts, emitted, context, generated, d_hat
):
    """Random server request sets (remaining steps max(d_hat - emitted, 1), many ties) and one
    more request: KvPeakBase gives the former kv_peak's float of the joined set, also when the
    added request has fewer remaining steps than some (its fallback)."""
    n = min(len(contexts), len(emitted))
    ctx = np.array(contexts[:n], dtype=float)
    rem = np.maximum(d_hat - np.array(emitted[:n], dtype=float), 1.0)
    added = max(d_hat - generated, 1.0)
    expected = former_kv_peak(np.append(ctx, float(context)), np.append(rem, added))
    assert KvPeakBase(ctx, rem).with_one(float(context), added) == expected


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 12), st.integers(1, 50_000), st.integers(0, 50_000)),
        max_size=30,
    ),
    huge=st.booleans(),
    deadline=st.integers(-1, 13),
    now=st.integers(-1, 13),
    prompt=st.integers(1, 50_000),
    charged=st.booleans(),
)
def test_queued_prompts_give_the_former_walk(rows, huge, deadline, now, prompt, charged):
    """Random queues (deadline ties, requests already late): QueuedPrompts gives the former
    walk's tokens ahead, longest prompt, attention work (the same float; prompts of 10^8 tokens
    push the integer sums past 2^52, where it sums in queue order as before) and sorted rows
    behind."""
    rows = [(0.25 * d, left, done) for d, left, done in rows]  # few deadlines: ties
    if huge and rows:
        rows[0] = (rows[0][0], 100_000_000, rows[0][2])  # its work alone is 5 x 10^15 > 2^52
    rows = [(dq, left, done if charged else 0) for dq, left, done in rows]
    deadline, now = 0.25 * deadline, 0.25 * now
    queue = QueuedPrompts(list(rows))
    i, ahead, longest, work = queue.ahead_of(deadline, now, prompt, charged)
    former = former_queue_walk(rows, deadline, now, prompt, charged)
    assert (ahead, longest, work, queue.rows[i:]) == former


def assert_same_base(got, fresh):
    """``got`` holds the requests of ``fresh`` (in any order) and the same groups' floats."""
    for name in ("suffix", "left", "levels", "steps"):
        np.testing.assert_array_equal(getattr(got, name), getattr(fresh, name))
    assert got.top == fresh.top
    order, fresh_order = (
        np.lexsort((got.contexts, got.remaining)),
        np.lexsort((fresh.contexts, fresh.remaining)),
    )
    np.testing.assert_array_equal(got.contexts[order], fresh.contexts[fresh_order])
    np.testing.assert_array_equal(got.remaining[order], fresh.remaining[fresh_order])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    contexts=st.lists(st.integers(0, 900_000), max_size=30),
    emitted=st.lists(st.integers(0, 400), max_size=30),
    added=st.lists(st.tuples(st.integers(1, 900_000), st.integers(0, 3)), max_size=6),
    context=st.integers(1, 900_000),
    d_hat=st.sampled_from([1.0, 2.5, 37.25, 211.5]),
)
def test_kv_peak_base_plus_requests_is_the_base_read_afresh(
    contexts, emitted, added, context, d_hat
):
    """Random server request sets (many ties), then requests queued one by one, each with at
    least every other's remaining steps: KvPeakBase.plus gives the groups of the base read
    afresh from the joined arrays, and with_one the former kv_peak's float."""
    n = min(len(contexts), len(emitted))
    ctx = np.array(contexts[:n], dtype=float)
    rem = np.maximum(d_hat - np.array(emitted[:n], dtype=float), 1.0)
    base = KvPeakBase(ctx, rem)
    for queued, generated in added:
        remaining = max(d_hat - generated, 1.0)
        if remaining < base.top:
            continue  # the server's state is read afresh then
        base = base.plus(float(queued), remaining)
        ctx, rem = np.append(ctx, float(queued)), np.append(rem, remaining)
        assert_same_base(base, KvPeakBase(ctx, rem))
    expected = former_kv_peak(np.append(ctx, float(context)), np.append(rem, d_hat))
    assert base.with_one(float(context), max(d_hat, 1.0)) == expected


def azure_run():
    """The Azure conversation stream on 16 co-located servers at 60 % of the fluid rate."""
    probe = stream_instance("azure_conv_2023", 2000, 1.0, seed=0, servers=16, mode="colocated")
    rate = 0.6 * tp.fluid_rate(probe, "colocated", 16)
    inst = stream_instance("azure_conv_2023", 2000, rate, seed=0, servers=16, mode="colocated")
    sched = make_scheduler("polyserve", inst, mode="colocated", servers=16)
    return sched.instance, sched.router, sched.run(sched.instance, seed=0)


def test_azure_colocated_run_keeps_the_former_outcome(monkeypatch):
    """Azure conversation near 60 % of the fluid rate on 16 co-located servers: the same
    outcome (token times to the bit) and routing decisions as before; and each KV-peak base and
    queued-prompt list the admission reuses for a server equals the one read afresh from the
    server at that moment (the server-state key misses no change)."""
    reused = {"bases": 0, "queues": 0, "carried": 0}
    peak_base, queued = ps.PolyServeController._peak_base, ps.PolyServeController._queued_prompts
    carry = ps.PolyServeController._carried_base
    carried = []

    def carried_base(self, s, was, base, key):
        got = carry(self, s, was, base, key)
        carried.append(got)
        return got

    def checked_base(self, s, key=None):
        entry = self._bases.get(s.id)
        carried.clear()
        got = peak_base(self, s, key)
        if entry is not None and (entry[1] is got or carried == [got]):
            # kept from an earlier read, or carried from it across queue moves
            reused["bases" if entry[1] is got else "carried"] += 1
            kept = self._bases.pop(s.id)
            fresh = peak_base(self, s)
            self._bases[s.id] = kept
            assert_same_base(got, fresh)
        return got

    def checked_queue(self, s, key):
        entry = self._queues.get(s.id)
        got = queued(self, s, key)
        if entry is not None and entry[1] is got:
            reused["queues"] += 1
            del self._queues[s.id]
            assert queued(self, s, state_key(s)).in_order == got.in_order
        return got

    monkeypatch.setattr(ps.PolyServeController, "_peak_base", checked_base)
    monkeypatch.setattr(ps.PolyServeController, "_carried_base", carried_base)
    monkeypatch.setattr(ps.PolyServeController, "_queued_prompts", checked_queue)
    instance, controller, out = azure_run()
    assert check(instance, out) == []
    assert (outcome_fingerprint(out), controller.decisions) == FORMER
    # both kinds of entry were reused, and bases carried, and checked, many times
    assert min(reused.values()) > 500, reused  # 592 kept bases and queues, 1,131 carried


@pytest.mark.parametrize(
    ("run", "former", "moved"),
    [(azure_run, FORMER, 0), (lambda: mooncake_run(2.0, "lazy"), MOONCAKE[(2.0, "lazy")], 1)],
    ids=["azure", "mooncake"],
)
def test_tiers_ranked_when_asked_are_the_full_ranking(monkeypatch, run, former, moved):
    """Every tier list a placement reads from the ranking built tier by tier when asked
    (:class:`ps.TierRanking`) equals the full ranking read afresh from the servers at that
    moment (test_polyserve_dispatch_view's reference), and the
    outcome is the former one; the membership kept across placements is rebuilt when the
    server list changes, and (Mooncake) when a server changes tier or leaves the pending list
    under the same list."""
    get = ps.TierRanking.get
    seen = {"lists": 0, "servers": 0, "calls": 0, "rebuilt": 0, "moved": 0}
    members = ps.PolyServeController._members

    def checked_get(self, t):
        got = get(self, t)
        assert got == former_ranked(self.controller, self.servers).get(t)
        seen["lists"] += 1
        seen["servers"] += len(got or ())
        return got

    def counted_members(self, servers):
        kept_servers, _, _, kept = self._members_of
        found = members(self, servers)
        seen["calls"] += 1
        seen["rebuilt"] += found is not kept
        seen["moved"] += found is not kept and kept_servers is servers
        return found

    monkeypatch.setattr(ps.TierRanking, "get", checked_get)
    monkeypatch.setattr(ps.PolyServeController, "_members", counted_members)
    instance, controller, out = run()
    assert check(instance, out) == []
    assert (outcome_fingerprint(out), controller.decisions) == former
    # Azure: 2,110 lists of 5,017 servers, the membership asked 2,009 times (placements and
    # dispatches) and built 10 times; Mooncake: 441 lists of 676 servers, asked 2,739 times and
    # built 279 times, 15 of them under the same server list
    assert seen["lists"] > 300 and seen["servers"] > seen["lists"], seen
    assert 1 < seen["rebuilt"] < seen["calls"] / 5, seen
    assert (seen["moved"] > 0) == bool(moved), seen
