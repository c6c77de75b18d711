"""PolyServe's held requests kept in dispatch order (per tier and the prefill queue): the same
decisions as sorting every held request at every retry point, which the former dispatch did."""

import dataclasses
import hashlib

import numpy as np
import pytest
from fingerprint import fingerprint, load_recording
from slolab.heuristics.policies import Scheduler
from slolab.heuristics.polyserve import (
    HOLD,
    PolyServeController,
    PolyServePolicy,
    polyserve_cluster,
    tier_pool,
    tiers_of,
)
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check
from slolab.timing import LinearTiming

# T = 10 ms + 0.1 ms per token + 1 us per decode KV token
LINE = LinearTiming(
    0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4, "decode_kv_tokens": 1e-6}, name="line"
)


class FormerController(PolyServeController):
    """The dispatch before the held requests were kept sorted: at every retry point, every
    held request's deadline computed and the whole queue sorted (on time first, each by
    deadline, ties in the order held)."""

    def _dispatch_tiers(self, held, servers, now):
        ids = np.asarray(held, dtype=np.int64)
        tier = self.req.tier[ids]
        deadline = self.req.arrival[ids] + self.req.ttft[ids]
        placed = []
        ranked = self._ranked(servers)
        for j in range(len(self.tiers)):
            mine = ids[tier == j]
            if not len(mine):
                self.unplaced[j] = False
                continue
            d = deadline[tier == j]
            failures = 0
            signature = self._signature(j, servers)
            for r in mine[np.lexsort((d, d < now))].tolist():
                self.decisions += 1
                k = self._place(r, servers, now, signature, ranked)
                if k == HOLD:
                    failures += 1
                    if failures >= self.params.dispatch_lookahead:
                        break
                    continue
                failures = 0
                placed.append((r, k))
                self.held_count[j] -= 1
                signature = self._signature(j, servers)
            self.unplaced[j] = self.held_count[j] > 0
        return placed

    def _dispatch_queue(self, held, servers, now, place):
        ids = np.asarray(held, dtype=np.int64)
        deadline = self.req.arrival[ids] + self.req.ttft[ids]
        placed = []
        failures = 0
        for r in ids[np.lexsort((deadline, deadline < now))].tolist():
            self.decisions += 1
            k = place(r, servers, now)
            if k == HOLD:
                failures += 1
                if failures >= self.params.dispatch_lookahead:
                    break
                continue
            failures = 0
            placed.append((r, k))
        return placed


def digest(outcome) -> str:
    """sha256 of every recorded array of ``outcome`` and its scaling events.

    Bit for bit on purpose: the two runs compared are made in the same process on the same
    processor, so equal arithmetic gives equal bits; nothing recorded on another machine is
    compared (tests/fingerprint.py is for that)."""
    h = hashlib.sha256()
    for f in dataclasses.fields(outcome):
        value = getattr(outcome, f.name)
        if isinstance(value, np.ndarray):
            h.update(f.name.encode())
            h.update(np.ascontiguousarray(value).tobytes())
    h.update(repr(outcome.scale_events).encode())
    return h.hexdigest()


def outcome_fingerprint(outcome):
    """The fingerprint (tests/fingerprint.py) of every recorded array of ``outcome`` and its
    scaling events: decisions exactly, times within 1e-10 of their magnitudes."""
    arrays = [
        (f.name, getattr(outcome, f.name))
        for f in dataclasses.fields(outcome)
        if isinstance(getattr(outcome, f.name), np.ndarray)
    ]
    return fingerprint(arrays, outcome.scale_events)


@dataclasses.dataclass(frozen=True)
class Former:
    """A run recorded from former code: its fingerprint's record and its routing decisions.
    Equal to a pair ``(outcome_fingerprint(out), decisions)`` that matches both."""

    record: list
    decisions: int

    def __eq__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        found, decisions = other
        return found.matches(self.record) and decisions == self.decisions


def load_former(test_file: str) -> dict[str, Former]:
    """The :class:`Former` runs recorded beside ``test_file`` (tests/fingerprint.py)."""
    return {key: Former(*value) for key, value in load_recording(test_file).items()}


def bursty(seed: int, n: int = 120) -> Workload:
    """``n`` requests in bursts of 8 at one instant every 0.15 s (overload: queues build), equal
    TTFTs within a burst (deadline ties), TPOT tiers 20/50/100 ms, and one request larger than
    any server's KV (rejected when held)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(100, 3000, n)
    prompt[n // 3] = 50_000  # no server holds it
    return Workload(
        {
            "arrival_s": np.repeat(np.arange(n // 8) * 0.15, 8),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(2, 40, n),
            "ttft_slo_s": np.repeat(rng.choice([0.5, 1.5, 3.0], n // 8), 8),
            "tpot_slo_s": rng.choice([0.02, 0.05, 0.1], n),
        }
    )


def outcome(controller_class, base, mode, scaled, seed):
    """Run PolyServe (its controller of ``controller_class``) on ``base``: with its scaler on
    its empty pools (fleet 4), or without a scaler on pools of 1 server each."""
    inst = polyserve_cluster(base, mode, 4)
    if not scaled:
        pools = [dataclasses.replace(p, servers=1) for p in inst.cluster.resolved_pools()]
        cluster = Cluster.from_pools(
            pools, kv_capacity_tokens=20_000, max_batch_size=64, max_batch_tokens=4096
        )
        inst = dataclasses.replace(inst, cluster=cluster)
    controller = controller_class()
    sched = Scheduler(
        PolyServePolicy(controller),
        controller,
        controller.decode_router if mode == "disaggregated" else None,
        controller if scaled else None,
        instance=inst,
    )
    out = sched.run(inst, seed=seed, record_iterations=True)
    assert check(inst, out) == []
    return digest(out), controller.decisions, out


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
@pytest.mark.parametrize("scaled", [True, False], ids=["scaler", "fixed-pools"])
def test_sorted_held_queues_give_the_former_decisions(mode, scaled):
    """120 bursty requests, 2 seeds: identical outcomes and decision counts with the former
    full sort; requests were held and retried (more decisions than requests), one rejected."""
    for seed in range(2):
        base = Instance(
            "bursts",
            bursty(seed),
            Cluster(servers=4, kv_capacity_tokens=20_000, max_batch_size=64, max_batch_tokens=4096),
            LINE,
        )
        assert len(tiers_of(base)) == 3 and tier_pool(0.02) != tier_pool(0.1)
        former, former_decisions, out = outcome(FormerController, base, mode, scaled, seed)
        now, now_decisions, _ = outcome(PolyServeController, base, mode, scaled, seed)
        assert now == former and now_decisions == former_decisions
        # 120 first decisions (240 disaggregated: entry and decode) and retries on top
        assert former_decisions > (2 if mode == "disaggregated" else 1) * 120
        assert out.rejected.sum() == 1
