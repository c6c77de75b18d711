"""Presets generated from the fitted Vidur table: fit errors, hand arithmetic, refusals, a run."""

import json
import shutil
from pathlib import Path

import pytest
from slolab.harness.cli import main
from slolab.harness.serving import ServingSetup
from slolab.sim import check
from slolab.timing import TimingModel, available_presets, preset
from slolab.timing.generated import (
    VIDUR_FITS_JSON,
    fit_error_table,
    generated_preset,
    generated_preset_names,
    refused_presets,
)
from slolab.timing.presets import LLAMA2_7B_H100_JSON, VIDUR_H100_LLAMA2_7B_PROFILE
from slolab.timing.vendor_vidur import fit_vidur_profiles

DOCS = Path(__file__).resolve().parents[2] / "docs" / "timing.md"

TABLE = json.loads(VIDUR_FITS_JSON.read_text())


def test_vendored_table_is_compact_and_covers_every_profile():
    """One JSON under 200 KB: 20 (model, GPU) profiles, 71 (model, GPU, TP) fits (phi-2 at TP 1 only), 10 all-reduce
    fits, 8 model shapes, 3 GPUs with dated prices."""
    assert VIDUR_FITS_JSON.stat().st_size < 200_000
    assert len(TABLE["token_parallel"]) == 20
    assert sum(len(per) for per in TABLE["token_parallel"].values()) == 71
    assert sum(len(per) for per in TABLE["all_reduce"].values()) == 10
    assert len(TABLE["models"]) == 8
    assert {g: s["price_usd_per_hour"] for g, s in TABLE["gpus"].items()} == {
        "a40": 1.28,
        "a100": 2.21,
        "h100": 4.25,
    }
    assert {s["price_date"] for s in TABLE["gpus"].values()} == {"2024-02-07"}


def test_fit_errors_against_the_profiles_are_bounded():
    """Over every (model, GPU, TP) the fitted iteration time is within 6% of the profile at
    the median row and within 40% at the worst row (llama3-8b/a100/tp8: 39.3%)."""
    medians, maxima = [], []
    for per_tp in TABLE["token_parallel"].values():
        for fits in per_tp.values():
            medians.append(fits["iteration_median_rel_error"])
            maxima.append(fits["iteration_max_rel_error"])
    assert max(medians) < 0.06
    assert max(maxima) < 0.40
    assert min(medians) > 0.01  # a real fit, not a copy of the profile


def test_table_fit_of_llama2_7b_h100_tp1_equals_the_hand_preset_fit():
    """The table's Llama-2-7B H100 TP 1 fit is the GEMM fit of the hand preset (same profile,
    same method): floor, intercept and slope agree to 1e-9 relative."""
    fits = TABLE["token_parallel"]["llama2-7b/h100"]["1"]
    stored = json.loads(LLAMA2_7B_H100_JSON.read_text())["model"]["lines"]
    assert fits["floor_s"] == pytest.approx(stored[0]["intercept_s"], rel=1e-9)
    assert fits["intercept_s"] == pytest.approx(stored[1]["intercept_s"], rel=1e-9)
    assert fits["slope_s"] == pytest.approx(stored[1]["coefficients"]["prefill_tokens"], rel=1e-9)


def test_iteration_time_equals_hand_computation_from_the_table():
    """llama2-70b/h100/tp4, decode of 8 sequences at context 1000: token-parallel fit + 160
    all-reduces of 8 * 8192 * 2 bytes + KV reads / 4."""
    tp = TABLE["token_parallel"]["llama2-70b/h100"]["4"]
    ar = TABLE["all_reduce"]["h100_dgx"]["4"]
    gemm = max(tp["floor_s"], tp["intercept_s"] + tp["slope_s"] * 8)
    reduce = 2 * 80 * max(ar["floor_s"], ar["intercept_s"] + ar["slope_s"] * 8 * 8192 * 2)
    # KV bytes per token: 2 * 80 layers * 8 KV heads * 128 * 2 bytes = 327,680; HBM 3.35 TB/s
    kv_reads = 8 * 1000 * 327_680 / 3.35e12 / 4
    model = preset("llama2-70b/h100/tp4")
    got = model.time_of(decode_tokens=8, num_decode_seqs=8, decode_kv_tokens=8000)
    assert got == pytest.approx(gemm + reduce + kv_reads, rel=1e-12)
    # the all-reduces are a real part of the step: 5.8 ms of 21.2 ms
    assert reduce == pytest.approx(5.8e-3, abs=0.1e-3)
    assert got == pytest.approx(21.2e-3, abs=0.1e-3)


def test_kv_capacity_and_price_by_hand():
    """llama2-70b/h100/tp4: 4 x 80 GiB x 0.9 less 137.97 GB of weights, over 327,680 bytes
    per token, is 522,649 tokens; the server costs 4 x $4.25/h."""
    info = generated_preset("llama2-70b/h100/tp4")
    params = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) + 2 * 32768 * 8192
    assert params == 68_987_912_192
    free = 4 * 0.9 * 80 * 2**30 - 2 * params  # 171,261,820,928 bytes
    assert int(free // 327_680) == 522_649
    assert info.kv_capacity_tokens == 522_649
    assert info.price_usd_per_hour == pytest.approx(17.0)
    assert (info.gpu, info.tp, info.gpus_per_server, info.model) == ("h100", 4, 4, "llama2-70b")


def test_a_70b_model_on_one_a40_is_refused_with_one_line():
    """The weights (128.5 GiB) exceed one A40's 45 GiB less its 10% reserve."""
    message = (
        "llama2-70b/a40/tp1: the weights of llama2-70b need 128.5 GiB per GPU at TP 1, more "
        "than the 40.5 GiB one A40 holds after its 10% reserve"
    )
    with pytest.raises(ValueError) as exc:
        preset("llama2-70b/a40/tp1")
    assert str(exc.value) == message
    assert refused_presets()["llama2-70b/a40/tp1"] == message


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("phi-2/h100/tp2", "phi-2/h100/tp2: phi-2 on h100 is profiled at TP 1 only"),
        (
            "llama3-8b/h100/tp1",
            "llama3-8b/h100/tp1: no profile of llama3-8b on h100 (profiled on a100)",
        ),
        ("llama2-7b/a40/tp2", "llama2-7b/a40/tp2: no all-reduce profile of 2 a40 GPUs in one node"),
        (
            "llama2-7b/h100/tp3",
            "llama2-7b/h100/tp3: llama2-7b on h100 is profiled at TP 1, 2, 4, 8 only",
        ),
    ],
)
def test_unsupported_combinations_are_refused(name, reason):
    """TP not profiled, GPU not profiled, no all-reduce profile: one line saying why."""
    with pytest.raises(ValueError) as exc:
        preset(name)
    assert str(exc.value) == reason


def test_generated_names_are_listed():
    """48 of the 80 (model, GPU, TP) candidates are supported and listed; 32 are refused."""
    names = generated_preset_names()
    assert len(names) == 48
    assert len(refused_presets()) == 32
    assert set(names) <= set(available_presets())
    assert {"llama2-70b/h100/tp4", "llama3-70b/a100/tp8", "phi-2/a40/tp1"} <= set(names)


def test_presets_command_lists_price_kv_and_fit_error(capsys):
    """``slolab presets --json`` gives a generated preset's price, KV tokens and fit errors
    and None for the hand-written ones."""
    assert main(["presets", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["llama2-70b/h100/tp4"]
    assert (row["price_usd_per_hour"], row["kv_capacity_tokens"], row["tp"]) == (17.0, 522_649, 4)
    fits = TABLE["token_parallel"]["llama2-70b/h100"]["4"]
    assert row["fit_median_rel_error"] == fits["iteration_median_rel_error"]
    assert rows["llama2-7b-h100"]["price_usd_per_hour"] is None


def test_hand_preset_llama2_7b_h100_is_unchanged():
    """The hand preset is the stored JSON model, bit for bit, at four shapes."""
    stored = TimingModel.from_dict(json.loads(LLAMA2_7B_H100_JSON.read_text())["model"])
    model = preset("llama2-7b-h100")
    assert model.to_dict() == stored.to_dict()
    for shape in (
        {"decode_tokens": 1, "num_decode_seqs": 1, "decode_kv_tokens": 1},
        {"decode_tokens": 64, "num_decode_seqs": 64, "decode_kv_tokens": 64 * 2048},
        {"prefill_tokens": 2048, "num_prefill_seqs": 1, "prefill_attention_work": 2048 * 2049 / 2},
    ):
        assert model.time_of(**shape) == stored.time_of(**shape)
    # 5.797 ms for a decode step of one sequence (the GEMM floor)
    assert model.time_of(decode_tokens=1, num_decode_seqs=1, decode_kv_tokens=1) == (
        pytest.approx(5.797e-3, abs=1e-6)
    )


def test_generated_preset_runs_a_checker_clean_simulation():
    """40 requests of azure_conv_2023 on one llama2-70b/h100/tp4 server with its KV capacity:
    all finish and the checker finds nothing."""
    info = generated_preset("llama2-70b/h100/tp4")
    setup = ServingSetup(
        trace="azure_conv_2023",
        timing=info.name,
        kv_capacity=info.kv_capacity_tokens,
        limit=40,
        seed=3,
    )
    instance, scheduler = setup.prepare(setup.instance())
    outcome = scheduler.run(instance, seed=3, record_iterations=True)
    assert check(instance, outcome) == []
    assert int(outcome.finished.sum()) == 40


def test_docs_error_table_is_the_table_of_the_vendored_fits():
    """The error table of docs/timing.md is generated from the vendored JSON (20 rows)."""
    table = fit_error_table()
    assert len(table.splitlines()) == 22
    assert "| llama2-70b/h100 | 3.2 / 28.0 | 3.1 / 26.0 | 2.6 / 21.0 | 3.2 / 21.8 |" in table
    assert table in DOCS.read_text()


def test_vendoring_script_reproduces_the_stored_fit(tmp_path):
    """The vendoring script run on a folder holding the vendored Llama-2-7B H100 profile
    writes the stored table's fits at TP 1 and 4 (to 1e-9) and no all-reduce without a
    network profile."""
    source = tmp_path / "compute" / "h100" / "meta-llama" / "Llama-2-7b-hf"
    source.mkdir(parents=True)
    shutil.copy(VIDUR_H100_LLAMA2_7B_PROFILE, source / "mlp.csv")
    (tmp_path / "network").mkdir()
    (tmp_path / "models.csv").write_text(
        "model,num_layers,num_q_heads,num_kv_heads,embedding_dim,mlp_hidden_dim,"
        "max_position_embeddings,vocab_size,use_gated_mlp,no_tensor_parallel\n"
        "meta-llama/Llama-2-7b-hf,32,32,32,4096,11008,4096,32768,true,false\n"
    )
    (tmp_path / "gpus.csv").write_text(
        "gpu,fp16_dense_tflops,memory_gb,hbm_tb_per_s,price_usd_per_hour_2024_02,"
        "price_usd_per_hour_later,devices_per_node_dgx,devices_per_node_pairwise_nvlink\n"
        "h100,1000,80,3.35,4.25,6.98,8,4\n"
    )
    fresh = fit_vidur_profiles(tmp_path)
    assert fresh["all_reduce"] == {}
    for tp in ("1", "4"):
        got = fresh["token_parallel"]["llama2-7b/h100"][tp]
        stored = TABLE["token_parallel"]["llama2-7b/h100"][tp]
        for key in ("floor_s", "intercept_s", "slope_s", "median_rel_error", "max_rel_error"):
            assert got[key] == pytest.approx(stored[key], rel=1e-9)
    # TP 1 has no all-reduce: the iteration error is the token-parallel fit's
    assert fresh["token_parallel"]["llama2-7b/h100"]["1"]["iteration_max_rel_error"] == (
        pytest.approx(0.195, abs=5e-4)
    )
    assert fresh["gpus"]["h100"]["price_date"] == "2024-02-07"
