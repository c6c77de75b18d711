"""Exact solvers: one :func:`solve` entry point over HiGHS, CBC, CP-SAT and brute force.

>>> from slolab.solvers import build_model, solve  # doctest: +SKIP
>>> result = solve(build_model("sa-ordering", instance), solver="highs", time_limit=60)
"""

from slolab.solvers.backend import Backend, RawSolve
from slolab.solvers.base import (
    CpFormulation,
    ExactModel,
    FrontPoint,
    MilpFormulation,
    Result,
    Status,
)
from slolab.solvers.registry import (
    available_models,
    available_solvers,
    build_model,
    get_backend,
    get_model,
    register_backend,
    register_model,
    solve,
)

__all__ = [
    "Backend",
    "CpFormulation",
    "ExactModel",
    "FrontPoint",
    "MilpFormulation",
    "RawSolve",
    "Result",
    "Status",
    "available_models",
    "available_solvers",
    "build_model",
    "get_backend",
    "get_model",
    "register_backend",
    "register_model",
    "solve",
]
