"""Timing forms on hand-computed shapes, serialisation and the single-row fast paths."""

import json

import numpy as np
import pytest
from slolab.timing import (
    FEATURES,
    BatchShape,
    LinearTiming,
    MeanLengthTiming,
    PhaseSumTiming,
    ProfiledTiming,
    RooflineTiming,
    ThresholdTiming,
    TimingModel,
)
from slolab.timing.forms import row_timer


def _roofline() -> RooflineTiming:
    return RooflineTiming(
        [
            LinearTiming(0.02, {"prefill_tokens": 1e-4, "decode_tokens": 1e-4}),
            LinearTiming(0.005, {"prefill_tokens": 2e-4, "decode_tokens": 2e-4}),
        ],
        name="two-lines",
    )


def _profiled() -> ProfiledTiming:
    return ProfiledTiming([1, 3], [0, 100], [[0.010, 0.020], [0.014, 0.030]], name="grid")


def _threshold() -> ThresholdTiming:
    return ThresholdTiming(
        "num_decode_seqs",
        95,
        LinearTiming(0.01, {"num_decode_seqs": 1e-4}),
        LinearTiming(0.002, {"num_decode_seqs": 2e-4}),
    )


def _phase_sum() -> PhaseSumTiming:
    return PhaseSumTiming(
        LinearTiming(0.02, {"prefill_tokens": 1e-4}),
        LinearTiming(0.01, {"num_decode_seqs": 1e-3}),
    )


def _mean_length() -> MeanLengthTiming:
    return MeanLengthTiming(
        LinearTiming(0.01, {}), prefill_length_coef_s=1e-5, decode_context_coef_s=2e-6
    )


ALL_FORMS = [_roofline, _profiled, _threshold, _phase_sum, _mean_length]


def test_roofline_takes_the_larger_line():
    """A two-line roofline follows the floor-like line below 150 tokens and the steep one above."""
    model = _roofline()
    # 100 tokens: 0.02 + 100e-4 = 0.030 vs 0.005 + 200e-4 = 0.025 -> 0.030
    assert model.time_of(prefill_tokens=60, decode_tokens=40) == pytest.approx(0.030, rel=1e-12)
    # 300 tokens: 0.02 + 0.03 = 0.050 vs 0.005 + 0.06 = 0.065 -> 0.065
    assert model.time_of(prefill_tokens=300) == pytest.approx(0.065, rel=1e-12)
    # 150 tokens: both lines give 0.035
    assert model.time_of(decode_tokens=150) == pytest.approx(0.035, rel=1e-12)


def test_roofline_from_token_lines_counts_spec_steps():
    """SLOs-Serve's (k1, k2, b) line charges tokens and speculative steps."""
    model = RooflineTiming.from_token_lines([(1e-4, 2e-3, 0.01)])
    # 30 prefill + 20 decode tokens, 3 spec steps: 50 * 1e-4 + 3 * 2e-3 + 0.01 = 0.021
    assert model.time_of(prefill_tokens=30, decode_tokens=20, spec_steps=3) == pytest.approx(
        0.021, rel=1e-12
    )


def test_roofline_affine_only_with_one_line():
    """affine() returns the single line and None for two lines."""
    one = RooflineTiming.from_token_lines([(4e-5, 0.0, 0.03)])
    intercept, coef = one.affine()
    # intercept 0.03; prefill_tokens and decode_tokens both 4e-5
    assert intercept == 0.03
    assert coef[FEATURES.index("prefill_tokens")] == 4e-5
    assert coef[FEATURES.index("decode_tokens")] == 4e-5
    assert _roofline().affine() is None


def test_profiled_bilinear_inside_the_grid():
    """The centre of the cell is the bilinear mix of its four corners."""
    model = _profiled()
    # b = 2, kv = 50: tx = ty = 0.5; low = 0.010 + 0.5 * 0.004 = 0.012;
    # high = 0.020 + 0.5 * 0.010 = 0.025; T = 0.012 + 0.5 * 0.013 = 0.0185
    assert model.time_of(decode_tokens=2, num_decode_seqs=2, decode_kv_tokens=50) == pytest.approx(
        0.0185, rel=1e-12
    )
    # a grid point is returned as profiled: b = 3, kv = 100 -> 0.030
    assert model.time_of(decode_tokens=3, decode_kv_tokens=100) == pytest.approx(0.030, rel=1e-12)


def test_profiled_extrapolates_linearly_and_clamps_at_zero():
    """Outside the grid the edge cell continues linearly, never below zero."""
    model = _profiled()
    # b = 5, kv = 0: tx = (5 - 1) / 2 = 2 -> 0.010 + 2 * 0.004 = 0.018
    assert model.time_of(decode_tokens=5, decode_kv_tokens=0) == pytest.approx(0.018, rel=1e-12)
    # b = 1, kv = 300: ty = 3 -> 0.010 + 3 * 0.010 = 0.040
    assert model.time_of(decode_tokens=1, decode_kv_tokens=300) == pytest.approx(0.040, rel=1e-12)
    steep = ProfiledTiming([10, 20], [0, 1], [[0.010, 0.010], [0.030, 0.030]])
    # b = 0: tx = -1 -> 0.010 - 0.020 = -0.010, clamped to 0
    assert steep.time_of(decode_kv_tokens=0.5) == 0.0


def test_profiled_batch_axis_sequences_ignores_prefill_tokens():
    """With batch_axis='sequences' the coordinate is the number of sequences."""
    model = ProfiledTiming(
        [1, 3], [0, 100], [[0.010, 0.020], [0.014, 0.030]], batch_axis="sequences"
    )
    # 1 decode + 1 prefill sequence = 2 sequences, kv = 0: 0.010 + 0.5 * 0.004 = 0.012
    shape = BatchShape.of(prefill_chunks=[(500, 0)], decode_contexts=[0])
    assert model.time(shape) == pytest.approx(0.012, rel=1e-12)


def test_profiled_from_model_reproduces_a_linear_model_on_its_grid():
    """Tabulating an affine model gives a table that interpolates it exactly."""
    linear = LinearTiming(0.01, {"decode_tokens": 1e-4, "decode_kv_tokens": 1e-7})
    table = ProfiledTiming.from_model(linear, [1, 64, 256], [0, 10_000, 100_000])
    # b = 100, kv = 50,000: 0.01 + 100e-4 + 50,000e-7 = 0.025 (bilinear is exact on affine data)
    assert table.time_of(
        decode_tokens=100, num_decode_seqs=100, decode_kv_tokens=50_000
    ) == pytest.approx(0.025, rel=1e-12)


def test_profiled_rejects_a_bad_grid():
    """A non-increasing grid or a wrongly shaped table is an error naming the field."""
    with pytest.raises(ValueError, match="batch_sizes"):
        ProfiledTiming([1, 1], [0, 1], [[0, 0], [0, 0]])
    with pytest.raises(ValueError, match="shape"):
        ProfiledTiming([1, 2], [0, 1, 2], [[0, 0], [0, 0]])


def test_threshold_switches_regime_at_the_threshold():
    """Below 95 sequences the first model applies, from 95 the second."""
    model = _threshold()
    # 94 sequences: 0.01 + 94e-4 = 0.0194
    assert model.time_of(num_decode_seqs=94, decode_tokens=94) == pytest.approx(0.0194, rel=1e-12)
    # 95 sequences: 0.002 + 95 * 2e-4 = 0.021
    assert model.time_of(num_decode_seqs=95, decode_tokens=95) == pytest.approx(0.021, rel=1e-12)


def test_phase_sum_charges_each_present_phase():
    """Pure iterations pay one part, mixed ones both, an empty one nothing."""
    model = _phase_sum()
    # prefill of 100 tokens: 0.02 + 100e-4 = 0.030
    assert model.time_of(prefill_tokens=100, num_prefill_seqs=1) == pytest.approx(0.030, rel=1e-12)
    # decode of 5 sequences: 0.01 + 5e-3 = 0.015
    assert model.time_of(decode_tokens=5, num_decode_seqs=5) == pytest.approx(0.015, rel=1e-12)
    # both: 0.030 + 0.015 = 0.045
    assert model.time_of(
        prefill_tokens=100, num_prefill_seqs=1, decode_tokens=5, num_decode_seqs=5
    ) == pytest.approx(0.045, rel=1e-12)
    assert model.time_of() == 0.0


def test_mean_length_adds_per_sequence_means():
    """The mean prefill chunk and mean decode context each add their own term."""
    model = _mean_length()
    # 400 prefill tokens over 4 sequences -> mean 100 -> 100 * 1e-5 = 0.001;
    # 3000 KV tokens over 3 sequences -> mean 1000 -> 1000 * 2e-6 = 0.002; 0.01 + 0.003 = 0.013
    assert model.time_of(
        prefill_tokens=400,
        num_prefill_seqs=4,
        decode_kv_tokens=3000,
        num_decode_seqs=3,
        decode_tokens=3,
    ) == pytest.approx(0.013, rel=1e-12)
    # no sequences: only the base, 0.01
    assert model.time_of() == pytest.approx(0.01, rel=1e-12)


@pytest.mark.parametrize("build", ALL_FORMS)
def test_round_trip_through_json(build):
    """to_dict -> JSON -> from_dict gives an equal model with equal times."""
    model = build()
    again = TimingModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert again == model
    assert hash(again) == hash(model)
    rows = _random_rows(seed=3, n=20)
    # the rebuilt model evaluates identically on 20 random shapes
    assert np.array_equal(again.times(rows), model.times(rows))


@pytest.mark.parametrize("build", ALL_FORMS)
def test_single_row_path_matches_the_vectorised_path(build):
    """times on one row equals the same row inside a batch of rows."""
    model = build()
    rows = _random_rows(seed=5, n=40)
    batch = model.times(rows)
    one_by_one = np.array([model.times(rows[i : i + 1])[0] for i in range(len(rows))])
    # identical arithmetic up to rounding in the last bits
    np.testing.assert_allclose(one_by_one, batch, rtol=1e-12, atol=0)


def _linear() -> LinearTiming:
    return LinearTiming(0.012, {"prefill_tokens": 1.7e-4, "decode_kv_tokens": 3.1e-8})


@pytest.mark.parametrize("build", [_linear, *ALL_FORMS])
def test_row_timer_gives_the_float_of_times(build):
    """The engine's one-row timer (a list in, no array for the linear and roofline forms)
    gives, bit for bit, the float ``times`` gives for that row, on every form."""
    model = build()
    rows = _random_rows(seed=7, n=200)
    timer = row_timer(model)
    from_lists = [timer(row) for row in rows.tolist()]
    from_times = [float(model.times(rows[i : i + 1])[0]) for i in range(len(rows))]
    # exact equality: the engine's iteration times (hence every token time) are unchanged
    assert from_lists == from_times


def test_unknown_form_lists_known_ones():
    """from_dict with an unknown form names the registered forms."""
    with pytest.raises(ValueError, match="mean-length.*phase-sum.*profiled.*roofline.*threshold"):
        TimingModel.from_dict({"form": "cubic"})


def _random_rows(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, len(FEATURES)))
    decode = rng.integers(0, 200, n).astype(float)
    chunk = rng.integers(0, 2000, n).astype(float)
    rows[:, 0] = chunk
    rows[:, 1] = decode
    rows[:, 2] = decode
    rows[:, 3] = decode * rng.integers(1, 4000, n)
    rows[:, 4] = chunk * (chunk + 1) / 2
    rows[:, 5] = (chunk > 0).astype(float)
    return rows


def test_padded_static_batch_features() -> None:
    """Two sequences padded to 3 prompt tokens: 6 prefill tokens, 2 sequences, attention work
    2 * 3 * 4 / 2 = 12. Three decoding sequences reading 5 and 7 KV tokens: 3 tokens, 3
    sequences, 15 and 21 KV tokens read."""
    from slolab.timing.base import padded_decode_features, padded_prefill_features

    prefill = padded_prefill_features(2, 3)
    assert prefill.shape == (1, len(FEATURES))
    assert dict(zip(FEATURES, prefill[0], strict=True)) == {
        "prefill_tokens": 6.0,
        "decode_tokens": 0.0,
        "num_decode_seqs": 0.0,
        "decode_kv_tokens": 0.0,
        "prefill_attention_work": 12.0,
        "num_prefill_seqs": 2.0,
        "spec_steps": 0.0,
    }
    decode = padded_decode_features(3, [5, 7])
    assert decode[:, FEATURES.index("decode_tokens")].tolist() == [3.0, 3.0]
    assert decode[:, FEATURES.index("num_decode_seqs")].tolist() == [3.0, 3.0]
    assert decode[:, FEATURES.index("decode_kv_tokens")].tolist() == [15.0, 21.0]
    assert decode[:, FEATURES.index("prefill_tokens")].tolist() == [0.0, 0.0]
