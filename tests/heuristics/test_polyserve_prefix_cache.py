"""PolyServe's own pools keep the instance's prefix cache (they used to drop it)."""

import dataclasses

from slolab.harness.serving import ServingSetup
from slolab.sim import metrics
from slolab.sim.check import check

SETUP = ServingSetup(
    "mooncake_conversation",
    policy="polyserve",
    servers=4,
    limit=100,
    slos="polyserve",
    arrivals="poisson",
    prefix_cache="auto",
)


def test_polyserve_pools_dropped_the_prefix_cache():
    """PolyServe on 100 Mooncake requests caches 512-token blocks with auto, none with off."""
    instance, scheduler = SETUP.prepare(SETUP.instance(1.0))
    outcome = scheduler.run(instance, seed=0)
    assert check(instance, outcome) == []
    cache = metrics.summary(instance, outcome)["prefix_cache"]
    # the pools rebuilt for the tiers carry the set-up's 512-token blocks: 72 blocks hit in
    # 100 admissions, 72 * 512 = 36,864 prefill tokens skipped
    assert instance.cluster.prefix_block_tokens == 512
    assert (cache["hits"], cache["prefill_tokens_saved"]) == (72, 72 * 512)
    off = dataclasses.replace(SETUP, prefix_cache="off")
    instance, scheduler = off.prepare(off.instance(1.0))
    outcome = scheduler.run(instance, seed=0)
    assert instance.cluster.prefix_block_tokens == 0
    assert "prefix_cache" not in metrics.summary(instance, outcome)
