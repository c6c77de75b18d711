"""HyperFlexis's dispatcher sorts its queue only when it chooses a batch: the same runs."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.harness.serving import ServingSetup
from slolab.heuristics.hyperflexis import HyperFlexisDispatcher
from slolab.sim import Server, check, run


class EagerDispatcher(HyperFlexisDispatcher):
    """The dispatcher as before: every decision gives targets to and sorts the whole queue."""

    def _pending(self, server: Server) -> bool:
        held = list(server.held) if server.accepting else []
        queue = held + list(server.waiting)
        self._targets(queue)
        tpot = self.tpot
        self.sorted_queue = sorted(queue, key=lambda r: (tpot[r], server.arrival(r), r))
        return bool(queue)

    def _queue(self, server: Server, tpot: np.ndarray) -> list[int]:  # type: ignore[override]
        return self.sorted_queue


@pytest.mark.parametrize(
    ("policy", "workload", "n", "rate", "servers", "arrivals"),
    [
        ("hyperflexis", "mooncake_conversation", 150, 1e6, 1, None),
        ("hyperflexis", "mooncake_conversation", 200, 3.0, 8, "poisson"),
        ("hyperflexis-pm", "azure_conv_2023", 200, 400.0, 2, None),
    ],
)
def test_runs_identical_to_the_eager_sort(
    policy: str, workload: str, n: int, rate: float, servers: int, arrivals: str | None
) -> None:
    """Seeded runs (a Mooncake burst, Poisson arrivals on 8 servers, the mapped targets): same
    token times as the dispatcher that sorts at every decision."""
    setup = ServingSetup(
        workload, policy=policy, servers=servers, limit=n, arrivals=arrivals, slos="polyserve"
    )
    times = []
    for eager in (False, True):
        instance, sched = setup.prepare(setup.instance(rate=rate))
        dispatcher = sched.policy
        assert isinstance(dispatcher, HyperFlexisDispatcher)
        if eager:
            dispatcher = EagerDispatcher(dispatcher.params)
        out = run(instance, dispatcher, sched.router, seed=0)
        assert check(instance, out) == []
        times.append(out.token_times)
    np.testing.assert_array_equal(times[0], times[1])
    emitted = int(np.isfinite(times[0]).sum())
    print(policy, workload, "tokens", emitted, "of", len(times[0]))
    # not a comparison of empty runs: every token was emitted
    assert emitted == len(times[0])
