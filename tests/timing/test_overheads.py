"""Serving-overhead terms: applying them, fitting them, the calibrated presets."""

from __future__ import annotations

import numpy as np
import pytest
from slolab.timing import preset
from slolab.timing.base import LinearTiming
from slolab.timing.forms import RooflineTiming
from slolab.timing.measured import IterationSample
from slolab.timing.overheads import (
    ServingOverheads,
    apply_overheads,
    calibrated_overheads,
    calibration,
    fit_overheads,
    opt_shape,
    predict,
    real_hardware_error,
)
from slolab.timing.presets import preset_table


def test_terms_scale_and_shift_every_line():
    """A 100-token prefill on 4 GPUs of a 10-layer model pays each term once."""
    base = RooflineTiming([LinearTiming(0.01, {"prefill_tokens": 1e-4})], name="base")
    terms = ServingOverheads(
        "test",
        iteration_s=0.001,
        prefill_seq_s=0.002,
        allreduce_latency_s=1e-5,
        kernel_time_scale=0.5,
    )
    model = apply_overheads(base, terms, num_layers=10, tp=4, name="served")
    # 0.5 * (0.01 + 100 * 1e-4) + 0.001 + 0.002 * 1 + 2 * 10 * log2(4) * 1e-5
    # = 0.01 + 0.001 + 0.002 + 0.0004 = 0.0134
    assert model.time_of(prefill_tokens=100, num_prefill_seqs=1) == pytest.approx(0.0134)
    # at TP 1 the all-reduce term vanishes: 0.0134 - 0.0004
    tp1 = apply_overheads(base, terms, num_layers=10, tp=1, name="served")
    assert tp1.time_of(prefill_tokens=100, num_prefill_seqs=1) == pytest.approx(0.013)


def test_negative_term_is_refused_with_its_name():
    """A negative per-iteration time is an error naming the field and the value."""
    with pytest.raises(ValueError, match=r"iteration_s must be a finite number >= 0, got -0.001"):
        ServingOverheads("bad", iteration_s=-0.001)


def test_fit_recovers_known_terms():
    """Times made from known terms on llama2-7b/h100/tp1 give those terms back."""
    truth = ServingOverheads(
        "truth", iteration_s=0.0008, prefill_seq_s=0.0015, kernel_time_scale=0.9
    )
    samples = []
    for chunk in (64, 512, 2048, 4096):
        row = np.array([[chunk, 0, 0, 0, chunk * (chunk + 1) / 2, 1, 0]], dtype=float)
        samples.append(IterationSample("s", "llama2-7b", "h100", 1, "prefill", row, 1.0))
    for context in (100, 1000, 3000):
        row = np.array([[0, 1, 1, context, 0, 0, 0]], dtype=float)
        samples.append(IterationSample("s", "llama2-7b", "h100", 1, "decode", row, 1.0))
    times = predict(samples, truth)
    samples = [
        IterationSample(s.source, s.model, s.gpu, s.tp, s.phase, s.features, float(t))
        for s, t in zip(samples, times, strict=True)
    ]
    fitted = fit_overheads(samples, "fit", ("iteration_s", "prefill_seq_s"))
    assert fitted.kernel_time_scale == pytest.approx(0.9, rel=1e-6)
    assert fitted.iteration_s == pytest.approx(0.0008, rel=1e-5)
    assert fitted.prefill_seq_s == pytest.approx(0.0015, rel=1e-5)


def test_opt_shape_counts_layer_parameters():
    """OPT-13B: 40 layers of 4 * 5120^2 + 2 * 5120 * 20480 parameters."""
    # 4 * 26,214,400 + 209,715,200 = 314,572,800 per layer; x 40 = 12,582,912,000
    assert opt_shape("opt-13b").non_embedding_params == 12_582_912_000


def test_token_scale_touches_the_per_token_part_only():
    """A factor 0.8 on the per-token coefficients leaves a line's intercept (weight reads)."""
    base = RooflineTiming([LinearTiming(0.01, {"prefill_tokens": 1e-4})], name="base")
    terms = ServingOverheads("test", token_time_scale=0.8, iteration_s=0.001)
    model = apply_overheads(base, terms, num_layers=10, tp=1, name="served")
    # 0.01 + 0.8 * 100 * 1e-4 + 0.001 = 0.01 + 0.008 + 0.001 = 0.019
    assert model.time_of(prefill_tokens=100) == pytest.approx(0.019)


def test_fit_recovers_a_known_token_scale_on_its_grid():
    """Times made with token_time_scale 0.85 and 0.5 ms per iteration give both back."""
    truth = ServingOverheads("truth", iteration_s=0.0005, token_time_scale=0.85)
    samples = []
    for chunk in (64, 512, 2048, 4096):
        row = np.array([[chunk, 0, 0, 0, chunk * (chunk + 1) / 2, 1, 0]], dtype=float)
        samples.append(IterationSample("s", "llama2-7b", "h100", 1, "prefill", row, 1.0))
    for context in (100, 1000, 3000):
        row = np.array([[0, 1, 1, context, 0, 0, 0]], dtype=float)
        samples.append(IterationSample("s", "llama2-7b", "h100", 1, "decode", row, 1.0))
    times = predict(samples, truth)
    samples = [
        IterationSample(s.source, s.model, s.gpu, s.tp, s.phase, s.features, float(t))
        for s, t in zip(samples, times, strict=True)
    ]
    fitted = fit_overheads(samples, "fit", ("iteration_s",), scales=("token_time_scale",))
    assert fitted.token_time_scale == 0.85
    assert fitted.kernel_time_scale == 1.0
    assert fitted.iteration_s == pytest.approx(0.0005, rel=1e-6)


def test_calibrated_preset_takes_each_term_from_its_calibration():
    """On an H100 the vLLM 0.11 terms and its token factor; the all-reduce floor from
    DistServe's fits; on an A100 no token factor."""
    vllm, distserve = calibration("vllm-0.11"), calibration("vllm-distserve")
    h100, a100 = calibrated_overheads("h100"), calibrated_overheads("a100")
    assert (h100.iteration_s, h100.prefill_seq_s) == (vllm.iteration_s, vllm.prefill_seq_s)
    assert h100.token_time_scale == vllm.token_time_scale == 0.9
    assert a100.token_time_scale == 1.0 and a100.iteration_s == vllm.iteration_s
    assert h100.allreduce_latency_s == a100.allreduce_latency_s == distserve.allreduce_latency_s
    # the older engine's own factor and per-sequence term are not applied
    assert (h100.kernel_time_scale, h100.decode_seq_s) == (1.0, 0.0)


def test_calibrated_preset_adds_the_floor_per_tp_step():
    """A Llama-2-70B decode step at batch 1 on 8 A100s pays 2 * 80 * log2(8) all-reduce
    floors and the per-iteration time more than the generated preset (no token factor on
    A100; the per-token part of a batch-1 step below the weight-read floor)."""
    terms = calibrated_overheads("a100")
    shape = {"decode_tokens": 1, "num_decode_seqs": 1, "decode_kv_tokens": 1}
    plain = preset("llama2-70b/a100/tp8").time_of(**shape)
    served = preset("llama2-70b/a100/tp8/calibrated").time_of(**shape)
    # 2 * 80 * 3 = 480 all-reduces' floors, plus iteration_s
    extra = 480 * terms.allreduce_latency_s + terms.iteration_s
    assert served == pytest.approx(plain + extra, rel=1e-12)


def test_presets_state_real_hardware_error_or_not_measured():
    """Only presets a vLLM 0.11 run covers carry a real-hardware error."""
    rows = {r["name"]: r for r in preset_table()}
    assert rows["llama2-70b/h100/tp4"]["real_median_abs_rel_error"] is None
    assert real_hardware_error("llama2-70b/h100/tp4") is None
    measured = rows["llama2-7b/h100/tp1"]["real_median_abs_rel_error"]
    # 56 samples of jan21-llama7b-train-1 (30 prefill, 26 decode), error between 1% and 20%
    assert real_hardware_error("llama2-7b/h100/tp1")["samples"] == 56
    assert 0.01 < measured < 0.2
