"""Tests for the SLOs-Serve scenarios and their capacity search."""

import numpy as np
import pytest
from slolab.harness.scenarios import capacity_of
from slolab.heuristics.baselines import SarathiFCFS
from slolab.instances import read_trace, scale_rate, trace_path
from slolab.instances.scenarios import (
    CONTEXT_TOKENS,
    SCENARIOS,
    scenario_instance,
    scenario_workload,
)
from slolab.sim import metrics, run
from slolab.timing import preset, time2bs

COLUMNS = {"arrival_s", "prompt_tokens", "output_tokens", "ttft_slo_s", "tpot_slo_s", "task"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_columns_sizes_and_levels(name):
    """Every scenario has n requests in context, the SLO columns and tight 3x TTFT."""
    wl = scenario_workload(name, seed=3, n=90)
    timing = preset("opt-13b-h100-slos")
    assert COLUMNS <= set(wl.columns)
    assert len(wl) == 90
    assert np.all(wl.prompt_tokens + wl.output_tokens <= CONTEXT_TOKENS)
    # slack="tight" fixes every prefill level: TTFT / zero-load prefill time = 3 for all rows
    line = timing.lines[0]
    zero_load = line.intercept_s + line.coefficients["prefill_tokens"] * wl.prompt_tokens
    np.testing.assert_allclose(np.asarray(wl["ttft_slo_s"]) / zero_load, 3.0, rtol=1e-12)
    # Table 1 decode levels: coder tight (50 ms), chatbot and summarizer loose (100 ms)
    expected_tpot = {"chatbot": 0.1, "coder": 0.05, "summarizer": 0.1}
    want = np.array([expected_tpot[t] for t in np.asarray(wl["task"])])
    np.testing.assert_array_equal(np.asarray(wl["tpot_slo_s"]), want)
    assert wl.arrival_s[0] == 0.0
    assert np.all(np.diff(wl.arrival_s) >= 0)


def test_chatbot_first_request_ttft_by_hand():
    """The first conversation request (374 prompt tokens) gets TTFT 3 x 0.043052 s."""
    wl = scenario_workload("chatbot", seed=0, n=5)
    # zero-load prefill of 374 tokens: 0.02743 + 4.177e-05 * 374 = 0.04305198 s; tight: 3x
    assert wl.prompt_tokens[0] == 374
    assert wl["ttft_slo_s"][0] == pytest.approx(3 * (0.02743 + 4.177e-05 * 374), rel=1e-12)
    assert wl["ttft_slo_s"][0] == pytest.approx(0.12915594, abs=1e-8)
    assert wl["tpot_slo_s"][0] == 0.1


def test_summarizer_uses_conversation_arrivals_and_arxiv_lengths():
    """Summarizer arrivals are the conversation trace's; its prompts average above 1000."""
    wl = scenario_workload("summarizer", seed=1, n=200)
    conv = read_trace(trace_path("azure_conv_2023"), limit=200)
    np.testing.assert_allclose(wl.arrival_s, conv.arrival_s - conv.arrival_s[0])
    # arXiv lengths within 2048 tokens: prompt mean 1333 over all 5143 rows; a sample of 200
    # stays well above the conversation mean (about 750)
    assert wl.prompt_tokens.mean() > 1100
    assert set(np.asarray(wl["task"]).tolist()) == {"summarizer"}


def test_mixed_is_balanced_and_deterministic():
    """Mixed holds 31/30/30 of each task for n=91 and repeats exactly for one seed."""
    a = scenario_workload("mixed", seed=5, n=91)
    b = scenario_workload("mixed", seed=5, n=91)
    c = scenario_workload("mixed", seed=6, n=91)
    tasks, counts = np.unique(np.asarray(a["task"]), return_counts=True)
    # labels i % 3 over 91 slots: chatbot gets rows 0, 3, ..., 90 (31), the others 30 each
    assert dict(zip(tasks.tolist(), counts.tolist(), strict=True)) == {
        "chatbot": 31,
        "coder": 30,
        "summarizer": 30,
    }
    assert a.equals(b)
    assert not np.array_equal(np.asarray(a["task"]), np.asarray(c["task"]))


def test_unknown_names_and_bad_sizes_raise():
    """Unknown scenario and policy names list the known ones; n out of range is rejected."""
    with pytest.raises(ValueError, match="known: chatbot, coder, summarizer, mixed"):
        scenario_workload("reasoning", seed=0, n=10)
    with pytest.raises(ValueError, match="known: slos-serve, sarathi, vllm"):
        capacity_of("chatbot", "distserve", 1, seed=0, n=10)
    with pytest.raises(ValueError, match="n must be an integer"):
        scenario_workload("coder", seed=0, n=0)


def test_instance_cluster_and_rate():
    """The instance has 2 colocated replicas of 200k KV tokens and the requested mean rate."""
    inst = scenario_instance("coder", seed=0, replicas=2, n=50, rate=4.0)
    assert inst.problem == "serving"
    assert inst.cluster.servers == 2
    assert inst.cluster.kv_capacity_tokens == 200_000
    assert inst.cluster.max_batch_tokens == 2048
    # scale_rate: mean rate (n - 1) / span = 4 req/s, so span = 49 / 4 = 12.25 s
    span = inst.workload.arrival_s[-1] - inst.workload.arrival_s[0]
    assert span == pytest.approx(12.25, rel=1e-9)


def test_capacity_rate_meets_target_when_recomputed():
    """Sarathi's capacity on 60 chatbot requests meets 90% when simulated independently."""
    res = capacity_of("chatbot", "sarathi", 1, seed=0, n=60, rel_tol=0.1)
    assert res.converged
    assert res.capacity > 0
    wl = scenario_workload("chatbot", seed=0, n=60)
    timing = preset("opt-13b-h100-slos")
    # tightest TPOT 0.1 s: budget = time2bs(0.1 s) tokens, as Sarathi is configured
    budget = time2bs(timing, 0.1)
    base = scenario_instance("chatbot", seed=0, replicas=1, n=60)
    inst = type(base)(
        "recheck", scale_rate(wl, res.capacity), base.cluster, timing, problem="serving"
    )
    out = run(inst, SarathiFCFS(budget), seed=0, record_iterations=False)
    attained = metrics.attainment(inst, out)
    assert attained >= 0.9
    assert attained == pytest.approx(dict(res.probes)[res.capacity], abs=1e-12)
    # the bracket's upper end missed the target: its recorded attainment is below 0.9
    assert dict(res.probes)[res.bracket[1]] < 0.9
