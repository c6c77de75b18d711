"""SLO and priority schemes: seeded proportions, attainability bumps and paper tables."""

import math

import numpy as np
import pandas as pd
import pytest
from slolab.instances import (
    SCHEMES,
    Workload,
    assign_slos,
    idle_decode_s,
    read_azure,
    scheme_params,
    tdg_token_weights,
    trace_path,
    zero_load_prefill_s,
)
from slolab.timing.base import LinearTiming

# prefill: 10 ms + 0.1 ms per prompt token; decode: 10 ms + 0.01 ms per KV token read
TIMING = LinearTiming(0.010, {"prefill_tokens": 1e-4, "decode_kv_tokens": 1e-5})
# 1 ms per iteration: every PolyServe tier and TTFT attainable for short requests
FAST = LinearTiming(0.001, {})


def uniform_workload(n: int, prompt: int, output: int) -> Workload:
    return Workload(
        {
            "arrival_s": np.arange(n, dtype=float),
            "prompt_tokens": np.full(n, prompt),
            "output_tokens": np.full(n, output),
        },
        source=f"{n} x ({prompt}, {output})",
    )


def within(count: int, n: int, p: float, sds: float = 4.0) -> bool:
    """``count`` successes of ``n`` are within ``sds`` binomial standard deviations of ``n p``."""
    return abs(count - n * p) <= sds * math.sqrt(n * p * (1 - p))


def test_timing_helpers_by_hand():
    """Zero-load prefill and the last decode step of one request under TIMING."""
    # prefill of 1000 tokens: 0.010 + 1000 * 1e-4 = 0.110 s
    assert zero_load_prefill_s(TIMING, np.array([1000]))[0] == pytest.approx(0.110, rel=1e-12)
    # last decode step of (p=1000, o=501) reads 1000 + 500 = 1500 KV tokens: 0.010 + 0.015
    decode = idle_decode_s(TIMING, np.array([1000, 1000]), np.array([501, 1]))
    assert decode[0] == pytest.approx(0.025, rel=1e-12)
    # one output token: no decode step
    assert decode[1] == 0.0


def test_polyserve_tier_and_ttft_proportions():
    """20,000 attainable requests: tiers 10/20/30/40 % and TTFTs 1/3 each, within 4 sd."""
    n = 20_000
    w = assign_slos(uniform_workload(n, 100, 10), "polyserve", seed=5, timing=FAST)
    tiers = w["tier"]
    for index, p in enumerate((0.1, 0.2, 0.3, 0.4)):
        assert within(int((tiers == index).sum()), n, p)
    # tier index i has TPOT tpot_tiers_s[i]
    np.testing.assert_array_equal(w["tpot_slo_s"], np.array([0.02, 0.03, 0.05, 0.1])[tiers])
    for ttft in (0.3, 0.5, 1.0):
        assert within(int((w["ttft_slo_s"] == ttft).sum()), n, 1 / 3)
    assert np.isnan(w["e2e_slo_s"]).all()


def test_polyserve_bumps_unattainable_tiers():
    """Decode at 25 ms bumps 20 ms draws to 30 ms (10 % + 20 % = 30 % of requests)."""
    n = 20_000
    # last decode step reads 1000 + 500 = 1500 KV tokens: 0.010 + 1500 * 1e-5 = 0.025 s > 20 ms
    w = assign_slos(uniform_workload(n, 1000, 501), "polyserve", seed=1, timing=TIMING)
    tiers = w["tier"]
    assert (tiers >= 1).all()
    assert within(int((tiers == 1).sum()), n, 0.3)
    assert within(int((tiers == 3).sum()), n, 0.4)


def test_polyserve_bumps_ttft_and_marks_best_effort():
    """Prefill of 0.41 s drops the 300 ms TTFT; 1.01 s leaves nothing: best effort."""
    n = 9_000
    # prefill of 4000 tokens: 0.010 + 0.4 = 0.41 s -> TTFT 0.5 (2/3 of draws) or 1.0 (1/3)
    w = assign_slos(uniform_workload(n, 4000, 1), "polyserve", seed=2, timing=TIMING)
    assert set(np.unique(w["ttft_slo_s"]).tolist()) == {0.5, 1.0}
    assert within(int((w["ttft_slo_s"] == 0.5).sum()), n, 2 / 3)
    # prefill of 10000 tokens: 0.010 + 1.0 = 1.01 s > 1 s: no SLO, tier 4 (best effort)
    be = assign_slos(uniform_workload(3, 10_000, 1), "polyserve", seed=2, timing=TIMING)
    assert be["tier"].tolist() == [4, 4, 4]
    assert np.isnan(be["ttft_slo_s"]).all() and np.isnan(be["tpot_slo_s"]).all()
    # last decode step reads 100 + 9999 = 10099 KV tokens: 0.010 + 0.10099 s > 100 ms
    long = assign_slos(uniform_workload(2, 100, 10_000), "polyserve", seed=2, timing=TIMING)
    assert long["tier"].tolist() == [4, 4]


def test_polyserve_is_deterministic_per_seed():
    """Same seed, same columns; another seed changes them."""
    w = read_azure(trace_path("azure_code_2023"), limit=2_000)
    a = assign_slos(w, "polyserve", seed=9, timing=TIMING)
    b = assign_slos(w, "polyserve", seed=9, timing=TIMING)
    c = assign_slos(w, "polyserve", seed=10, timing=TIMING)
    assert a.equals(b)
    assert not np.array_equal(a["tier"], c["tier"])


def test_polyserve_needs_a_timing_model():
    """Without timing= the scheme says what it needs."""
    with pytest.raises(ValueError, match="scheme 'polyserve' needs a timing model"):
        assign_slos(uniform_workload(3, 10, 2), "polyserve", seed=0)


def test_proserve_priorities_half_and_half():
    """20,000 requests: high (2) with probability 1/2 within 4 sd, else 1; SLOs on request."""
    n = 20_000
    w = assign_slos(uniform_workload(n, 50, 5), "proserve", seed=3, ttft_slo_s=1.0, tpot_slo_s=0.05)
    assert set(np.unique(w["priority"]).tolist()) == {1.0, 2.0}
    assert within(int((w["priority"] == 2.0).sum()), n, 0.5)
    assert (w["ttft_slo_s"] == 1.0).all() and (w["tpot_slo_s"] == 0.05).all()


def test_proserve_keeps_other_slos():
    """ProServe priorities on top of PolyServe SLOs leave the SLO columns untouched."""
    base = assign_slos(uniform_workload(100, 50, 5), "polyserve", seed=0, timing=FAST)
    both = assign_slos(base, "proserve", seed=1)
    np.testing.assert_array_equal(both["tpot_slo_s"], base["tpot_slo_s"])
    np.testing.assert_array_equal(both["tier"], base["tier"])


def test_tdg_token_weights_by_hand():
    """Prompts 100, 300 and outputs 50, 10: ratio of means 200/30, mean of ratios (2+30)/2."""
    w = Workload({"arrival_s": [0.0, 1.0], "prompt_tokens": [100, 300], "output_tokens": [50, 10]})
    assert tdg_token_weights(w) == {"w_prefill": pytest.approx(200 / 30), "w_decode": 1.0}
    assert tdg_token_weights(w, how="mean-of-ratios")["w_prefill"] == 16.0


def test_slos_serve_tight_loose_and_scenarios():
    """TTFT = 3x or 5x the zero-load prefill; TPOT 50 or 100 ms per Table 1 scenario."""
    w = uniform_workload(2, 1000, 20)
    # zero-load prefill of 1000 tokens: 0.110 s
    tight = assign_slos(w, "slos-serve", seed=0, timing=TIMING, slack="tight")
    np.testing.assert_allclose(tight["ttft_slo_s"], [0.330, 0.330], rtol=1e-12)
    assert tight["tpot_slo_s"].tolist() == [0.05, 0.05] and tight["tier"].tolist() == [0, 0]
    coder = assign_slos(w, "slos-serve", seed=0, timing=TIMING, scenario="coder")
    # coder: loose prefill (5 x 0.110 = 0.550 s), tight decode (50 ms)
    np.testing.assert_allclose(coder["ttft_slo_s"], [0.550, 0.550], rtol=1e-12)
    assert coder["tpot_slo_s"].tolist() == [0.05, 0.05]
    summarizer = assign_slos(w, "slos-serve", seed=0, timing=TIMING, scenario="summarizer")
    # summarizer: tight prefill (0.330 s), loose decode (100 ms)
    np.testing.assert_allclose(summarizer["ttft_slo_s"], [0.330, 0.330], rtol=1e-12)
    assert summarizer["tpot_slo_s"].tolist() == [0.1, 0.1]


def test_slos_serve_mixed_needs_task_names():
    """Mixed scenario reads a task column of chatbot/coder/summarizer."""
    w = uniform_workload(3, 1000, 20).with_columns(
        task=np.array(["chatbot", "coder", "summarizer"])
    )
    mixed = assign_slos(w, "slos-serve", seed=0, timing=TIMING, scenario="mixed")
    # chatbot 5x / 100 ms, coder 5x / 50 ms, summarizer 3x / 100 ms of 0.110 s
    np.testing.assert_allclose(mixed["ttft_slo_s"], [0.55, 0.55, 0.33], rtol=1e-12)
    assert mixed["tpot_slo_s"].tolist() == [0.1, 0.05, 0.1]
    with pytest.raises(ValueError, match="needs scenario='chatbot' or 'coder' or 'summarizer'"):
        assign_slos(w, "slos-serve", seed=0, timing=TIMING)


def test_sa_tasks_mixed_half_each():
    """Mixed: exactly half chat (TTFT 10 s, TPOT 50 ms) and half code (e2e 30 s)."""
    w = assign_slos(uniform_workload(1_000, 100, 10), "sa", seed=4, task="mixed")
    chat = w["task"] == "chat"
    assert int(chat.sum()) == 500
    assert (w["ttft_slo_s"][chat] == 10.0).all() and (w["tpot_slo_s"][chat] == 0.05).all()
    assert np.isnan(w["e2e_slo_s"][chat]).all()
    assert (w["e2e_slo_s"][~chat] == 30.0).all() and np.isnan(w["ttft_slo_s"][~chat]).all()
    assert w["tier"].tolist() == np.where(chat, 0, 1).tolist()
    again = assign_slos(uniform_workload(1_000, 100, 10), "sa", seed=4, task="mixed")
    assert again.equals(w)


def test_sa_task_column_and_unknown_task():
    """A task column drives the SLOs; an unknown task names the row."""
    w = uniform_workload(2, 100, 10).with_columns(task=np.array(["code", "chat"]))
    out = assign_slos(w, "sa", seed=0)
    assert out["e2e_slo_s"][0] == 30.0 and out["ttft_slo_s"][1] == 10.0
    bad = uniform_workload(2, 100, 10).with_columns(task=np.array(["chat", "poem"]))
    with pytest.raises(ValueError, match=r"task must be one of chat, code, got 'poem' \(row 1\)"):
        assign_slos(bad, "sa", seed=0)


def test_hyperflexis_table_and_task_sets():
    """4-task set: 2 requests per task with Table 1 SLOs; tier = position in the set."""
    w = assign_slos(uniform_workload(8, 40, 20), "hyperflexis", seed=6, task="4-task")
    counts = pd.Series(w["task"]).value_counts().to_dict()
    assert counts == {"medical_qa": 2, "tldr_content_gen": 2, "tldr_headline_gen": 2, "wikisql": 2}
    table = {
        "medical_qa": (0.7, 0.5, 0),
        "tldr_content_gen": (1.0, 0.7, 1),
        "tldr_headline_gen": (2.0, 0.9, 2),
        "wikisql": (20.0, 1.0, 3),
    }
    columns = (w["task"], w["ttft_slo_s"], w["tpot_slo_s"], w["tier"])
    for task, ttft, tpot, tier in zip(*columns, strict=True):
        assert (ttft, tpot, tier) == table[task]
    gsm = assign_slos(uniform_workload(2, 40, 20), "hyperflexis", seed=0, task="gsm8k")
    assert gsm["ttft_slo_s"].tolist() == [0.7, 0.7] and gsm["tpot_slo_s"].tolist() == [0.2, 0.2]


def test_hyperflexis_without_task_is_the_4_task_set():
    """No task column and no task=: the 4-task set, as seeded as task='4-task'."""
    plain = assign_slos(uniform_workload(8, 40, 20), "hyperflexis", seed=6)
    named = assign_slos(uniform_workload(8, 40, 20), "hyperflexis", seed=6, task="4-task")
    # same seed, same shuffle: 2 requests per task in the same rows
    assert plain["task"].tolist() == named["task"].tolist()
    assert sorted(set(plain["task"].tolist())) == sorted(
        ["medical_qa", "tldr_content_gen", "tldr_headline_gen", "wikisql"]
    )


def test_table_scheme_dataframe_and_csv(tmp_path):
    """Explicit per-request SLOs from a DataFrame and from a CSV with an empty cell."""
    w = uniform_workload(3, 100, 10)
    frame = pd.DataFrame({"ttft_slo_s": [1.0, 2.0, 3.0], "priority": [1.0, 2.0, 4.0]})
    out = assign_slos(w, "table", seed=0, table=frame)
    assert out["ttft_slo_s"].tolist() == [1.0, 2.0, 3.0]
    assert out["priority"].tolist() == [1.0, 2.0, 4.0]
    path = tmp_path / "slos.csv"
    path.write_text("tpot_slo_s,e2e_slo_s\n0.05,\n0.1,20\n,30\n")
    csv = assign_slos(w, "table", seed=0, table=path)
    assert np.isnan(csv["e2e_slo_s"][0]) and csv["e2e_slo_s"][1:].tolist() == [20.0, 30.0]
    assert np.isnan(csv["tpot_slo_s"][2])


def test_table_scheme_validation():
    """Wrong length, unknown column and a negative SLO raise with what and where."""
    w = uniform_workload(3, 100, 10)
    with pytest.raises(ValueError, match="table has 2 rows, the workload has 3"):
        assign_slos(w, "table", seed=0, table=pd.DataFrame({"ttft_slo_s": [1.0, 2.0]}))
    with pytest.raises(ValueError, match="unknown column.* deadline; allowed: ttft_slo_s"):
        assign_slos(w, "table", seed=0, table=pd.DataFrame({"deadline": [1.0, 2.0, 3.0]}))
    with pytest.raises(ValueError, match=r"ttft_slo_s must be nan \(none\) or a finite .*row 1"):
        assign_slos(w, "table", seed=0, table=pd.DataFrame({"ttft_slo_s": [1.0, -2.0, 3.0]}))


def test_unknown_scheme_and_parameter():
    """Unknown scheme lists the known ones; unknown parameter lists the accepted ones."""
    w = uniform_workload(2, 100, 10)
    with pytest.raises(ValueError, match="known: polyserve, proserve, slos-serve, sa, hyperflexis"):
        assign_slos(w, "vllm", seed=0)
    with pytest.raises(ValueError, match="unknown parameter.* tiers .*accepted: tpot_tiers_s"):
        assign_slos(w, "polyserve", seed=0, timing=FAST, tiers=(0.1,))
    with pytest.raises(ValueError, match="seed must be an integer"):
        assign_slos(w, "sa", seed=None, task="chat")  # type: ignore[arg-type]
    assert scheme_params("sa") == ["task", "chat_ttft_s", "chat_tpot_s", "code_e2e_s"]
    assert sorted(SCHEMES) == ["hyperflexis", "polyserve", "proserve", "sa", "slos-serve", "table"]
