"""Prefix caching under memory pressure decides as recorded: on seeded cuts of the Mooncake
conversation trace with small servers (blocks are evicted every few iterations), each case's
Outcome and its prefix-cache log (every hit, every eviction, the per-server counts) are compared
with the recording, decisions exactly, times within tests/fingerprint.py's tolerance.

The records are in ``test_prefix_cache_identity.json``, taken before the engine's cache moves
were made faster (evictions, lookups, logs), to show they decide as before. After a deliberate
change of the cache's decisions, re-record with ``PYTHONPATH=tests python
tests/sim/test_prefix_cache_identity.py`` and name the move in the commit.
"""

from __future__ import annotations

import sys

import pytest
from fingerprint import Fingerprint, assert_case, fingerprint, load_recording, write_recording
from slolab.sim.prefix_cache import cache_log

TRACE = "mooncake_conversation"

#: Case name -> ServingSetup fields (plus ``rate``); every case caches, on small servers.
CASES: dict[str, dict] = {
    "sarathi/least-loaded/trace": {"policy": "sarathi", "router": "least-loaded"},
    "sarathi/least-loaded/poisson1": {"policy": "sarathi", "router": "least-loaded", "seed": 1},
    "sarathi/cache-aware/poisson2": {"policy": "sarathi", "router": "cache-aware", "seed": 2},
    "sarathi/round-robin/poisson3": {"policy": "sarathi", "router": "round-robin", "seed": 3},
    "vllm/least-loaded/poisson2": {"policy": "vllm", "router": "least-loaded", "seed": 2},
    "edf/cache-aware/poisson1": {"policy": "edf", "router": "cache-aware", "seed": 1},
    # 16-token blocks: 32 per trace block id
    "sarathi/blocks-16/poisson3": {
        "policy": "sarathi",
        "router": "cache-aware",
        "seed": 3,
        "prefix_cache": "16",
    },
    # tighter still: preemptions of requests holding shared blocks
    "vllm/tiny-kv/poisson1": {"policy": "vllm", "seed": 1, "kv_capacity": 12_000, "rate": 6.0},
}


def _fingerprint(outcome) -> Fingerprint:
    """What the run decided (its Outcome's arrays and the prefix-cache log), and when."""
    log = cache_log(outcome)
    assert log is not None
    return fingerprint(
        (
            outcome.token_times,
            outcome.server,
            outcome.rejected,
            outcome.rejected_kv,
            outcome.first_scheduled_s,
            outcome.prefill_done_s,
            outcome.preemptions,
            outcome.preempt_request,
            outcome.preempt_s,
            outcome.busy_s,
            outcome.it_server,
            outcome.it_start,
            outcome.it_end,
            outcome.it_features,
            outcome.it_kv_tokens,
            outcome.entry_request,
            outcome.entry_tokens,
        ),
        float(outcome.end_s),
        outcome.info["iterations"],
        (
            log.block_tokens,
            log.hit_request,
            log.hit_server,
            log.hit_s,
            log.hit_tokens,
            log.queried_tokens,
            log.evict_server,
            log.evict_s,
            log.evict_block,
            log.server_stats,
        ),
    )


def run_case(name: str):
    """The case's Outcome."""
    from slolab.harness.serving import ServingSetup

    fields = {"servers": 2, "limit": 400, "kv_capacity": 30_000, "prefix_cache": "auto"}
    fields.update(CASES[name])
    if "seed" in fields:
        # seeded Poisson arrivals (the trace's own arrivals, time-scaled, otherwise)
        fields["arrivals"] = "poisson"
    rate = fields.pop("rate", 3.0)
    setup = ServingSetup(TRACE, **fields)
    instance, sched = setup.prepare(setup.instance(rate))
    return sched.run(instance, seed=setup.seed, record_iterations=True)


EXPECTED = load_recording(__file__)


@pytest.mark.parametrize("name", sorted(CASES))
def test_prefix_cache_decides_as_recorded(name):
    outcome = run_case(name)
    # the cases are meant to evict often: more evicted blocks than requests
    assert cache_log(outcome).summary()["evictions"] > len(outcome.server)
    assert name in EXPECTED, f"{name}: not recorded"
    assert_case(_fingerprint(outcome), EXPECTED[name], name)


if __name__ == "__main__":
    write_recording(__file__, {name: _fingerprint(run_case(name)).record() for name in CASES})
    sys.exit(0)
