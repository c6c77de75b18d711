"""Presets: values at hand-computed shapes, sources, serialisation and the stored fit."""

import json

import pytest
from slolab.sim.static import member_times
from slolab.timing import TimingModel, available_presets, preset, preset_source, time_to_tokens
from slolab.timing.presets import (
    H100_SXM,
    H200,
    LLAMA2_7B,
    LLAMA2_7B_H100_JSON,
    LLAMA31_8B,
    attention_terms,
    refit_llama2_7b_h100,
)


def _decode(model, batch, context):
    return model.time_of(
        decode_tokens=batch, num_decode_seqs=batch, decode_kv_tokens=batch * context
    )


def _prefill(model, prompt):
    return model.time_of(
        prefill_tokens=prompt, num_prefill_seqs=1, prefill_attention_work=prompt * (prompt + 1) / 2
    )


def test_available_presets_and_unknown_name():
    """Eight hand-written presets beside the generated MODEL/GPU/tpN ones; an unknown name
    lists them all."""
    names = available_presets()
    assert [n for n in names if "/" not in n] == [
        "llama2-7b-h100",
        "llama3.1-8b-h200",
        "opt-13b-a100-distserve",
        "opt-13b-a100-hyperflexis",
        "opt-13b-h100-slos",
        "opt-30b-4gpu-slos",
        "opt-6.7b-a100-slos",
        "sa-qwen2.5-7b-v100",
    ]
    with pytest.raises(ValueError, match="known: .*llama2-7b-h100, llama2-7b/a100/tp1"):
        preset("gpt-5")


@pytest.mark.parametrize("name", available_presets())
def test_every_preset_round_trips_and_names_its_source(name):
    """to_dict/from_dict through JSON gives an equal model; every preset has a source."""
    model = preset(name)
    assert model.name == name
    again = TimingModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again == model
    # a decode step of batch 8 at context 512 takes the same time in both
    assert _decode(again, 8, 512) == _decode(model, 8, 512)
    assert len(preset_source(name)) > 40


def test_stored_llama2_fit_equals_a_fresh_fit():
    """data/llama2-7b-h100.json holds exactly what refit_llama2_7b_h100() computes."""
    fresh, reports = refit_llama2_7b_h100()
    stored = json.loads(LLAMA2_7B_H100_JSON.read_text())
    for fresh_line, stored_line in zip(
        fresh.to_dict()["lines"], stored["model"]["lines"], strict=True
    ):
        assert fresh_line["intercept_s"] == pytest.approx(stored_line["intercept_s"], rel=1e-9)
        for feature, value in fresh_line["coefficients"].items():
            assert value == pytest.approx(stored_line["coefficients"][feature], rel=1e-9, abs=0)
    for form in ("roofline", "linear"):
        assert reports[form].mape == pytest.approx(stored["gemm_fit"][form]["mape"], rel=1e-9)


def test_attention_terms_from_model_shape():
    """KV bytes over HBM bandwidth and 4 * layers * hidden FLOPs at 35% of peak."""
    terms = attention_terms(LLAMA2_7B, H100_SXM)
    # 2 * 32 layers * 32 heads * 128 * 2 B = 524,288 B per token; / 3.35e12 B/s = 1.56504e-7 s
    assert LLAMA2_7B.kv_bytes_per_token == 524_288
    assert terms["decode_kv_tokens"] == pytest.approx(1.56504e-7, rel=1e-5)
    # 4 * 32 * 4096 = 524,288 FLOP per pair; / (989e12 * 0.35) = 1.51463e-9 s
    assert terms["prefill_attention_work"] == pytest.approx(1.51463e-9, rel=1e-5)
    # Llama-3.1-8B has 8 KV heads: 131,072 B per token; / 4.8e12 = 2.73067e-8 s on H200
    assert attention_terms(LLAMA31_8B, H200)["decode_kv_tokens"] == pytest.approx(
        2.73067e-8, rel=1e-5
    )


def test_llama2_h100_adds_kv_reads_to_the_gemm_floor():
    """At small batches the GEMM floor binds; KV reads add 1.565e-7 s per context token."""
    model = preset("llama2-7b-h100")
    floor = model.lines[0].intercept_s
    # batch 1 at context 1: floor + 1.56504e-7
    assert _decode(model, 1, 1) == pytest.approx(floor + 1.56504e-7, rel=1e-6)
    # batch 8 at context 4096: floor + 32,768 * 1.56504e-7 = floor + 5.1283e-3
    assert _decode(model, 8, 4096) == pytest.approx(floor + 5.1283e-3, rel=1e-4)


def test_llama31_h200_matches_polyserve_statements():
    """15 ms at batch 1, context 1; 20 ms at ~50 and 40 ms at ~150 sequences at the implied context."""
    model = preset("llama3.1-8b-h200")
    # floor line 0.015 s; slope line 0.010 + 2.05e-5 + 2.7e-8 s = 0.01002 s -> 0.015
    assert _decode(model, 1, 1) == pytest.approx(0.015, rel=1e-12)
    slope = model.lines[1].coefficients
    # per sequence at context L: gemm + L * kv = (0.040 - 0.020) / (150 - 50) = 2e-4 s
    context = (2e-4 - slope["decode_tokens"]) / slope["decode_kv_tokens"]
    assert 6000 < context < 7000
    assert _decode(model, 50, context) == pytest.approx(0.020, rel=1e-9)
    assert _decode(model, 150, context) == pytest.approx(0.040, rel=1e-9)


def test_llama31_h200_saturates_memory_before_100ms():
    """At a 100 ms TPOT and a 512-token mean context, the batch outgrows the H200's KV memory."""
    model = preset("llama3.1-8b-h200")
    slope = model.lines[1].coefficients
    per_sequence = slope["decode_tokens"] + 512 * slope["decode_kv_tokens"]
    # 0.010 + b * (2.05e-5 + 512 * 2.73e-8) <= 0.1 -> b ~ 0.09 / 3.45e-5 ~ 2,600 sequences
    batch = int((0.1 - model.lines[1].intercept_s) / per_sequence)
    assert 2500 < batch < 2700
    # KV memory: 0.9 * 141e9 B - 2 * 8.03e9 B of weights = 110.8e9 B / 131,072 B = 845k tokens,
    # below the 2,600 * 512 = 1.33M tokens the 100 ms iteration could carry
    kv_capacity_tokens = (0.9 * 141e9 - 2 * 8.03e9) / LLAMA31_8B.kv_bytes_per_token
    assert batch * 512 > kv_capacity_tokens


def test_distserve_decode_regimes_and_prefill():
    """DistServe's OPT-13B formulas at batch 1, batch 100 and a 1000-token prefill."""
    model = preset("opt-13b-a100-distserve")
    # decode batch 1, context 100: 19.93 + 0.000627 * 100 + 0.0385 = 20.0312 ms
    assert _decode(model, 1, 100) == pytest.approx(20.0312e-3, rel=1e-9)
    # decode batch 100 at context 100: 7.166 + 0.000580 * 10,000 + 0.1583 * 100 = 28.796 ms
    assert _decode(model, 100, 100) == pytest.approx(28.796e-3, rel=1e-9)
    # prefill of 1000 tokens: 18.10 + 0.1019 * 1000 + 7.122e-6 * 1000^2 = 127.122 ms, via
    # sum(l^2) = 2 * work - tokens = 2 * 500,500 - 1000 = 1,000,000
    assert _prefill(model, 1000) == pytest.approx(127.122e-3, rel=1e-9)
    # mixed: both parts, 127.122 + 20.0312 = 147.1532 ms
    mixed = model.time_of(
        prefill_tokens=1000,
        num_prefill_seqs=1,
        prefill_attention_work=500_500,
        decode_tokens=1,
        num_decode_seqs=1,
        decode_kv_tokens=100,
    )
    assert mixed == pytest.approx(147.1532e-3, rel=1e-9)


def test_hyperflexis_eq2_is_one_line_at_every_batch_size():
    """HyperFlexis Eqs. 1-2: DistServe's prefill, and its small-batch decode line everywhere."""
    model = preset("opt-13b-a100-hyperflexis")
    # prefill as DistServe: 18.10 + 0.1019 * 1000 + 7.122e-6 * 1000^2 = 127.122 ms
    assert _prefill(model, 1000) == pytest.approx(127.122e-3, rel=1e-9)
    # decode batch 100, context 100: 19.93 + 0.000627 * 10,000 + 0.0385 * 100 = 30.05 ms (the
    # DistServe preset switches lines at 95 sequences and gives 28.796 ms)
    assert _decode(model, 100, 100) == pytest.approx(30.05e-3, rel=1e-9)
    assert _decode(model, 1, 100) == pytest.approx(20.0312e-3, rel=1e-9)


def test_distserve_chunked_prefill_charges_the_square_increment():
    """A chunk of 500 after a 500-token prefix pays 1000^2 - 500^2 of the sum(l^2) term."""
    model = preset("opt-13b-a100-distserve")
    # work = 500 * (500 + 501 / 2) = 375,250; 2 * work - 500 = 750,000 = 1000^2 - 500^2
    # T = 18.10 + 0.1019 * 500 + 7.122e-6 * 750,000 = 18.10 + 50.95 + 5.3415 = 74.3915 ms
    chunk = model.time_of(prefill_tokens=500, num_prefill_seqs=1, prefill_attention_work=375_250)
    assert chunk == pytest.approx(74.3915e-3, rel=1e-9)


def test_slos_serve_rooflines():
    """SLOs-Serve's published lines at hand-computed token counts."""
    # OPT-13B/H100, 300 tokens: 0.02743 + 300 * 4.177e-5 = 0.039961 s
    assert preset("opt-13b-h100-slos").time_of(
        prefill_tokens=200, decode_tokens=100
    ) == pytest.approx(0.039961, rel=1e-12)
    opt67 = preset("opt-6.7b-a100-slos")
    # 100 tokens: max(0.006878 + 0.0248, 0.007523 + 0.003033) = max(0.031678, 0.010556)
    assert opt67.time_of(prefill_tokens=100) == pytest.approx(0.031678, rel=1e-12)
    # 4000 tokens: max(0.27512 + 0.0248, 0.30092 + 0.003033) = max(0.29992, 0.303953)
    assert opt67.time_of(prefill_tokens=4000) == pytest.approx(0.303953, rel=1e-12)
    # OPT-30B, 200 tokens and 4 spec steps: 200 * 9.314e-5 + 4 * 0.002797 + 0.03788 = 0.067696
    assert preset("opt-30b-4gpu-slos").time_of(prefill_tokens=200, spec_steps=4) == pytest.approx(
        0.067696, rel=1e-12
    )


def test_sa_predictor_in_a_static_batch():
    """A member of a static batch of 2 with 100 prompt and 3 output tokens, per Table 2."""
    model = preset("sa-qwen2.5-7b-v100")
    ttft, execution = member_times(model, batch_size=2, prompt_tokens=100, output_tokens=3)
    # prefill: 0.1 * 2 * 100 + 5.7 * 2 + 0.01 * 100 + 43.67 = 20 + 11.4 + 1 + 43.67 = 76.07 ms
    assert ttft == pytest.approx(76.07e-3, rel=1e-9)
    # decode at L = 101: 0.0002 * 2 * 101 + 0.275 * 2 + 0.00088 * 101 + 15.85 = 16.52928 ms
    # decode at L = 102: 0.0408 + 0.55 + 0.08976 + 15.85 = 16.53056 ms
    # execution: 76.07 + 16.52928 + 16.53056 = 109.12984 ms
    assert execution == pytest.approx(109.12984e-3, rel=1e-9)


def test_sa_predictor_budget_for_a_chunk():
    """With the phase-sum rule a chunk must also pay the prefill intercept of 43.67 ms."""
    model = preset("sa-qwen2.5-7b-v100")
    # decode part, batch 1 at context 1000: 0.2 + 0.275 + 0.88 + 15.85 = 17.205 ms;
    # chunk n: 43.67 + 5.7 + 0.1 n + 0.01 n = 49.37 + 0.11 n ms; budget 100 ms:
    # 0.11 n <= 100 - 17.205 - 49.37 = 33.425 -> n = 303.86 -> 303
    assert time_to_tokens(model, 0.1, decode_seqs=1, decode_kv_tokens=1000) == 303


def test_serving_clusters_move_the_kv_cache_of_their_presets_model():
    """A disaggregated serving instance moves 131,072 B per token under the Llama-3.1-8B preset
    (8 KV heads) and 524,288 B under Llama-2-7B's; a preset naming no model shape keeps the
    cluster default."""
    from slolab.problems.serving import serving_instance
    from slolab.timing.presets import preset_kv_bytes_per_token

    def moved(timing: str) -> float:
        inst = serving_instance(
            "azure_conv_2023",
            seed=0,
            limit=5,
            timing=timing,
            mode="disaggregated",
            prefill_servers=1,
            servers=2,
        )
        return inst.cluster.kv_bytes_per_token

    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072; with 32 KV heads 524,288
    assert moved("llama3.1-8b-h200") == 131_072
    assert moved("llama2-7b-h100") == 524_288
    assert preset_kv_bytes_per_token("opt-13b-h100-slos") is None
    assert moved("opt-13b-h100-slos") == 524_288  # the Cluster default
