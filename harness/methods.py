"""Methods by name: every heuristic and exact method the harness can run on an instance.

A method turns an Instance into a :class:`MethodRun`: an Outcome from the engine (simulated
by a policy or replayed from a schedule), plus, for exact methods, the solver's Result. The
objective is never taken from the method: :func:`slolab.harness.compare.compare` recomputes it
from the Outcome with the shared metrics.

Names resolve through the instance's problem (:mod:`slolab.problems`):

- a heuristic or baseline the problem declares (``sa``, ``dp``, ``sarathi``);
- an alias of an exact method (``columns`` for ``sa-ordering-columns:highs``);
- ``model:solver`` (``slos-b2:cbc``);
- a bare solver name (``highs``, ``cbc``, ``cpsat``, ``brute``): the problem's default model.

:func:`register_method` adds a method outside any problem declaration (experiments, tests).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slolab.heuristics.policies import Scheduler
from slolab.instances.records import Instance
from slolab.problems import SOLVER_NAMES, Heuristic, Problem, build_model, get_problem
from slolab.problems.registry import resolve
from slolab.sim import Outcome, replay
from slolab.solvers import Result, Status, solve
from slolab.solvers.registry import model_refuses


@dataclass(frozen=True, slots=True)
class MethodRun:
    """What one method produced on one instance.

    ``instance``: the instance the outcome was run on when the method changed it (a policy
    with its own cluster layout), else None (the instance given).
    """

    outcome: Outcome | None
    runtime_s: float
    status: str
    result: Result | None = None
    details: dict[str, Any] = field(default_factory=dict)
    instance: Instance | None = None


@dataclass(frozen=True, slots=True)
class Method:
    """A named method: ``kind`` is ``"heuristic"``, ``"exact"`` or ``"bound"``.

    ``runner(instance, *, seed, time_limit, threads, progress)`` returns a :class:`MethodRun`;
    a runner takes ``**kwargs`` for the keywords it does not use.
    """

    name: str
    kind: str
    problems: tuple[str, ...]
    runner: Callable[..., MethodRun]
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("heuristic", "exact", "bound"):
            raise ValueError(f"kind must be heuristic, exact or bound, got {self.kind!r}")


_EXTRA: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add a method outside the problem declarations (replacing one of the same name)."""
    _EXTRA[method.name] = method
    return method


def _heuristic_method(problem: Problem, h: Heuristic) -> Method:
    if h.schedule is not None:
        make_schedule = h.schedule

        def plan(instance: Instance, *, seed: int, time_limit: float = 60.0, **_: Any) -> MethodRun:
            t0 = time.perf_counter()
            make = resolve(make_schedule)
            # a search that takes a time limit gets the run's (--time-limit); its progress bar
            # is silenced (compare draws its own)
            accepted = inspect.signature(make).parameters
            options: dict[str, Any] = {"time_limit": time_limit} if "time_limit" in accepted else {}
            if "quiet" in accepted:
                options["quiet"] = True
            schedule = make(instance, seed=seed, **options)
            decided = time.perf_counter() - t0
            out = replay(instance, schedule)
            return MethodRun(out, decided, "HEURISTIC", details={"decision_s": decided})

        return Method(h.name, "heuristic", (problem.name,), plan, h.description)
    assert h.policy is not None
    make_policy = h.policy
    return _online_method(
        h.name,
        problem,
        lambda instance: Scheduler.of(resolve(make_policy)(instance)),
        h.description,
    )


def _online_method(
    name: str, problem: Problem, make: Callable[[Instance], Scheduler], description: str
) -> Method:
    """A method simulating the scheduler ``make(instance)`` online in the engine."""

    def simulate(instance: Instance, *, seed: int, progress: bool = False, **_: Any) -> MethodRun:
        t0 = time.perf_counter()
        made = make(instance)
        ran = made.on(instance)
        out = made.run(instance, seed=seed, progress=progress)
        return MethodRun(
            out,
            time.perf_counter() - t0,
            "SIMULATED",
            instance=ran if ran is not instance else None,
        )

    return Method(name, "heuristic", (problem.name,), simulate, description)


def run_exact_result(
    instance: Instance, result: Result, *, seed: int
) -> tuple[Outcome | None, Instance]:
    """An exact model's Result run in the engine: the outcome (None without a decision) and
    the instance it ran on. Its schedule replayed on ``instance``, or, when the problem
    declares ``run_result`` (:class:`slolab.problems.Problem`), the Scheduler it makes of the
    Result simulated online (on the cluster it brings)."""
    run_result = get_problem(instance.problem).run_result
    if run_result is not None and result.objective is not None:
        made = Scheduler.of(resolve(run_result)(instance, result))
        return made.run(instance, seed=seed), made.on(instance)
    if result.schedule is None:
        return None, instance
    return replay(instance, result.schedule), instance


def _exact_method(name: str, problem: str, model_name: str, solver: str) -> Method:
    from slolab.solvers import get_model

    kind = "bound" if get_model(model_name).bound_only else "exact"

    def runner(
        instance: Instance, *, seed: int, time_limit: float = 60.0, threads: int = 1, **_: Any
    ) -> MethodRun:
        model = build_model(model_name, instance)
        model.quiet = True  # a search's own bar is silenced (compare draws its own)
        res = solve(model, solver=solver, time_limit=time_limit, threads=threads, seed=seed)
        out, ran = run_exact_result(instance, res, seed=seed)
        return MethodRun(
            out,
            res.runtime_s,
            res.status.value,
            result=res,
            instance=ran if ran is not instance else None,
        )

    return Method(name, kind, (problem,), runner, f"{model_name} solved by {solver}")


def _runs_policies(problem: Problem) -> bool:
    """Whether ``problem`` runs online policies (one of its heuristics is a policy), so that
    any registered policy is a method of it."""
    # a problem whose decisions run on a fleet of their own (run_result: a deployment plan's)
    # is scored on that fleet, which a policy on the instance's own cluster does not build
    return problem.run_result is None and any(h.policy is not None for h in problem.heuristics)


def policy_method(problem: Problem, name: str) -> Method | None:
    """``name`` as an online policy on ``problem`` when the problem runs online policies (a
    heuristic of it is a policy) and ``name`` is a registered policy (a plugin's included) or
    ``package.module:Name`` of a Policy class; None otherwise."""
    from slolab.heuristics.policies import is_policy, make_scheduler, policy_entry
    from slolab.plugin_loading import is_reference
    from slolab.solvers import available_models

    if not _runs_policies(problem):
        return None
    if name in problem.aliases or name in SOLVER_NAMES:
        return None
    if is_reference(name):
        if name.partition(":")[0] in available_models():
            return None
        policy_entry(name)  # an import error is the message
    elif not is_policy(name):
        return None
    return _online_method(
        name,
        problem,
        lambda instance: make_scheduler(name, instance),
        policy_entry(name).description,
    )


def available_methods(problem: str | None = None) -> list[str]:
    """Method names of ``problem`` (heuristics, exact aliases, bare solvers, extra methods).

    Any ``model:solver`` with a model of the problem works too (see :func:`method_help`).
    """
    if problem is None:
        from slolab.problems import problems

        return sorted({n for p in problems() for n in available_methods(p.name)})
    names = get_problem(problem).method_names()
    return names + _extra_names(problem, names)


def _extra_names(problem: str, declared: list[str]) -> list[str]:
    return sorted(k for k, m in _EXTRA.items() if problem in m.problems and k not in declared)


def method_help(problem: str) -> str:
    """The names ``problem`` accepts, as one line for error messages and help texts."""
    spec = get_problem(problem)
    text = spec.method_help(tuple(_extra_names(problem, spec.method_names())))
    if _runs_policies(spec):
        text += "; or any policy of 'slolab simulate --policy' (package.module:Name included)"
    return text


def get_method(name: str, instance: Instance | None = None) -> Method:
    """The method called ``name`` on ``instance``'s problem; ValueError listing the known ones."""
    problem_name = instance.problem if instance is not None else "serving"
    if name in _EXTRA and problem_name in _EXTRA[name].problems:
        return _EXTRA[name]
    problem = get_problem(problem_name)
    for h in problem.heuristics:
        if h.name == name:
            return _heuristic_method(problem, h)
    policy = policy_method(problem, name)
    if policy is not None:
        return policy
    target = problem.aliases.get(name, name)
    model, _, solver = target.partition(":")
    if not solver and name in SOLVER_NAMES and problem.default_model is not None:
        model, solver = problem.default_model, name
    if solver:
        if model not in problem.models:
            raise ValueError(
                f"method {name!r}: problem {problem_name!r} has no model {model!r}; "
                f"its models: {', '.join(problem.models) or 'none'}"
            )
        if solver not in SOLVER_NAMES:
            raise ValueError(
                f"unknown solver {solver!r} in method {name!r}; known: {', '.join(SOLVER_NAMES)}"
            )
        refused = model_refuses(model, solver)
        if refused is not None:
            raise ValueError(f"method {name!r}: {refused}")
        return _exact_method(name, problem_name, model, solver)
    hint = ""
    if name in SOLVER_NAMES:
        hint = f" (problem {problem_name!r} has no exact model)"
    raise ValueError(
        f"unknown method {name!r} for problem {problem_name!r}{hint}; known: "
        f"{method_help(problem_name)}"
    )


def resolve_methods(names: Sequence[str], instance: Instance) -> list[Method]:
    """Every method of ``names`` on ``instance``, checked before any of them runs."""
    if not names:
        raise ValueError("give at least one method")
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ValueError(f"method {n!r} is listed twice")
        seen.add(n)
    return [get_method(n, instance) for n in names]


__all__ = [
    "SOLVER_NAMES",
    "Method",
    "MethodRun",
    "Result",
    "Status",
    "available_methods",
    "get_method",
    "method_help",
    "policy_method",
    "register_method",
    "resolve_methods",
    "run_exact_result",
]
