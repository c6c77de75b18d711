"""Plugins: policies, routers, scalers, SLO schemes, timing presets and problems from outside
the package.

An installed package joins slolab by declaring entry points in one of :data:`GROUPS`
(``[project.entry-points."slolab.policies"]`` in its ``pyproject.toml``); a class that is only
importable (a file in the working directory, say) is named ``package.module:Name`` wherever a
policy, router or scaler name is taken. What each group's entry point names:

- ``slolab.policies``: a Policy class or factory (it takes a ``token_budget`` keyword when it
  runs on a token budget per iteration), or a
  :class:`slolab.heuristics.policies.PolicyEntry` for full control (its own router, set-up,
  capacity bound);
- ``slolab.routers``: a Router class or factory called without arguments;
- ``slolab.scalers``: a Scaler class or factory; it is passed ``min_servers`` and
  ``max_servers`` when it accepts them, or a :class:`slolab.heuristics.scalers.ScalerEntry`;
- ``slolab.slo_schemes``: ``scheme(workload, rng, timing, **params) -> {column: array}``, as
  the built-in schemes of :mod:`slolab.instances.slos` (keyword-only parameters are the
  scheme's parameters);
- ``slolab.presets``: a function without arguments returning a
  :class:`slolab.timing.TimingModel` (its ``source`` attribute or docstring says where its
  numbers come from);
- ``slolab.problems``: a :class:`slolab.problems.Problem`.

Entry points are read once per process, the first time a registry of their group is looked
up or listed (so a command that needs no policy imports no policy plugin). A plugin that fails
to import or to register is skipped with one :class:`PluginWarning` naming it; nothing else
fails. The public protocols and registries a plugin relies on are listed in
:data:`PUBLIC_API`, versioned by :data:`PLUGIN_API_VERSION` (docs/extending.md).
"""

from slolab.harness.plugins import installed_plugins
from slolab.plugin_loading import (
    GROUPS,
    TRACEBACK_ENV,
    PluginFailure,
    PluginWarning,
    accepted_keywords,
    description_of,
    import_reference,
    is_reference,
    load_plugins,
    lookup,
    plugin_failure,
    traceback_wanted,
)

__all__ = [
    "GROUPS",
    "PLUGIN_API_VERSION",
    "PUBLIC_API",
    "PluginFailure",
    "PluginWarning",
    "TRACEBACK_ENV",
    "accepted_keywords",
    "description_of",
    "import_reference",
    "installed_plugins",
    "is_reference",
    "load_plugins",
    "lookup",
    "plugin_failure",
    "traceback_wanted",
]

#: Version of the plugin API (:data:`PUBLIC_API`): raised whenever a public name is removed or
#: a signature changes (a test compares them with a stored snapshot).
PLUGIN_API_VERSION = 3

#: The public API a plugin may rely on: ``module -> names`` (classes, functions, constants).
PUBLIC_API: dict[str, tuple[str, ...]] = {
    "slolab.sim": (
        "Batch",
        "ClusterView",
        "HOLD",
        "Outcome",
        "Policy",
        "PolicyError",
        "Router",
        "ScaleAction",
        "Scaler",
        "Server",
        "check",
        "run",
    ),
    "slolab.heuristics.policies": (
        "PolicyEntry",
        "Scheduler",
        "make_policy",
        "make_router",
        "make_scheduler",
        "policy_entry",
        "policy_names",
        "register_policy",
        "register_router",
        "router_names",
        "sarathi_token_budget",
    ),
    "slolab.heuristics.scalers": (
        "ScalerEntry",
        "make_scaler",
        "register_scaler",
        "scaler_names",
    ),
    "slolab.instances": ("assign_slos", "register_scheme", "scheme_names"),
    "slolab.timing": ("TimingModel", "available_presets", "preset", "register_preset"),
    "slolab.problems": (
        "Heuristic",
        "Objective",
        "Option",
        "Problem",
        "get_problem",
        "register_problem",
    ),
    "slolab.testing": ("ContractViolation", "check_policy", "contract_instances"),
    "slolab.plugins": ("PLUGIN_API_VERSION", "installed_plugins", "load_plugins"),
}
