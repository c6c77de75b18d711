"""The solve entry point and the two registries: solver backends and exact models.

Backends are registered by name with a lazy import path, so ``import slolab.solvers`` pulls in
neither PuLP nor OR-Tools. Models register themselves with :func:`register_model` when
:mod:`slolab.models` is imported (:mod:`slolab.problems` imports it on its first lookup, so
the harness and the command line see every model); this layer sits below the models and
never imports them.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from slolab.solvers.backend import (
    FORMULATION_LABELS,
    Backend,
    check_time_limit,
    model_label,
)
from slolab.solvers.base import ExactModel, Result

logger = logging.getLogger("slolab")

ModelClass = TypeVar("ModelClass", bound=type[ExactModel])

# name -> Backend subclass, or "module:ClassName" imported on first use.
_BACKENDS: dict[str, type[Backend] | str] = {
    "highs": "slolab.solvers.highs:HighsBackend",
    "cbc": "slolab.solvers.cbc:CbcBackend",
    "cpsat": "slolab.solvers.cpsat:CpSatBackend",
    "brute": "slolab.solvers.brute:BruteForceBackend",
}
# name -> None when the backend runs here, else why it does not.
_UNAVAILABLE: dict[str, str | None] = {}

_MODELS: dict[str, type[ExactModel]] = {}


def register_backend(name: str, backend: type[Backend] | str) -> None:
    """Register a solver backend under ``name``.

    Parameters
    ----------
    name : str
        Registry key, the ``solver=`` argument of :func:`solve`.
    backend : type[Backend] or str
        The :class:`Backend` subclass, or ``"package.module:ClassName"`` to import it lazily.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend name must be a non-empty string, got {name!r}")
    if isinstance(backend, str):
        if backend.count(":") != 1:
            raise ValueError(f"a lazy backend path reads 'module:ClassName', got {backend!r}")
    elif not (isinstance(backend, type) and issubclass(backend, Backend)):
        raise TypeError(f"backend must be a Backend subclass or an import path, got {backend!r}")
    _BACKENDS[name] = backend
    _UNAVAILABLE.pop(name, None)


def get_backend(name: str) -> type[Backend]:
    """The backend class registered as ``name`` (imports it); ValueError listing known names."""
    if name not in _BACKENDS:
        known = ", ".join(_BACKENDS)
        raise ValueError(f"unknown solver {name!r}; known solvers: {known}")
    entry = _BACKENDS[name]
    if isinstance(entry, str):
        module_name, class_name = entry.split(":")
        entry = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(entry, type) and issubclass(entry, Backend)):
            raise TypeError(f"{_BACKENDS[name]!r} is not a Backend subclass")
        _BACKENDS[name] = entry
    return entry


def available_solvers() -> list[str]:
    """Names of registered backends whose packages import on this machine."""
    return [name for name in _BACKENDS if _unavailable_reason(name) is None]


def _unavailable_reason(name: str) -> str | None:
    """None when backend ``name`` can run here, else the reason (the import error)."""
    if name not in _UNAVAILABLE:
        backend_class = get_backend(name)
        try:
            usable = backend_class.available()
        except ImportError as error:
            reason: str | None = f"{type(error).__name__}: {error}"
        else:
            reason = None if usable else f"the solver {name!r} is not installed"
        if reason is not None:
            logger.warning("solver %r is unavailable: %s", name, reason)
        _UNAVAILABLE[name] = reason
    return _UNAVAILABLE[name]


def solvers_for(model: ExactModel) -> list[str]:
    """Registered backends whose formulation kind ``model`` implements."""
    kinds = model.supports()
    return [
        name
        for name in _BACKENDS
        if get_backend(name).formulation in kinds
        and (model.backends is None or name in model.backends)
    ]


def register_model(name: str) -> Callable[[ModelClass], ModelClass]:
    """Class decorator registering an :class:`ExactModel` subclass under ``name``.

    Sets the class's ``name`` to ``name`` (a class that already carries another name is an
    error). Registering a second class under a taken name raises ValueError, except a class of
    the same module and qualified name (a reloaded module), which replaces the first.

    Examples
    --------
    >>> @register_model("my-problem")  # doctest: +SKIP
    ... class MyProblem(ExactModel):
    ...     sense = "max"
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a model name must be a non-empty string, got {name!r}")

    def register(cls: ModelClass) -> ModelClass:
        if not (isinstance(cls, type) and issubclass(cls, ExactModel)):
            raise TypeError(f"register_model({name!r}) needs an ExactModel subclass, got {cls!r}")
        if cls.name and cls.name != name:
            raise ValueError(
                f"class {cls.__qualname__} is named {cls.name!r}, cannot register it as {name!r}"
            )
        existing = _MODELS.get(name)
        if existing is not None and existing is not cls and not _same_class(existing, cls):
            raise ValueError(
                f"model name {name!r} is taken by {existing.__module__}.{existing.__qualname__}"
            )
        cls.name = name
        _MODELS[name] = cls
        return cls

    return register


def _same_class(a: type, b: type) -> bool:
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def available_models() -> list[str]:
    """Names of every registered exact model (those of :mod:`slolab.models` once it is
    imported)."""
    return sorted(_MODELS)


def get_model(name: str) -> type[ExactModel]:
    """The model class registered as ``name``; ValueError listing the known names."""
    if name not in _MODELS:
        known = ", ".join(sorted(_MODELS)) or "(none)"
        raise ValueError(f"unknown model {name!r}; known models: {known}")
    return _MODELS[name]


def model_refuses(name: str, solver: str) -> str | None:
    """Why model ``name`` does not run on backend ``solver`` (one line), or None when it does:
    checked before any method of a list runs. The model's formulations are read from its class
    (:meth:`ExactModel.supports` reads no instance data)."""
    cls = get_model(name)
    model = cls.__new__(cls)
    runs_on = solvers_for(model)
    if solver in runs_on:
        return None
    return f"model {name!r} does not run on {solver!r}; it runs on: {', '.join(runs_on) or 'none'}"


def build_model(name: str, instance: Any, **options: Any) -> ExactModel:
    """Build the model registered as ``name`` from ``instance`` (``options`` go to its constructor)."""
    return get_model(name)(instance, **options)


def solve(
    model: ExactModel,
    solver: str = "highs",
    time_limit: float = 60.0,
    threads: int = 1,
    seed: int = 0,
    log: bool = False,
    **params: Any,
) -> Result:
    """Solve an exact model with one backend.

    Parameters
    ----------
    model : ExactModel
        The model (see :func:`build_model`).
    solver : str
        Backend name: ``"highs"``, ``"cbc"``, ``"cpsat"``, ``"brute"`` or any registered one.
    time_limit : float
        Seconds granted to building the formulation and solving it (finite, > 0): a build
        still running when it runs out is stopped and gives TIME_LIMIT with no incumbent
        (:meth:`Backend.solve_model`); a model with its own loop spends it across its solver
        calls.
    threads : int
        Solver threads (>= 1).
    seed : int
        Solver random seed, in ``[0, 2**31 - 2]``.
    log : bool
        Keep the full solver log in ``Result.log`` (otherwise a one-line summary).
    **params
        Backend options (HiGHS options, CBC command-line options, CP-SAT parameters).

    Returns
    -------
    Result
        Status (OPTIMAL only when proved), incumbent, bound, schedule. ``runtime_s`` is the
        wall time of this call: building the formulation, solving, reading the schedule.
        ``details`` holds ``time_limit_s``, ``threads``, ``seed`` and the backend's counters.

    Raises
    ------
    TypeError
        ``model`` is not an ExactModel.
    ValueError
        Unknown solver, a backend whose formulation the model lacks, a bad time limit, thread
        count, seed or option.
    RuntimeError
        The backend's packages do not import here.

    Notes
    -----
    The backend is built first (with ``threads``, ``seed``, ``log`` and ``params``) and handed
    to ``model.solve_with(backend, time_limit)``; a Result from it is returned with this
    call's wall time and settings, None means one solve of the backend's formulation
    (``Backend.solve_model``). See docs/solvers.md for the statuses and the Backend API.
    """
    if not isinstance(model, ExactModel):
        raise TypeError(
            f"solve() needs an ExactModel (see build_model), got {type(model).__name__}"
        )
    check_time_limit(time_limit)
    backend_class = get_backend(solver)
    if model.backends is not None and solver not in model.backends:
        raise ValueError(
            f"model {model_label(model)!r} does not run on {solver!r}; it runs on: "
            f"{', '.join(solvers_for(model))}"
        )
    if backend_class.formulation not in model.supports():
        label = FORMULATION_LABELS.get(backend_class.formulation, backend_class.formulation)
        supported = ", ".join(solvers_for(model)) or "none"
        raise ValueError(
            f"model {model_label(model)!r} has no {label} formulation; it supports: {supported}"
        )
    reason = _unavailable_reason(solver)
    if reason is not None:
        needs = ", ".join(backend_class.requires) or "its packages"
        raise RuntimeError(f"solver {solver!r} (needs {needs}) is not available here: {reason}")
    backend = backend_class(threads=threads, seed=seed, log=log, **params)
    settings = {"time_limit_s": float(time_limit), "threads": backend.threads, "seed": backend.seed}

    logger.info("solving %s with %s (time limit %.3g s)", model_label(model), solver, time_limit)
    start = time.perf_counter()
    custom = model.solve_with(backend, time_limit)
    if custom is None:
        raw = backend.solve_model(model, time_limit)
        runtime_s = time.perf_counter() - start
        result = raw.to_result(model, runtime_s=runtime_s, solver_s=raw.runtime_s, **settings)
    else:
        runtime_s = time.perf_counter() - start
        if not isinstance(custom, Result):
            raise TypeError(
                f"{type(model).__name__}.solve_with must return a Result or None, "
                f"got {type(custom).__name__}"
            )
        result = dataclasses.replace(
            custom, runtime_s=runtime_s, details={**custom.details, **settings}
        )
    logger.info(
        "%s on %s: %s, objective %s, bound %s, %.3f s",
        result.model,
        result.backend,
        result.status.value,
        result.objective,
        result.bound,
        result.runtime_s,
    )
    return result
