"""The plugins installed for every registry: the listing behind ``slolab plugins`` and
:func:`slolab.plugins.installed_plugins`."""

from __future__ import annotations

from slolab.heuristics.policies import policy_names
from slolab.heuristics.scalers import scaler_names
from slolab.instances.slos import scheme_names
from slolab.plugin_loading import registered_plugins
from slolab.problems import problem_names
from slolab.timing import available_presets

__all__ = ["installed_plugins"]


def installed_plugins() -> dict[str, dict[str, str]]:
    """Every plugin of every group that loaded: ``group -> {name: "module:attribute"}``
    (loads them all; broken ones are skipped with a warning)."""
    policy_names()
    scaler_names()
    scheme_names()
    available_presets()
    problem_names()
    return registered_plugins()
