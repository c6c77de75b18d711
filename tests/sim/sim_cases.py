"""Random serving instances shared by the engine tests."""

import numpy as np
from slolab.instances.records import Cluster, Instance, Workload
from slolab.timing.base import LinearTiming

#: 5 ms per iteration plus token, context and attention terms.
RANDOM_TIMING = LinearTiming(
    0.005,
    {
        "prefill_tokens": 2e-5,
        "decode_tokens": 1e-4,
        "decode_kv_tokens": 1e-7,
        "prefill_attention_work": 1e-9,
    },
)


def random_instance(seed, *, n=40, servers=2, kv=6000, horizon_s=2.0, **cluster):
    """``n`` requests arriving uniformly over ``horizon_s`` (prompts 1-299, outputs 1-59 tokens,
    TTFT 0.5 s, TPOT 50 ms) on ``servers`` servers of ``kv`` KV tokens and a 256-token budget;
    ``cluster`` sets further Cluster fields."""
    rng = np.random.default_rng(seed)
    wl = Workload(
        {
            "arrival_s": np.sort(rng.uniform(0, horizon_s, n)),
            "prompt_tokens": rng.integers(1, 300, n),
            "output_tokens": rng.integers(1, 60, n),
            "ttft_slo_s": np.full(n, 0.5),
            "tpot_slo_s": np.full(n, 0.05),
        }
    )
    cl = Cluster(servers=servers, kv_capacity_tokens=kv, max_batch_tokens=256, **cluster)
    return Instance("random", wl, cl, RANDOM_TIMING)


def mooncake_setup(policy, mode="colocated"):
    """60 Mooncake conversation requests with Poisson arrivals and PolyServe's SLOs on 4
    servers, under the registered ``policy`` (``setup.instance(rate)`` draws them)."""
    from slolab.harness.serving import ServingSetup

    return ServingSetup(
        "mooncake_conversation",
        policy=policy,
        servers=4,
        limit=60,
        slos="polyserve",
        arrivals="poisson",
        mode=mode,
    )
