"""The shared token-level timing model: forms, inverse, fitting from profiles, presets.

Every model maps iteration shapes (:data:`FEATURES`) to seconds. Start from a preset
(:func:`preset`, :func:`available_presets`), fit one to a profile (:func:`fit`), or build a
form directly (:class:`LinearTiming`, :class:`RooflineTiming`, :class:`ProfiledTiming`,
:class:`ThresholdTiming`, :class:`PhaseSumTiming`, :class:`MeanLengthTiming`).
:func:`time_to_tokens` and :func:`time2bs` turn a time budget into tokens.
"""

from slolab.timing.base import FEATURES, BatchShape, LinearTiming, TimingModel
from slolab.timing.forms import (
    MeanLengthTiming,
    PhaseSumTiming,
    ProfiledTiming,
    RooflineTiming,
    ThresholdTiming,
)
from slolab.timing.inverse import time2bs, time_to_tokens
from slolab.timing.presets import (
    attention_terms,
    available_presets,
    preset,
    preset_source,
    refit_llama2_7b_h100,
    resolve_timing,
)

_LAZY = {"FitReport", "fit", "fit_report", "load_vidur_mlp_profile"}


def __getattr__(name: str):
    """The fitting tools (and scipy.optimize behind them) load on first use."""
    if name in _LAZY:
        from slolab.timing import fitting

        return getattr(fitting, name)
    raise AttributeError(f"module 'slolab.timing' has no attribute {name!r}")


__all__ = [
    "FEATURES",
    "BatchShape",
    "FitReport",
    "LinearTiming",
    "MeanLengthTiming",
    "PhaseSumTiming",
    "ProfiledTiming",
    "RooflineTiming",
    "ThresholdTiming",
    "TimingModel",
    "attention_terms",
    "available_presets",
    "fit",
    "fit_report",
    "load_vidur_mlp_profile",
    "preset",
    "preset_source",
    "refit_llama2_7b_h100",
    "resolve_timing",
    "time2bs",
    "time_to_tokens",
]
