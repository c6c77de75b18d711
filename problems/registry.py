"""Problem records and the registry every paper problem joins.

Callables in the records may be given as ``"package.module:attribute"`` strings, imported on
first use, so that listing the problems (the command line's help, say) imports neither the
solvers nor the heuristics.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome
    from slolab.solvers.base import ExactModel

#: Python types an option may take (the command line parses its flag with it).
OPTION_TYPES = (int, float, str, bool)

#: Solver backends a bare method name may name (the problem's default model on that backend).
SOLVER_NAMES = ("highs", "cbc", "cpsat", "brute")


def resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """The callable ``target`` names (``"module:attribute"``), or ``target`` itself."""
    if callable(target):
        return target
    module_name, _, attribute = str(target).partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a lazy reference reads 'module:attribute', got {target!r}")
    found = getattr(importlib.import_module(module_name), attribute)
    if not callable(found):
        raise TypeError(f"{target!r} is not callable")
    return found


def _lazy(target: object, what: str) -> None:
    if callable(target):
        return
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValueError(
            f"{what} must be a callable or a 'module:attribute' string, got {target!r}"
        )


class OptionValueError(ValueError):
    """A builder option out of its range; ``cli_message`` names its command-line flag."""

    def __init__(self, message: str, cli_message: str) -> None:
        super().__init__(message)
        self.cli_message = cli_message


@dataclass(frozen=True, slots=True)
class Option:
    """One option of a problem's instance builder.

    Parameters
    ----------
    name : str
        Keyword argument of the builder (``batch_size``); the command-line flag is
        ``--`` + the name with ``_`` as ``-`` unless ``flag`` is given.
    type : type
        ``int``, ``float``, ``str`` or ``bool`` (a bool option is a flag without a value).
    default : object
        Value used when the option is not given (None: the builder decides).
    help : str
        One line for ``--help`` and the docs.
    choices : tuple, optional
        Allowed values.
    flag : str, optional
        Command-line flag, when it differs from the name (``--batch`` for ``batch_size``).
    minimum : int or float, optional
        Smallest value accepted (a count of requests 1, a seed 0); a smaller one is an error
        naming the flag.
    maximum : int or float, optional
        Largest value accepted (a seed every solver takes).
    aliases : tuple of str
        Further command-line spellings of the flag (``--replicas`` for ``--servers``).
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    flag: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"option name must be an identifier, got {self.name!r}")
        if self.type not in OPTION_TYPES:
            raise ValueError(
                f"option {self.name!r}: type must be one of int, float, str, bool, got {self.type!r}"
            )
        for flag in (self.flag, *self.aliases):
            if flag is not None and not flag.startswith("--"):
                raise ValueError(f"option {self.name!r}: flag must start with '--', got {flag!r}")
        if self.choices is not None and self.default is not None:
            if self.default not in self.choices:
                raise ValueError(
                    f"option {self.name!r}: default {self.default!r} is not among {self.choices}"
                )

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


#: How a builder reads its trace: options passed on to :func:`slolab.instances.read_workload`
#: (one declaration, shared by every problem whose builder reads a trace, so each flag means
#: the same thing everywhere). Defaults of None leave the choice to the reader.
READ_OPTIONS: tuple[Option, ...] = (
    Option(
        "format",
        str,
        None,
        "trace format: azure, mooncake, burstgpt, vidur, lengths, generic (default: detected "
        "from the file)",
    ),
    Option(
        "columns",
        str,
        None,
        "with --format generic: WORKLOAD=FILE column pairs, such as "
        "arrival_s=ts,prompt_tokens=in,output_tokens=out",
    ),
    Option(
        "time_unit",
        str,
        None,
        "with --format generic: unit of the arrival column, s, ms, us, ns or datetime (default: s)",
    ),
    Option(
        "zero_output",
        str,
        "error",
        "rows with 0 output tokens: error, drop, or clamp to 1",
        choices=("error", "drop", "clamp"),
    ),
    Option(
        "max_request_tokens",
        int,
        None,
        "most prompt tokens, and most output tokens, one request may declare; longer rows are "
        "refused (default: 1048576 = 2**20)",
    ),
)

#: Arrival-process options of builders that keep arrival times (with the builder's ``rate``).
ARRIVAL_OPTIONS: tuple[Option, ...] = (
    Option(
        "arrivals",
        str,
        None,
        "draw arrival times from a process at --rate: poisson, gamma or uniform (a "
        "length-only trace needs one; a trace's own times are replaced)",
        choices=("poisson", "gamma", "uniform"),
    ),
    Option(
        "cv",
        float,
        None,
        "with --arrivals gamma: coefficient of variation of the gaps (1 is Poisson, larger "
        "is burstier)",
    ),
)

#: Every trace option: reading and arrivals.
TRACE_OPTIONS: tuple[Option, ...] = READ_OPTIONS + ARRIVAL_OPTIONS

#: Help of a builder's ``rate`` when it reads a trace with :data:`ARRIVAL_OPTIONS`.
RATE_HELP = (
    "mean arrival rate (req/s): of the drawn process with --arrivals, else the trace's own "
    "arrivals are time-scaled to it (burstiness kept)"
)


@dataclass(frozen=True, slots=True)
class Heuristic:
    """An online heuristic or baseline of a problem.

    Exactly one of ``schedule`` and ``policy`` is given:

    - ``schedule(instance, *, seed) -> Schedule``: the heuristic plans the whole instance; the
      engine replays the plan;
    - ``policy(instance) -> (Policy, Router or None)``, or a
      :class:`slolab.heuristics.policies.Scheduler` when it also brings a scaler, a decode
      router or its own cluster: the heuristic runs online in the engine.
    """

    name: str
    description: str
    schedule: str | Callable[..., Any] | None = None
    policy: str | Callable[..., Any] | None = None
    baseline: bool = False

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or "," in self.name:
            raise ValueError(
                f"heuristic name must be non-empty without ':' or ',', got {self.name!r}"
            )
        if (self.schedule is None) == (self.policy is None):
            raise ValueError(f"heuristic {self.name!r}: give exactly one of schedule and policy")
        _lazy(
            self.schedule if self.schedule is not None else self.policy, f"heuristic {self.name!r}"
        )


@dataclass(frozen=True, slots=True)
class Objective:
    """What a problem maximises or minimises, computed from an Outcome by the shared metrics.

    ``evaluate(instance, outcome, table) -> float`` where ``table`` is
    :func:`slolab.sim.metrics.request_table` of the outcome (computed once per row).
    """

    name: str
    sense: str
    evaluate: str | Callable[..., float]
    description: str

    def __post_init__(self) -> None:
        if self.sense not in ("max", "min"):
            raise ValueError(
                f"objective {self.name!r}: sense must be 'max' or 'min', got {self.sense!r}"
            )
        _lazy(self.evaluate, f"objective {self.name!r}")

    def __call__(self, instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
        return float(resolve(self.evaluate)(instance, outcome, table))


@dataclass(frozen=True, slots=True)
class Problem:
    """A paper problem, declared once.

    Parameters
    ----------
    name : str
        Registry key, also ``Instance.problem`` of the instances it builds.
    title : str
        One line: the decision and the objective.
    objective : Objective
        The objective every method is scored by (recomputed from the Outcome).
    builder : callable or "module:attribute"
        ``builder(**options) -> Instance``, cutting an instance from a real trace.
    options : tuple of Option
        The builder's options (the command line's ``instance build`` flags for this problem).
    models : tuple of str
        Registered exact models (:func:`slolab.solvers.register_model`); the first is the
        default (``slolab solve FILE`` and a bare solver name in ``compare``).
    aliases : mapping
        Short method names of exact methods: ``{"b1": "slos-b1:highs"}``.
    heuristics : tuple of Heuristic
        The paper's heuristics and its baselines.
    docs : str
        The problem's docs page (relative to ``docs/``).
    front : callable or "module:attribute", optional
        ``front(instance, *, solver, time_limit, threads, seed) -> list of FrontPoint``: the
        exact cost-attainment Pareto front of an instance (``slolab pareto``); None when the
        problem has one objective only.
    settings : tuple of str
        Keys every instance of the problem carries in ``Instance.settings`` (written by its
        builder): an instance file labelled with this problem but without them was built for
        another one (see :meth:`check_instance`).
    run_result : callable or "module:attribute", optional
        ``run_result(instance, result) -> Scheduler``: how an exact model's Result is run in
        the engine when its decision is not a schedule of the instance's own cluster (a fleet
        and a router, say); None: its ``schedule`` is replayed on the instance.
    """

    name: str
    title: str
    objective: Objective
    builder: str | Callable[..., Any]
    options: tuple[Option, ...] = ()
    models: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)
    heuristics: tuple[Heuristic, ...] = ()
    docs: str = ""
    front: str | Callable[..., Any] | None = None
    settings: tuple[str, ...] = ()
    run_result: str | Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name or "/" in self.name:
            raise ValueError(
                f"problem name must be non-empty without ':' or '/', got {self.name!r}"
            )
        _lazy(self.builder, f"problem {self.name!r} builder")
        if self.front is not None:
            _lazy(self.front, f"problem {self.name!r} front")
        if self.run_result is not None:
            _lazy(self.run_result, f"problem {self.name!r} run_result")
        seen: set[str] = set()
        for o in self.options:
            if o.name in seen:
                raise ValueError(f"problem {self.name!r}: option {o.name!r} declared twice")
            seen.add(o.name)
        names = [h.name for h in self.heuristics]
        if len(set(names)) != len(names):
            raise ValueError(f"problem {self.name!r}: a heuristic name is declared twice")
        for alias, target in self.aliases.items():
            model, _, solver = target.partition(":")
            if model not in self.models or not solver:
                raise ValueError(
                    f"problem {self.name!r}: alias {alias!r} must name 'model:solver' with a model "
                    f"of this problem ({', '.join(self.models) or 'none'}), got {target!r}"
                )
            if alias in names:
                raise ValueError(
                    f"problem {self.name!r}: {alias!r} is both an alias and a heuristic"
                )
        object.__setattr__(self, "aliases", MappingProxyType(dict(self.aliases)))

    @property
    def default_model(self) -> str | None:
        return self.models[0] if self.models else None

    def method_names(self) -> list[str]:
        """Declared method names: heuristics and baselines, aliases, bare solver names (those
        its default model runs on)."""
        names = [h.name for h in self.heuristics]
        names += sorted(self.aliases)
        if self.models:
            names += [s for s in _bare_solvers(self.models[0]) if s not in names]
        return names

    def method_help(self, extra: tuple[str, ...] = ()) -> str:
        """The method names this problem accepts (plus ``extra``), as one line."""
        text = ", ".join([*self.method_names(), *extra]) or "none"
        if self.models:
            text += f"; or MODEL:SOLVER with MODEL in {', '.join(self.models)}"
        return text

    def option(self, name: str) -> Option:
        for o in self.options:
            if o.name == name:
                return o
        raise KeyError(
            f"problem {self.name!r} has no option {name!r}; its options: "
            f"{', '.join(o.name for o in self.options) or 'none'}"
        )

    def heuristic(self, name: str) -> Heuristic:
        for h in self.heuristics:
            if h.name == name:
                return h
        raise KeyError(f"problem {self.name!r} has no heuristic {name!r}")

    def build(self, **options: Any) -> Instance:
        """An instance of this problem: unknown options raise, missing ones take their default."""
        known = {o.name: o for o in self.options}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"problem {self.name!r} has no option {unknown[0]!r}; its options: "
                f"{', '.join(known) or 'none'}"
            )
        values = {name: o.default for name, o in known.items()}
        values.update(options)
        for name, value in values.items():
            choices = known[name].choices
            if choices is not None and value is not None and value not in choices:
                raise ValueError(
                    f"option {name!r} of problem {self.name!r} must be one of "
                    f"{', '.join(map(str, choices))}, got {value!r}"
                )
            least = known[name].minimum
            if least is not None and value is not None and not value >= least:
                raise OptionValueError(
                    f"option {name!r} of problem {self.name!r} must be >= {least}, got {value!r}",
                    f"{known[name].cli_flag} must be >= {least}, got {value!r}",
                )
            most = known[name].maximum
            if most is not None and value is not None and not value <= most:
                raise OptionValueError(
                    f"option {name!r} of problem {self.name!r} must be <= {most}, got {value!r}",
                    f"{known[name].cli_flag} must be <= {most}, got {value!r}",
                )
        builder = resolve(self.builder)
        accepted = inspect.signature(builder).parameters
        missing = [n for n in values if n not in accepted]
        if missing and not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            raise TypeError(
                f"the builder of problem {self.name!r} does not take its option {missing[0]!r}"
            )
        instance = builder(**values)
        if instance.problem != self.name:
            raise ValueError(
                f"the builder of problem {self.name!r} made an instance of problem "
                f"{instance.problem!r}"
            )
        missing = self.missing_settings(instance.settings)
        if missing:
            raise ValueError(
                f"the builder of problem {self.name!r} made an instance without its settings "
                f"{', '.join(missing)}"
            )
        return instance

    def missing_settings(self, settings: Mapping[str, Any]) -> list[str]:
        """The declared :attr:`settings` keys ``settings`` lacks."""
        return [key for key in self.settings if key not in settings]

    def check_instance(self, settings: Mapping[str, Any]) -> str | None:
        """Why an instance with ``settings`` labelled with this problem is not one of its
        instances (it lacks the problem's settings; the problems whose settings it has are
        named), or None when it has them."""
        missing = self.missing_settings(settings)
        if not missing:
            return None
        fits = [p.name for p in problems() if p.settings and not p.missing_settings(settings)]
        built = f"; its settings are those of {' or '.join(map(repr, fits))}" if fits else ""
        return (
            f"labelled {self.name!r} but it lacks the settings every {self.name} instance "
            f"carries ({', '.join(missing)}){built}: rebuild it with 'slolab instance build "
            f"--problem {self.name}' instead of relabelling it"
        )


_PROBLEMS: dict[str, Problem] = {}
_LOADED = False
#: Constructor keywords the problems hand their exact models: ``model -> {keyword: value}``.
_MODEL_OPTIONS: dict[str, dict[str, Any]] = {}


def register_problem(problem: Problem) -> Problem:
    """Add ``problem`` to the registry (a second problem of the same name is an error)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"register_problem needs a Problem, got {type(problem).__name__}")
    existing = _PROBLEMS.get(problem.name)
    if existing is not None and existing != problem:
        raise ValueError(f"problem {problem.name!r} is already registered")
    _PROBLEMS[problem.name] = problem
    return problem


def _load() -> None:
    """Import every module of :mod:`slolab.problems` (each registers its problem) and
    :mod:`slolab.models` (each model registers itself with :mod:`slolab.solvers`, which sits
    below the models and never imports them)."""
    global _LOADED
    if _LOADED:
        return
    importlib.import_module("slolab.models")
    package = importlib.import_module("slolab.problems")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name != "registry":
            importlib.import_module(f"slolab.problems.{info.name}")
    _LOADED = True
    from slolab.plugin_loading import load_plugins

    load_plugins("problems", _register_plugin_problem)


def _register_plugin_problem(name: str, problem: Any) -> None:
    if not isinstance(problem, Problem):
        raise TypeError(f"the entry point must name a Problem, got {type(problem).__name__}")
    if problem.name != name:
        raise ValueError(f"the entry point is named {name!r}, its problem {problem.name!r}")
    register_problem(problem)


def problems() -> list[Problem]:
    """Every registered problem, by name."""
    _load()
    return [_PROBLEMS[k] for k in sorted(_PROBLEMS)]


def problem_names() -> list[str]:
    """Names of the registered problems."""
    return [p.name for p in problems()]


def get_problem(name: str) -> Problem:
    """The problem registered as ``name``; ValueError listing the known ones."""
    _load()
    if name not in _PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; known: {', '.join(sorted(_PROBLEMS))}")
    return _PROBLEMS[name]


def build_instance(problem: str, **options: Any) -> Instance:
    """An instance of ``problem`` from its builder (see :meth:`Problem.build`)."""
    return get_problem(problem).build(**options)


def label_mismatch(problem: str, settings: dict[str, Any]) -> str | None:
    """Why ``settings`` are not those of a ``problem`` instance (a file relabelled to another
    problem), or None; a problem not registered here is not checked."""
    if problem not in problem_names():
        return None
    return get_problem(problem).check_instance(settings)


def load_instance(path: str | Path) -> Instance:
    """:func:`slolab.instances.load_instance`, refusing a file whose ``problem`` label does not
    fit its settings (an :class:`~slolab.instances.io.InstanceFileError` on field ``problem``)."""
    from slolab.instances import load_instance as load_file

    return load_file(path, check_label=label_mismatch)


def register_model_options(model: str, **options: Any) -> None:
    """Hand the exact model registered as ``model`` the constructor keywords ``options``
    whenever :func:`build_model` builds it: what a model's search takes from the heuristics (a
    start, a warm start) comes from the problem's declaration, as the models sit below the
    heuristics and never import them."""
    _MODEL_OPTIONS.setdefault(model, {}).update(options)


def build_model(name: str, instance: Any, **options: Any) -> ExactModel:
    """:func:`slolab.solvers.build_model` with the keywords the problems declared for model
    ``name`` (:func:`register_model_options`); ``options`` override them."""
    from slolab.solvers import build_model as build

    _load()
    return build(name, instance, **{**_MODEL_OPTIONS.get(name, {}), **options})


def _bare_solvers(model: str) -> tuple[str, ...]:
    """The solvers of :data:`SOLVER_NAMES` the model ``model`` runs on (a bare solver name in a
    method list is the problem's default model on that solver)."""
    from slolab.solvers.registry import model_refuses

    return tuple(s for s in SOLVER_NAMES if model_refuses(model, s) is None)
