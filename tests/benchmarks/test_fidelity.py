"""The fidelity benchmark: its grouping, its trend with TP, its rounding and its replays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from slolab.benchmarks.fidelity import _held_out_key, _round, replay, tp_trend
from slolab.timing.measured import REQUEST_COLUMNS, IterationSample, MeasuredRun
from slolab.timing.overheads import ServingOverheads


def _sample(source: str, tp: int) -> IterationSample:
    row = np.array([[1, 0, 0, 0, 1, 1, 0]], dtype=float)
    return IterationSample(source, "opt-13b", "a100", tp, "prefill", row, 0.01)


def test_held_out_part_is_a_tp_degree_for_distserve_and_a_run_otherwise():
    """DistServe's fits are held out by TP degree, inference-sim's by run."""
    assert _held_out_key("vllm-distserve", _sample("distserve", 4)) == 4
    assert _held_out_key("vllm-0.11", _sample("jan20-codellama-train-1", 1)) == (
        "jan20-codellama-train-1"
    )


def test_tp_trend_is_the_largest_tp_minus_the_smallest_pooled_over_models():
    """Medians by TP over models: TP 1 -0.20, TP 8 the median of -0.10 and 0.00."""
    summary = pd.DataFrame(
        {
            "source": ["distserve"] * 4,
            "model": ["opt-13b", "opt-13b", "opt-66b", "opt-66b"],
            "tp": [1, 2, 8, 8],
            "phase": ["decode"] * 4,
            "variant": ["before"] * 4,
            "median_error": [-0.20, -0.30, -0.10, 0.00],
        }
    )
    (row,) = tp_trend(summary).to_dict("records")
    # TP 8: median(-0.10, 0.00) = -0.05; 100 * (-0.05 - (-0.20)) = +15 points
    assert (row["tp_low"], row["tp_high"]) == (1, 8)
    assert row["trend_points"] == pytest.approx(15.0)


def test_round_keeps_four_significant_digits():
    """A relative error of -0.123456 is guarded as -0.1235, a term of 5.6622e-3 s as 5.662e-3."""
    assert _round(-0.123456) == -0.1235
    assert _round(0.0056622) == 0.005662


def _one_request_run(prompt: int, output: int) -> MeasuredRun:
    values = dict.fromkeys(REQUEST_COLUMNS, 0.0)
    values |= {"e2e_s": 1.0, "ttft_s": 0.1, "prompt_tokens": prompt, "output_tokens": output}
    requests = {k: np.array([float(v)]) for k, v in values.items()}
    return MeasuredRun(
        name="one",
        model="llama2-7b",
        gpu="h100",
        tp=1,
        engine="vllm-0.11.0",
        max_num_seqs=8,
        max_num_batched_tokens=4096,
        kv_cache_tokens=100_000,
        prefix_tokens=0,
        prefix_cache_hit_rate=0.0,
        gpu_evidence="test",
        requests=requests,
    )


def test_replay_pays_the_per_iteration_term_once_per_iteration():
    """A lone 512-token prompt with 5 output tokens: one prefill and 4 decode iterations, so a
    10 ms per-iteration term adds 10 ms to TTFT and 50 ms end to end."""
    run = _one_request_run(prompt=512, output=5)
    plain = replay(run, None)
    slowed = replay(run, ServingOverheads("test", iteration_s=0.010))
    # TTFT: the prefill iteration (it emits the first token) + 0.010
    assert slowed["ttft_s"].iloc[0] - plain["ttft_s"].iloc[0] == pytest.approx(0.010)
    # end to end: 1 prefill + (5 - 1) decode iterations, each + 0.010 = 0.050
    assert slowed["e2e_s"].iloc[0] - plain["e2e_s"].iloc[0] == pytest.approx(0.050)
