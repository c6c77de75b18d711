"""Least-squares fits: recovery of known coefficients, reports, and the real Vidur profile."""

import numpy as np
import pandas as pd
import pytest
from slolab.timing import (
    FitReport,
    LinearTiming,
    RooflineTiming,
    fit,
    fit_report,
    load_vidur_mlp_profile,
)
from slolab.timing.presets import VIDUR_H100_LLAMA2_7B_PROFILE


def _grid_profile() -> pd.DataFrame:
    tokens = np.arange(1, 4097, 17, dtype=float)
    kv = (tokens * 37) % 5000
    return pd.DataFrame({"tokens": tokens, "decode_kv_tokens": kv})


def test_linear_fit_recovers_exact_coefficients():
    """Noise-free affine data is fitted back to its coefficients with zero error."""
    profile = _grid_profile()
    # T = 0.004 + 2e-5 * tokens + 1e-7 * kv
    profile["time_s"] = 0.004 + 2e-5 * profile["tokens"] + 1e-7 * profile["decode_kv_tokens"]
    model, report = fit(profile, "linear", regressors=("tokens", "decode_kv_tokens"))
    assert isinstance(model, LinearTiming)
    assert model.intercept_s == pytest.approx(0.004, rel=1e-9)
    assert model.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=1e-9)
    assert model.coefficients["decode_tokens"] == pytest.approx(2e-5, rel=1e-9)
    assert model.coefficients["decode_kv_tokens"] == pytest.approx(1e-7, rel=1e-9)
    # exact data: MAPE 0 up to rounding
    assert report.mape < 1e-9
    assert report.n_points == len(profile)


def test_roofline_fit_recovers_floor_and_slope():
    """max(0.006, 0.004 + 2e-5 x) is recovered: breakpoint at x = 100 tokens."""
    tokens = np.r_[np.arange(1, 200, 3), np.arange(200, 4097, 64)].astype(float)
    # floor 0.006 binds while 0.004 + 2e-5 x < 0.006, i.e. x < 100
    profile = pd.DataFrame({"tokens": tokens, "time_s": np.maximum(0.006, 0.004 + 2e-5 * tokens)})
    model, report = fit(profile, "roofline")
    assert isinstance(model, RooflineTiming)
    floor, slope = model.lines
    assert floor.intercept_s == pytest.approx(0.006, rel=1e-9)
    assert slope.intercept_s == pytest.approx(0.004, rel=1e-9)
    assert slope.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=1e-9)
    assert report.mape < 1e-9


def test_fit_report_of_noisy_data_matches_the_noise_level():
    """With 1% Gaussian relative noise the MAPE is about E|N(0, 0.01)| = 0.008."""
    rng = np.random.default_rng(7)
    profile = _grid_profile()
    truth = 0.004 + 2e-5 * profile["tokens"]
    profile["time_s"] = truth * (1 + 0.01 * rng.standard_normal(len(profile)))
    model, report = fit(profile, "linear")
    # 0.01 * sqrt(2 / pi) = 0.00798; with 241 points the sample MAPE is within +-0.002 of it
    assert 0.006 < report.mape < 0.010
    assert model.coefficients["prefill_tokens"] == pytest.approx(2e-5, rel=0.01)


def test_fit_report_numbers_by_hand():
    """fit_report on three points: MAPE, max errors, bias, RMSE."""
    model = LinearTiming(0.0, {"prefill_tokens": 1.0})
    features = np.zeros((3, 7))
    features[:, 0] = [1.0, 2.0, 4.0]
    measured = np.array([1.0, 2.5, 4.0])
    report = fit_report(model, features, measured)
    # residuals 0, -0.5, 0; relative 0, 0.2, 0 -> MAPE 0.2 / 3
    assert report.mape == pytest.approx(0.2 / 3, rel=1e-12)
    assert report.max_rel_error == pytest.approx(0.2, rel=1e-12)
    assert report.max_abs_error_s == pytest.approx(0.5, rel=1e-12)
    # mean residual -0.5 / 3; RMSE sqrt(0.25 / 3)
    assert report.mean_error_s == pytest.approx(-0.5 / 3, rel=1e-12)
    assert report.rmse_s == pytest.approx(np.sqrt(0.25 / 3), rel=1e-12)


def test_nonnegative_fit_clamps_a_negative_slope():
    """Data falling with the regressor gives slope 0 under the non-negativity bound."""
    profile = pd.DataFrame({"tokens": [1.0, 2.0, 3.0], "time_s": [0.03, 0.02, 0.01]})
    model, _ = fit(profile, "linear", weighting="absolute")
    # slope pinned at 0 (no non-zero coefficient left); intercept is the mean 0.02
    assert model.coefficients == {}
    assert model.intercept_s == pytest.approx(0.02, rel=1e-9)
    free, _ = fit(profile, "linear", weighting="absolute", nonnegative=False)
    # unconstrained: 0.04 - 0.01 * tokens
    assert free.coefficients["prefill_tokens"] == pytest.approx(-0.01, rel=1e-9)


def test_fit_rejects_unknown_names():
    """Unknown forms, regressors and missing columns are errors that list what is known."""
    profile = pd.DataFrame({"tokens": [1.0, 2.0, 3.0], "time_s": [0.01, 0.02, 0.03]})
    with pytest.raises(ValueError, match="known: linear, roofline"):
        fit(profile, "cubic")
    with pytest.raises(ValueError, match="unknown regressor"):
        fit(profile, regressors=("batch",))
    with pytest.raises(ValueError, match="lacks column"):
        fit(profile, regressors=("decode_kv_tokens",))


def test_fit_report_validates_its_fields():
    """A report with no points is rejected with the field named."""
    with pytest.raises(ValueError, match="n_points must be >= 1, got 0"):
        FitReport("linear", 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_vidur_loader_sums_layer_operators():
    """At 1 token, TP 1: 32 layers of 0.175 ms plus the 0.002 ms embedding = 5.602 ms."""
    profile = load_vidur_mlp_profile(VIDUR_H100_LLAMA2_7B_PROFILE, tp=1)
    first = profile.iloc[0]
    # layer medians: norm 0.004 + QKV 0.038 + rope 0.004 + out 0.016 + norm 0.004 + up 0.064
    # + act 0.006 + down 0.038 + add 0.001 = 0.175 ms; 32 * 0.175 + 0.002 = 5.602 ms
    assert first["num_tokens"] == 1
    assert first["time_per_layer_ms"] == pytest.approx(0.175, rel=1e-9)
    assert first["time_s"] == pytest.approx(0.005602, rel=1e-9)
    # 261 token counts profiled at TP 1 (1 .. 4096)
    assert len(profile) == 261
    with pytest.raises(ValueError, match="tensor-parallel degrees: \\[1, 2, 4, 8\\]"):
        load_vidur_mlp_profile(VIDUR_H100_LLAMA2_7B_PROFILE, tp=3)


def test_real_profile_fit_errors():
    """On Vidur's H100 Llama-2-7B profile the roofline MAPE is under 5%, the linear under 6%."""
    profile = load_vidur_mlp_profile(VIDUR_H100_LLAMA2_7B_PROFILE, tp=1)
    roofline, roofline_report = fit(profile, "roofline")
    _, linear_report = fit(profile, "linear")
    # measured: roofline 4.53%, linear 5.16% (docs/timing.md)
    assert roofline_report.mape < 0.05
    assert linear_report.mape < 0.06
    assert roofline_report.mape < linear_report.mape
    # the floor binds up to the crossover (floor - a) / b, between 64 and 128 tokens
    floor, slope = roofline.lines
    crossover = (floor.intercept_s - slope.intercept_s) / slope.coefficients["prefill_tokens"]
    assert 64 < crossover < 128
