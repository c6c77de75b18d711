"""The paper problems, each declared once: name, instance builder, exact models, heuristics, objective.

A problem is one :class:`Problem` record, registered by a module of this package (one module
per problem, found and imported on first lookup). The harness (``compare``, ``solve``,
``capacity``), the command line (``instance build``, ``compare``, ``solve``, ``problems``) and
the docs read this registry; none of them names a paper. Adding a problem means: its model in
:mod:`slolab.models`, its heuristics in :mod:`slolab.heuristics`, one module here declaring it,
its docs page, notebook and tests.

>>> from slolab.problems import build_instance, get_problem  # doctest: +SKIP
>>> inst = build_instance("sa-ordering", n=10, batch=4, seed=1)
>>> get_problem("sa-ordering").objective.name
'G'
"""

from slolab.problems.registry import (
    ARRIVAL_OPTIONS,
    READ_OPTIONS,
    SOLVER_NAMES,
    TRACE_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    build_instance,
    build_model,
    get_problem,
    label_mismatch,
    load_instance,
    problem_names,
    problems,
    register_model_options,
    register_problem,
)

__all__ = [
    "ARRIVAL_OPTIONS",
    "READ_OPTIONS",
    "SOLVER_NAMES",
    "TRACE_OPTIONS",
    "Heuristic",
    "Objective",
    "Option",
    "Problem",
    "build_instance",
    "build_model",
    "get_problem",
    "label_mismatch",
    "load_instance",
    "problem_names",
    "problems",
    "register_model_options",
    "register_problem",
]
