"""The SA-ordering snapshot builder's given cache (``cache=True``): the cached prefixes the
trace's earlier requests left, off by default, refused in one line without block ids."""

from __future__ import annotations

import numpy as np
import pytest
from slolab import problems, sim
from slolab.heuristics.sa_ordering import fcfs_batches, plan_schedule
from slolab.instances.prefix_state import given_cache
from slolab.instances.readers import read_mooncake, trace_path
from slolab.instances.records import CACHED_COLUMN, cached_prompt_tokens

MOONCAKE = {"task": "chat", "trace": "mooncake_conversation"}


def test_a_mooncake_snapshot_gets_the_cache_its_predecessors_left():
    """Seed 0, 8 chat requests from Mooncake: the cut's cached prefixes are given_cache's of
    the same rows (in the snapshot's shuffled order), whole 512-token blocks, and the default
    snapshot is the same requests without the column."""
    plain = problems.build_instance("sa-ordering", n=8, batch_size=4, seed=0, **MOONCAKE)
    cached = problems.build_instance(
        "sa-ordering", n=8, batch_size=4, seed=0, cache=True, **MOONCAKE
    )
    assert CACHED_COLUMN not in plain.workload
    assert cached.name == plain.name + "-cached"
    np.testing.assert_array_equal(cached.workload.prompt_tokens, plain.workload.prompt_tokens)
    got = cached_prompt_tokens(cached.workload)
    # measured: seed 0 finds one or two shared 512-token blocks in front of every prompt
    assert got.tolist() == [512, 512, 512, 512, 512, 1024, 1024, 512]
    # given_cache of the trace's run of 8 short requests with these prompts: the same
    # (prompt, cached) pairs
    trace = read_mooncake(trace_path("mooncake_conversation"), keep_hash_ids=True)
    ok = np.flatnonzero(trace.prompt_tokens + trace.output_tokens <= 2048)
    want = sorted(zip(cached.workload.prompt_tokens.tolist(), got.tolist(), strict=True))
    prompts = sorted(p for p, _ in want)
    starts = [
        i
        for i in range(len(ok) - 7)
        if sorted(trace.prompt_tokens[ok[i : i + 8]].tolist()) == prompts
    ]
    assert len(starts) == 1
    snap = given_cache(trace, ok[starts[0] : starts[0] + 8])
    pairs = zip(snap.prompt_tokens.tolist(), snap[CACHED_COLUMN].tolist(), strict=True)
    assert sorted(pairs) == want
    outcome = sim.replay(cached, plan_schedule(fcfs_batches(cached)))
    assert sim.check(cached, outcome) == []


def test_a_cache_needs_a_trace_with_block_ids():
    with pytest.raises(ValueError, match="mixed snapshot's Azure traces carry no prompt block"):
        problems.build_instance("sa-ordering", n=4, seed=0, cache=True)
    with pytest.raises(ValueError, match="needs a trace with prompt block ids"):
        problems.build_instance("sa-ordering", n=4, seed=0, task="chat", cache=True)
