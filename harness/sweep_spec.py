"""Sweep files: the TOML spec of a sweep, validated whole and expanded into tasks.

:func:`load_spec` reads a sweep file (format in ``docs/sweeps.md``), checks every key, type
and name before anything runs (an unknown key, a bad type or an unknown method, policy, trace
or preset is a one-line :class:`SpecError` naming the file, the key and the value), and expands
the grid into :class:`Task` records that :mod:`slolab.harness.sweep` runs. A task's key is the
SHA-256 of its canonical description (:func:`slolab.harness.store.task_key`): what it computes,
with instance and trace files identified by name and content hash, not by folder.

Build specs (a problem name plus builder options) go through :func:`build_instance`, the one
place that maps a problem to its instance builder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from slolab.harness.serving import ServingSetup
from slolab.harness.store import canonical_json, task_key
from slolab.instances.records import Instance

KINDS = ("compare", "simulate", "capacity", "deploy")
#: Backends of :func:`run_sweep`.

_TOP_KEYS = ("name", "store", "run", "jobqueue", *KINDS)
_RUN_KEYS = ("threads", "workers", "batch_rows", "batch_seconds")
_COMPARE_KEYS = ("instances", "builds", "methods", "seeds", "time_limits")
#: Fields of ServingSetup a simulate/capacity group may set (beyond the grid axes).
_SETUP_OPTIONS = tuple(
    field.name
    for field in dataclasses.fields(ServingSetup)
    if field.name not in ("trace", "seed", "servers", "policy")
)
#: Integer and float fields among them (the others are strings).
_SETUP_INTS = (
    "prefill_servers",
    "kv_capacity",
    "max_batch_tokens",
    "max_batch_size",
    "limit",
    "max_request_tokens",
    "min_servers",
    "max_servers",
)
_SETUP_FLOATS = ("cv", "scale_upper", "scale_lower")
_SERVING_AXES = ("traces", "policies", "servers", "seeds")
_SIMULATE_KEYS = (*_SERVING_AXES, "rates", *_SETUP_OPTIONS)
_CAPACITY_OPTIONS = ("target", "definition", "start_rate", "rel_tol", "max_probes")
_CAPACITY_KEYS = (*_SERVING_AXES, *_CAPACITY_OPTIONS, *_SETUP_OPTIONS)
#: A deploy group: its grid axes, then options each of its tasks shares (with their defaults).
_DEPLOY_AXES = ("traces", "models", "gpus", "tps", "traffic", "targets", "seeds")
_DEPLOY_OPTIONS: dict[str, Any] = {
    "limit": None,
    "slos": "polyserve",
    "policy": "sarathi",
    "definition": "deadline",
    "max_rounds": 8,
    "prices": None,
    "calibrated": True,
}
#: Deploy options a task's description names only when given (so that a spec without them
#: keeps its task keys): the planner's mode (co, pd, both) and the KV link between the pools.
_DEPLOY_PD_OPTIONS = ("mode", "link")
_DEPLOY_KEYS = (*_DEPLOY_AXES, *_DEPLOY_OPTIONS, *_DEPLOY_PD_OPTIONS)


class SpecError(ValueError):
    """A sweep spec is invalid; the message names the file, the key and the value."""


# -- build specs ------------------------------------------------------------------------------


def build_instance(problem: str, **options: Any) -> Instance:
    """An instance of ``problem`` built with its declared builder and ``options``.

    The one place a sweep turns a build spec into an instance: the problem registry
    (:func:`slolab.problems.build_instance`), whose options are each problem's ``instance
    build`` flags (``slolab problems`` lists them).
    """
    from slolab.problems import build_instance as build

    return build(problem, **options)


def build_options(problem: str) -> dict[str, Any]:
    """Options of ``problem``'s builder: name -> its declared :class:`slolab.problems.Option`."""
    from slolab.problems import get_problem

    return {o.name: o for o in get_problem(problem).options}


# -- the spec ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class JobqueueOptions:
    """Batch-system settings of the ``slurm`` / ``pbs`` backends (the spec's ``[jobqueue]``).

    Attributes
    ----------
    queue, account : str or None
        Partition (queue) and account jobs are charged to.
    cores : int or None
        Cores per job; each job runs ``cores // threads`` worker processes.
    memory : str or None
        Memory per job, e.g. ``"32GB"``.
    walltime : str or None
        Job time limit, e.g. ``"02:00:00"``.
    jobs : int
        Jobs to start.
    interface : str or None
        Network interface of the workers and the scheduler (e.g. ``"ib0"``).
    job_extra_directives : tuple of str
        More ``#SBATCH`` / ``#PBS`` lines (without the prefix).
    job_script_prologue : tuple of str
        Shell lines run before the worker starts (``module load ...``, activating an env).
    """

    queue: str | None = None
    account: str | None = None
    cores: int | None = None
    memory: str | None = None
    walltime: str | None = None
    jobs: int = 1
    interface: str | None = None
    job_extra_directives: tuple[str, ...] = ()
    job_script_prologue: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.cores is not None and self.cores < 1:
            raise ValueError(f"cores must be >= 1, got {self.cores}")
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {self.jobs}")


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    """One unit of a sweep: computed by :func:`run_task` on a worker into one or more rows.

    Attributes
    ----------
    key : str
        :func:`slolab.harness.store.task_key` of ``description``.
    kind : str
        One of :data:`KINDS`.
    sweep : str
        Name of the sweep.
    description : str
        Canonical JSON of what the task computes (instance or trace by name or content hash,
        methods or policy, seed, limits); stored in column ``task``.
    payload : Mapping[str, Any]
        How to compute it (absolute paths, a :class:`ServingSetup`, ...).
    threads : int
        Solver threads (not part of the key: it changes how a task runs, not what it is).
    """

    key: str
    kind: str
    sweep: str
    description: str
    payload: Mapping[str, Any]
    threads: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")


@dataclasses.dataclass(frozen=True, slots=True)
class SweepSpec:
    """A validated sweep file.

    Attributes
    ----------
    name : str
        The sweep's name (default: the file's stem); stored in column ``sweep``.
    path : Path
        The spec file.
    store : Path or None
        The store directory it names (relative paths resolved against the file's folder).
    threads : int
        Solver threads per task.
    workers : int or None
        Local worker processes (None: cores // threads).
    batch_rows, batch_seconds : int, float
        A batch is written once this many rows are waiting, or this long after the last one.
    jobqueue : JobqueueOptions
        Settings of the batch-system backends.
    tasks : tuple of Task
        The grid, expanded, in spec order (duplicates removed).
    """

    name: str
    path: Path
    store: Path | None
    threads: int
    workers: int | None
    batch_rows: int
    batch_seconds: float
    jobqueue: JobqueueOptions
    tasks: tuple[Task, ...]

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.batch_rows < 1:
            raise ValueError(f"batch_rows must be >= 1, got {self.batch_rows}")
        if not self.batch_seconds > 0:
            raise ValueError(f"batch_seconds must be > 0, got {self.batch_seconds}")


class _Reader:
    """Typed access to the tables of one spec file, failing with the file, key and value."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.resolve().parent

    def fail(self, key: str, value: Any, message: str) -> SpecError:
        return SpecError(f"{self.path}: {key} = {value!r}: {message}")

    def table(self, data: Any, where: str, allowed: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(data, Mapping):
            raise self.fail(where, data, "must be a table")
        for name, value in data.items():
            if name not in allowed:
                raise self.fail(
                    f"{where}.{name}" if where else name,
                    value,
                    f"unknown key; known keys: {', '.join(allowed)}",
                )
        return data

    def groups(
        self, spec: Mapping[str, Any], kind: str, allowed: Sequence[str]
    ) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """``(where, table)`` of each ``[[kind]]`` table of the spec, its keys checked."""
        groups = spec.get(kind, [])
        if not isinstance(groups, list):
            raise self.fail(kind, groups, f"must be an array of tables ([[{kind}]])")
        for number, raw in enumerate(groups):
            where = f"{kind}[{number}]"
            yield where, self.table(raw, where, allowed)

    def value(self, data: Mapping[str, Any], where: str, name: str, kinds: Any) -> Any:
        """``data[name]`` checked against ``kinds`` (``float`` also takes ints; never bools)."""
        value = data[name]
        accepted = kinds if isinstance(kinds, tuple) else (kinds,)
        if float in accepted:
            accepted = (*accepted, int)
        if isinstance(value, bool) and bool not in accepted or not isinstance(value, accepted):
            names = " or ".join(
                kind.__name__ for kind in (kinds if isinstance(kinds, tuple) else (kinds,))
            )
            raise self.fail(f"{where}.{name}" if where else name, value, f"must be {names}")
        return float(value) if kinds is float else value

    def ints(self, data: Mapping[str, Any], where: str, name: str, default: list[int]) -> list[int]:
        """A list of ints, or a range written ``"A..B"`` (both ends included)."""
        if name not in data:
            return default
        key, value = f"{where}.{name}", data[name]
        if isinstance(value, str):
            try:
                return list(parse_range(value, minimum=0))
            except ValueError as error:
                raise self.fail(key, value, str(error)) from None
        if isinstance(value, bool) or isinstance(value, int):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.fail(key, value, 'must be a non-empty list of integers or a range "A..B"')
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise self.fail(key, item, "must be an integer >= 0")
        return list(value)

    def floats(self, data: Mapping[str, Any], where: str, name: str) -> list[float] | None:
        if name not in data:
            return None
        key, value = f"{where}.{name}", data[name]
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list) or not value:
            raise self.fail(key, value, "must be a non-empty list of numbers")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int | float) or not item > 0:
                raise self.fail(key, item, "must be a number > 0")
        return [float(item) for item in value]

    def strings(self, data: Mapping[str, Any], where: str, name: str, required: bool) -> list[str]:
        if name not in data:
            if required:
                raise self.fail(f"{where}.{name}", None, "is required")
            return []
        key, value = f"{where}.{name}", data[name]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or (required and not value):
            raise self.fail(key, value, "must be a non-empty list of strings")
        for item in value:
            if not isinstance(item, str) or not item:
                raise self.fail(key, item, "must be a non-empty string")
        return list(value)

    def file(self, reference: str) -> Path | None:
        """``reference`` as an existing file, relative paths against the spec's folder."""
        path = Path(reference).expanduser()
        path = path if path.is_absolute() else self.folder / path
        return path.resolve() if path.is_file() else None


def parse_range(text: str, minimum: int = 1) -> range:
    """Integers from ``"A..B"`` (both included) or ``"A"``; each at least ``minimum``."""
    first, dots, last = text.partition("..")
    try:
        lo = int(first)
        hi = int(last) if dots else lo
    except ValueError:
        raise ValueError(f'must read "A..B" or "A" with integers, got {text!r}') from None
    if not minimum <= lo <= hi:
        raise ValueError(f"needs {minimum} <= A <= B, got {text!r}")
    return range(lo, hi + 1)


def _file_reference(path: Path) -> dict[str, str]:
    """How a file enters a task key: its name and the SHA-256 of its bytes (not its folder)."""
    return {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def _check_method(reader: _Reader, key: str, name: str, problem: str) -> None:
    from slolab.harness.methods import SOLVER_NAMES, available_methods, policy_method
    from slolab.problems import get_problem
    from slolab.solvers import available_models

    known = available_methods(problem)
    if name in known:
        return
    try:
        if policy_method(get_problem(problem), name) is not None:
            return
    except ValueError as exc:
        raise reader.fail(key, name, str(exc)) from None
    model, colon, solver = name.partition(":")
    if colon and model in available_models() and solver in SOLVER_NAMES:
        return
    raise reader.fail(
        key,
        name,
        f"unknown method for problem {problem!r}; known: {', '.join(known)} (or MODEL:SOLVER)",
    )


def _instance_sources(
    reader: _Reader, group: Mapping[str, Any], where: str
) -> list[tuple[str, Any, dict[str, Any], str]]:
    """``(problem, reference for the key, source for the worker, label)`` of each instance."""
    from slolab.instances import load_manifest
    from slolab.problems import load_instance

    shipped = {entry["name"]: entry["problem"] for entry in load_manifest()}
    sources: list[tuple[str, Any, dict[str, Any], str]] = []
    for index, name in enumerate(reader.strings(group, where, "instances", required=False)):
        path = reader.file(name)
        if path is not None:
            try:
                problem = load_instance(path).problem
            except Exception as error:  # an unreadable instance file fails the spec
                raise reader.fail(f"{where}.instances[{index}]", name, str(error)) from None
            sources.append((problem, _file_reference(path), {"file": str(path)}, path.stem))
        elif name in shipped:
            sources.append((shipped[name], {"shipped": name}, {"shipped": name}, name))
        else:
            raise reader.fail(
                f"{where}.instances[{index}]",
                name,
                f"no instance file (relative to {reader.folder}) and no shipped instance by that "
                f"name; shipped: {', '.join(shipped)}",
            )
    builds = group.get("builds", [])
    if not isinstance(builds, list):
        raise reader.fail(f"{where}.builds", builds, "must be a list of tables")
    for index, build in enumerate(builds):
        sources.extend(_build_sources(reader, build, f"{where}.builds[{index}]"))
    if not sources:
        raise reader.fail(where, dict(group), "needs instances or builds")
    return sources


def _build_sources(
    reader: _Reader, build: Any, where: str
) -> list[tuple[str, Any, dict[str, Any], str]]:
    if not isinstance(build, Mapping) or "problem" not in build:
        raise reader.fail(where, build, "must be a table with a problem and builder options")
    problem = build["problem"]
    from slolab.problems import problem_names

    if problem not in problem_names():
        raise reader.fail(f"{where}.problem", problem, f"known: {', '.join(problem_names())}")
    options = build_options(problem)
    allowed = ["problem", "seeds", *(name for name in options if name != "seed")]
    reader.table(build, where, allowed)
    from slolab.timing import available_presets

    types: dict[type, tuple[type, ...]] = {
        bool: (bool,),
        int: (int,),
        float: (int, float),
        str: (str,),
    }
    for name, option in options.items():
        if name == "seed" or name not in build:
            continue
        value = reader.value(build, where, name, types[option.type])
        if option.choices is not None and value not in option.choices:
            raise reader.fail(
                f"{where}.{name}", value, f"known: {', '.join(map(str, option.choices))}"
            )
        if name == "timing" and value not in available_presets():
            raise reader.fail(f"{where}.{name}", value, f"known: {', '.join(available_presets())}")
    seeds = reader.ints(build, where, "seeds", [0])
    sources = []
    for seed in seeds:
        chosen = {name: build[name] for name in options if name in build}
        chosen["seed"] = seed
        reference = {"build": problem, "options": chosen}
        label = f"{problem}:{canonical_json(chosen)}"
        sources.append((problem, reference, {"build": problem, "options": chosen}, label))
    return sources


def _compare_tasks(
    reader: _Reader, spec: Mapping[str, Any], sweep: str, threads: int
) -> list[Task]:
    tasks = []
    for where, group in reader.groups(spec, "compare", _COMPARE_KEYS):
        methods = reader.strings(group, where, "methods", required=True)
        sources = _instance_sources(reader, group, where)
        for problem, _, _, _ in sources:
            for index, method in enumerate(methods):
                _check_method(reader, f"{where}.methods[{index}]", method, problem)
        seeds = reader.ints(group, where, "seeds", [0])
        time_limits = reader.floats(group, where, "time_limits") or [60.0]
        for problem, reference, source, label in sources:
            for seed in seeds:
                for time_limit in time_limits:
                    description = {
                        "kind": "compare",
                        "instance": reference,
                        "methods": methods,
                        "seed": seed,
                        "time_limit_s": time_limit,
                    }
                    payload = {
                        "source": source,
                        "label": label,
                        "problem": problem,
                        "methods": methods,
                        "seed": seed,
                        "time_limit_s": time_limit,
                    }
                    tasks.append(_task("compare", sweep, description, payload, threads))
    return tasks


def _setup_options(reader: _Reader, group: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ServingSetup fields a group sets, type-checked against the field defaults."""
    from slolab.heuristics.policies import is_router, router_names
    from slolab.heuristics.scalers import scaler_entry
    from slolab.instances import scheme_names
    from slolab.instances.records import MODES
    from slolab.timing import available_presets

    choices: dict[str, Sequence[str]] = {
        "timing": available_presets(),
        "mode": list(MODES),
        "slack": ["tight", "loose"],
    }
    options: dict[str, Any] = {}
    for name in _SETUP_OPTIONS:
        if name not in group:
            continue
        if name == "token_budget":
            value = reader.value(group, where, name, (str, int))
            if isinstance(value, str) and value != "auto":
                raise reader.fail(f"{where}.{name}", value, 'must be an integer or "auto"')
        elif name in _SETUP_INTS:
            value = reader.value(group, where, name, int)
            if value < (0 if name == "prefill_servers" else 1):
                raise reader.fail(f"{where}.{name}", value, "is out of range")
        elif name in _SETUP_FLOATS:
            value = reader.value(group, where, name, (int, float))
        else:
            value = reader.value(group, where, name, str)
        if name in choices and value not in choices[name]:
            raise reader.fail(f"{where}.{name}", value, f"known: {', '.join(choices[name])}")
        if name in ("router", "decode_router") and not is_router(value):
            raise reader.fail(
                f"{where}.{name}",
                value,
                f"known: {', '.join(router_names())} (or package.module:Name)",
            )
        if name == "autoscale":
            try:
                scaler_entry(value)
            except ValueError as exc:
                raise reader.fail(f"{where}.{name}", value, str(exc)) from None
        if name == "slos" and value != "none":
            schemes = scheme_names()
            unknown = [part for part in value.split("+") if part not in schemes]
            if unknown:
                raise reader.fail(
                    f"{where}.{name}", value, f"known schemes (joined by +): {', '.join(schemes)}"
                )
        options[name] = value
    return options


def _traces(reader: _Reader, group: Mapping[str, Any], where: str) -> list[tuple[Any, str]]:
    """``(reference for the key, path or vendored name for the worker)`` of each trace."""
    from slolab.instances import TRACES

    found: list[tuple[Any, str]] = []
    for index, name in enumerate(reader.strings(group, where, "traces", required=True)):
        path = reader.file(name)
        if path is not None:
            found.append((_file_reference(path), str(path)))
        elif name in TRACES:
            found.append((name, name))
        else:
            raise reader.fail(
                f"{where}.traces[{index}]",
                name,
                f"no trace file (relative to {reader.folder}) and no vendored trace by that "
                f"name; vendored: {', '.join(TRACES)}",
            )
    return found


def _serving_tasks(
    reader: _Reader, spec: Mapping[str, Any], kind: str, sweep: str, threads: int
) -> list[Task]:
    from slolab.heuristics.policies import is_policy, policy_names
    from slolab.sim.metrics import DEFINITIONS

    tasks = []
    keys = _SIMULATE_KEYS if kind == "simulate" else _CAPACITY_KEYS
    for where, group in reader.groups(spec, kind, keys):
        traces = _traces(reader, group, where)
        policies = reader.strings(group, where, "policies", required=True)
        for index, policy in enumerate(policies):
            if not is_policy(policy):
                raise reader.fail(
                    f"{where}.policies[{index}]",
                    policy,
                    f"known: {', '.join(policy_names())} (or package.module:Name)",
                )
        servers = reader.ints(group, where, "servers", [1])
        if min(servers) < 1:
            raise reader.fail(f"{where}.servers", group["servers"], "counts must be >= 1")
        seeds = reader.ints(group, where, "seeds", [0])
        options = _setup_options(reader, group, where)
        extra: dict[str, Any] = {}
        rates: list[float | None] = [None]
        if kind == "simulate":
            given = reader.floats(group, where, "rates")
            rates = [None] if given is None else [*given]
        else:
            extra = {"target": 0.9, "definition": "deadline", "rel_tol": 0.02, "max_probes": 30}
            for name in _CAPACITY_OPTIONS:
                if name in group:
                    kinds = (
                        str if name == "definition" else (int if name == "max_probes" else float)
                    )
                    extra[name] = reader.value(group, where, name, kinds)
            if extra["definition"] not in DEFINITIONS:
                raise reader.fail(
                    f"{where}.definition", extra["definition"], f"known: {', '.join(DEFINITIONS)}"
                )
            if not 0 < extra["target"] <= 1:
                raise reader.fail(f"{where}.target", extra["target"], "must be in (0, 1]")
        for reference, trace in traces:
            for policy in policies:
                for count in servers:
                    for seed in seeds:
                        for rate in rates:
                            setup = ServingSetup(
                                trace=trace, seed=seed, servers=count, policy=policy, **options
                            )
                            described = {
                                field.name: getattr(setup, field.name)
                                for field in dataclasses.fields(setup)
                            }
                            described["trace"] = reference
                            description = {"kind": kind, "setup": described, **extra}
                            payload = {"setup": setup, **extra}
                            if kind == "simulate":
                                description["rate"] = rate
                                payload["rate"] = rate
                            tasks.append(_task(kind, sweep, description, payload, threads))
    return tasks


def _grid_sets(
    reader: _Reader, group: Mapping[str, Any], where: str, name: str, kind: type, default: list[Any]
) -> list[tuple[Any, ...]]:
    """``group[name]``: a non-empty list of non-empty lists of ``kind`` (one set of the grid
    each), or ``[default]``."""
    if name not in group:
        return [tuple(default)]
    sets = group[name]
    if not isinstance(sets, list) or not sets:
        raise reader.fail(f"{where}.{name}", sets, "must be a non-empty list of lists")
    for index, items in enumerate(sets):
        if (
            not isinstance(items, list)
            or not items
            or any(isinstance(item, bool) or not isinstance(item, kind) for item in items)
        ):
            raise reader.fail(
                f"{where}.{name}[{index}]", items, f"must be a non-empty list of {kind.__name__}"
            )
    return [tuple(items) for items in sets]


def _deploy_tasks(reader: _Reader, spec: Mapping[str, Any], sweep: str, threads: int) -> list[Task]:
    """One task per trace x model x GPU set x TP set x traffic x target x seed: the deployment
    plan of :func:`slolab.harness.deploy.plan_deployment`."""
    from slolab.heuristics.policies import policy_entry
    from slolab.instances import scheme_names
    from slolab.problems.deployment_capacity import check_grid_names, read_prices
    from slolab.sim.metrics import DEFINITIONS

    tasks = []
    for where, group in reader.groups(spec, "deploy", _DEPLOY_KEYS):
        traces = _traces(reader, group, where)
        models = reader.strings(group, where, "models", required=True)
        gpu_sets = _grid_sets(reader, group, where, "gpus", str, ["a100", "h100", "a40"])
        tp_sets = _grid_sets(reader, group, where, "tps", int, [1, 2, 4, 8])
        for index, tps in enumerate(tp_sets):
            if min(tps) < 1:
                raise reader.fail(f"{where}.tps[{index}]", list(tps), "degrees must be >= 1")
        for index, model in enumerate(models):
            for gpus in gpu_sets:
                try:
                    check_grid_names(model, gpus)
                except ValueError as error:
                    raise reader.fail(f"{where}.models[{index}]", model, str(error)) from None
        traffic = reader.floats(group, where, "traffic") or [1.0]
        targets = reader.floats(group, where, "targets") or [0.9]
        for index, target in enumerate(targets):
            if target > 1:
                raise reader.fail(f"{where}.targets[{index}]", target, "must be in (0, 1]")
        seeds = reader.ints(group, where, "seeds", [0])
        options = dict(_DEPLOY_OPTIONS)
        for name in ("limit", "max_rounds"):
            if name in group:
                options[name] = reader.value(group, where, name, int)
                if options[name] < 1:
                    raise reader.fail(f"{where}.{name}", options[name], "must be >= 1")
        for name in ("slos", "policy", "definition", "prices"):
            if name in group:
                options[name] = reader.value(group, where, name, str)
        if "calibrated" in group:
            options["calibrated"] = reader.value(group, where, "calibrated", bool)
        _deploy_pd_options(reader, group, where, gpu_sets, options)
        if options["definition"] not in DEFINITIONS:
            raise reader.fail(
                f"{where}.definition", options["definition"], f"known: {', '.join(DEFINITIONS)}"
            )
        try:
            if policy_entry(options["policy"]).setup is not None:
                raise ValueError("lays out its own cluster; the planner needs a per-server one")
        except ValueError as error:
            raise reader.fail(f"{where}.policy", options["policy"], str(error)) from None
        if options["slos"] != "none":
            unknown = [part for part in options["slos"].split("+") if part not in scheme_names()]
            if unknown:
                raise reader.fail(
                    f"{where}.slos",
                    options["slos"],
                    f"known schemes (joined by +): {', '.join(scheme_names())}",
                )
        prices_reference = None
        if options["prices"] is not None:
            path = reader.file(options["prices"])
            if path is None:
                raise reader.fail(
                    f"{where}.prices",
                    options["prices"],
                    f"no such file (relative to {reader.folder})",
                )
            try:
                read_prices(path, [gpu for gpus in gpu_sets for gpu in gpus])
            except ValueError as error:
                raise reader.fail(f"{where}.prices", options["prices"], str(error)) from None
            prices_reference, options["prices"] = _file_reference(path), str(path)
        grid = itertools.product(traces, models, gpu_sets, tp_sets, traffic, targets, seeds)
        for (reference, trace), model, gpus, tps, level, target, seed in grid:
            chosen = {
                "model": model,
                "gpus": list(gpus),
                "tps": list(tps),
                "traffic": level,
                "target": target,
                "seed": seed,
            }
            description = {
                "kind": "deploy",
                "trace": reference,
                **chosen,
                **options,
                "prices": prices_reference,
            }
            payload = {"trace": trace, **chosen, **options}
            tasks.append(_task("deploy", sweep, description, payload, threads))
    return tasks


def _deploy_pd_options(
    reader: _Reader,
    group: Mapping[str, Any],
    where: str,
    gpu_sets: Sequence[Sequence[str]],
    options: dict[str, Any],
) -> None:
    """``mode`` (co, pd, both) and ``link`` of a deploy group into ``options``, checked."""
    from slolab.harness.deploy_pd import MODES, check_link

    if "mode" in group:
        options["mode"] = reader.value(group, where, "mode", str)
        if options["mode"] not in MODES:
            raise reader.fail(f"{where}.mode", options["mode"], f"known: {', '.join(MODES)}")
    if "link" in group:
        options["link"] = str(reader.value(group, where, "link", (str, float)))
        for gpus in gpu_sets:
            try:
                check_link(options["link"], list(gpus))
            except ValueError as error:
                raise reader.fail(f"{where}.link", options["link"], str(error)) from None


def _task(
    kind: str, sweep: str, description: dict[str, Any], payload: dict[str, Any], threads: int
) -> Task:
    return Task(
        key=task_key(description),
        kind=kind,
        sweep=sweep,
        description=canonical_json(description),
        payload=payload,
        threads=threads,
    )


def _read_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        text = path.read_text()
    except OSError as error:
        raise SpecError(f"{path}: cannot read the sweep spec: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise SpecError(
            f"{path}: not a sweep spec (not UTF-8 text: {error.reason} at byte {error.start})"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{path}: not valid TOML: {error}") from None


def load_spec(path: str | os.PathLike[str], *, threads: int | None = None) -> SweepSpec:
    """Read and validate a sweep file and expand its grid into tasks.

    Parameters
    ----------
    path : path
        The TOML file (format in ``docs/sweeps.md``).
    threads : int, optional
        Solver threads per task, overriding the file's ``run.threads``.

    Raises
    ------
    SpecError
        On anything invalid, before any task runs; the message names the file, the key and
        the value.
    """
    path = Path(path)
    reader = _Reader(path)
    data = reader.table(_read_toml(path), "", _TOP_KEYS)
    name = reader.value(data, "", "name", str) if "name" in data else path.stem
    run = reader.table(data.get("run", {}), "run", _RUN_KEYS)
    for key in ("threads", "workers", "batch_rows"):
        if key in run and reader.value(run, "run", key, int) < 1:
            raise reader.fail(f"run.{key}", run[key], "must be >= 1")
    if "batch_seconds" in run and not reader.value(run, "run", "batch_seconds", float) > 0:
        raise reader.fail("run.batch_seconds", run["batch_seconds"], "must be > 0")
    if threads is not None and threads < 1:
        raise SpecError(f"--threads must be >= 1, got {threads}")
    threads = threads or int(run.get("threads", 1))
    store = None
    if "store" in data:
        store = Path(reader.value(data, "", "store", str)).expanduser()
        store = store if store.is_absolute() else reader.folder / store
    tasks = [
        *_compare_tasks(reader, data, name, threads),
        *_serving_tasks(reader, data, "simulate", name, threads),
        *_serving_tasks(reader, data, "capacity", name, threads),
        *_deploy_tasks(reader, data, name, threads),
    ]
    if not tasks:
        raise SpecError(
            f"{path}: no tasks: add [[compare]], [[simulate]], [[capacity]] or [[deploy]] tables"
        )
    unique = list({task.key: task for task in tasks}.values())
    return SweepSpec(
        name=name,
        path=path,
        store=store,
        threads=threads,
        workers=run.get("workers"),
        batch_rows=int(run.get("batch_rows", 500)),
        batch_seconds=float(run.get("batch_seconds", 5.0)),
        jobqueue=_jobqueue_options(reader, data.get("jobqueue", {})),
        tasks=tuple(unique),
    )


def _jobqueue_options(reader: _Reader, raw: Any) -> JobqueueOptions:
    names = [field.name for field in dataclasses.fields(JobqueueOptions)]
    table = reader.table(raw, "jobqueue", names)
    values: dict[str, Any] = {}
    for name in names:
        if name not in table:
            continue
        if name in ("cores", "jobs"):
            values[name] = reader.value(table, "jobqueue", name, int)
            if values[name] < 1:
                raise reader.fail(f"jobqueue.{name}", values[name], "must be >= 1")
        elif name.startswith("job_"):
            values[name] = tuple(reader.strings(table, "jobqueue", name, required=False))
        else:
            values[name] = reader.value(table, "jobqueue", name, str)
    return JobqueueOptions(**values)
