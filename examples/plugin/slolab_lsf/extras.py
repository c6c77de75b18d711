"""A router, a scaler, an SLO scheme and a timing preset, each declared as an entry point."""

import numpy as np
from slolab.sim import ScaleAction
from slolab.timing import LinearTiming


class FewestWaiting:
    """Route each request to the server with the fewest requests waiting (lowest id on ties)."""

    def start(self, instance, seed: int) -> None:
        """No state to reset."""

    def route(self, request: int, servers, now: float) -> int:
        return min(range(len(servers)), key=lambda k: (len(servers[k].waiting), servers[k].id))


class QueueStepScaler:
    """Every second, switch one server on while more than ``per_server`` requests wait per
    accepting server (up to ``max_servers``); never drains."""

    interval_s = 1.0

    def __init__(self, max_servers: int = 16, per_server: float = 4.0) -> None:
        self.max_servers = max_servers
        self.per_server = per_server
        self._pool = ""

    def start(self, instance, seed: int) -> None:
        self._pool = instance.cluster.resolved_pools()[0].name

    def decide(self, cluster):
        present = cluster.in_pool(self._pool)
        active = [s for s in present if s.accepting]
        waiting = sum(len(s.waiting) for s in present)
        if waiting > self.per_server * max(len(active), 1) and len(present) < self.max_servers:
            return [ScaleAction.on(self._pool)]
        return []


def flat_slos(workload, rng, timing, *, ttft_s: float = 1.0, tpot_s: float = 0.1):
    """The same TTFT and TPOT SLO for every request (``ttft_s``, ``tpot_s``), priority 1."""
    n = len(workload)
    return {
        "ttft_slo_s": np.full(n, float(ttft_s)),
        "tpot_slo_s": np.full(n, float(tpot_s)),
        "priority": np.ones(n),
    }


def toy_timing():
    """Made up for the example: 10 ms per iteration plus 0.1 ms per token in the batch."""
    return LinearTiming(0.010, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4}, name="lsf-toy")
