"""PolyServe's dispatch reads the servers once (:meth:`PolyServeController._tier_servers`) for
its rankings and signatures, and the controller keeps per-run lists (tiers tried, TPOTs,
first-token deadlines) and its tier lists unrebuilt while no listed server departs: the same
rankings, signatures, lists and deadlines as reading each from the servers and the arrays
again, at every retry point of seeded runs."""

import copy

import pytest
from slolab.heuristics.polyserve import (
    PREFILL_POOL,
    PolyServeController,
    PolyServeParams,
    polyserve_cluster,
)
from test_polyserve_empty_admission import mooncake, run


def former_ranked(c: PolyServeController, servers) -> dict[int, list[int]]:
    """The rankings read from the servers (the code before the dispatch's one look)."""
    by_tier: dict[int, list[int]] = {}
    for k, s in enumerate(servers):
        t = c.tier_of_pool.get(s.pool)
        if t is not None and s.id not in c.pending:
            by_tier.setdefault(t, []).append(k)
    for t, ks in by_tier.items():
        rank = {sid: i for i, sid in enumerate(c.order[t])}
        ks.sort(key=lambda k: (-servers[k].load, rank.get(servers[k].id, 1 << 30)))
    return by_tier


def former_signature(c: PolyServeController, j: int, servers) -> tuple[tuple[int, int], ...]:
    """The signature read from the servers (the code before the dispatch's one look)."""
    usable = set(c._candidate_tiers(j))
    found = []
    for s in servers:
        t = c.tier_of_pool.get(s.pool)
        if t in usable and s.id not in c.pending:
            found.append((s.id, c.placed.get(s.id, 0) - s.load))
    return tuple(sorted(found))


class CheckedController(PolyServeController):
    """Computes every ranking, signature and tier-list update both ways; fails on the first
    difference and counts the comparisons."""

    def start(self, instance, seed):
        super().start(instance, seed)
        self.compared = {"ranked": 0, "signature": 0, "sync": 0, "departed": 0}
        req = self.req
        # the deadlines as the former code summed them, one request at a time
        assert self.first_deadline == [
            float(req.arrival[r] + req.ttft[r]) for r in range(len(req.arrival))
        ]
        assert self._tries == [self._candidate_tiers(j) for j in range(len(self.tiers))]
        assert self.tier_taus == [float(t) for t in self.tiers]

    def _ranked(self, servers, usable=None):
        ranked = super()._ranked(servers, usable)
        assert ranked == former_ranked(self, servers)
        self.compared["ranked"] += 1
        return ranked

    def _signature(self, j, servers, usable=None):
        signature = super()._signature(j, servers, usable)
        assert signature == former_signature(self, j, servers)
        self.compared["signature"] += 1
        return signature

    def _sync(self, cluster):
        order, prefill_order = copy.deepcopy(self.order), list(self.prefill_order)
        super()._sync(cluster)
        # the former update: new servers appended, then every list filtered
        live = {s.id for s in cluster.servers}
        listed = set(prefill_order).union(*order)
        self.compared["departed"] += not listed <= live
        for s in cluster.servers:
            if s.id in listed or not s.accepting:
                continue
            if s.pool == PREFILL_POOL:
                prefill_order.append(s.id)
            elif s.pool in self.tier_of_pool:
                order[self.tier_of_pool[s.pool]].append(s.id)
        assert self.order == [[i for i in lst if i in live] for lst in order]
        assert self.prefill_order == [i for i in prefill_order if i in live]
        self.compared["sync"] += 1


@pytest.mark.parametrize("promotion", ["lazy", "eager"])
def test_dispatch_view_answers_as_the_servers_read_again(promotion):
    """80 Mooncake requests at 2 req/s on 8 co-located servers under the scaler: every
    ranking, signature and tier-list update of the run equals the former reading (thousands of
    retry points: held long prompts are offered again at every tick)."""
    inst = polyserve_cluster(mooncake(2.0, 80), "colocated", 8)
    # every iteration within the TPOT: the rule under which these long prompts are held
    controller = CheckedController(PolyServeParams(promotion=promotion, tpot_bound="always"))
    run(controller, inst, scaled=True)
    # each retry point ranks once and signs each tier with held requests at least once
    assert controller.compared["ranked"] > 1000
    assert controller.compared["signature"] >= controller.compared["ranked"]
    assert controller.compared["sync"] > 1000
    assert controller.compared["departed"] > 0  # the lists are filtered on those ticks
