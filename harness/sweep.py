"""Sweeps: a grid of compare, simulate, capacity and deploy tasks run on Dask, rows to a store.

A sweep is a TOML file (see ``docs/sweeps.md``): the grid of tasks and where the rows go.
:func:`slolab.harness.sweep_spec.load_spec` validates it whole before anything runs and
expands it into :class:`~slolab.harness.sweep_spec.Task` records. :func:`run_sweep` runs the tasks not yet
in the store on a Dask cluster and appends their rows to a
:class:`slolab.harness.store.ResultsStore` batch by batch. Every backend is a
``dask.distributed`` cluster driven by one code path (submit, gather as completed, write):

- ``local``: a :class:`distributed.LocalCluster` of worker processes on this machine;
- ``dask``: an existing scheduler (``Client(address)``);
- ``slurm`` / ``pbs``: a :mod:`dask_jobqueue` cluster whose workers run as batch jobs.

Task kinds:

- ``compare``: an instance x seed x time limit, running a list of methods
  (:func:`slolab.harness.compare.compare`), one row per method;
- ``simulate``: a trace x policy x servers x seed (x rate), what ``slolab simulate --json``
  reports, one row;
- ``capacity``: a trace x policy x servers x seed, the largest rate meeting an attainment
  target (:func:`slolab.harness.serving.capacity_search`), one row;
- ``deploy``: a trace x model x GPU set x TP set x traffic x target x seed, the deployment
  plan (:func:`slolab.harness.deploy.plan_deployment`: cheapest single configuration, mixed
  fleet, saving, simulated attainments), one row.

A task's key is the SHA-256 of its canonical description (:func:`slolab.harness.store.task_key`);
the store holds a task's rows whole or not at all, so a rerun computes only the tasks whose
key is missing. A task that raises becomes rows with ``error`` set; it never stops the sweep.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import functools
import json
import logging
import os
import platform
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from slolab.harness.output import add_output_flags, wants_progress
from slolab.harness.serving import ServingSetup
from slolab.harness.store import ResultsStore, StoreLockedError, StoreReadError
from slolab.harness.sweep_spec import (
    JobqueueOptions,
    SweepSpec,
    Task,
    build_instance,
    load_spec,
)
from slolab.instances.records import Instance

logger = logging.getLogger("slolab")

BACKENDS = ("local", "dask", "slurm", "pbs")

_COMMON_COLUMNS = {
    "task_key": "string",
    "sweep": "string",
    "task_kind": "string",
    "task": "string",
    "seed": "int64",
    "threads": "int64",
    "time_limit_s": "float64",
    "host": "string",
    "versions": "string",
    "wall_s": "float64",
    "finished_utc": "string",
    "error": "string",
    "error_type": "string",
    "error_traceback": "string",
}
_COMPARE_COLUMNS = {
    "instance": "string",
    "problem": "string",
    "requests": "int64",
    "method": "string",
    "kind": "string",
    "status": "string",
    "objective": "float64",
    "solver_objective": "float64",
    "bound": "float64",
    "runtime_s": "float64",
    "backend": "string",
    "attainment": "float64",
    "finished": "int64",
    "mean_latency_s": "float64",
    "ttft_p99_s": "float64",
    "violations": "int64",
    "optimum_lo": "float64",
    "optimum_hi": "float64",
    "gap_lo": "float64",
    "gap_hi": "float64",
    "objective_name": "string",
    "sense": "string",
    "cost_server_s": "float64",
    "gap": "float64",
}
_SERVING_COLUMNS = {
    "trace": "string",
    "rate": "float64",
    "policy": "string",
    "router": "string",
    "mode": "string",
    "servers": "int64",
    "timing": "string",
    "rejected": "int64",
    "rejected_kv": "int64",
    # requests rejected because the run stalled, and why (the row's error says so too)
    "stalled": "int64",
    "stall": "string",
    # requests a router held that no server took by the end (a stall too)
    "rejected_held": "int64",
    "kv_capacity": "int64",
    "kv_capacity_source": "string",
    "attainment_deadline": "float64",
    "attainment_ttft+mean-tpot": "float64",
    "attainment_ttft+max-tpot": "float64",
    "attainment_e2e": "float64",
    "ttft_p50": "float64",
    "ttft_p99": "float64",
    "tpot_p50": "float64",
    "tpot_p99": "float64",
    "e2e_mean": "float64",
    "tdg_ratio": "float64",
    "miss_tdg_ratio": "float64",
    "g": "float64",
    "tokens_simulated": "int64",
    "iterations": "int64",
    "preemptions": "int64",
    "end_s": "float64",
    "utilization": "float64",
    "simulate_s": "float64",
    "cost_per_request_s": "float64",
    "cost_per_met_request_s": "float64",
    "cost_by_pool": "string",
    "servers_max": "int64",
    "scale_events": "int64",
    "autoscale": "string",
    "startup_s": "float64",
    # by-tier figures (JSON objects keyed by the tier), when the SLOs define tiers
    "attainment_by_tier": "string",
    "requests_by_tier": "string",
    # what a self-reporting router says of its decisions (JSON: simulate's router_* keys)
    "router_report": "string",
}
_CAPACITY_COLUMNS = {
    "capacity": "float64",
    "target": "float64",
    "definition": "string",
    "trace_rate": "float64",
    "bracket_lo": "float64",
    "bracket_hi": "float64",
    "n_probes": "int64",
    "monotone": "bool",
    "capped_high": "bool",
    "capped_low": "bool",
    "rel_tol": "float64",
    "stop_reason": "string",
    "probes": "string",
    "n_stalled": "int64",
}
#: A deploy row: the grid point, then :meth:`slolab.harness.deploy.DeploymentReport.to_record`
#: (``trace``, ``policy``, ``requests``, ``target``, ``definition`` are shared columns).
_DEPLOY_COLUMNS = {
    "model": "string",
    "gpus": "string",
    "tps": "string",
    "traffic": "float64",
    "configurations": "int64",
    "classes": "int64",
    "refused": "string",
    "single_loop_fleet": "string",
    "single_met": "bool",
    "single_rounds": "int64",
    "single_fleet": "string",
    "single_cost": "float64",
    "single_attainment": "float64",
    "mixed_loop_fleet": "string",
    "mixed_met": "bool",
    "mixed_rounds": "int64",
    "mixed_fleet": "string",
    "mixed_cost": "float64",
    "mixed_attainment": "float64",
    "mixed_from": "string",
    "saving": "float64",
    "optimum_cost": "float64",
    "optimum_status": "string",
    "greedy_gap": "float64",
    "best_single_gap": "float64",
    "capacity_probes": "int64",
    "capacity_early": "int64",
    "capacity_reused": "int64",
    "capacity_saved": "int64",
}
#: A deploy row with ``mode = "pd"`` or ``"both"``: the disaggregated answer
#: (:meth:`slolab.harness.deploy_pd.PDReport.to_record`) and which answer is cheaper
#: (:func:`slolab.harness.deploy_pd.modes_record`).
_DEPLOY_PD_COLUMNS = {
    "mode": "string",
    "co_first_attainment": "float64",
    "pd_link": "string",
    "pd_met": "bool",
    "pd_rounds": "int64",
    "pd_first_cost": "float64",
    "pd_first_attainment": "float64",
    "pd_loop_fleet": "string",
    "pd_fleet": "string",
    "pd_cost": "float64",
    "pd_attainment": "float64",
    "pd_optimum_cost": "float64",
    "pd_optimum_status": "string",
    "pd_greedy_gap": "float64",
    "pd_best_pair_gap": "float64",
    "pd_capacity_probes": "int64",
    "pd_capacity_early": "int64",
    "pd_wall_s": "float64",
    "answer": "string",
    "pd_saving": "float64",
}
#: The columns of a sweep's store: every task's columns plus those of each kind (a row
#: leaves the other kinds' columns null).
SWEEP_COLUMNS: dict[str, str] = {
    **_COMMON_COLUMNS,
    **_COMPARE_COLUMNS,
    **_SERVING_COLUMNS,
    **_CAPACITY_COLUMNS,
    **_DEPLOY_COLUMNS,
    **_DEPLOY_PD_COLUMNS,
}

# -- running one task (on a worker) -----------------------------------------------------------


@functools.cache
def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for package in (
        "slolab",
        "numpy",
        "pandas",
        "pyarrow",
        "highspy",
        "ortools",
        "pulp",
        "dask",
        "distributed",
    ):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "absent"
    return json.dumps(found, sort_keys=True)


def _fit(row: Mapping[str, Any]) -> dict[str, Any]:
    """A full row of :data:`SWEEP_COLUMNS` from ``row``: its values cast to the columns' types,
    other keys dropped, missing columns None."""
    fitted: dict[str, Any] = dict.fromkeys(SWEEP_COLUMNS)
    for name, value in row.items():
        column = SWEEP_COLUMNS.get(name)
        if column is None:
            continue
        if isinstance(value, np.generic):
            value = value.item()
        if value is not None and column == "int64" and isinstance(value, float):
            value = None if not np.isfinite(value) else int(value)
        elif value is not None and column == "string" and isinstance(value, Mapping | list):
            value = json.dumps(value, sort_keys=True, default=str)
        elif value is not None and column == "string" and not isinstance(value, str):
            value = str(value)
        elif value is not None and column == "bool":
            value = bool(value)
        fitted[name] = value
    return fitted


def _error_fields(error: BaseException) -> dict[str, Any]:
    return {
        "error": str(error) or repr(error),
        "error_type": type(error).__name__,
        "error_traceback": "".join(traceback.format_exception(error))[-4000:],
    }


def _load_source(source: Mapping[str, Any]) -> Instance:
    from slolab.instances import load_shipped
    from slolab.problems import load_instance

    if "file" in source:
        return load_instance(source["file"])
    if "shipped" in source:
        return load_shipped(source["shipped"])
    return build_instance(source["build"], **source["options"])


def _compare_rows(task: Task) -> list[dict[str, Any]]:
    import pandas as pd
    from slolab.harness.compare import compare, with_gaps

    payload = task.payload
    methods = payload["methods"]
    try:
        instance = _load_source(payload["source"])
    except Exception as error:
        fields = {"instance": payload["label"], "problem": payload["problem"]}
        return [{**fields, "method": method, **_error_fields(error)} for method in methods]
    done: list[dict[str, Any]] = []
    failed: dict[str, dict[str, Any]] = {}
    for method in methods:
        try:
            frame = compare(
                instance,
                [method],
                seed=payload["seed"],
                time_limit=payload["time_limit_s"],
                threads=task.threads,
            )
            done.extend(
                {str(name): value for name, value in row.items()}
                for row in frame.to_dict(orient="records")
            )
        except Exception as error:
            failed[method] = {
                "instance": instance.name,
                "problem": instance.problem,
                "requests": instance.n_requests,
                "method": method,
                **_error_fields(error),
            }
    by_method: dict[str, dict[str, Any]] = {}
    if done:
        for row in with_gaps(pd.DataFrame(done)).to_dict("records"):
            by_method[str(row["method"])] = {str(name): value for name, value in row.items()}
    return [by_method.get(method) or failed[method] for method in methods]


def _serving_rows(task: Task) -> list[dict[str, Any]]:
    from slolab.harness.serving import capacity_search, simulate_summary

    payload = task.payload
    setup: ServingSetup = payload["setup"]
    described = json.loads(task.description)["setup"]
    trace = (
        described["trace"] if isinstance(described["trace"], str) else described["trace"]["file"]
    )
    fields = {
        "trace": trace,
        "policy": setup.policy,
        "router": setup.router_name,
        "servers": setup.servers,
        "timing": setup.timing,
    }
    try:
        if task.kind == "simulate":
            summary = simulate_summary(setup, payload["rate"])
            report = {k[len("router_") :]: v for k, v in summary.items() if k.startswith("router_")}
            if report:
                summary["router_report"] = report
            return [{**_without_stalled_attainment(summary), **fields, "rate": payload["rate"]}]
        found, trace_rate = capacity_search(
            setup,
            target=payload["target"],
            definition=payload["definition"],
            start_rate=payload.get("start_rate"),
            rel_tol=payload["rel_tol"],
            max_probes=payload["max_probes"],
        )
        record = found.to_record()
        if found.stop_reason == "stalled":
            rate = found.probes[-1][0]
            record.update(
                error=f"the capacity probe at rate {rate:.6g} stalled ({found.stalled[-1]} "
                "requests left waiting with nothing to run): no valid attainment",
                error_type=STALLED_RUN,
            )
        return [{**record, **fields, "trace_rate": trace_rate, "definition": payload["definition"]}]
    except Exception as error:
        return [{**fields, **_error_fields(error)}]


def _deploy_rows(task: Task) -> list[dict[str, Any]]:
    """The deployment plan of one grid point (:func:`slolab.harness.deploy.plan_deployment`)
    as one row; a grid the data cannot support, or a target out of its reach, an error row."""
    from slolab.harness.deploy import (
        configuration_names,
        plan_deployment,
        read_prices,
        trace_instance,
    )

    payload = task.payload
    trace = json.loads(task.description)["trace"]
    fields = {
        "trace": trace if isinstance(trace, str) else trace["file"],
        "model": payload["model"],
        "gpus": ",".join(payload["gpus"]),
        "tps": ",".join(map(str, payload["tps"])),
        "traffic": payload["traffic"],
        "target": payload["target"],
        "definition": payload["definition"],
        "policy": payload["policy"],
    }
    try:
        configurations, refused = configuration_names(
            payload["model"],
            payload["gpus"],
            payload["tps"],
            calibrated=payload.get("calibrated", True),
        )
        instance = trace_instance(
            payload["trace"],
            configurations,
            seed=payload["seed"],
            limit=payload["limit"],
            slos=payload["slos"],
            traffic=payload["traffic"],
        )
        if payload.get("mode", "co") != "co":
            return [{**_deploy_modes_row(payload, instance, configurations, refused), **fields}]
        report = plan_deployment(
            instance,
            configurations,
            target=payload["target"],
            definition=payload["definition"],
            policy=payload["policy"],
            seed=payload["seed"],
            prices=None
            if payload["prices"] is None
            else read_prices(payload["prices"], payload["gpus"]),
            refused=refused,
            max_rounds=payload["max_rounds"],
            cache=_capacity_cache(payload.get("capacity_cache")),
        )
        return [{**report.to_record(), **fields, "requests": instance.n_requests}]
    except Exception as error:
        return [{**fields, **_error_fields(error)}]


def _deploy_modes_row(
    payload: Mapping[str, Any],
    instance: Any,
    configurations: list[str],
    refused: dict[str, str],
) -> dict[str, Any]:
    """A deploy task with ``mode`` pd or both: :func:`slolab.harness.deploy_pd.plan_modes`
    as one row (:func:`slolab.harness.deploy_pd.modes_record`)."""
    from slolab.harness.deploy import read_prices
    from slolab.harness.deploy_pd import DEFAULT_LINK, modes_record, plan_modes

    answer = plan_modes(
        instance,
        configurations,
        mode=payload["mode"],
        target=payload["target"],
        link=payload.get("link", DEFAULT_LINK),
        definition=payload["definition"],
        policy=payload["policy"],
        seed=payload["seed"],
        prices=None if payload["prices"] is None else read_prices(payload["prices"]),
        refused=refused,
        max_rounds=payload["max_rounds"],
        cache=_capacity_cache(payload.get("capacity_cache")),
    )
    return {**modes_record(answer), "mode": payload["mode"], "requests": instance.n_requests}


#: The capacity caches of this process, by directory: a worker's tasks share one (in memory,
#: and in the directory the other workers share).
_CAPACITY_CACHES: dict[str, Any] = {}


def _capacity_cache(directory: str | None) -> Any:
    """The process's :class:`slolab.harness.deploy.CapacityCache` on ``directory`` (None: none)."""
    from slolab.harness.deploy import CapacityCache

    if directory is None:
        return None
    if directory not in _CAPACITY_CACHES:
        _CAPACITY_CACHES[directory] = CapacityCache(directory)
    return _CAPACITY_CACHES[directory]


#: ``error_type`` of a row whose run stalled (its ``error`` says why).
STALLED_RUN = "StalledRun"


def _without_stalled_attainment(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` as a row: when its run stalled, the attainments dropped (they are no valid
    attainment) and ``error`` set to the stall's reason."""
    if not (summary.get("stalled") or summary.get("rejected_held")):
        return summary
    kept = {k: v for k, v in summary.items() if not k.startswith("attainment")}
    return {**kept, "error": summary["stall"], "error_type": STALLED_RUN}


def run_task(task: Task) -> list[dict[str, Any]]:
    """The rows of one task, computed here (on a Dask worker); never raises for a task's fault.

    A compare task gives one row per method (a method that raises gets a row with ``error``
    set; the others keep their results and gaps); a simulate, capacity or deploy task one row. Every
    row carries the task columns: ``task_key``, ``sweep``, ``task_kind``, ``task`` (the
    description), ``seed``, ``threads``, ``time_limit_s``, ``host``, ``versions`` (JSON),
    ``wall_s`` (the task's wall time), ``finished_utc``, and ``error`` / ``error_type`` /
    ``error_traceback`` (null unless it failed).
    """
    start = time.perf_counter()
    rows = {"compare": _compare_rows, "deploy": _deploy_rows}.get(task.kind, _serving_rows)(task)
    common = {
        "task_key": task.key,
        "sweep": task.sweep,
        "task_kind": task.kind,
        "task": task.description,
        "seed": task.payload["setup"].seed if "setup" in task.payload else task.payload["seed"],
        "threads": task.threads,
        "time_limit_s": task.payload.get("time_limit_s"),
        "host": socket.gethostname(),
        "versions": _versions(),
        "wall_s": time.perf_counter() - start,
        "finished_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    return [_fit({**row, **common}) for row in rows]


def _rows_of(future: Any, task: Task) -> list[dict[str, Any]]:
    """Rows of a completed future: its result, failure rows, or none if it was cancelled."""
    try:
        if future.status == "cancelled":
            logger.warning(
                "task %s was cancelled by the cluster; it is left for the next run", task.key
            )
            return []
        if future.status == "error":
            return _failed_rows(task, future.exception())
        return list(future.result())
    finally:
        future.release()


def _failed_rows(task: Task, error: BaseException) -> list[dict[str, Any]]:
    """Rows recording that ``task`` failed outside :func:`run_task` (its worker died, say)."""
    methods = task.payload.get("methods", [None])
    common = {
        "task_key": task.key,
        "sweep": task.sweep,
        "task_kind": task.kind,
        "task": task.description,
        "threads": task.threads,
        "time_limit_s": task.payload.get("time_limit_s"),
        **_error_fields(error),
    }
    return [_fit({**common, "method": method}) for method in methods]


# -- backends ---------------------------------------------------------------------------------


def available_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True, slots=True)
class Backend:
    """Where a sweep runs.

    Attributes
    ----------
    kind : str
        One of :data:`BACKENDS`.
    workers : int or None
        ``local``: worker processes (None: the cores available // threads).
    address : str or None
        ``dask``: the scheduler's address (``tcp://host:8786``).
    jobqueue : JobqueueOptions
        ``slurm`` / ``pbs``: queue, cores, memory, walltime, jobs.
    """

    kind: str = "local"
    workers: int | None = None
    address: str | None = None
    jobqueue: JobqueueOptions = JobqueueOptions()

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {self.kind!r}")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.kind == "dask" and not self.address:
            raise ValueError("the dask backend needs a scheduler address (--dask tcp://host:8786)")


def local_workers(workers: int | None, threads: int, cores: int | None = None) -> int:
    """Worker processes of the local backend: ``workers``, or the most with workers x threads <= cores.

    Logs a warning when ``workers * threads`` exceeds the cores (the tasks then compete for
    them and time-limited solves get less done).
    """
    cores = cores or available_cores()
    if workers is None:
        return max(1, cores // threads)
    if workers * threads > cores:
        logger.warning(
            "%d workers x %d threads = %d exceeds the %d cores available: tasks will compete "
            "for cores (time-limited solves then get less done)",
            workers,
            threads,
            workers * threads,
            cores,
        )
    return workers


def _jobqueue_classes() -> tuple[Any, Any]:
    """dask-jobqueue's ``PBSCluster`` and ``SLURMCluster``, imported without its side effect.

    Importing dask-jobqueue replaces the process's SIGINT handler with one that calls
    ``sys.exit`` (its ``runner`` module does so at import), which would turn every later Ctrl-C
    into a SystemExit instead of the KeyboardInterrupt the solvers and the command line expect:
    the handler in place before the import is put back.
    """
    previous = signal.getsignal(signal.SIGINT)
    try:
        from dask_jobqueue import PBSCluster, SLURMCluster
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return PBSCluster, SLURMCluster


def jobqueue_cluster(kind: str, options: JobqueueOptions, threads: int) -> Any:
    """A dask-jobqueue cluster (not yet scaled) whose workers each run one task at a time.

    Each job has ``options.cores`` cores and runs ``cores // threads`` worker processes; each
    worker declares the resource ``cpus = threads`` and every task asks for ``threads`` of it,
    so a worker runs one task at a time and a job never runs more solver threads than cores.
    """
    PBSCluster, SLURMCluster = _jobqueue_classes()

    missing = [name for name in ("cores", "memory", "walltime") if getattr(options, name) is None]
    if missing:
        raise ValueError(
            f"--jobqueue {kind} needs {', '.join(missing)} (in the spec's [jobqueue] table or as "
            f"--{' --'.join(missing)})"
        )
    assert options.cores is not None
    if options.cores < threads:
        raise ValueError(f"jobqueue cores ({options.cores}) must be >= threads ({threads})")
    settings: dict[str, Any] = {
        "queue": options.queue,
        "account": options.account,
        "cores": options.cores,
        "processes": options.cores // threads,
        "memory": options.memory,
        "walltime": options.walltime,
        "interface": options.interface,
        "job_extra_directives": list(options.job_extra_directives),
        "job_script_prologue": list(options.job_script_prologue),
        "worker_extra_args": ["--resources", f"cpus={threads}"],
    }
    cluster_class = {"slurm": SLURMCluster, "pbs": PBSCluster}[kind]
    return cluster_class(**{name: value for name, value in settings.items() if value is not None})


def _warn_oversubscribed(client: Any, threads: int) -> None:
    """Warn when a remote cluster runs more task threads per host than the host has cores."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    cores = client.run(available_cores)
    per_host: dict[str, list[int]] = {}
    for address, info in workers.items():
        host = info.get("host", address)
        per_host.setdefault(host, [0, cores.get(address, 0)])
        per_host[host][0] += int(info.get("nthreads", 1)) * threads
    for host, (used, available) in per_host.items():
        if available and used > available:
            logger.warning(
                "workers on %s run up to %d solver threads on %d cores (worker threads x "
                "threads per task); start them with --nthreads 1 to avoid it",
                host,
                used,
                available,
            )


def _spawned_children() -> dict[int, Any]:
    """Child processes of this one that run a multiprocessing spawn (Dask workers), by pid."""
    import psutil

    found = {}
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if any("spawn_main" in part for part in child.cmdline()):
                found[child.pid] = child
    return found


def _start_local_workers(cluster: Any, workers: int) -> list[Any]:
    """Start ``workers`` worker processes of a LocalCluster that ignore SIGINT; return them.

    The Ctrl-C a terminal sends goes to its whole process group, workers included; workers
    started while SIGINT is ignored keep ignoring it, so only this process gets it and stops
    them (:func:`_stop_local_workers`). SIGINT is ignored here only until the worker processes
    exist (tens of milliseconds), not while they import.
    """
    before = set(_spawned_children())
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cluster.scale(workers)
        deadline = time.monotonic() + 120.0
        while True:
            started = [child for pid, child in _spawned_children().items() if pid not in before]
            if len(started) >= workers:
                return started
            if time.monotonic() > deadline:
                raise RuntimeError(f"{workers} local worker processes did not start in 120 s")
            time.sleep(0.005)
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_local_workers(cluster: Any, processes: list[Any]) -> None:
    """Kill the worker processes this sweep started (``processes``) so the cluster closes at once.

    Workers still starting then fail to, which their nannies would log as errors: the loggers
    of distributed and tornado are silenced first, since this is the intended outcome.
    """
    import psutil

    for name in ("distributed", "tornado", "tornado.application", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for nanny in list(cluster.workers.values()):
        nanny.close_gracefully(reason="sweep interrupted")  # do not restart the worker
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


@contextlib.contextmanager
def open_cluster(
    backend: Backend, threads: int, echo: Callable[[str], None]
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A Dask client on ``backend`` and the ``submit`` options its tasks need; closed on exit."""
    from dask.distributed import Client, LocalCluster

    if backend.kind == "local":
        cluster = LocalCluster(
            n_workers=0, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        client = None
        processes: list[Any] = []
        try:
            client = Client(cluster)
            processes = _start_local_workers(cluster, local_workers(backend.workers, threads))
            yield client, {}
        except KeyboardInterrupt:
            _stop_local_workers(cluster, processes)
            raise
        finally:
            if client is not None:
                client.close()
            cluster.close()
        return
    with contextlib.ExitStack() as stack:
        submit_options: dict[str, Any] = {}
        if backend.kind == "dask":
            client = stack.enter_context(Client(backend.address, timeout="30s"))
            echo(f"dask scheduler {backend.address}; dashboard: {client.dashboard_link}")
            _warn_oversubscribed(client, threads)
        else:
            command = {"slurm": "sbatch", "pbs": "qsub"}[backend.kind]
            if shutil.which(command) is None:
                raise ValueError(f"--jobqueue {backend.kind} needs {command} on PATH")
            cluster = stack.enter_context(jobqueue_cluster(backend.kind, backend.jobqueue, threads))
            cluster.scale(jobs=backend.jobqueue.jobs)
            client = stack.enter_context(Client(cluster))
            submit_options = {"resources": {"cpus": threads}}
            echo(
                f"submitted {backend.jobqueue.jobs} {backend.kind} job(s); tasks start as they "
                f"do; dashboard: {cluster.dashboard_link}"
            )
        yield client, submit_options


# -- the sweep --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class SweepTally:
    """What :func:`run_sweep` did.

    Attributes
    ----------
    name : str
        The sweep.
    store : str
        The store directory.
    tasks : int
        Tasks in the spec.
    stored_before : int
        Tasks already stored when the run started (skipped).
    ran : int
        Tasks run and stored now (failed ones included).
    failed : int
        Of ``ran``, tasks with at least one error row.
    rows : int
        Rows added.
    not_run : int
        Tasks left for the next run (interrupted, or cancelled by the cluster).
    wall_s : float
        Wall time of the run.
    interrupted : bool
        Whether the run was stopped (Ctrl-C) before the end.
    """

    name: str
    store: str
    tasks: int
    stored_before: int
    ran: int
    failed: int
    rows: int
    not_run: int
    wall_s: float
    interrupted: bool = False

    def __post_init__(self) -> None:
        for name in ("tasks", "stored_before", "ran", "failed", "rows", "not_run"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.stored_before + self.ran + self.not_run != self.tasks:
            raise ValueError("stored_before + ran + not_run must equal tasks")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep; ``tally`` says what was stored."""

    def __init__(self, tally: SweepTally) -> None:
        super().__init__(tally)
        self.tally = tally


@contextlib.contextmanager
def _deferred_sigint() -> Iterator[threading.Event]:
    """Turn a Ctrl-C into an event the sweep checks between steps; a second one raises at once.

    Distributed's blocking calls must not be cut by a KeyboardInterrupt (the client or the
    cluster is then left half started or half closed), so the sweep stops at its next check
    (every 50 ms while it waits for tasks). Outside the main thread nothing changes.
    """
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def handler(signum: int, frame: Any) -> None:
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGINT, previous)


#: Directory of a store where its deploy tasks keep the capacities they measured.
CAPACITY_CACHE_DIRECTORY = "capacity-cache"


def with_capacity_cache(task: Task, store_directory: str | os.PathLike[str]) -> Task:
    """``task``, a deploy task of it reading and writing the capacities of the store's
    :data:`CAPACITY_CACHE_DIRECTORY` (:class:`slolab.harness.deploy.CapacityCache`): grid points
    that share capacity searches (the same trace cut, classes, configurations in the same
    order, class targets, policy, seed) measure them once. The task's key, of its description,
    does not change; other tasks are returned as they are."""
    if task.kind != "deploy" or "capacity_cache" in task.payload:
        return task
    directory = str(Path(store_directory) / CAPACITY_CACHE_DIRECTORY)
    return dataclasses.replace(task, payload={**task.payload, "capacity_cache": directory})


def open_store(directory: str | os.PathLike[str]) -> ResultsStore:
    """The results store of a sweep (columns :data:`SWEEP_COLUMNS`, key ``task_key``)."""
    return ResultsStore(directory, SWEEP_COLUMNS, key="task_key")


def run_sweep(
    spec: SweepSpec,
    store_directory: str | os.PathLike[str],
    backend: Backend = Backend(),
    *,
    progress: bool = True,
    echo: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
    max_in_flight: int = 1024,
) -> SweepTally:
    """Run the spec's tasks not yet in the store on ``backend`` and append their rows.

    Tasks are submitted to the Dask client (at most ``max_in_flight`` at a time) and gathered
    as they complete; the rows of completed tasks are appended in one batch once
    ``spec.batch_rows`` rows wait or ``spec.batch_seconds`` passed since the last batch, and at
    the end. A task whose worker dies repeatedly is stored as failed; a task the cluster
    cancels is left for the next run.

    Raises
    ------
    SweepInterrupted
        On Ctrl-C, after writing the rows of every completed task and closing the cluster.
    slolab.harness.store.StoreLockedError
        When another process is writing to the store.
    """
    from dask.distributed import as_completed
    from tqdm.auto import tqdm

    start = time.perf_counter()
    store = open_store(store_directory)
    stored_before = ran = failed = rows_added = 0
    with store.writer() as writer:
        pending = [
            with_capacity_cache(task, store.directory)
            for task in spec.tasks
            if task.key not in writer.keys
        ]
        stored_before = len(spec.tasks) - len(pending)

        def tally(interrupted: bool = False) -> SweepTally:
            return SweepTally(
                name=spec.name,
                store=str(store.directory),
                tasks=len(spec.tasks),
                stored_before=stored_before,
                ran=ran,
                failed=failed,
                rows=rows_added,
                not_run=len(spec.tasks) - stored_before - ran,
                wall_s=time.perf_counter() - start,
                interrupted=interrupted,
            )

        if not pending:
            return tally()
        buffer: list[dict[str, Any]] = []
        buffered_tasks: list[bool] = []
        last_write = time.monotonic()

        def flush() -> None:
            nonlocal ran, failed, rows_added, last_write
            if buffer:
                writer.append(buffer)
                ran += len(buffered_tasks)
                failed += sum(buffered_tasks)
                rows_added += len(buffer)
                buffer.clear()
                buffered_tasks.clear()
            last_write = time.monotonic()

        bar = tqdm(
            total=len(spec.tasks),
            initial=stored_before,
            desc=f"sweep {spec.name}",
            unit="task",
            disable=None if progress else True,
        )
        if backend.kind == "local":
            # No more workers than tasks (local_workers warns about oversubscription later).
            workers = backend.workers or max(1, available_cores() // spec.threads)
            backend = dataclasses.replace(backend, workers=min(workers, len(pending)))
        try:
            with (
                _deferred_sigint() as stop,
                open_cluster(backend, spec.threads, echo) as (client, submit_options),
            ):
                by_key = {}
                queue = iter(pending)
                completed = as_completed()

                def submit_next() -> None:
                    task = next(queue, None)
                    if task is not None:
                        future = client.submit(
                            run_task, task, key=f"sweep-{task.key}", pure=False, **submit_options
                        )
                        by_key[future.key] = task
                        completed.add(future)

                try:
                    if stop.is_set():
                        raise KeyboardInterrupt
                    for _ in range(max_in_flight):
                        submit_next()
                    while not completed.is_empty():
                        if stop.is_set():
                            raise KeyboardInterrupt
                        ready = completed.next_batch(block=False) if completed.has_ready() else []
                        if not ready:
                            time.sleep(0.05)
                        for future in ready:
                            task = by_key.pop(future.key)
                            rows = _rows_of(future, task)
                            if rows:
                                buffer.extend(rows)
                                buffered_tasks.append(any(row.get("error") for row in rows))
                            bar.update(1)
                            submit_next()
                        waited = time.monotonic() - last_write
                        if len(buffer) >= spec.batch_rows or (
                            buffer and waited >= spec.batch_seconds
                        ):
                            flush()
                finally:
                    # Ctrl-C included: the completed tasks' rows go in before the cluster closes.
                    flush()
        except KeyboardInterrupt:
            raise SweepInterrupted(tally(interrupted=True)) from None
        finally:
            bar.close()
        return tally()


# -- command line -----------------------------------------------------------------------------


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` command to the ``slolab`` subcommands."""
    p = sub.add_parser(
        "sweep",
        help="run a grid of compare/simulate/capacity/deploy tasks from a TOML spec",
        description="Run the tasks of a sweep spec (TOML) that are not yet in the store, on "
        "local worker processes, a Dask cluster or a SLURM/PBS batch system; rows are "
        "appended to a Parquet data set that pandas.read_parquet(STORE) reads. Rerunning the "
        "same command resumes: stored tasks are skipped. See docs/sweeps.md.",
    )
    p.add_argument("spec", help="the sweep file (.toml)")
    p.add_argument(
        "--store",
        default=None,
        help="results directory (default: the spec's 'store', relative to the spec file)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local worker processes (default: the spec's run.workers, else cores // threads)",
    )
    where.add_argument(
        "--dask", metavar="ADDRESS", default=None, help="run on a Dask scheduler (tcp://host:8786)"
    )
    where.add_argument(
        "--jobqueue",
        choices=["slurm", "pbs"],
        default=None,
        help="start workers as batch jobs (settings from the spec's [jobqueue] and the flags below)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="solver threads per task (default: the spec's run.threads, else 1)",
    )
    p.add_argument("--queue", default=None, help="--jobqueue: partition / queue")
    p.add_argument("--account", default=None, help="--jobqueue: account to charge")
    p.add_argument("--cores", type=int, default=None, help="--jobqueue: cores per job")
    p.add_argument("--memory", default=None, help="--jobqueue: memory per job, e.g. 32GB")
    p.add_argument("--walltime", default=None, help="--jobqueue: job time limit, e.g. 02:00:00")
    p.add_argument("--jobs", type=int, default=None, help="--jobqueue: jobs to start")
    add_output_flags(p, "print the tally as one JSON object")
    p.set_defaults(func=cmd_sweep)
    return p


def _backend(spec: SweepSpec, args: argparse.Namespace) -> Backend:
    if args.dask:
        return Backend("dask", address=args.dask)
    if args.jobqueue:
        overrides = {
            name: getattr(args, name)
            for name in ("queue", "account", "cores", "memory", "walltime", "jobs")
            if getattr(args, name) is not None
        }
        return Backend(args.jobqueue, jobqueue=dataclasses.replace(spec.jobqueue, **overrides))
    return Backend("local", workers=args.workers or spec.workers)


def _describe(tally: SweepTally) -> str:
    if tally.ran == 0 and tally.not_run == 0:
        return (
            f"sweep {tally.name}: all {tally.tasks} tasks already stored in {tally.store}; "
            "no rows added"
        )
    text = (
        f"sweep {tally.name}: {tally.tasks} tasks; {tally.stored_before} already stored, "
        f"{tally.ran} run ({tally.failed} failed); {tally.rows} rows added to {tally.store} in "
        f"{tally.wall_s:.1f} s"
    )
    if tally.failed:
        text += "; failed tasks have the column error set"
    if tally.not_run:
        text += f"; {tally.not_run} not run: run the same command to resume"
    return text


def cmd_sweep(args: argparse.Namespace) -> int:
    """``slolab sweep``: run a spec; exit 0 (failed tasks are rows), 130 on Ctrl-C."""
    spec = load_spec(args.spec, threads=args.threads)
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    directory = Path(args.store) if args.store else spec.store
    if directory is None:
        raise ValueError(f'{args.spec}: no store: give --store DIR or store = "DIR" in the spec')
    backend = _backend(spec, args)
    if not getattr(args, "verbose", False):
        # The scheduler and nannies run in this process and log every start and stop; importing
        # distributed sets its logger's level, so set it after.
        import distributed  # noqa: F401

        logging.getLogger("distributed").setLevel(logging.ERROR)
    try:
        tally = run_sweep(spec, directory, backend, progress=wants_progress(args))
    except (StoreLockedError, StoreReadError) as error:
        raise ValueError(str(error)) from None
    except SweepInterrupted as stop:
        done = stop.tally.stored_before + stop.tally.ran
        print(
            f"slolab: interrupted: {done} of {stop.tally.tasks} tasks stored in "
            f"{stop.tally.store}; run the same command to resume",
            file=sys.stderr,
        )
        return 130
    except KeyboardInterrupt:
        print(
            f"slolab: interrupted; stored tasks are kept in {directory}; run the same command "
            "to resume",
            file=sys.stderr,
        )
        return 130
    if args.json:
        print(json.dumps(tally.to_dict()))
    else:
        print(_describe(tally))
    return 0
