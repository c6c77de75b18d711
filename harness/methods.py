"""Method registry: every heuristic and exact method the harness can run, by name.

A method turns an Instance into a :class:`MethodRun`: an Outcome from the engine (simulated
by a policy or replayed from a schedule), plus, for exact methods, the solver's Result. The
objective is never taken from the method: :func:`slolab.harness.compare.compare` recomputes it
from the Outcome with the shared metrics.

Exact methods are named ``model:solver`` (``sa-ordering:highs``); on an instance whose
problem has a default model a bare solver name works too (``highs``, ``cbc``, ``cpsat``,
``brute``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slolab.instances.records import Instance
from slolab.sim import Outcome, Schedule, replay, run
from slolab.solvers import Result, Status, build_model, solve


@dataclass(frozen=True, slots=True)
class MethodRun:
    """What one method produced on one instance."""

    outcome: Outcome | None
    runtime_s: float
    status: str
    result: Result | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Method:
    """A named method: ``kind`` is ``"heuristic"``, ``"exact"`` or ``"bound"``."""

    name: str
    kind: str
    problems: tuple[str, ...]
    runner: Callable[..., MethodRun]
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("heuristic", "exact", "bound"):
            raise ValueError(f"kind must be heuristic, exact or bound, got {self.kind!r}")


_METHODS: dict[str, Method] = {}
#: Default exact model of each problem (for bare solver names).
DEFAULT_MODEL: dict[str, str] = {"sa-ordering": "sa-ordering", "slos-admission": "slos-b1"}
SOLVER_NAMES = ("highs", "cbc", "cpsat", "brute")
#: Short names of exact methods per problem.
ALIASES: dict[str, dict[str, str]] = {
    "slos-admission": {"b1": "slos-b1:highs", "b2": "slos-b2:highs"},
    "sa-ordering": {
        "columns": "sa-ordering-columns:highs",
        "columns-cbc": "sa-ordering-columns:cbc",
    },
}


def register_method(method: Method) -> Method:
    """Add a method to the registry (replacing one of the same name)."""
    _METHODS[method.name] = method
    return method


def _policy_method(
    name: str, factory: Callable[[], Any], router: Callable[[], Any] | None, description: str
) -> Method:
    def runner(instance: Instance, *, seed: int, **_: Any) -> MethodRun:
        t0 = time.perf_counter()
        out = run(instance, factory(), router() if router else None, seed=seed)
        return MethodRun(out, time.perf_counter() - t0, "SIMULATED")

    return Method(name, "heuristic", ("serving",), runner, description)


def schedule_method(
    name: str, problems: tuple[str, ...], make_schedule: Callable[..., Schedule], description: str
) -> Method:
    """A heuristic that outputs a Schedule; the engine replays it."""

    def runner(instance: Instance, *, seed: int, **_: Any) -> MethodRun:
        t0 = time.perf_counter()
        schedule = make_schedule(instance, seed=seed)
        decided = time.perf_counter() - t0
        out = replay(instance, schedule)
        return MethodRun(out, decided, "HEURISTIC", details={"decision_s": decided})

    return Method(name, "heuristic", problems, runner, description)


def _exact_runner(model_name: str, solver: str) -> Callable[..., MethodRun]:
    def runner(
        instance: Instance, *, seed: int, time_limit: float = 60.0, threads: int = 1, **_: Any
    ) -> MethodRun:
        model = build_model(model_name, instance)
        res = solve(model, solver=solver, time_limit=time_limit, threads=threads, seed=seed)
        out = replay(instance, res.schedule) if res.schedule is not None else None
        return MethodRun(out, res.runtime_s, res.status.value, result=res)

    return runner


def _register_defaults() -> None:
    from slolab.heuristics import baselines as b

    for name, cls, desc in (
        ("vllm", b.PrefillFirstFCFS, "vLLM-style prefill-first FCFS"),
        ("sarathi", b.SarathiFCFS, "Sarathi-Serve fixed token budget, decode first, FCFS"),
        ("edf", b.EDFTokens, "earliest token deadline first within a token budget"),
    ):
        register_method(_policy_method(name, cls, b.LeastLoaded, desc + " (least-loaded routing)"))


def get_method(name: str, instance: Instance | None = None) -> Method:
    """The method called ``name``; bare solver names resolve through the instance's problem."""
    if not _METHODS:
        _register_defaults()
        _load_problem_methods()
    problem = instance.problem if instance is not None else None
    key = name
    if problem is not None and f"{problem}/{name}" in _METHODS:
        key = f"{problem}/{name}"
    if key in _METHODS:
        return _METHODS[key]
    target = ALIASES.get(problem or "", {}).get(name, name)
    model, _, solver = target.partition(":")
    if not solver and name in SOLVER_NAMES and problem in DEFAULT_MODEL:
        model, solver = DEFAULT_MODEL[problem], name
    if solver:
        if solver not in SOLVER_NAMES:
            raise ValueError(
                f"unknown solver {solver!r} in method {name!r}; known: {', '.join(SOLVER_NAMES)}"
            )
        return Method(
            name,
            "exact",
            (problem or "",),
            _exact_runner(model, solver),
            f"{model} solved by {solver}",
        )
    known = sorted(
        k.split("/")[-1]
        for k in _METHODS
        if problem is None or k.startswith(f"{problem}/") or problem in _METHODS[k].problems
    )
    raise ValueError(
        f"unknown method {name!r} for problem {problem!r}; known: {', '.join(known + list(SOLVER_NAMES))}"
    )


def available_methods(problem: str | None = None) -> list[str]:
    """Method names (for one problem, if given), exact solver names included."""
    if not _METHODS:
        _register_defaults()
        _load_problem_methods()
    names = sorted(
        {k.split("/")[-1] for k, m in _METHODS.items() if problem is None or problem in m.problems}
    )
    if problem is None or problem in DEFAULT_MODEL:
        names += [s for s in SOLVER_NAMES if s not in names]
    names += sorted(ALIASES.get(problem or "", {}))
    return names


def _load_problem_methods() -> None:
    """Methods contributed by the paper-problem modules."""
    from slolab.harness import problem_methods

    for m in problem_methods.methods():
        for p in m.problems:
            register_method(Method(f"{p}/{m.name}", m.kind, m.problems, m.runner, m.description))


__all__ = [
    "DEFAULT_MODEL",
    "Method",
    "MethodRun",
    "Result",
    "SOLVER_NAMES",
    "Status",
    "available_methods",
    "get_method",
    "register_method",
    "schedule_method",
]
