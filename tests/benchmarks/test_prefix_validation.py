"""The prefix-cache validation: the replays' block ids, the checker, and the hit rate the
workload's structure implies where the cache log shows nothing of the prefix was lost."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.benchmarks.prefix_validation import cached_replay, prefix_workload
from slolab.sim import metrics
from slolab.sim.check import check
from slolab.sim.prefix_cache import block_keys, cache_log
from slolab.timing.measured import read_inference_sim_runs
from slolab.timing.overheads import calibration_samples, fit_calibration

RUNS = read_inference_sim_runs()
PREFIX_RUNS = {r.name for r in RUNS if r.prefix_tokens}


@pytest.fixture(scope="module")
def replays():
    """Each vendored run through the engine with its prefix cache, timing fitted on all runs."""
    fit = fit_calibration("vllm-0.11", calibration_samples("vllm-0.11"))
    return {run_.name: (run_, *cached_replay(run_, fit)) for run_ in RUNS}


def test_the_vendored_runs_include_shared_prefixes_of_whole_ids():
    """Two runs share guidellm's 1,024-token prefix: two whole 512-token ids, so the 16-token
    blocks the ids can name as shared are exactly the prefix's 64."""
    assert PREFIX_RUNS == {"jan20-codellama-prefill-1", "jan20-prefill-llama7b-tp1-1"}
    assert all(r.prefix_tokens % 512 == 0 for r in RUNS)


@pytest.mark.parametrize("run_", RUNS, ids=lambda r: r.name)
def test_only_the_prefix_blocks_are_shared(run_):
    """Prompts are the measured ones; in 16-token blocks, the first prefix / 16 keys are the same
    in every request and every other key occurs once in the whole run."""
    wl = prefix_workload(run_)
    assert np.array_equal(wl.prompt_tokens, run_.requests["prompt_tokens"].astype(np.int64))
    shared = run_.prefix_tokens // 16
    keys = [
        block_keys(ids, int(p), 16)
        for ids, p in zip(wl["hash_ids"], wl.prompt_tokens.tolist(), strict=True)
    ]
    head = keys[0][:shared]
    assert len(head) == shared
    assert all(k[:shared] == head for k in keys)
    rest = [key for k in keys for key in k[shared:]]
    assert len(rest) == len(set(rest))
    assert not set(rest) & set(head)
    # the same at the level of the 512-token ids (one per started block of the prompt)
    assert all(
        len(ids) == -(-int(p) // 512)
        for ids, p in zip(wl["hash_ids"], wl.prompt_tokens, strict=True)
    )
    own = [h for ids in wl["hash_ids"] for h in ids[run_.prefix_tokens // 512 :]]
    assert len(own) == len(set(own))


@pytest.mark.parametrize("name", [r.name for r in RUNS])
def test_the_cached_replay_passes_the_checker(replays, name):
    """The engine's checker, with its own replay of the caches, finds nothing."""
    _, instance, outcome = replays[name]
    assert cache_log(outcome) is not None
    assert check(instance, outcome) == []


def _expected_skips(run_) -> np.ndarray:
    """Tokens each request skips when the prefix is cached: 0 for the first, else the prefix
    in whole 16-token blocks, at most the whole blocks inside its first prompt - 1 tokens."""
    prompt = run_.requests["prompt_tokens"].astype(np.int64)
    out = np.minimum(16 * (run_.prefix_tokens // 16), 16 * ((prompt - 1) // 16))
    out[0] = 0
    return out


def test_hits_are_what_the_structure_implies_where_no_prefix_block_was_evicted(replays):
    """Each request's first admission skips exactly the expected tokens when it started after
    the first request's prompt was computed and no prefix block had been evicted before it
    (read from the cache log); on a run where every request was admitted once and that held
    for all, the run's hit rate is the expected skipped tokens over all prompt tokens. Both
    shared-prefix runs are such runs."""
    whole_run = set()
    for name, (run_, instance, outcome) in replays.items():
        log = cache_log(outcome)
        expected = _expected_skips(run_)
        prefix_keys = set(block_keys(instance.workload["hash_ids"][0], run_.prefix_tokens, 16))
        evicted_at = [
            t
            for t, k in zip(log.evict_s.tolist(), log.evict_block.tolist(), strict=True)
            if k in prefix_keys
        ]
        first_evicted = min(evicted_at, default=np.inf)
        requests = log.hit_request.tolist()
        _, first = np.unique(log.hit_request, return_index=True)
        assert len(first) == len(run_.requests["prompt_tokens"])
        checked = 0
        for i in first.tolist():
            r = requests[i]
            t = float(log.hit_s[i])
            if r == 0 or (t >= outcome.prefill_done_s[0] and t < first_evicted):
                assert int(log.hit_tokens[i]) == int(expected[r]), (name, r)
                checked += 1
        admitted_once = len(requests) == len(first)
        if admitted_once and checked == len(first):
            rate = metrics.summary(instance, outcome)["prefix_cache"]["hit_rate"]
            prompt = run_.requests["prompt_tokens"].astype(np.int64)
            assert rate == pytest.approx(expected.sum() / prompt.sum(), rel=1e-12)
            whole_run.add(name)
    assert PREFIX_RUNS <= whole_run


def test_without_shared_content_every_hit_is_a_resumed_request(replays):
    """On the runs without a shared prefix a request finds cached only its own blocks, so
    every skipped token belongs to a request admitted again after a preemption."""
    for run_, _, outcome in replays.values():
        if run_.prefix_tokens:
            continue
        log = cache_log(outcome)
        seen: set[int] = set()
        for r, skip in zip(log.hit_request.tolist(), log.hit_tokens.tolist(), strict=True):
            if skip:
                assert r in seen
                assert outcome.preemptions[r] > 0
            seen.add(r)


@pytest.mark.parametrize("prefix", [512, 1536])
def test_other_shared_prefix_lengths_run_and_check_clean(prefix):
    """``jan20-prefill-llama7b-tp1-1`` with a 512-token shared prefix once stopped at t = 47 s
    (PolicyError: a batch needs 2,732 KV tokens, 2,414 free): SarathiFCFS counted all 2,917
    tokens of its victim as freed, 512 of them prefix blocks other running requests kept
    resident. Now it counts what preempting frees (``Server.kv_freed_by_preempting``)."""
    import dataclasses

    from slolab.benchmarks.fidelity import replay_instance
    from slolab.benchmarks.prefix_validation import VLLM_BLOCK
    from slolab.heuristics.baselines import SarathiFCFS
    from slolab.sim import run

    (run_,) = [r for r in read_inference_sim_runs() if r.name == "jan20-prefill-llama7b-tp1-1"]
    run_ = dataclasses.replace(run_, prefix_tokens=prefix)
    instance = replay_instance(run_, None, prefix_workload(run_), VLLM_BLOCK)
    outcome = run(instance, SarathiFCFS(), seed=0)
    assert check(instance, outcome) == []
    assert outcome.finished.all()
