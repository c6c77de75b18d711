"""The checker catches hand-made violations; metrics on hand-made outcomes."""

import dataclasses

import numpy as np
import pytest
from slolab.heuristics.baselines import SarathiFCFS
from slolab.instances.records import Cluster, Instance, Workload
from slolab.sim import check, metrics, run
from slolab.timing.base import LinearTiming

ROUND = LinearTiming(0.010, {"prefill_tokens": 0.001, "decode_tokens": 0.002})


def clean_run():
    wl = Workload({"arrival_s": [0.0, 0.015], "prompt_tokens": [10, 20], "output_tokens": [3, 2]})
    inst = Instance("two", wl, Cluster(max_batch_tokens=16), ROUND)
    return inst, run(inst, SarathiFCFS(), seed=0)


def test_clean_run_has_no_violation():
    """The reference run (tokens at 0.020/0.047/0.064 and 0.064/0.076) is clean."""
    inst, out = clean_run()
    assert check(inst, out) == []


def test_token_earlier_than_its_iteration_is_caught():
    """Moving a token earlier than the iteration that produced it is a violation."""
    inst, out = clean_run()
    times = out.token_times.copy()
    times[1] = 0.030  # A's second token comes from the iteration ending at 0.047
    v = check(inst, dataclasses.replace(out, token_times=times))
    assert len(v) == 1
    assert v[0].startswith("request 0 token 2: outcome says 0.03, the iterations give 0.047")


def test_iteration_duration_off_the_timing_model_is_caught():
    """An iteration that lasts longer than the timing model says is a violation."""
    inst, out = clean_run()
    ends = out.it_end.copy()
    ends[0] = 0.025  # the model gives 0.020 for A's 10-token prefill
    v = check(inst, dataclasses.replace(out, it_end=ends))
    assert any("lasts 0.025s but the timing model gives 0.02s" in m for m in v)


def test_memory_over_capacity_is_caught():
    """The same run on a server with 20 KV tokens breaks memory (27 resident at t=0.020)."""
    inst, out = clean_run()
    small = dataclasses.replace(inst, cluster=Cluster(max_batch_tokens=16, kv_capacity_tokens=20))
    v = check(small, out)
    assert any("27 KV tokens resident exceed capacity 20" in m for m in v)


def test_duplicate_decode_in_one_iteration_is_caught():
    """Two decode entries of one request in one iteration is a violation."""
    inst, out = clean_run()
    req = out.entry_request.copy()
    # iteration 2 (t=0.020) has entries [B prefill, A decode]; make the prefill entry A too
    a = out.entry_offsets[1]
    req[a : a + 2] = 0
    v = check(inst, dataclasses.replace(out, entry_request=req))
    assert any("appears more than once" in m for m in v)


def test_service_before_arrival_is_caught():
    """Serving a request before it arrives is a violation."""
    inst, out = clean_run()
    late = dataclasses.replace(
        inst, workload=inst.workload.with_columns(arrival_s=np.array([0.0, 0.03]))
    )
    v = check(late, out)
    assert any("request 1 served before its arrival 0.03s" in m for m in v)


def _outcome_with_tokens(inst, token_lists, rejected=None):
    """A minimal Outcome holding given token times (no iteration log)."""
    n = inst.n_requests
    out = inst.workload.output_tokens
    offs = np.concatenate([[0], np.cumsum(out)])
    times = np.concatenate([np.asarray(t, dtype=float) for t in token_lists])
    assert len(times) == offs[-1]
    z = np.zeros(0)
    from slolab.sim.outcome import Outcome

    return Outcome(
        server=np.zeros(n, dtype=int),
        prefill_server=np.zeros(n, dtype=int),
        rejected=np.zeros(n, dtype=bool) if rejected is None else np.asarray(rejected),
        first_scheduled_s=np.zeros(n),
        prefill_done_s=times[offs[:-1]],
        token_offsets=offs,
        token_times=times,
        preemptions=np.zeros(n, dtype=int),
        busy_s=np.array([1.0]),
        it_server=z.astype(int),
        it_start=z,
        it_end=z,
        it_features=np.zeros((0, 7)),
        it_kv_tokens=z.astype(int),
        entry_offsets=np.zeros(1, dtype=int),
        entry_request=z.astype(int),
        entry_phase=z.astype(np.int8),
        entry_tokens=z.astype(int),
        preempt_request=z.astype(int),
        preempt_server=z.astype(int),
        preempt_s=z,
        transfer_done_s=np.full(n, np.inf),
        end_s=float(np.max(times[np.isfinite(times)])),
        wall_s=0.0,
        recorded_iterations=False,
    )


@pytest.fixture
def slo_instance():
    wl = Workload(
        {
            "arrival_s": [0.0, 1.0, 2.0],
            "prompt_tokens": [5, 5, 5],
            "output_tokens": [3, 2, 1],
            "ttft_slo_s": [0.5, 0.5, np.nan],
            "tpot_slo_s": [0.1, 0.1, np.nan],
            "e2e_slo_s": [np.nan, np.nan, 1.0],
            "priority": [2.0, 1.0, 1.0],
        }
    )
    return Instance("slo", wl, Cluster(), ROUND, settings={"w_prefill": 3.0, "w_decode": 1.0})


def test_metrics_on_hand_made_outcome(slo_instance):
    """TTFT, TPOT, gaps, attainment definitions, TDG and G on hand-set token times."""
    out = _outcome_with_tokens(slo_instance, [[0.4, 0.55, 0.62], [1.3, 1.45], [3.5]])
    t = metrics.request_table(slo_instance, out)
    # request 0: TTFT 0.4; mean TPOT (0.62 - 0.4) / 2 = 0.11; max gap 0.15
    #   deadlines 0.5, 0.6, 0.7 -> tokens 0.4, 0.55, 0.62 all on time
    # request 1: TTFT 0.3; TPOT 0.15; deadlines 1.5, 1.6 -> 1.3, 1.45 on time
    # request 2: e2e 1.5 > 1.0 SLO -> missed everywhere
    np.testing.assert_allclose(t["ttft_s"], [0.4, 0.3, 1.5])
    np.testing.assert_allclose(t["tpot_mean_s"][:2], [0.11, 0.15])
    np.testing.assert_allclose(t["max_gap_s"][:2], [0.15, 0.15])
    assert t["met_deadline"].tolist() == [True, True, False]
    # mean TPOT 0.11 > 0.1 and 0.15 > 0.1: both miss under ttft+mean-tpot
    assert t["met_ttft+mean-tpot"].tolist() == [False, False, False]
    assert metrics.attainment(slo_instance, out, "deadline") == pytest.approx(2 / 3)
    assert metrics.attainment(slo_instance, out, "e2e") == 0.0
    # TDG: weights w_prefill * priority for token 1, w_decode * priority for the rest
    #   request 0: 3*2 + 1*2 + 1*2 = 10 on time; request 1: 3*1 + 1*1 = 4 on time
    #   request 2: its only token has no TTFT deadline (inf) -> on time, weight 3*1 = 3
    assert metrics.tdg(slo_instance, out) == pytest.approx(17.0)
    assert metrics.tdg_ratio(slo_instance, out) == pytest.approx(1.0)
    # G = met / sum of latencies = 0 / (0.62 + 0.45 + 1.5)
    assert metrics.g_ratio(slo_instance, out) == 0.0


def test_g_ratio_counts_met_over_latency(slo_instance):
    """G with two requests met: 2 / (0.3 + 0.2 + 0.8)."""
    out = _outcome_with_tokens(slo_instance, [[0.1, 0.2, 0.3], [1.1, 1.2], [2.8]])
    # latencies 0.3, 0.2, 0.8; request 0 TTFT 0.1 TPOT 0.1 met; request 1 TTFT 0.1 TPOT 0.1
    # met; request 2 e2e 0.8 <= 1.0 met -> G = 3 / 1.3
    assert metrics.g_ratio(slo_instance, out) == pytest.approx(3 / 1.3)


def test_rejected_and_unfinished_never_meet(slo_instance):
    """A rejected request and an unfinished one miss under every definition."""
    out = _outcome_with_tokens(
        slo_instance, [[0.1, 0.2, np.inf], [1.1, 1.2], [2.8]], rejected=[False, True, False]
    )
    t = metrics.request_table(slo_instance, out)
    assert t["met_deadline"].tolist() == [False, False, True]
    # TDG: request 0 tokens 1, 2 on time (3*2 + 1*2 = 8); request 1 rejected (0); request 2 (3)
    assert metrics.tdg(slo_instance, out) == pytest.approx(11.0)


def test_unknown_definition_lists_known(slo_instance):
    """An unknown attainment definition raises and lists the known ones."""
    out = _outcome_with_tokens(slo_instance, [[0.1, 0.2, 0.3], [1.1, 1.2], [2.8]])
    with pytest.raises(ValueError, match="known: deadline, ttft\\+mean-tpot"):
        metrics.attainment(slo_instance, out, "p99")


def test_attainment_by_tier_splits_the_deadline_attainment(slo_instance):
    """Tiers 0, 0, 1 with requests met, met, missed: tier 0 at 1.0, tier 1 at 0.0."""
    import dataclasses

    from slolab.instances.records import Workload

    columns = {c: slo_instance.workload[c] for c in slo_instance.workload.columns}
    wl = Workload({**columns, "tier": [0, 0, 1]})
    inst = dataclasses.replace(slo_instance, workload=wl)
    out = _outcome_with_tokens(inst, [[0.4, 0.55, 0.62], [1.3, 1.45], [3.5]])
    # the hand-made outcome of test_metrics_on_hand_made_outcome: met, met, missed (e2e 1.5 > 1)
    assert metrics.attainment_by_tier(inst, out) == {"0": 1.0, "1": 0.0}
    s = metrics.summary(inst, out)
    assert s["attainment_by_tier"] == {"0": 1.0, "1": 0.0}
    assert s["requests_by_tier"] == {"0": 2, "1": 1}
    # without a tier column: no split
    assert "attainment_by_tier" not in metrics.summary(slo_instance, out)
