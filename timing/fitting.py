"""Fitting timing models to profiled iteration times, and reading Vidur profiles.

A *profile* is a table (pandas DataFrame) with one row per measured iteration: a column per
regressor (a name of :data:`slolab.timing.FEATURES`, or ``"tokens"`` for prefill plus decode
tokens with one shared coefficient) and a column of measured times in seconds. :func:`fit`
returns the fitted model and a :class:`FitReport` of its errors on the profile.

Fitting method
--------------
The loss is the sum of squared *relative* residuals ``((T_hat - T) / T)^2`` by default
(``weighting="relative"``), because the errors that matter to a scheduler are relative
(the profile spans 5 ms to 80 ms), and the reported MAPE is relative; ``"absolute"``
minimises squared seconds instead. Slopes are constrained non-negative (an iteration never
gets faster with more work) by bounded-variable least squares (``scipy.optimize.lsq_linear``
with ``method="bvls"``); intercepts are free, because a line of a roofline may legitimately
cross zero below its active range.

- ``form="linear"``: one affine function of the regressors.
- ``form="roofline"``: ``max(floor, affine(regressors))``, a constant floor (fixed per-
  iteration cost while the GEMMs are bound by reading the weights) and a sloped line (the
  compute-bound regime). Rows are ordered by the prediction of the linear fit; for every split
  of that order, the rows before the split fit the floor and the rows after it fit the line,
  and the split whose max-model has the smallest loss over *all* rows wins. With one regressor
  the order is the regressor's order, so the search is exhaustive over breakpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear
from slolab.timing.base import FEATURES, LinearTiming, TimingModel
from slolab.timing.forms import RooflineTiming

__all__ = [
    "FIT_FORMS",
    "FitReport",
    "fit",
    "fit_report",
    "load_vidur_mlp_profile",
]

#: Forms :func:`fit` knows.
FIT_FORMS: tuple[str, ...] = ("linear", "roofline")
_WEIGHTINGS = ("relative", "absolute")


@dataclass(frozen=True, slots=True)
class FitReport:
    """Errors of a timing model on a profile.

    Attributes
    ----------
    form : str
        Form of the fitted model.
    n_points : int
        Profile rows used.
    mape : float
        Mean absolute percentage error, as a fraction (0.05 is 5 %).
    max_rel_error : float
        Largest ``|T_hat - T| / T``.
    max_abs_error_s : float
        Largest ``|T_hat - T|`` (s).
    mean_error_s : float
        Mean signed residual ``T_hat - T`` (s): positive when the model over-predicts.
    rmse_s : float
        Root mean squared residual (s).
    p95_rel_error : float
        95th percentile of ``|T_hat - T| / T``.
    """

    form: str
    n_points: int
    mape: float
    max_rel_error: float
    max_abs_error_s: float
    mean_error_s: float
    rmse_s: float
    p95_rel_error: float

    def __post_init__(self) -> None:
        if self.n_points < 1:
            raise ValueError(f"n_points must be >= 1, got {self.n_points}")
        for name in ("mape", "max_rel_error", "max_abs_error_s", "rmse_s", "p95_rel_error"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if not math.isfinite(self.mean_error_s):
            raise ValueError(f"mean_error_s must be finite, got {self.mean_error_s}")

    def to_record(self) -> dict[str, Any]:
        """Flat dict for a pandas row."""
        return asdict(self)


def fit_report(
    model: TimingModel, features: np.ndarray, measured_s: np.ndarray, form: str | None = None
) -> FitReport:
    """Errors of ``model`` on a ``(n, 7)`` feature matrix against measured times (s).

    Parameters
    ----------
    model : TimingModel
        The model to evaluate.
    features : array ``(n, 7)``
        Shapes, columns as :data:`slolab.timing.FEATURES`.
    measured_s : array ``(n,)``
        Measured times (s), all > 0.
    form : str, optional
        Label for the report; the model's form by default.
    """
    measured = np.asarray(measured_s, dtype=float)
    if measured.ndim != 1 or len(measured) == 0:
        raise ValueError(f"measured_s must be a non-empty 1-D array, got shape {measured.shape}")
    if not np.all(measured > 0):
        raise ValueError("measured_s must be > 0 everywhere (relative errors divide by it)")
    residual = model.times(np.asarray(features, dtype=float)) - measured
    relative = np.abs(residual) / measured
    return FitReport(
        form=form if form is not None else model.form,
        n_points=len(measured),
        mape=float(relative.mean()),
        max_rel_error=float(relative.max()),
        max_abs_error_s=float(np.abs(residual).max()),
        mean_error_s=float(residual.mean()),
        rmse_s=float(np.sqrt(np.mean(residual**2))),
        p95_rel_error=float(np.quantile(relative, 0.95)),
    )


def fit(
    profile: pd.DataFrame,
    form: str = "linear",
    *,
    regressors: Sequence[str] = ("tokens",),
    time_column: str = "time_s",
    nonnegative: bool = True,
    weighting: str = "relative",
    name: str = "fitted",
) -> tuple[TimingModel, FitReport]:
    """Fit a timing model to a profile by least squares.

    Parameters
    ----------
    profile : DataFrame
        One row per measured iteration; a column per regressor and ``time_column``.
    form : {"linear", "roofline"}
        ``"linear"``: ``b + sum_i c_i x_i``; ``"roofline"``: ``max(floor, b + sum_i c_i x_i)``
        as a :class:`~slolab.timing.forms.RooflineTiming` of a constant line and a sloped
        line (see the module docstring for the breakpoint search).
    regressors : sequence of str
        Names of :data:`slolab.timing.FEATURES`, or ``"tokens"`` for prefill plus decode
        tokens (one coefficient for both). Features not listed get coefficient 0.
    time_column : str
        Column of measured times (s), all > 0.
    nonnegative : bool
        Constrain the slopes to be >= 0 (intercepts are always free).
    weighting : {"relative", "absolute"}
        Minimise squared relative residuals or squared seconds.
    name : str
        Label of the fitted model.

    Returns
    -------
    (TimingModel, FitReport)
        The fitted model and its errors on the profile.
    """
    if form not in FIT_FORMS:
        raise ValueError(f"unknown fit form {form!r}; known: {', '.join(FIT_FORMS)}")
    if weighting not in _WEIGHTINGS:
        raise ValueError(f"unknown weighting {weighting!r}; known: {', '.join(_WEIGHTINGS)}")
    regressors = list(regressors)
    if not regressors:
        raise ValueError("regressors must name at least one column")
    unknown = [r for r in regressors if r != "tokens" and r not in FEATURES]
    if unknown:
        raise ValueError(f"unknown regressor(s) {unknown}; known: tokens, {', '.join(FEATURES)}")
    if len(set(regressors)) != len(regressors):
        raise ValueError(f"regressors must be distinct, got {regressors}")
    if "tokens" in regressors and ({"prefill_tokens", "decode_tokens"} & set(regressors)):
        raise ValueError("regressor 'tokens' already covers prefill_tokens and decode_tokens")
    missing = [c for c in [*regressors, time_column] if c not in profile.columns]
    if missing:
        raise ValueError(f"profile lacks column(s) {missing}; it has {list(profile.columns)}")
    x = profile[regressors].to_numpy(dtype=float)
    y = profile[time_column].to_numpy(dtype=float)
    if len(y) < len(regressors) + 1:
        raise ValueError(
            f"profile has {len(y)} rows, fewer than the {len(regressors) + 1} unknowns"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError(f"profile values must be finite and {time_column} > 0")
    weights = 1.0 / y if weighting == "relative" else np.ones_like(y)

    if form == "linear":
        intercept, slopes = _weighted_affine_fit(x, y, weights, nonnegative)
        model: TimingModel = _linear(intercept, slopes, regressors, name)
    else:
        model = _fit_roofline(x, y, weights, nonnegative, regressors, name)
    return model, fit_report(model, _feature_matrix(x, regressors), y, form=form)


def _weighted_affine_fit(
    x: np.ndarray, y: np.ndarray, weights: np.ndarray, nonnegative: bool
) -> tuple[float, np.ndarray]:
    design = np.column_stack([np.ones(len(y)), x]) * weights[:, None]
    target = y * weights
    if nonnegative:
        lower = np.r_[-np.inf, np.zeros(x.shape[1])]
        upper = np.full(x.shape[1] + 1, np.inf)
        solution = lsq_linear(design, target, bounds=(lower, upper), method="bvls").x
    else:
        solution = np.linalg.lstsq(design, target, rcond=None)[0]
    return float(solution[0]), np.asarray(solution[1:], dtype=float)


def _weighted_constant_fit(y: np.ndarray, weights: np.ndarray) -> float:
    w2 = weights**2
    return float(np.sum(w2 * y) / np.sum(w2))


def _fit_roofline(
    x: np.ndarray,
    y: np.ndarray,
    weights: np.ndarray,
    nonnegative: bool,
    regressors: list[str],
    name: str,
) -> RooflineTiming:
    n_unknowns = x.shape[1] + 1
    if len(y) < n_unknowns + 1:
        raise ValueError(f"a roofline fit needs at least {n_unknowns + 1} rows, got {len(y)}")
    intercept0, slopes0 = _weighted_affine_fit(x, y, weights, nonnegative)
    order = np.argsort(intercept0 + x @ slopes0, kind="stable")
    xs, ys, ws = x[order], y[order], weights[order]
    best: tuple[float, float, float, np.ndarray] | None = None
    for split in range(1, len(ys) - n_unknowns + 1):
        floor = _weighted_constant_fit(ys[:split], ws[:split])
        intercept, slopes = _weighted_affine_fit(xs[split:], ys[split:], ws[split:], nonnegative)
        predicted = np.maximum(floor, intercept + xs @ slopes)
        loss = float(np.sum(((predicted - ys) * ws) ** 2))
        if best is None or loss < best[0]:
            best = (loss, floor, intercept, slopes)
    assert best is not None
    _, floor, intercept, slopes = best
    return RooflineTiming(
        [
            LinearTiming(floor, {}, name=f"{name}[floor]"),
            _linear(intercept, slopes, regressors, f"{name}[slope]"),
        ],
        name=name,
    )


def _linear(intercept: float, slopes: np.ndarray, regressors: list[str], name: str) -> LinearTiming:
    coefficients: dict[str, float] = {}
    for regressor, slope in zip(regressors, slopes, strict=True):
        if regressor == "tokens":
            coefficients["prefill_tokens"] = float(slope)
            coefficients["decode_tokens"] = float(slope)
        else:
            coefficients[regressor] = float(slope)
    return LinearTiming(intercept, coefficients, name=name)


def _feature_matrix(x: np.ndarray, regressors: list[str]) -> np.ndarray:
    """Feature rows for profile rows; a ``tokens`` regressor is put in ``prefill_tokens``."""
    features = np.zeros((x.shape[0], len(FEATURES)))
    for k, regressor in enumerate(regressors):
        column = "prefill_tokens" if regressor == "tokens" else regressor
        features[:, FEATURES.index(column)] = x[:, k]
    return features


#: Operators of one transformer layer in Vidur's ``mlp.csv`` (token-parallel, per layer).
VIDUR_LAYER_OPERATORS: tuple[str, ...] = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
#: Operators a model may lack: a parallel attention-and-MLP block (phi-2) has one norm per layer.
VIDUR_OPTIONAL_OPERATORS: tuple[str, ...] = ("post_attention_layernorm",)
#: Operator of Vidur's ``mlp.csv`` that runs once per iteration (the embedding lookup).
VIDUR_ITERATION_OPERATORS: tuple[str, ...] = ("emb",)


def load_vidur_mlp_profile(path: str | Path, tp: int = 1, num_layers: int = 32) -> pd.DataFrame:
    """Token-parallel (GEMM) time of one iteration from a Vidur ``mlp.csv`` profile.

    Vidur profiles each operator of a transformer layer at a range of ``num_tokens`` and
    tensor-parallel degrees, with per-layer kernel times in milliseconds. Per row (one token
    count, one TP degree) this sums the ``.median`` times of the per-layer operators
    (:data:`VIDUR_LAYER_OPERATORS`: norms, QKV and output projections, rope, MLP up/act/down,
    residual add; a model without a post-attention norm, as phi-2, counts it as 0), multiplies by ``num_layers``, and adds the embedding lookup once, because
    it runs once per iteration, not per layer (Vidur's own predictor leaves it out; it is
    0.002 ms at 1 token and 0.12 ms at 4096 tokens). The attention kernels themselves are not
    in this file, and neither is the CPU-side overhead (scheduling, sampling, input
    preparation), so the result is the GPU time of the token-parallel operators only.

    Parameters
    ----------
    path : str or Path
        Vidur ``mlp.csv``.
    tp : int
        Tensor-parallel degree to keep (``num_tensor_parallel_workers``).
    num_layers : int
        Transformer layers of the model (32 for Llama-2-7B and Llama-3-8B).

    Returns
    -------
    DataFrame
        Sorted by ``num_tokens``, with columns ``num_tokens``, ``tokens`` (the same, the
        regressor name :func:`fit` understands), ``time_per_layer_ms``, ``embedding_ms``,
        ``iteration_ms`` and ``time_s`` (the iteration time in seconds).

    References
    ----------
    Vidur (Agrawal et al., MLSys 2024), ``data/profiling/compute/<gpu>/<model>/mlp.csv`` of
    microsoft/vidur (MIT licence).
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    raw = pd.read_csv(path)
    needed = [
        f"time_stats.{op}.median"
        for op in (*VIDUR_LAYER_OPERATORS, *VIDUR_ITERATION_OPERATORS)
        if op not in VIDUR_OPTIONAL_OPERATORS
    ]
    missing = [c for c in [*needed, "num_tokens", "num_tensor_parallel_workers"] if c not in raw]
    if missing:
        raise ValueError(f"{path} is not a Vidur mlp.csv: it lacks column(s) {missing}")
    rows = raw[raw["num_tensor_parallel_workers"] == tp]
    if rows.empty:
        known = sorted(raw["num_tensor_parallel_workers"].unique().tolist())
        raise ValueError(f"no rows with tp={tp} in {path}; tensor-parallel degrees: {known}")
    layer_columns = [f"time_stats.{op}.median" for op in VIDUR_LAYER_OPERATORS]
    layer_ms = rows[[c for c in layer_columns if c in rows]].sum(axis=1)
    embedding_ms = rows[[f"time_stats.{op}.median" for op in VIDUR_ITERATION_OPERATORS]].sum(axis=1)
    out = pd.DataFrame(
        {
            "num_tokens": rows["num_tokens"].astype(int),
            "tokens": rows["num_tokens"].astype(float),
            "time_per_layer_ms": layer_ms,
            "embedding_ms": embedding_ms,
        }
    )
    out["iteration_ms"] = num_layers * out["time_per_layer_ms"] + out["embedding_ms"]
    out["time_s"] = out["iteration_ms"] / 1000.0
    return out.sort_values("num_tokens", kind="stable").reset_index(drop=True)
