"""Scaler ticks with requests held that would repeat the tick before them exactly are passed
over (co-located PolyServe): the same run, to the bit, as ticking through every one of them."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slolab.heuristics.polyserve import PolyServeController, PolyServeParams, polyserve_cluster
from slolab.instances.records import Instance, Workload
from test_polyserve_empty_admission import SMALL, mooncake, run, sparse
from test_polyserve_held_index import LINE, outcome


class Counting(PolyServeController):
    """Passes held ticks over (as the registered scheduler's controller does) and counts the
    ticks passed over, the ticks run, and the pending servers each tick sees."""

    last: "Counting | None" = None  # the last one started

    def __init__(self, params=None):
        super().__init__(params)
        self.skip_held_ticks = True

    def start(self, instance, seed):
        super().start(instance, seed)
        self.passed = 0
        self.ticks = 0
        self.pending_seen = 0
        Counting.last = self

    def decide(self, cluster):
        self.ticks += 1
        actions = super().decide(cluster)
        self.pending_seen += len(self.pending)
        return actions

    def pass_held_ticks(self, ticks):
        self.passed += len(ticks)
        super().pass_held_ticks(ticks)


class Ticking(Counting):
    """Every tick runs (the skipping switched off, as in a controller built by hand)."""

    def __init__(self, params=None):
        super().__init__(params)
        self.skip_held_ticks = False


def same_outcome(a, b) -> None:
    """Every recorded array of ``a`` equals ``b``'s (token times included), and so do the
    scaling events."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            nan = x.dtype.kind == "f"
            assert np.array_equal(x, y, equal_nan=nan), f.name
    assert a.scale_events == b.scale_events


def both(base: Instance, mode: str = "colocated", scaled: bool = True, seed: int = 0):
    """``base`` run ticking and skipping (fleet 4 under the scaler, or pools of one server):
    the two controllers after asserting the same outcome and decisions."""
    *_, ticking = outcome(Ticking, base, mode, scaled, seed)
    ticked = Counting.last
    *_, skipping = outcome(Counting, base, mode, scaled, seed)
    skipped = Counting.last
    same_outcome(ticking, skipping)
    assert ticked.decisions == skipped.decisions
    assert ticked.summary()["decisions"] == skipped.summary()["decisions"]
    assert ticked.passed == 0
    # every tick either ran or was passed over
    assert skipped.ticks + skipped.passed == ticked.ticks
    return ticked, skipped


#: Mooncake requests of the runs near capacity (each run simulates about LIMIT / 0.11 s)
LIMIT = 100


@pytest.mark.parametrize("rate", [0.1128, 0.1143])
def test_mooncake_runs_near_capacity_are_the_same_with_held_ticks_passed(rate):
    """100 Mooncake requests at the rates that bracket the 4,000-request capacity, 8 servers
    under the scaler: the same outcome and routing decisions whether the held ticks run or are
    passed over, and about half the ticks are passed over."""
    # every iteration within the TPOT: the rule that holds these long prompts (ticks to pass)
    always = PolyServeParams(tpot_bound="always")
    ticked, skipped = Ticking(always), Counting(always)
    inst = polyserve_cluster(mooncake(rate, LIMIT), "colocated", 8)
    same_outcome(run(ticked, inst, scaled=True), run(skipped, inst, scaled=True))
    assert ticked.decisions == skipped.decisions
    # measured: 1,713 ticks ticking at 0.1128 req/s, 846 of them passed over (1,906 and 1,031
    # at 0.1143); the rest act, place a request, or are bounded by a server's next event
    assert skipped.passed > 500 and skipped.ticks + skipped.passed == ticked.ticks


@pytest.mark.filterwarnings("ignore:1 request")
@pytest.mark.parametrize("seed", [0, 1])
def test_sparse_runs_holding_requests_on_time_and_late_are_the_same(seed):
    """80 sparse requests (long prompts with short TTFTs held until they are late, one prompt
    no server admits, held to the end), under the scaler: the same run, ticks passed over."""
    base = Instance("sparse", sparse(seed), SMALL, LINE)
    _, skipped = both(base)
    assert skipped.passed > 100


def test_runs_with_pending_servers_and_scale_down_checks_are_the_same():
    """80 Mooncake requests at 2 req/s under the scaler (servers switched on and drained,
    servers put on the pending list at scale-down checks): the same run, ticks passed."""
    base = mooncake(2.0, 80)
    _, skipped = both(base)
    assert skipped.pending_seen > 0 and skipped.passed > 0


def test_disaggregated_runs_pass_no_held_tick():
    """Disaggregated (the decode router holds requests as their KV cache lands): no held tick
    is passed over, and the run is the one ticking."""
    base = Instance("random", random_workload(0, 40, 0.05), SMALL, LINE)
    ticked, skipped = both(base, mode="disaggregated")
    assert skipped.passed == 0 and skipped.ticks == ticked.ticks


def random_workload(seed: int, n: int, gap: float) -> Workload:
    """``n`` requests with exponential gaps of mean ``gap`` s, prompts 50 to 4,000 tokens (a
    long one with a 0.2 s TTFT is too late even alone on an empty server: held until late),
    TTFT 0.2/0.5/1.5 s, TPOT tiers 20/50/100 ms."""
    rng = np.random.default_rng(seed)
    return Workload(
        {
            "arrival_s": np.cumsum(rng.exponential(gap, n)),
            "prompt_tokens": rng.integers(50, 4000, n),
            "output_tokens": rng.integers(2, 40, n),
            "ttft_slo_s": rng.choice([0.2, 0.5, 1.5], n),
            "tpot_slo_s": rng.choice([0.02, 0.05, 0.1], n),
        }
    )


@settings(max_examples=12, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(5, 40),
    gap=st.sampled_from([0.05, 0.2, 0.6]),
    scaled=st.booleans(),
)
def test_small_random_runs_are_the_same_with_held_ticks_passed(seed, n, gap, scaled):
    """Random small workloads (hypothesis, seeded), under the scaler or on fixed pools: the
    same run and decisions, ticking or passing the held ticks over."""
    both(Instance("random", random_workload(seed, n, gap), SMALL, LINE), scaled=scaled)


class Unadvanced(Counting):
    """Counts the passed ticks' decisions but leaves the refusal memory as the last tick
    wrote it (wrong: each passed tick re-asks a deadline refusal a tick old)."""

    def pass_held_ticks(self, ticks):
        fresh, self._fresh_late = self._fresh_late, []
        super().pass_held_ticks(ticks)
        self._fresh_late = fresh


class Longer(Counting):
    """Remembers a deadline refusal for a little more than the scaler's interval: the tick
    after a refusal answers from memory, the one after it asks again."""

    def start(self, instance, seed):
        super().start(instance, seed)
        self.params = dataclasses.replace(self.params, tick_s=1.5 * self.interval_s)


class EveryTick(Longer):
    """Advances each deadline refusal to the last passed tick, as if every tick re-asked it
    (wrong when a refusal outlives a tick)."""

    def pass_held_ticks(self, ticks):
        super().pass_held_ticks(ticks)
        for r, sid in self._fresh_late:
            departed, _, code = self._refused[r][sid]
            self._refused[r][sid] = (departed, ticks[-1], code)


class LongerTicking(Longer):
    def __init__(self, params=None):
        super().__init__(params)
        self.skip_held_ticks = False


def test_passed_ticks_advance_the_refusal_memory():
    """The memory of deadline refusals after passed ticks is the one ticking leaves: passing
    ticks without advancing it changes the run (a server freed at an event is asked afresh
    where the ticking run answers from memory); with a memory that outlives a tick (its span
    rounded up to the next float) the entries are re-asked every other tick, and advancing
    them as if every tick re-asked changes the run while stepping through the ticks does not."""
    base = Instance("random", random_workload(0, 40, 0.05), SMALL, LINE)
    _, _, ticking = outcome(Ticking, base, "colocated", True, 0)
    _, _, wrong = outcome(Unadvanced, base, "colocated", True, 0)
    assert Counting.last.passed > 0
    with pytest.raises(AssertionError):
        same_outcome(ticking, wrong)

    _, _, longer_ticking = outcome(LongerTicking, base, "colocated", True, 0)
    ticked = Counting.last
    _, _, longer = outcome(Longer, base, "colocated", True, 0)
    same_outcome(longer_ticking, longer)
    assert Counting.last.decisions == ticked.decisions and Counting.last.passed > 0
    _, _, every = outcome(EveryTick, base, "colocated", True, 0)
    with pytest.raises(AssertionError):
        same_outcome(longer_ticking, every)
