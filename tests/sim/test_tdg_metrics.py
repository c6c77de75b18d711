"""TDG, TDG ratio and Miss-TDG ratio against ProServe's definition (Eq. 3, Sec. 5.1) by hand."""

from __future__ import annotations

import pytest
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import metrics, replay
from slolab.sim.schedule import PlannedIteration, Schedule
from slolab.timing import LinearTiming


def one_request(priority: float) -> tuple[Instance, Schedule]:
    """One request (arrival 1 s, TTFT 0.5 s, TPOT 0.3 s, 3 tokens); every iteration takes 0.2 s;
    its tokens come at 1.4 s, 1.85 s and 2.05 s."""
    wl = Workload(
        {
            "arrival_s": [1.0],
            "prompt_tokens": [1],
            "output_tokens": [3],
            "ttft_slo_s": [0.5],
            "tpot_slo_s": [0.3],
            "priority": [priority],
        }
    )
    inst = Instance(
        "one",
        wl,
        Cluster(kv_capacity_tokens=100),
        LinearTiming(0.2, {}, name="flat"),
        settings={"w_prefill": 4.0, "w_decode": 1.0},
    )
    schedule = Schedule(
        (
            (
                PlannedIteration(((0, "prefill", 1),), not_before_s=1.2),
                PlannedIteration(((0, "decode", 1),), not_before_s=1.65),
                PlannedIteration(((0, "decode", 1),)),
            ),
        )
    )
    return inst, schedule


def test_tdg_by_hand_priority_two():
    """Deadlines 1.5, 1.8, 2.1 s: tokens 1 and 3 on time: TDG = 2 (4 + 1) = 10 of 12."""
    inst, schedule = one_request(priority=2.0)
    out = replay(inst, schedule)
    # w_r(1) = w_p * w_p(r) = 4 * 2 = 8 (1.4 < 1.5); token 2 at 1.85 > 1.8 earns nothing;
    # w_r(3) = w_d * w_p(r) = 1 * 2 = 2 (2.05 < 2.1); ideal 8 + 2 + 2 = 12
    assert list(out.token_times.round(9)) == [1.4, 1.85, 2.05]
    assert metrics.tdg(inst, out) == pytest.approx(10.0)
    assert metrics.tdg_ratio(inst, out) == pytest.approx(10 / 12)
    assert metrics.miss_tdg_ratio(inst, out) == pytest.approx(2 / 12)
    # every token is emitted during the run, so the emitted TDG is the same
    assert metrics.tdg_emitted(inst, out) == pytest.approx(10.0)


def test_tdg_weights_per_request():
    """First-token and decode-token gains per request scale with the priority weight."""
    inst, _ = one_request(priority=2.0)
    first, later = metrics.tdg_request_weights(inst)
    assert (first[0], later[0]) == (8.0, 2.0)
    assert list(metrics.token_weights(inst)) == [8.0, 2.0, 2.0]
