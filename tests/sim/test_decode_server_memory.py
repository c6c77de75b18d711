"""A disaggregated decode server whose decoding requests outgrow its memory preempts the latest
to start decoding and recomputes them there later: the runs used to end in a PolicyError ("batch
needs 3 KV tokens but only 1 of 600 are free") on the decode server."""

import numpy as np
import pytest
from sim_cases import random_instance
from slolab.heuristics.policies import make_scheduler
from slolab.sim import check

#: The policies whose decode servers share the rule (baselines, ProServe's, HyperFlexis's
#: Migrator)
POLICIES = (
    "vllm",
    "sarathi",
    "sarathi-priority",
    "edf",
    "fairbatching",
    "weighted-vtc",
    "slide-batching",
    "minimal",
    "hyperflexis",
    "hyperflexis-pm",
)


@pytest.mark.parametrize("name", POLICIES)
def test_a_full_decode_server_preempts_and_recomputes(name):
    """60 requests in 1 s on one prefill and two decode servers of 600 KV tokens: every
    request finishes, some are preempted on a decode server, and the checker accepts the
    run (a decode server prefills only to recompute what it preempted)."""
    inst = random_instance(
        0, n=60, servers=3, kv=600, horizon_s=1.0, mode="disaggregated", prefill_servers=1
    )
    scheduler = make_scheduler(name, inst)
    out = scheduler.run(inst, seed=0)
    ran = scheduler.on(inst)
    assert check(ran, out) == []
    assert not out.rejected.any()
    roles = np.array([ran.cluster.resolved_pools()[p].role for p in out.server_pool])
    assert len(out.preempt_server) > 0
    assert set(roles[out.preempt_server]) == {"decode"}
