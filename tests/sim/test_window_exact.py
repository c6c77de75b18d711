"""Fast-forwarded decode windows against one decision per iteration: bit for bit.

A decode-only batch marked ``repeat=True`` is run as one vectorised window; the same run with
the flag dropped (the policy asked at every iteration, each iteration timed alone) must give
the same floats: every token time, every iteration's start and end, every server's busy time.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from sim_cases import mooncake_setup, random_instance
from slolab.heuristics.baselines import LeastLoaded, PrefillFirstFCFS, SarathiFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import Batch, check, run
from slolab.sim.engine import WINDOW_CHUNK
from slolab.timing.base import (
    F_DECODE_KV,
    F_DECODE_TOKENS,
    F_NUM_DECODE,
    N_FEATURES,
    LinearTiming,
)
from slolab.timing.forms import MeanLengthTiming, ProfiledTiming, ThresholdTiming
from slolab.timing.presets import available_presets, preset


class Counted:
    """Wraps a policy and counts its decisions; ``repeat=False`` drops its repeat flag (one
    decision and one timing call per iteration)."""

    def __init__(self, inner, *, repeat=True):
        self.inner = inner
        self.repeat = repeat
        self.decisions = 0

    def start(self, instance, seed):
        self.inner.start(instance, seed)

    def next_batch(self, server):
        self.decisions += 1
        batch = self.inner.next_batch(server)
        return batch if self.repeat else dataclasses.replace(batch, repeat=False)


def _forms():
    """Every timing form of the project: the presets (roofline, phase sum, linear parts) and
    a profiled table on either batch axis, a threshold and a mean-length model."""
    base = preset("llama2-7b-h100")
    models = {name: preset(name) for name in available_presets()}
    grid = ([1, 8, 64, 256], [0, 1e4, 1e5, 1e6])
    models["profiled-tokens"] = ProfiledTiming.from_model(base, *grid)
    models["profiled-sequences"] = ProfiledTiming.from_model(base, *grid, batch_axis="sequences")
    models["threshold"] = ThresholdTiming(
        "num_decode_seqs", 4, base, preset("opt-13b-a100-distserve")
    )
    models["mean-length"] = MeanLengthTiming(base, 1.3e-6, 3.3e-7)
    return models


FORMS = _forms()


@pytest.mark.parametrize("name", sorted(FORMS))
def test_timing_rows_equal_one_row_calls(name):
    """Each row of a vectorised ``times`` call is the float of that row timed alone, on the
    decode windows' shapes (1 to 256 sequences, contexts growing by the batch size per row)
    and on random mixed shapes."""
    model = FORMS[name]
    rng = np.random.default_rng(5)
    rows = []
    for s in (1, 3, 17, 64, 256):
        f = np.zeros((WINDOW_CHUNK, N_FEATURES))
        f[:, F_DECODE_TOKENS] = s
        f[:, F_NUM_DECODE] = s
        f[:, F_DECODE_KV] = int(rng.integers(0, 2_000_000)) + s * np.arange(WINDOW_CHUNK)
        rows.append(f)
    scale = np.array([4096, 256, 256, 1e6, 1e7, 16, 0.0])
    rows.append(np.round(rng.random((200, N_FEATURES)) * scale))
    features = np.concatenate(rows)
    together = model.times(features)
    alone = np.array([model.times(row[None, :])[0] for row in features])
    # 5 window shapes x 128 rows + 200 random rows, every one the same float
    assert len(together) == 5 * 128 + 200
    assert np.array_equal(together, alone)


def _long_outputs(seed, timing):
    """The random instance with outputs of 100 to 400 tokens (windows longer than one
    chunk of 128 iterations are extended) under ``timing``."""
    inst = random_instance(seed, n=24, kv=60_000)
    rng = np.random.default_rng(seed)
    wl = inst.workload.with_columns(output_tokens=rng.integers(100, 400, inst.n_requests))
    return dataclasses.replace(inst, workload=wl, timing=timing)


def _same_run(inst, fast, slow):
    assert np.array_equal(fast.token_times, slow.token_times)
    assert np.array_equal(fast.busy_s, slow.busy_s)
    assert np.array_equal(fast.server, slow.server)
    assert fast.n_iterations == slow.n_iterations
    key_fast = np.lexsort((fast.it_start, fast.it_server))
    key_slow = np.lexsort((slow.it_start, slow.it_server))
    assert np.array_equal(fast.it_start[key_fast], slow.it_start[key_slow])
    assert np.array_equal(fast.it_end[key_fast], slow.it_end[key_slow])
    assert check(inst, fast) == []


@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("policy", [SarathiFCFS, PrefillFirstFCFS])
def test_windows_equal_stepping_on_every_timing_form(name, policy):
    """Seeded runs with outputs of 100 to 400 tokens: token times, iteration starts and ends
    and busy times of the windowed run equal the one-decision-per-iteration run's exactly,
    with windows extended past one chunk."""
    inst = _long_outputs(3, FORMS[name])
    fast_policy, slow_policy = Counted(policy()), Counted(policy(), repeat=False)
    fast = run(inst, fast_policy, LeastLoaded(), seed=3)
    slow = run(inst, slow_policy, LeastLoaded(), seed=3)
    _same_run(inst, fast, slow)
    # at least one decision per iteration without windows (and an idle server's empty ones);
    # with them a window of up to 128 iterations per decision, and the longest output (more
    # than 256 tokens) needs extended windows
    assert slow_policy.decisions >= slow.n_iterations
    assert fast_policy.decisions < slow.n_iterations / 4
    assert inst.workload.output_tokens.max() > 2 * WINDOW_CHUNK


@pytest.mark.parametrize(
    ("policy", "rate"),
    [
        ("vllm", 3.0),
        ("sarathi", 3.0),
        ("hyperflexis", 3.0),
        ("hyperflexis-pm", 3.0),
        ("slos-serve", 3.0),
        ("polyserve", 1.5),
        ("scorpio", 3.0),
        ("slide-batching", 3.0),
    ],
)
def test_registered_repeating_policies_equal_stepping(policy, rate):
    """The registered policies that mark decode batches ``repeat=True``, on 60 Mooncake
    requests with Poisson arrivals on 4 servers: the same token times and busy times bit for
    bit with and without windows."""
    setup = mooncake_setup(policy)
    instance, sched = setup.prepare(setup.instance(rate))
    fast_policy = Counted(sched.policy)
    fast = dataclasses.replace(sched, policy=fast_policy).run(instance, seed=0)
    instance, sched = setup.prepare(setup.instance(rate))
    slow_policy = Counted(sched.policy, repeat=False)
    slow = dataclasses.replace(sched, policy=slow_policy).run(instance, seed=0)
    assert np.array_equal(fast.token_times, slow.token_times)
    assert np.array_equal(fast.busy_s, slow.busy_s)
    assert np.array_equal(fast.rejected, slow.rejected)
    assert check(instance, fast) == []
    # the windows fast-forwarded iterations: fewer decisions with them than without
    assert fast.n_iterations == slow.n_iterations
    assert fast_policy.decisions < slow_policy.decisions


class WakeOnce:
    """Prefills its one request whole, then repeats its decode batch, asking to decide again
    at 0.1 s the first time; records the times it is asked."""

    def __init__(self):
        self.asked = []

    def start(self, instance, seed):
        self.asked = []

    def next_batch(self, server):
        self.asked.append(server.now)
        if server.waiting:
            r = server.waiting[0]
            return Batch(prefill=[(r, server.remaining_prefill(r))])
        if not server.decoding:
            return Batch()
        wake = 0.1 if len(self.asked) == 2 else math.inf
        return Batch(decode=server.decoding_ids(), repeat=True, wake_at_s=wake)


def test_wake_at_s_ends_a_window_with_the_first_step_ending_at_or_after_it():
    """A repeated decode batch with ``wake_at_s`` 0.1 s is decided again at the end of the
    first step ending at or after 0.1 s; the tokens are those of stepping."""
    wl = Workload({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [20]})
    inst = Instance(
        "wake",
        wl,
        Cluster(),
        LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002}),
    )
    policy = WakeOnce()
    fast = run(inst, policy, seed=0)
    slow = run(inst, Counted(WakeOnce(), repeat=False), seed=0)
    # prefill 10 tokens: 0.010 + 0.010 = 0.020 (token 1); decode steps of 0.012 end at
    # 0.032, 0.044, ..., 0.092, 0.104: the first at or after 0.1 is the 7th, at 0.104; from
    # there the batch repeats to the last token (19 steps: 0.020 + 19 x 0.012 = 0.248)
    assert policy.asked[:3] == pytest.approx([0.0, 0.020, 0.104], abs=1e-12)
    assert fast.tokens_of(0)[-1] == pytest.approx(0.248, abs=1e-12)
    assert np.array_equal(fast.token_times, slow.token_times)
    assert check(inst, fast) == []
