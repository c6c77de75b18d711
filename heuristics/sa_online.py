"""The SA-ordering scheduler run online on each worker (:class:`SAOrderingPolicy`), the baseline
HyperFlexis compares with behind round robin (``sa-rr`` of the dispatch-scale problem).

References
----------
Huang et al., "SLO-Aware Scheduling for Large Language Model Inferences", 2025, Sec. 4.3;
HyperFlexis, Sec. 7.4.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.heuristics.policies import register_policy
from slolab.sim.policy import Batch

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

__all__ = ["SAOrderingPolicy"]


class SAOrderingPolicy:
    """The SA-ordering scheduler on one worker, online.

    Whenever the worker has nothing running and requests wait, the SA paper's simulated
    annealing (:func:`slolab.heuristics.sa_ordering.sa_order`) plans the first
    ``queue_limit`` waiting requests as a snapshot taken now (each one's TTFT reduced by the
    time it has waited) into static batches of at most ``batch_size``; the worker prefills the
    plan's first batch (whole prompts, as many as fit in memory and in the iteration's
    ``max_batch_tokens``) and decodes it until every member finishes, then plans again. A
    prompt longer than ``max_batch_tokens`` alone is prefilled in chunks of the cap (ours: the
    paper does not chunk, and the cap is the engine's). With a snapshot's given cache (the
    workload's ``cached_tokens``), the plan's member timings, the memory a member needs and
    the chunk it is given count only its uncached prompt, as the engine charges it. This is
    the adapter that lets the SA
    paper's one-queue, static-batch scheduler run behind a router on co-located workers
    (docs/hyperflexis.md).

    References
    ----------
    Huang et al., "SLO-Aware Scheduling for Large Language Model Inferences", 2025, Sec. 4.3;
    HyperFlexis, Sec. 7.4.
    """

    name = "sa-online"
    #: a co-located design: one worker orders and runs whole requests (the SA paper describes
    #: no disaggregation)
    modes = ("colocated",)

    def __init__(self, batch_size: int = 8, queue_limit: int = 10, params: Any = None) -> None:
        if batch_size < 1 or queue_limit < 1:
            raise ValueError(
                f"batch_size and queue_limit must be >= 1, got {batch_size}, {queue_limit}"
            )
        self.batch_size = batch_size
        self.queue_limit = queue_limit
        self.params = params
        self._seed = 0
        self._calls = 0
        self.ttft = np.zeros(0)
        self.tpot = np.zeros(0)
        self.cached: list[int] = []

    def start(self, instance: Instance, seed: int) -> None:
        from slolab.instances.records import cached_prompt_tokens
        from slolab.sim.metrics import deadline_slos

        ttft, tpot = deadline_slos(instance.workload)
        self.ttft = np.asarray(ttft, dtype=float)
        self.tpot = np.asarray(tpot, dtype=float)
        # a snapshot's given cache: each request's cached prompt tokens (zeros without it)
        self.cached = cached_prompt_tokens(instance.workload).tolist()
        self._seed = seed
        self._calls = 0

    def _plan(self, server: Server, queue: list[int]) -> list[int]:
        """The first batch of the SA plan of ``queue`` (a snapshot now)."""
        from slolab.heuristics.sa_ordering import sa_order
        from slolab.models.sa_ordering import OrderingProblem
        from slolab.sim.static import member_times

        now = server.now
        b = min(self.batch_size, server.max_batch_size, len(queue))
        first = np.full((len(queue), b + 1), np.nan)
        execs = np.full((len(queue), b + 1), np.nan)
        for i, r in enumerate(queue):
            for s in range(1, b + 1):
                first[i, s], execs[i, s] = member_times(
                    server.timing, s, server.prompt(r), server.output(r), self.cached[r]
                )
        left = np.array(
            [max(server.arrival(r) + self.ttft[r] - now, 1e-9) for r in queue], dtype=float
        )
        tpot = np.array([self.tpot[r] if self.tpot[r] > 0 else np.nan for r in queue])
        problem = OrderingProblem(
            batch_size=b,
            arrival_s=np.zeros(len(queue)),
            ttft_slo_s=np.where(np.isfinite(left), left, np.nan),
            tpot_slo_s=tpot,
            e2e_slo_s=np.full(len(queue), np.nan),
            output_tokens=np.array([server.output(r) for r in queue], dtype=np.int64),
            first_token_s=first,
            exec_s=execs,
        )
        self._calls += 1
        batches, _ = sa_order(problem, self.params, seed=self._seed + self._calls)
        return [queue[i] for i in batches[0]]

    def next_batch(self, server: Server) -> Batch:
        room = server.max_batch_tokens or 1 << 62
        if server.prefilling:
            # a prompt longer than the token cap is prefilled in chunks of at most the cap
            # (the scheduler itself never chunks; the cap is the engine's configuration)
            chunks = []
            for r in server.prefilling:
                take = min(server.remaining_prefill(r), room)
                if take <= 0:
                    break
                chunks.append((r, take))
                room -= take
            return Batch(prefill=chunks)
        if server.decoding:
            decode = list(server.decoding)
            return Batch(decode=server.decoding_ids(), repeat=True) if len(decode) else Batch()
        queue = list(server.waiting)[: self.queue_limit]
        if not queue:
            return Batch()
        members = self._plan(server, queue)
        free = server.kv_free_tokens
        prefill = []
        for r in members:
            # the uncached prompt: a given cache's tokens are neither computed nor held
            computed = server.prompt(r) - self.cached[r]
            need = computed + server.output(r)
            if need > free or computed > room:
                break
            prefill.append((r, computed))
            free -= need
            room -= computed
        if not prefill:
            r = queue[0]
            prefill = [(r, min(server.prompt(r) - self.cached[r], room))]
        return Batch(prefill=prefill)


register_policy("sa-online", SAOrderingPolicy, "the SA-ordering scheduler run online per worker")
