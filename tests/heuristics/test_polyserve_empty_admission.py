"""Co-located PolyServe's admission on a server with no request answers from remembered parts
plus the server's free time: the same codes and predicted ends as reading the server's queue,
at every such ask, and the same runs as before."""

import dataclasses
from collections import Counter

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics.policies import Scheduler
from slolab.heuristics.polyserve import (
    ADMIT,
    FULL,
    TOO_LATE,
    PolyServeController,
    PolyServeParams,
    PolyServePolicy,
    polyserve_cluster,
)
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check
from test_polyserve_held_index import LINE, load_former, outcome, outcome_fingerprint


class CheckedController(PolyServeController):
    """Answers every ask on an empty server both ways and counts the codes; fails on the first
    ask where they differ (code, or the predicted end of a placement)."""

    last: "CheckedController | None" = None  # the last one started

    def start(self, instance, seed):
        super().start(instance, seed)
        self.codes = Counter()
        CheckedController.last = self

    def unservable(self, request):
        # no request is rejected as it arrives: one no server admits stays held, and every
        # empty server of its tiers is asked about it (refusals for room, on time and late)
        return None

    def _admit_empty(self, s, r, tau_s, late):
        former = self._admit_queued(s, r, tau_s, late)
        former_end = self._predicted_end
        self._predicted_end = float("nan")
        code = super()._admit_empty(s, r, tau_s, late)
        assert code == former, (s.now, r, s.id, code, former)
        if code == ADMIT and not late:
            assert self._predicted_end == former_end
        self.codes[code, late] += 1
        return code


def mooncake(rate: float, limit: int) -> Instance:
    """The first ``limit`` Mooncake conversation requests, PolyServe's SLOs, Poisson arrivals
    at ``rate`` req/s."""
    setup = ServingSetup(
        "mooncake_conversation",
        policy="polyserve",
        servers=8,
        limit=limit,
        slos="polyserve",
        mode="colocated",
        arrivals="poisson",
    )
    return setup.instance(rate)


def fixed_pools(base: Instance, servers: int, per_pool: int) -> Instance:
    """``base`` on PolyServe's tier pools of ``per_pool`` servers each (no scaler needed)."""
    inst = polyserve_cluster(base, "colocated", servers)
    c = inst.cluster
    pools = [dataclasses.replace(p, servers=per_pool) for p in c.resolved_pools()]
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=c.kv_capacity_tokens,
        max_batch_size=c.max_batch_size,
        max_batch_tokens=c.max_batch_tokens,
    )
    return dataclasses.replace(inst, cluster=cluster)


def run(controller, inst: Instance, scaled: bool):
    """PolyServe with ``controller`` on ``inst``, its scaler on or off; the checked outcome."""
    sched = Scheduler(
        PolyServePolicy(controller), controller, None, controller if scaled else None, instance=inst
    )
    out = sched.run(inst, seed=0)
    assert check(inst, out) == []
    return out


def test_empty_servers_answer_as_their_queue_would_on_mooncake():
    """120 Mooncake requests at 2 req/s on 8 servers under the scaler: every ask on an empty
    server (thousands: held long prompts ask every empty server of their tiers at every tick)
    gets the queue path's code; refusals for the deadline and placements on time and late
    occur (an empty server always has room for these prompts)."""
    inst = polyserve_cluster(mooncake(2.0, 120), "colocated", 8)
    # every iteration within the TPOT: the rule whose empty-server answers are remembered
    # parts (with the default a prompt alone is predicted by _admit_idle on both paths)
    controller = CheckedController(PolyServeParams(tpot_bound="always"))
    run(controller, inst, scaled=True)
    codes = controller.codes
    assert codes[TOO_LATE, False] > 1000
    assert codes[ADMIT, False] > 0 and codes[ADMIT, True] > 0


def sparse(seed: int, n: int = 80) -> Workload:
    """``n`` requests with exponential gaps of mean 0.3 s (servers often empty), prompts 100 to
    4,000 tokens (under T = 10 ms + 0.1 ms per token a 20 ms tier prefills about 100 per
    iteration, so a long prompt with a 0.3 s TTFT is too late even alone), TTFT 0.3/1/3 s, TPOT
    tiers 20/50/100 ms, and one prompt of 19,500 tokens (above 95 % of a 20,000-token KV: no
    server admits it, and :class:`CheckedController` holds it to the end of the run)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(100, 4000, n)
    prompt[n - 5] = 19_500
    return Workload(
        {
            "arrival_s": np.cumsum(rng.exponential(0.3, n)),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(2, 40, n),
            "ttft_slo_s": rng.choice([0.3, 1.0, 3.0], n),
            "tpot_slo_s": rng.choice([0.02, 0.05, 0.1], n),
        }
    )


#: 4 servers of 20,000 KV tokens (PolyServe's cluster builder splits them into tier pools)
SMALL = Cluster(servers=4, kv_capacity_tokens=20_000, max_batch_size=64, max_batch_tokens=4096)


@pytest.mark.filterwarnings("ignore:1 request")
@pytest.mark.parametrize("scaled", [True, False], ids=["scaler", "fixed-pools"])
def test_empty_servers_answer_as_their_queue_would_on_sparse_arrivals(scaled):
    """80 sparse requests, 2 seeds, with the scaler and on fixed pools: every ask on an empty
    server gets the queue path's code, and every answer occurs: placed on time and late,
    refused for room on time and late, refused for the deadline."""
    for seed in range(2):
        base = Instance("sparse", sparse(seed), SMALL, LINE)
        _, decisions, out = outcome(CheckedController, base, "colocated", scaled, seed)
        controller = CheckedController.last
        # the 19,500-token prompt is the one request left held
        assert out.rejected.sum() == 1 and decisions > 80
        for late in (False, True):
            assert controller.codes[ADMIT, late] > 0 and controller.codes[FULL, late] > 0
        assert controller.codes[TOO_LATE, False] > 0


#: Outcome digests and routing decisions of the code before the empty-server answers, on the
#: first 150 Mooncake requests at 1 and 2 req/s, on fixed tier pools of 2 servers (8 in all)
#: without a scaler (held requests are retried as requests leave): rate -> (digest, decisions)
#: Kept as fingerprints in the .json beside this file (decisions exactly, times within 1e-10:
#: tests/fingerprint.py), recorded where the digests still held.
FORMER_FIXED = {float(rate): former for rate, former in load_former(__file__).items()}


@pytest.mark.parametrize("rate", sorted(FORMER_FIXED))
def test_fixed_pool_mooncake_runs_keep_the_former_outcomes(rate):
    """150 Mooncake requests on 8 servers in fixed tier pools: the former outcome (every token
    time) and decision count, retries of held requests included (more decisions than
    requests); with the scaler: test_polyserve_held_retries.py."""
    controller = PolyServeController(PolyServeParams(tpot_bound="always"))  # the former rule
    out = run(controller, fixed_pools(mooncake(rate, 150), 8, 2), scaled=False)
    assert (outcome_fingerprint(out), controller.decisions) == FORMER_FIXED[rate]
