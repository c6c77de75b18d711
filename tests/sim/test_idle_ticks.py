"""Scaler ticks passed over while the cluster is idle: the same run, tick for tick, as ticking
through every idle span, for every registered scaler and for PolyServe's own."""

import dataclasses
import hashlib
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics.baselines import LeastLoaded, SarathiFCFS
from slolab.heuristics.policies import make_scheduler
from slolab.heuristics.scalers import ThresholdParams, ThresholdScaler, make_scaler, scaler_names
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check, run
from slolab.sim.engine import SKIP_BLOCK, Engine
from slolab.timing import LinearTiming

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token
LINE = LinearTiming(
    0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="line"
)


class Ticking:
    """``scaler`` without ``skip_idle_ticks``: the engine ticks through every idle span.
    Counts the decisions it is asked for."""

    def __init__(self, scaler):
        self.scaler = scaler
        self.interval_s = scaler.interval_s
        self.calls = 0

    def start(self, instance, seed):
        self.scaler.start(instance, seed)

    def decide(self, cluster):
        self.calls += 1
        return self.scaler.decide(cluster)


class Skipping(Ticking):
    """``scaler`` with its own ``skip_idle_ticks`` (if any), counting decisions."""

    def __getattr__(self, name):
        if name in ("skip_idle_ticks", "quiet_until"):
            return getattr(self.scaler, name)
        raise AttributeError(name)


def digest(outcome) -> str:
    """sha256 of every recorded array of ``outcome`` and its scaling events (not its wall time
    nor its info, which holds timings).

    Bit for bit on purpose: the two runs compared are made in the same process on the same
    processor, so equal arithmetic gives equal bits; nothing recorded on another machine is
    compared (tests/fingerprint.py is for that)."""
    h = hashlib.sha256()
    for f in dataclasses.fields(outcome):
        value = getattr(outcome, f.name)
        if isinstance(value, np.ndarray):
            h.update(f.name.encode())
            h.update(np.ascontiguousarray(value).tobytes())
    h.update(repr(outcome.scale_events).encode())
    h.update(repr(outcome.end_s).encode())
    return h.hexdigest()


def sparse_workload(seed: int, n: int = 40, gap_s: float = 4.0) -> Workload:
    """``n`` requests with exponential gaps of mean ``gap_s`` (idle spans between bursts of
    two), prompts 50..800, outputs 2..60, TPOT tiers 20/50/100 ms."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(gap_s, n)
    gaps[1::2] = rng.uniform(0.0, 0.05, n // 2)  # pairs arrive together
    return Workload(
        {
            "arrival_s": np.cumsum(gaps) - gaps[0],
            "prompt_tokens": rng.integers(50, 800, n),
            "output_tokens": rng.integers(2, 60, n),
            "ttft_slo_s": rng.choice([0.3, 1.0], n),
            "tpot_slo_s": rng.choice([0.02, 0.05, 0.1], n),
        }
    )


def runs(make, instance, policy, router, decode_router=None, seed=0):
    """The outcome digests and decision counts of ``make()``'s scaler ticking and skipping."""
    found = []
    for wrap in (Ticking, Skipping):
        scaler = wrap(make())
        out = run(
            instance,
            policy(),
            router(),
            seed=seed,
            scaler=scaler,
            decode_router=decode_router() if decode_router else None,
            record_iterations=True,
        )
        assert check(instance, out) == []
        found.append((digest(out), scaler.calls, out))
    return found


@pytest.mark.parametrize("name", ["fixed", "threshold", "hyperflexis"])
def test_every_registered_scaler_gives_the_same_run_skipping_idle_ticks(name):
    """Registered scalers, 40 sparse requests on 1..4 co-located servers, 3 seeds: identical
    outcomes; the threshold rule (which skips) asks for fewer decisions, the others as many."""
    assert set(scaler_names()) >= {"fixed", "threshold", "hyperflexis"}
    skips = hasattr(make_scaler(name), "skip_idle_ticks")
    # the threshold rule passes idle ticks; HyperFlexis counts sustained low ticks: it does not
    assert skips == (name == "threshold")
    for seed in range(3):
        inst = Instance(
            "sparse", sparse_workload(seed), Cluster(servers=2, kv_capacity_tokens=20_000), LINE
        )
        (ticking, calls_t, _), (skipping, calls_s, _) = runs(
            lambda: make_scaler(name, min_servers=1, max_servers=4),
            inst,
            lambda: SarathiFCFS(256),
            LeastLoaded,
            seed=seed,
        )
        assert ticking == skipping
        # fixed: one call at 0; threshold: fewer calls when it skips; hyperflexis: the same
        assert (calls_s < calls_t) if skips else (calls_s == calls_t)


@pytest.mark.parametrize("metric", ["load", "queue", "utilization"])
def test_threshold_rule_skips_for_every_metric_with_the_same_run(metric):
    """Threshold rule on each metric, min 1 / max 3 servers, 10 s cool-down: identical runs;
    with 40 requests over about 80 s at 1 tick per second the ticking run asks about 80 times,
    the skipping one fewer."""
    params = ThresholdParams(metric=metric, upper=2.0, lower=0.5, max_servers=3, cooldown_s=10.0)
    inst = Instance(
        "sparse", sparse_workload(7), Cluster(servers=3, kv_capacity_tokens=20_000), LINE
    )
    (ticking, calls_t, out), (skipping, calls_s, _) = runs(
        lambda: ThresholdScaler(params), inst, lambda: SarathiFCFS(256), LeastLoaded
    )
    assert ticking == skipping
    # the run spans the arrivals (about 40 x 2 s of mean gap over pairs) at one tick per second
    assert calls_t >= int(out.end_s) and calls_s < calls_t
    # it drained down to min_servers once the cool-down passed in an idle span
    assert any(e.action == "drain" for e in out.scale_events)


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_polyserve_controller_skips_idle_ticks_with_the_same_run(mode):
    """PolyServe's own scaler (5 ms ticks, 1 s scale-down checks), 40 sparse requests, fleet of
    4, 3 seeds: identical outcomes, and at least 4 times fewer decisions (seed 0: 20,387
    ticking against 166 disaggregated and 20,399 against 100 co-located: idle ticks and, while
    requests run, quiet ones are skipped; disaggregated left 3,559 when only idle ones were)."""
    for seed in range(3):
        base = Instance(
            "sparse", sparse_workload(seed), Cluster(servers=4, kv_capacity_tokens=20_000), LINE
        )
        sched = make_scheduler("polyserve", base, mode=mode, servers=4)
        controller = sched.scaler
        inst = sched.instance
        found = []
        for wrap in (Ticking, Skipping):
            fresh = make_scheduler("polyserve", base, mode=mode, servers=4)
            scaler = wrap(fresh.scaler)
            out = run(
                inst,
                fresh.policy,
                fresh.router,
                decode_router=fresh.decode_router,
                seed=seed,
                scaler=scaler,
                record_iterations=True,
            )
            assert check(inst, out) == []
            found.append((digest(out), scaler.calls))
            end_s = out.end_s
        assert hasattr(controller, "skip_idle_ticks")
        (ticking, calls_t), (skipping, calls_s) = found
        assert ticking == skipping
        # ticking, one tick every 5 ms from 0 to at least the run's end
        assert calls_t >= int(end_s / 0.005) and calls_s * 4 < calls_t


def test_tick_times_by_cumulative_sum_equal_repeated_addition():
    """The engine lists skipped tick times with np.cumsum; they equal t + dt + dt + ... added
    one at a time (5 ms steps from 0.1 s, 100,000 ticks)."""
    block = np.full(100_000, 0.005)
    block[0] = 0.1
    listed = np.cumsum(block)
    t = 0.1
    for i in range(100_000):
        assert listed[i] == t
        t += 0.005


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
def test_polyserve_skips_quiet_ticks_while_busy_with_the_same_run(mode):
    """PolyServe, 120 requests 0.1 s apart on average (servers busy, some requests held),
    fleet of 3, 3 seeds: identical outcomes; ticks between scale-down checks with nothing held
    are skipped while the servers work: at least 5 times fewer decisions co-located (seed 0:
    1,863 ticking against 146), 3 times disaggregated (1,873 against 440), where KV transfers
    that land inside a skipped span bring the next tick back to them (the decode router may
    hold the request there; the test fails without it)."""
    for seed in range(3):
        base = Instance(
            "busy",
            sparse_workload(seed, n=120, gap_s=0.1),
            Cluster(servers=3, kv_capacity_tokens=20_000),
            LINE,
        )
        found = []
        for wrap in (Ticking, Skipping):
            fresh = make_scheduler("polyserve", base, mode=mode, servers=3)
            scaler = wrap(fresh.scaler)
            out = run(
                fresh.instance,
                fresh.policy,
                fresh.router,
                decode_router=fresh.decode_router,
                seed=seed,
                scaler=scaler,
                record_iterations=True,
            )
            assert check(fresh.instance, out) == []
            found.append((digest(out), scaler.calls, out))
        (ticking, calls_t, out), (skipping, calls_s, _) = found
        assert ticking == skipping
        # some requests waited in a held queue (routed after they arrived, or, disaggregated,
        # decoded later than their KV cache could have landed)
        assert (out.routed_s > base.workload.arrival_s).any() or mode == "disaggregated"
        assert calls_s * (5 if mode == "colocated" else 3) < calls_t


def former_tick_blocks(step: float, nxt: float, until: float):
    """The engine's tick blocks as they were: always ``SKIP_BLOCK`` ticks summed."""
    while True:
        block = np.full(SKIP_BLOCK, step)
        block[0] = nxt
        ticks = np.cumsum(block)
        k = int(np.searchsorted(ticks, until, side="left"))
        nxt = float(ticks[k]) if k < SKIP_BLOCK else float(ticks[-1]) + step
        yield ticks[:k], nxt
        if k < SKIP_BLOCK:
            return


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    start=st.floats(0.0, 1e5, allow_nan=False),
    span=st.floats(1e-9, 200.0, allow_nan=False),
    interval=st.sampled_from([0.001, 0.005, 0.01, 0.1, 1.0, 0.37]),
)
def test_tick_blocks_sized_to_the_span_are_the_former_blocks(start, span, interval):
    """The engine's tick blocks, now summed in blocks about as long as the span: the same
    blocks (every tick time, the previous plus the interval) and the same tick after each as
    when every block summed SKIP_BLOCK ticks; spans up to 200 s reach 200,000 ticks (several
    blocks)."""
    engine = SimpleNamespace(scaler=SimpleNamespace(interval_s=interval))
    now = list(Engine._tick_blocks(engine, start, start + span))
    former = list(former_tick_blocks(interval, start, start + span))
    assert len(now) == len(former)
    for (ticks, after), (former_ticks, former_after) in zip(now, former, strict=True):
        assert np.array_equal(ticks, former_ticks) and after == former_after
    assert former[-1][1] >= start + span


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    start=st.floats(0.0, 1e5, allow_nan=False),
    span=st.floats(1e-9, 3.0, allow_nan=False),
    interval=st.sampled_from([0.001, 0.005, 0.01, 0.1, 1.0, 0.37]),
)
def test_ticks_before_a_time_are_those_of_the_tick_blocks(start, span, interval):
    """The tick times before a moment and the first tick at or after it, summed one tick at a
    time for a short span (under 256 intervals) and read from the blocks for a longer one:
    every time and the tick after equal those of the blocks, and ``_tick_after`` gives the same
    tick after (spans up to 3 s reach 3,000 ticks of 1 ms, both ways)."""
    engine = SimpleNamespace(scaler=SimpleNamespace(interval_s=interval))
    engine._tick_blocks = lambda nxt, until: Engine._tick_blocks(engine, nxt, until)
    ticks, after = Engine._ticks_before(engine, start, start + span)
    blocks = list(Engine._tick_blocks(engine, start, start + span))
    assert ticks == [t for block, _ in blocks for t in block.tolist()]
    assert after == blocks[-1][1]
    assert Engine._tick_after(engine, start, start + span) == after
