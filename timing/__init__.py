"""The shared token-level timing model: forms, inverse, fitting from profiles, presets.

Every model maps iteration shapes (:data:`FEATURES`) to seconds. Start from a preset
(:func:`preset`, :func:`available_presets`), fit one to a profile (:func:`fit`), or build a
form directly (:class:`LinearTiming`, :class:`RooflineTiming`, :class:`ProfiledTiming`,
:class:`ThresholdTiming`, :class:`PhaseSumTiming`, :class:`MeanLengthTiming`).
:func:`time_to_tokens` and :func:`time2bs` turn a time budget into tokens.
:func:`startup_delay_s` gives how long a switched-on server needs before it serves, by where its
weights come from (disk, host memory, another device).
"""

from slolab.timing.base import FEATURES, BatchShape, LinearTiming, TimingModel
from slolab.timing.forms import (
    MeanLengthTiming,
    PhaseSumTiming,
    ProfiledTiming,
    RooflineTiming,
    ThresholdTiming,
    timing_lines,
)
from slolab.timing.inverse import time2bs, time_to_tokens
from slolab.timing.presets import (
    attention_terms,
    available_presets,
    preset,
    preset_source,
    refit_llama2_7b_h100,
    register_preset,
    resolve_timing,
)
from slolab.timing.startup import (
    WEIGHT_SOURCES,
    available_startup_presets,
    startup_delay_s,
    startup_table,
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
    "WEIGHT_SOURCES",
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
    "available_startup_presets",
    "fit",
    "fit_report",
    "load_vidur_mlp_profile",
    "preset",
    "preset_source",
    "refit_llama2_7b_h100",
    "register_preset",
    "resolve_timing",
    "startup_delay_s",
    "startup_table",
    "time2bs",
    "time_to_tokens",
    "timing_lines",
]
