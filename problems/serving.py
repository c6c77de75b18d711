"""The serving problem: a stream of requests cut from a real trace, on a cluster.

No exact model: the stream is too long for one. The online policies run on it and are scored
by SLO attainment (``slolab simulate``, ``slolab capacity``, ``compare`` with policy names).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slolab.problems.flags import LIMIT, RATE, SEED, SERVERS, SLOS, TIMING, TRACE, slo_scheme_of
from slolab.problems.registry import (
    TRACE_OPTIONS,
    Heuristic,
    Objective,
    OptionValueError,
    Problem,
    register_problem,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.timing import TimingModel


def serving_instance(
    trace: str | Path | None,
    *,
    seed: int,
    servers: int = 1,
    timing: str | TimingModel = "llama2-7b-h100",
    slos: str | None = "polyserve",
    slo_params: dict[str, Any] | None = None,
    rate: float | None = None,
    limit: int | None = None,
    mode: str = "colocated",
    prefill_servers: int = 0,
    kv_capacity_tokens: int | None = None,
    max_batch_size: int = 256,
    max_batch_tokens: int = 2048,
    name: str | None = None,
    prefix_cache: str | int = "auto",
    **reading: Any,
) -> Instance:
    """A serving instance: a (rescaled, cut) real trace with SLOs on a cluster.

    Parameters
    ----------
    trace : path or vendored trace name
        Request trace (see :func:`slolab.instances.read_trace`).
    seed : int
        Seed of the SLO assignment and of the arrival process (with ``arrivals``).
    rate : float, optional
        Mean arrival rate (req/s): of the process with ``arrivals``, else the trace is
        time-compressed to it.
    limit : int, optional
        Keep the first ``limit`` requests.
    slos : str, optional
        SLO scheme, or several joined by ``+`` applied in order (``"polyserve+proserve"``:
        PolyServe's SLOs, then ProServe's priorities); ``slo_params`` go to every scheme that
        accepts them.
    kv_capacity_tokens : int, optional
        KV-cache tokens per server (None: the preset's, else 200,000:
        :func:`slolab.timing.presets.kv_capacity_of`).
    prefix_cache : str or int
        Prefix caching in every server (:func:`prefix_block_tokens`): ``"auto"``, the default
        (512-token blocks when the trace has prompt block ids, Mooncake's ``hash_ids``; off
        for a trace without them), ``"off"`` or a block size in tokens.
    **reading
        How the trace is read (``format``, ``columns``, ``time_unit``, ``arrivals``, ``cv``,
        ``zero_output``, ``max_request_tokens``): see :func:`slolab.instances.read_workload`.

    With the ``proserve`` scheme among ``slos``, the instance's settings hold the TDG token
    weights of its requests (:func:`slolab.instances.tdg_token_weights`, ProServe Sec. 5.1),
    which :func:`slolab.sim.metrics.tdg` reads.
    """
    from slolab.instances import (
        Cluster,
        Instance,
        read_workload,
        resolve_trace,
        tdg_token_weights,
    )
    from slolab.timing import resolve_timing
    from slolab.timing.presets import kv_capacity_of, preset_kv_bytes_per_token

    if trace is None:
        raise ValueError("a serving instance needs a trace (a file or a vendored trace name)")
    path = resolve_trace(trace)
    model = resolve_timing(timing)
    wanted = str(prefix_cache).strip().lower() not in ("off", "0")
    wl = read_workload(path, rate=rate, seed=seed, limit=limit, keep_hash_ids=wanted, **reading)
    if slos and slos != "none":
        wl = assign_schemes(wl, slos, seed=seed, timing=model, params=slo_params)
    cluster = Cluster(
        servers=servers,
        kv_capacity_tokens=kv_capacity_of(model, kv_capacity_tokens)[0],
        mode=mode,
        prefill_servers=prefill_servers,
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        prefix_block_tokens=prefix_block_tokens(prefix_cache, "hash_ids" in wl),
    )
    # the KV cache a disaggregated cluster moves: the preset's model's, when it names one
    kv_bytes = preset_kv_bytes_per_token(model)
    if kv_bytes is not None:
        cluster = dataclasses.replace(cluster, kv_bytes_per_token=float(kv_bytes))
    label = name or f"{path.stem}-{len(wl)}"
    settings: dict[str, Any] = {
        "seed": seed,
        "slos": slos or "none",
        "rate": rate if rate is not None else "trace",
    }
    if reading.get("arrivals") is not None:
        settings["arrivals"] = reading["arrivals"]
    if slos and "proserve" in slos.split("+"):
        # ProServe's TDG weights come with its priorities (Sec. 5.1: from the data set's lengths)
        settings.update(tdg_token_weights(wl))
    return Instance(label, wl, cluster, model, problem="serving", settings=settings)


def prefix_block_tokens(value: str | int, has_block_ids: bool) -> int:
    """Tokens per prefix-cache block for ``--prefix-cache value`` (0: off): ``off``; ``auto``
    (512 when the trace has block ids, else off); or a block size, a divisor of 512, which
    needs a trace with block ids."""
    text = str(value).strip().lower()
    if text in ("off", "0"):
        return 0
    if text == "auto":
        return 512 if has_block_ids else 0
    try:
        size = int(text)
    except ValueError:
        size = -1
    if size < 1 or 512 % size:
        raise OptionValueError(
            f"prefix_cache must be off, auto or a block size dividing 512, got {value!r}",
            f"--prefix-cache must be off, auto or a block size dividing 512 (16, 32, ..., 512), "
            f"got {value!r}",
        )
    if not has_block_ids:
        raise OptionValueError(
            "prefix caching needs a trace with prompt block ids (Mooncake's hash_ids)",
            f"--prefix-cache {value} needs a trace with prompt block ids (Mooncake's hash_ids); "
            "use --prefix-cache off",
        )
    return size


def serving_problem_instance(
    trace: str | Path | None,
    *,
    seed: int,
    servers: int,
    timing: str,
    slos: str | None,
    limit: int | None,
    rate: float | None,
    **reading: Any,
) -> Instance:
    """The serving problem's builder: :func:`serving_instance` with ``--slos`` read as
    ``slolab simulate`` reads it (PolyServe's scheme when not given, none for ``"none"``)."""
    return serving_instance(
        trace,
        seed=seed,
        servers=servers,
        timing=timing,
        slos=slo_scheme_of(slos),
        limit=limit,
        rate=rate,
        **reading,
    )


def assign_schemes(
    workload: Any, slos: str, *, seed: int, timing: Any, params: dict[str, Any] | None = None
) -> Any:
    """``workload`` with the SLO schemes of ``slos`` (names joined by ``+``) applied in order.

    Each scheme gets the entries of ``params`` it accepts; an entry no scheme accepts is an
    error naming the schemes.
    """
    from slolab.instances import assign_slos, scheme_params

    names = [n for n in slos.split("+") if n]
    if not names:
        raise ValueError(f"no SLO scheme in {slos!r}")
    given = dict(params or {})
    used: set[str] = set()
    for name in names:
        accepted = set(scheme_params(name))
        mine = {k: v for k, v in given.items() if k in accepted}
        used |= set(mine)
        workload = assign_slos(workload, name, seed=seed, timing=timing, **mine)
    unused = sorted(set(given) - used)
    if unused:
        raise ValueError(
            f"SLO parameter(s) {', '.join(unused)} apply to none of the schemes {', '.join(names)}"
        )
    return workload


def _least_loaded(policy: str):
    def make(instance: Instance) -> tuple[Any, Any]:
        from slolab.heuristics.policies import make_policy, make_router

        return make_policy(policy, instance), make_router("least-loaded")

    make.__name__ = f"{policy}_least_loaded"
    return make


PROBLEM = register_problem(
    Problem(
        name="serving",
        title="a request stream on a cluster; maximize SLO attainment",
        objective=Objective(
            "attainment",
            "max",
            "slolab.sim.metrics:attainment_objective",
            "fraction of requests meeting their SLO (the instance's definition, default deadline)",
        ),
        builder=serving_problem_instance,
        # the flags of 'slolab simulate', declared once (slolab.problems.flags)
        options=(TRACE, *TRACE_OPTIONS, SERVERS, TIMING, SLOS, LIMIT, RATE, SEED),
        heuristics=(
            Heuristic(
                "vllm",
                "vLLM-style prefill-first FCFS (least-loaded routing)",
                policy=_least_loaded("vllm"),
            ),
            Heuristic(
                "sarathi",
                "Sarathi-Serve token budget, decode first, FCFS (least-loaded routing)",
                policy=_least_loaded("sarathi"),
            ),
            Heuristic(
                "edf",
                "earliest token deadline first within a token budget (least-loaded routing)",
                policy=_least_loaded("edf"),
            ),
            Heuristic(
                "slos-serve",
                "SLOs-Serve's online scheduler (least-loaded first placement)",
                policy=_least_loaded("slos-serve"),
            ),
        ),
        docs="engine.md",
    )
)
