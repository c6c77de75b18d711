"""The disaggregated deployment problem (``deployment-pd``, the prefill/decode variant of
``deployment``): how many prefill servers and decode servers, each pool of its own (GPU, TP)
configurations, with the KV caches moved over each prefill server's link, at the least price
per hour within measured capacities.

What the MILP (:mod:`slolab.models.deployment_pd`) takes is measured here by the engine:

1. **Solo ceilings** (:func:`pd_side_targets`): per class, the best TTFT attainment any prefill
   configuration gives its requests alone (``a^P_k``: the requests 10,000 s apart with one
   output token), and the best attainment any decode configuration gives them alone behind a
   prefill server (``a^D_k``: counting only the misses a request whose TTFT an idle prefill
   server can keep would not have, see below). A request meets its SLO when its TTFT is kept
   and no later token misses, so a class's joint ceiling is ``c_k = a^P_k + a^D_k - 1``; with
   ``A = sum_k share_k c_k``, each side is held to its ceiling less half the trace's spare
   ``A - target``, and ``A < target`` is refused in one line.
2. **Prefill capacities**: for each (configuration, class), the largest Poisson rate of the
   class's requests, each with one output token, that one server (token budget
   :data:`PREFILL_TOKEN_BUDGET`) serves at the prefill target, by the capacity search.
3. **Decode capacities**: the same on a disaggregated cluster of one decode server of the
   configuration behind a prefill pool that keeps the class's TTFTs as an idle server would
   (the class's fastest prefill configuration, four times the servers its solo prefill times
   ask for at the probed rate, over that configuration's link); a request's TTFT SLO is raised
   to its solo TTFT where that one is already late, so that the decode side is not charged
   with the prefill side's unavoidable misses.
4. :func:`pd_capacity_data`: the MILP's data, with each class's mean KV bytes moved and each
   prefill configuration's link (:func:`slolab.timing.links.server_link_bytes_per_s`).

The fleet is run by :func:`pd_fleet_instance` and :func:`pd_scheduler`: one prefill pool and
one decode pool per configuration used, :class:`slolab.heuristics.deployment.PlanRouter` on
the prefill side, :class:`slolab.heuristics.deployment_pd.PlanDecodeRouter` on the decode side,
transfers queued per prefill server's link. docs/deployment.md, "Disaggregated".
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.instances.records import Cluster, Instance, Pool
from slolab.models.deployment import DeploymentData
from slolab.models.deployment_pd import PDData, PDPlan, pd_plan_violations
from slolab.problems.deployment_capacity import (
    SOLO_GAP_S,
    RequestClasses,
    check_probe_arrivals,
    configuration_price,
    pool_policy,
    probe_arrivals,
    read_prices,
    request_classes,
    timing_of,
    trace_instance,
)
from slolab.problems.registry import (
    READ_OPTIONS,
    Heuristic,
    Objective,
    Option,
    Problem,
    register_problem,
)
from slolab.solvers.capacity import ProbeVerdict, capacity

if TYPE_CHECKING:
    import pandas as pd
    from slolab.heuristics.policies import Scheduler
    from slolab.sim.outcome import Outcome
    from slolab.solvers import Result

__all__ = [
    "DEFAULT_LINK",
    "PREFILL_TOKEN_BUDGET",
    "PDCapacityTable",
    "PDSideTargets",
    "measure_pd_capacities",
    "pd_capacity_data",
    "pd_deployment_instance",
    "pd_fleet_instance",
    "pd_scheduler",
    "pd_side_targets",
    "prefill_link",
    "prefill_policy",
]

#: Tokens per iteration of a prefill server's scheduler (and its pool's cap): a prefill server
#: has no decode to protect, so its budget is not cut to the tightest TPOT.
PREFILL_TOKEN_BUDGET = 8192

#: The link between the pools unless given: InfiniBand NDR, one 50 GB/s port per GPU.
DEFAULT_LINK = "infiniband-ndr"

#: Prefill servers of the decode probes per server their solo prefill times ask for.
PREFILL_HEADROOM = 4.0


def prefill_link(configuration: str, link: str | float) -> float:
    """Bytes/s of one server's link of ``configuration`` (``tp`` GPUs, each with ``link``)."""
    from slolab.timing.generated import generated_preset
    from slolab.timing.links import server_link_bytes_per_s

    found = generated_preset(configuration)
    return server_link_bytes_per_s(link, found.gpu, found.tp)


def prefill_policy(instance: Instance, configuration: str, policy: str) -> Any:
    """A fresh ``policy`` for a prefill server of ``configuration``: a budgeted policy gets
    :data:`PREFILL_TOKEN_BUDGET` tokens per iteration."""
    from slolab.heuristics.policies import make_policy, policy_entry

    budget = PREFILL_TOKEN_BUDGET if policy_entry(policy).token_budget else None
    timed = dataclasses.replace(instance, timing=timing_of(configuration))
    return make_policy(policy, timed, token_budget=budget)


def _kv_bytes_per_token(configuration: str) -> float:
    from slolab.timing.generated import generated_preset

    return float(generated_preset(configuration).shape.kv_bytes_per_token)


def pd_fleet_instance(
    instance: Instance,
    prefill: Sequence[tuple[str, int]],
    decode: Sequence[tuple[str, int]],
    link: str | float = DEFAULT_LINK,
) -> Instance:
    """``instance`` on a disaggregated cluster: per ``(configuration, servers)`` of
    ``prefill`` a prefill pool ``P:configuration`` (its timing, KV capacity, token cap
    :data:`PREFILL_TOKEN_BUDGET` and link, :func:`prefill_link`), per entry of ``decode`` a
    decode pool ``D:configuration``; KV transfers queued per prefill server."""
    from slolab.timing.generated import generated_preset

    pools = [
        Pool(
            f"P:{name}",
            "prefill",
            int(n),
            max_batch_tokens=PREFILL_TOKEN_BUDGET,
            kv_capacity_tokens=generated_preset(name).kv_capacity_tokens,
            timing=name,
            kv_link_bandwidth_bytes_per_s=prefill_link(name, link),
        )
        for name, n in prefill
        if n > 0
    ]
    pools += [
        Pool(
            f"D:{name}",
            "decode",
            int(n),
            kv_capacity_tokens=generated_preset(name).kv_capacity_tokens,
            timing=name,
        )
        for name, n in decode
        if n > 0
    ]
    if not any(p.role == "prefill" for p in pools) or not any(p.role == "decode" for p in pools):
        raise ValueError("a disaggregated fleet needs a prefill server and a decode server")
    first = next(name for name, n in prefill if n > 0)
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=instance.cluster.kv_capacity_tokens,
        max_batch_size=instance.cluster.max_batch_size,
        max_batch_tokens=instance.cluster.max_batch_tokens,
        kv_bytes_per_token=_kv_bytes_per_token(first),
        kv_transfer_queued=True,
    )
    return dataclasses.replace(instance, cluster=cluster)


def pd_scheduler(
    instance: Instance,
    class_of: np.ndarray,
    data: PDData,
    plan: PDPlan,
    *,
    link: str | float = DEFAULT_LINK,
    policy: str = "sarathi",
) -> Scheduler:
    """The plan run online: its fleet (:func:`pd_fleet_instance`), the plan router on the
    prefill pools, :class:`PlanDecodeRouter` on the decode pools, one ``policy`` per pool
    (:func:`prefill_policy` on the prefill side, budgeted as the capacities were measured)."""
    from slolab.heuristics.deployment import PlanRouter, PoolPolicies
    from slolab.heuristics.deployment_pd import PlanDecodeRouter
    from slolab.heuristics.policies import Scheduler

    sides = []
    for part, side in ((data.prefill, plan.prefill), (data.decode, plan.decode)):
        present = [c for c, n in enumerate(side.replicas) if n > 0]
        names = [part.configurations[c] for c in present]
        shares = np.asarray([[row[c] for c in present] for row in side.fractions], dtype=float)
        sums = shares.sum(axis=1, keepdims=True)
        shares = np.where(sums > 0, shares / np.where(sums > 0, sums, 1.0), 1.0 / len(present))
        sides.append((names, [side.replicas[c] for c in present], shares))
    (p_names, p_n, p_shares), (d_names, d_n, d_shares) = sides
    fleet = pd_fleet_instance(
        instance, list(zip(p_names, p_n, strict=True)), list(zip(d_names, d_n, strict=True)), link
    )
    fleet = dataclasses.replace(
        fleet, settings={**instance.settings, "plan_pd": plan.to_dict(), "link": str(link)}
    )
    makers = {f"P:{name}": (prefill_policy, name) for name in p_names}
    makers.update({f"D:{name}": (pool_policy, name) for name in d_names})
    policies = PoolPolicies(
        {pool: make(instance, name, policy) for pool, (make, name) in makers.items()}
    )
    router = PlanRouter(class_of, [f"P:{name}" for name in p_names], p_shares.tolist())
    decode_router = PlanDecodeRouter(class_of, [f"D:{name}" for name in d_names], d_shares.tolist())
    return Scheduler(policies, router, decode_router=decode_router, instance=fleet)


def _single_server(instance: Instance, workload: Any, configuration: str) -> Instance:
    """``workload`` on one co-located server of ``configuration`` capped at
    :data:`PREFILL_TOKEN_BUDGET` tokens per iteration (a prefill server: every request has
    one output token)."""
    from slolab.timing.generated import generated_preset

    cluster = Cluster(
        servers=1,
        kv_capacity_tokens=generated_preset(configuration).kv_capacity_tokens,
        max_batch_size=instance.cluster.max_batch_size,
        max_batch_tokens=PREFILL_TOKEN_BUDGET,
    )
    return Instance(
        f"{instance.name}-prefill-{configuration}",
        workload,
        cluster,
        timing_of(configuration),
        problem="serving",
        settings=instance.settings,
    )


def _pd_pair(
    instance: Instance,
    workload: Any,
    prefill: str,
    prefill_servers: int,
    decode: str,
    link: str | float,
) -> Instance:
    """``workload`` on ``prefill_servers`` prefill servers of ``prefill`` and one decode server
    of ``decode``."""
    base = dataclasses.replace(instance, workload=workload, name=f"{instance.name}-pd")
    return pd_fleet_instance(base, [(prefill, prefill_servers)], [(decode, 1)], link)


def _prefill_only(workload: Any) -> Any:
    """``workload`` with one output token per request."""
    columns = {name: np.asarray(workload[name]) for name in workload.columns}
    columns["output_tokens"] = np.ones(len(workload), dtype=np.int64)
    return workload.derived(columns)


def _spaced(workload: Any) -> Any:
    """``workload`` with its requests :data:`SOLO_GAP_S` apart (each alone on its server)."""
    columns = {name: np.asarray(workload[name]) for name in workload.columns}
    columns["arrival_s"] = np.arange(len(workload), dtype=float) * SOLO_GAP_S
    return workload.derived(columns)


def _run_attainment(
    instance: Instance, scheduler: Any, definition: str, target: float | None, seed: int
) -> ProbeVerdict:
    """Simulate; with ``target``, stop as soon as the verdict on it is certain."""
    from slolab.sim import metrics, run
    from slolab.sim.verdict import AttainmentWatch, RampedStop

    start = time.perf_counter()
    policy, router, decode_router = scheduler
    watch = AttainmentWatch(instance, definition, target) if target is not None else None
    outcome = run(
        instance,
        policy,
        router,
        decode_router=decode_router,
        seed=seed,
        record_iterations=False,
        stop=None if watch is None else RampedStop(watch),
    )
    wall = time.perf_counter() - start
    if watch is not None and watch.bound is not None:
        return ProbeVerdict(watch.bound, early=True, wall_s=wall)
    return ProbeVerdict(
        metrics.attainment(instance, outcome, definition),
        wall_s=wall,
        stalled=int(outcome.info.get("stalled", 0)),
    )


def _pair_policies(instance: Instance, prefill: str, decode: str, policy: str) -> Any:
    from slolab.heuristics.deployment import PoolPolicies

    return PoolPolicies(
        {
            f"P:{prefill}": prefill_policy(instance, prefill, policy),
            f"D:{decode}": pool_policy(instance, decode, policy),
        }
    )


@dataclass(frozen=True, slots=True)
class PDSideTargets:
    """Per class: the sides' solo ceilings and the attainment each side is held to.

    Attributes
    ----------
    prefill_ceiling, decode_ceiling : tuple of float
        ``a^P_k`` and ``a^D_k`` (module docstring, step 1).
    prefill_target, decode_target : tuple of float
        ``a^P_k - s/2`` and ``a^D_k - s/2`` (at least 0), ``s = A - target``.
    reference : tuple of str
        Per class, the prefill configuration of the decode probes (the best prefill ceiling,
        ties: the fastest mean solo TTFT).
    solo_prefill_s : tuple of float
        Per class, the mean solo TTFT on its reference configuration (s).
    solo_ttft : tuple of numpy.ndarray
        Per class, each member's solo TTFT on its reference configuration (s).
    runs : int
        Solo simulations run.
    """

    prefill_ceiling: tuple[float, ...]
    decode_ceiling: tuple[float, ...]
    prefill_target: tuple[float, ...]
    decode_target: tuple[float, ...]
    reference: tuple[str, ...]
    solo_prefill_s: tuple[float, ...]
    solo_ttft: tuple[np.ndarray, ...]
    runs: int


def pd_side_targets(
    instance: Instance,
    classes: RequestClasses,
    prefill_configurations: Sequence[str],
    decode_configurations: Sequence[str],
    target: float,
    *,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> PDSideTargets:
    """The attainment each side is held to (module docstring, step 1).

    Raises
    ------
    ValueError
        When ``A < target``: no disaggregated fleet of the grid can meet the target.
    """
    from slolab.sim import metrics, run

    workload = instance.workload
    runs = 0
    a_p, a_d, refs, solo_mean, solo_ttft = [], [], [], [], []
    for k in range(len(classes.names)):
        members = classes.members(k)
        part = _spaced(workload.take(members))
        best: tuple[float, float, str, np.ndarray] | None = None
        for name in prefill_configurations:
            alone = _single_server(instance, _prefill_only(part), name)
            outcome = run(alone, prefill_policy(instance, name, policy), None, seed=seed)
            runs += 1
            table = metrics.request_table(alone, outcome)
            attained = metrics.attainment_from_table(table, definition)
            ttft = table["ttft_s"].to_numpy(dtype=float)
            key = (attained, -float(np.mean(ttft)), name, ttft)
            if best is None or key[:2] > best[:2]:
                best = key
        assert best is not None
        a_p.append(best[0])
        refs.append(best[2])
        solo_mean.append(float(np.mean(best[3])))
        solo_ttft.append(best[3])
        relaxed = _relaxed_ttft(part, best[3])
        top = 0.0
        for name in decode_configurations:
            pair = _pd_pair(instance, relaxed, best[2], 1, name, link)
            sched = (_pair_policies(instance, best[2], name, policy), None, None)
            top = max(top, _run_attainment(pair, sched, definition, None, seed).attainment)
            runs += 1
        a_d.append(top)
    total = sum(classes.rates)
    joint = [p + d - 1.0 for p, d in zip(a_p, a_d, strict=True)]
    reach = sum(rate / total * c for rate, c in zip(classes.rates, joint, strict=True))
    if reach < target:
        raise ValueError(
            f"the target {target} is out of reach disaggregated: with every request alone on "
            f"the best prefill and decode configurations of the grid, {reach:.3f} of the "
            "requests meet their SLO"
        )
    spare = (reach - target) / 2
    return PDSideTargets(
        tuple(a_p),
        tuple(a_d),
        tuple(max(0.0, a - spare) for a in a_p),
        tuple(max(0.0, a - spare) for a in a_d),
        tuple(refs),
        tuple(solo_mean),
        tuple(solo_ttft),
        runs,
    )


def _relaxed_ttft(workload: Any, solo_ttft: np.ndarray) -> Any:
    """``workload`` with each TTFT SLO raised to the request's solo TTFT where that is later
    (the decode probes do not charge the decode side with unavoidable TTFT misses)."""
    columns = {name: np.asarray(workload[name]) for name in workload.columns}
    slo = np.asarray(columns["ttft_slo_s"], dtype=float)
    columns["ttft_slo_s"] = np.where(np.isfinite(slo), np.maximum(slo, solo_ttft), slo)
    return workload.derived(columns)


#: Most requests of one capacity probe.
MAX_PROBE_REQUESTS = 4000

#: A probe's stream lasts at least this many SLO horizons of its class (below).
HORIZONS_PER_PROBE = 10.0


@dataclass(frozen=True, slots=True)
class _Stream:
    """How many requests a probe at rate ``r`` runs: at least ``least``, and enough to last
    :data:`HORIZONS_PER_PROBE` times ``horizon_s`` (so that a probe measures a sustained
    rate, not a burst the SLOs absorb whole), at most :data:`MAX_PROBE_REQUESTS`."""

    least: int
    horizon_s: float

    def requests(self, rate: float) -> int:
        span = HORIZONS_PER_PROBE * self.horizon_s
        return int(min(MAX_PROBE_REQUESTS, max(self.least, math.ceil(rate * span))))


def _horizons(workload: Any) -> tuple[float, float]:
    """A class's SLO horizons (s): its mean TTFT SLO (the prefill side's) and its mean
    deadline of the last token, TTFT SLO plus ``(output - 1)`` TPOT SLOs (the decode side's);
    1 s where the class sets none."""
    ttft = np.asarray(workload["ttft_slo_s"], dtype=float)
    tpot = np.asarray(workload["tpot_slo_s"], dtype=float)
    out = np.asarray(workload.output_tokens, dtype=float)
    last = ttft + np.where(np.isfinite(tpot), tpot, 0.0) * np.maximum(out - 1, 0)
    finite_ttft, finite_last = ttft[np.isfinite(ttft)], last[np.isfinite(last)]
    return (
        float(finite_ttft.mean()) if len(finite_ttft) else 1.0,
        float(finite_last.mean()) if len(finite_last) else 1.0,
    )


def _prefill_probe(
    instance: Instance,
    members: np.ndarray,
    name: str,
    policy: str,
    definition: str,
    side_target: float,
    seed: int,
    stream: _Stream,
    arrivals: str,
    rate: float,
) -> ProbeVerdict:
    """The class's stream, one output token each, Poisson at ``rate`` on one server of
    ``name``."""
    requests, _ = probe_arrivals(instance, members, stream.requests(rate), rate, seed, arrivals)
    alone = _single_server(instance, _prefill_only(requests), name)
    sched = (prefill_policy(instance, name, policy), None, None)
    return _run_attainment(alone, sched, definition, side_target, seed)


def _decode_probe(
    instance: Instance,
    members: np.ndarray,
    solo_ttft: np.ndarray,
    reference: str,
    solo_prefill_s: float,
    name: str,
    link: str | float,
    policy: str,
    definition: str,
    side_target: float,
    seed: int,
    stream: _Stream,
    arrivals: str,
    rate: float,
) -> ProbeVerdict:
    """The class's stream (TTFT SLOs relaxed to the solo TTFTs) Poisson at ``rate`` on one
    decode server of ``name`` behind :data:`PREFILL_HEADROOM` times the prefill servers of
    ``reference`` its solo prefill times ask for."""
    requests, position = probe_arrivals(
        instance, members, stream.requests(rate), rate, seed, arrivals
    )
    relaxed = _relaxed_ttft(requests, solo_ttft[position])
    servers = max(1, math.ceil(PREFILL_HEADROOM * rate * solo_prefill_s))
    pair = _pd_pair(instance, relaxed, reference, servers, name, link)
    sched = (_pair_policies(instance, reference, name, policy), None, None)
    return _run_attainment(pair, sched, definition, side_target, seed)


@dataclass(frozen=True, slots=True)
class PDCapacityTable:
    """Measured capacities of both sides.

    Attributes
    ----------
    prefill_configurations, decode_configurations : tuple of str
    classes : tuple of str
    prefill_capacity, decode_capacity : tuple of tuple of float
        ``[c][k]``: req/s of class ``k`` one server of ``c`` serves at the side's target.
    targets : PDSideTargets
    probes, early : int
        Capacity simulations run, and those stopped once their verdict was certain.
    wall_s : float
    """

    prefill_configurations: tuple[str, ...]
    decode_configurations: tuple[str, ...]
    classes: tuple[str, ...]
    prefill_capacity: tuple[tuple[float, ...], ...]
    decode_capacity: tuple[tuple[float, ...], ...]
    targets: PDSideTargets
    probes: int
    early: int
    wall_s: float


def measure_pd_capacities(
    instance: Instance,
    classes: RequestClasses,
    prefill_configurations: Sequence[str],
    decode_configurations: Sequence[str],
    *,
    target: float = 0.9,
    link: str | float = DEFAULT_LINK,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    rel_tol: float = 0.05,
    stream_requests: int = 400,
    arrivals: str = "trace",
    progress: bool = False,
) -> PDCapacityTable:
    """Both sides' capacities (module docstring, steps 1 to 3): capacity searches to
    ``rel_tol`` over Poisson rates of each class's stream (its requests repeated to
    ``stream_requests``) arriving as ``arrivals`` says
    (:func:`~slolab.problems.deployment_capacity.probe_arrivals`), every probe
    stopped once its verdict is certain; a class's search on the next configuration starts at
    the capacity found on the last one."""
    from tqdm.auto import tqdm

    check_probe_arrivals(arrivals)
    start = time.perf_counter()
    targets = pd_side_targets(
        instance,
        classes,
        prefill_configurations,
        decode_configurations,
        target,
        link=link,
        definition=definition,
        policy=policy,
        seed=seed,
    )
    n_class = len(classes.names)
    prefill = [[0.0] * n_class for _ in prefill_configurations]
    decode = [[0.0] * n_class for _ in decode_configurations]
    probes = early = 0
    bar = tqdm(
        total=(len(prefill_configurations) + len(decode_configurations)) * n_class,
        desc="capacities (pd)",
        unit="search",
        disable=None if progress else True,
    )

    def search(probe: Any, side_target: float, start_rate: float) -> float:
        nonlocal probes, early
        if side_target <= 0:  # the side may miss every request of the class: no load
            return 1.0
        found = capacity(
            probe,
            target=side_target,
            start_rate=start_rate,
            rel_tol=rel_tol,
            progress=False,
            floor_first=True,
        )
        probes += len(found.probes)
        early += found.n_early
        return found.capacity

    try:
        for k in range(n_class):
            members = classes.members(k)
            horizons = _horizons(instance.workload.take(members))
            solo_ttft = targets.solo_ttft[k]
            rate = classes.rates[k]
            for c, name in enumerate(prefill_configurations):
                probe_p = functools.partial(
                    _prefill_probe,
                    instance,
                    members,
                    name,
                    policy,
                    definition,
                    targets.prefill_target[k],
                    seed,
                    _Stream(stream_requests, horizons[0]),
                    arrivals,
                )
                prefill[c][k] = search(probe_p, targets.prefill_target[k], rate)
                if prefill[c][k] > 0 and targets.prefill_target[k] > 0:
                    rate = prefill[c][k]
                bar.update(1)
            rate = classes.rates[k]
            for c, name in enumerate(decode_configurations):
                probe_d = functools.partial(
                    _decode_probe,
                    instance,
                    members,
                    solo_ttft,
                    targets.reference[k],
                    targets.solo_prefill_s[k],
                    name,
                    link,
                    policy,
                    definition,
                    targets.decode_target[k],
                    seed,
                    _Stream(stream_requests, horizons[1]),
                    arrivals,
                )
                decode[c][k] = search(probe_d, targets.decode_target[k], rate)
                if decode[c][k] > 0 and targets.decode_target[k] > 0:
                    rate = decode[c][k]
                bar.update(1)
    finally:
        bar.close()
    return PDCapacityTable(
        tuple(prefill_configurations),
        tuple(decode_configurations),
        classes.names,
        tuple(tuple(row) for row in prefill),
        tuple(tuple(row) for row in decode),
        targets,
        probes,
        early,
        time.perf_counter() - start,
    )


def pd_capacity_data(
    table: PDCapacityTable,
    instance: Instance,
    classes: RequestClasses,
    *,
    link: str | float = DEFAULT_LINK,
    prices: dict[str, float] | None = None,
    refused: dict[str, str] | None = None,
) -> PDData:
    """The MILP's data of a measured table: per side, the configurations serving some class
    (the others named in ``refused`` with the side); each class's mean KV bytes sent,
    ``(prompt + 1)`` tokens times the model's bytes per token; each prefill configuration's
    link (:func:`prefill_link`). A class a side's target lets miss every request (target 0)
    is carried there at no load."""
    sides = []
    for side, names, capacity_rows, side_targets in (
        (
            "prefill",
            table.prefill_configurations,
            table.prefill_capacity,
            table.targets.prefill_target,
        ),
        ("decode", table.decode_configurations, table.decode_capacity, table.targets.decode_target),
    ):
        usable = [c for c, row in enumerate(capacity_rows) if any(v > 0 for v in row)]
        for c, name in enumerate(names):
            if c not in usable and refused is not None:
                refused[f"{side} {name}"] = (
                    f"{name}: meets the {side} targets for no request class at any rate"
                )
        if not usable:
            raise ValueError(
                f"no {side} configuration of {', '.join(names)} meets its targets for any "
                "request class, even at 1/1024 of its rate"
            )
        hopeless = [t == 0 for t in side_targets]
        sides.append(
            DeploymentData(
                tuple(names[c] for c in usable),
                tuple(configuration_price(names[c], prices) for c in usable),
                classes.names,
                tuple(0.0 if h else r for h, r in zip(hopeless, classes.rates, strict=True)),
                tuple(
                    tuple(1.0 if h else v for h, v in zip(hopeless, capacity_rows[c], strict=True))
                    for c in usable
                ),
            )
        )
    prefill, decode = sides
    prompt = np.asarray(instance.workload.prompt_tokens, dtype=float)
    per_token = _kv_bytes_per_token(prefill.configurations[0])
    kv_bytes = tuple(
        float(np.mean(prompt[classes.members(k)] + 1.0) * per_token)
        for k in range(len(classes.names))
    )
    links = tuple(prefill_link(name, link) for name in prefill.configurations)
    return PDData(prefill, decode, kv_bytes, links)


def pd_deployment_instance(
    *,
    trace: str = "azure_conv_2023",
    configurations: str | Sequence[str] = "llama2-7b/h100/tp1,llama2-7b/a100/tp2",
    target: float = 0.9,
    limit: int | None = 200,
    traffic: float = 1.0,
    stream_requests: int = 400,
    seed: int = 0,
    policy: str = "sarathi",
    definition: str = "deadline",
    link: str = DEFAULT_LINK,
    name: str | None = None,
    prices: str | Path | None = None,
    **reading: Any,
) -> Instance:
    """A ``deployment-pd`` instance: the trace cut with SLOs, its classes, and both sides'
    capacities of ``configurations`` (each may serve either pool) measured at ``target``
    over ``link``, stored in the settings as the decision problem's data."""
    price_table = None if prices is None else read_prices(prices)
    names = (
        [c.strip() for c in configurations.split(",") if c.strip()]
        if isinstance(configurations, str)
        else list(configurations)
    )
    if not names:
        raise ValueError("give at least one configuration")
    for config in names:
        prefill_link(config, link)  # an unknown or non-positive link: one line, before measuring
    base = trace_instance(trace, names, seed=seed, limit=limit, traffic=traffic, **reading)
    classes = request_classes(base)
    table = measure_pd_capacities(
        base,
        classes,
        names,
        names,
        target=target,
        link=link,
        definition=definition,
        policy=policy,
        seed=seed,
        stream_requests=stream_requests,
    )
    data = pd_capacity_data(table, base, classes, link=link, prices=price_table)
    settings = {
        **base.settings,
        "deployment_pd": data.to_dict(),
        "class_of": [int(k) for k in classes.class_of],
        "target": float(target),
        "policy": policy,
        "definition": definition,
        "link": link,
        "stream_requests": int(stream_requests),
    }
    label = name or f"deploy-pd-{base.name}-{len(names)}cfg"
    return dataclasses.replace(base, name=label, problem="deployment-pd", settings=settings)


def _data(instance: Instance) -> PDData:
    if "deployment_pd" not in instance.settings:
        raise ValueError(f"instance {instance.name!r} holds no deployment-pd data in its settings")
    return PDData.from_dict(instance.settings["deployment_pd"])


def _online(instance: Instance, plan: PDPlan) -> Scheduler:
    return pd_scheduler(
        instance,
        np.asarray(instance.settings["class_of"], dtype=np.int64),
        _data(instance),
        plan,
        link=instance.settings.get("link", DEFAULT_LINK),
        policy=str(instance.settings.get("policy", "sarathi")),
    )


def pd_result_scheduler(instance: Instance, result: Result) -> Scheduler:
    """The plan of an exact model's Result (``details["plan"]``) run online."""
    return _online(instance, PDPlan.from_dict(result.details["plan"]))


def pd_greedy_online(instance: Instance) -> Scheduler:
    """:func:`slolab.heuristics.deployment_pd.pd_greedy` on the stored capacities, online."""
    from slolab.heuristics.deployment_pd import pd_greedy

    return _online(instance, pd_greedy(_data(instance)))


def pd_best_pair_online(instance: Instance) -> Scheduler:
    """The cheapest single (prefill, decode) pair on the stored capacities, online."""
    from slolab.heuristics.deployment_pd import pd_best_pair

    plan = pd_best_pair(_data(instance))
    if plan is None:
        raise ValueError(f"no configuration pair of {instance.name!r} serves every request class")
    return _online(instance, plan)


def pd_fleet_cost(instance: Instance, outcome: Outcome, table: pd.DataFrame) -> float:
    """Price per hour of the fleet the engine ran (both pools' servers times their prices);
    ``inf`` when the plan breaks the capacity table (:func:`pd_plan_violations`)."""
    if "plan_pd" not in instance.settings:
        raise ValueError(
            f"instance {instance.name!r} ran no disaggregated plan: only the problem's exact "
            "models and its heuristics (best-pair, greedy-pd) run a plan's fleet"
        )
    data = _data(instance)
    plan = PDPlan.from_dict(instance.settings["plan_pd"])
    ran = {p.name: p.servers for p in instance.cluster.resolved_pools()}
    planned = {
        f"{tag}:{name}": n
        for tag, part, side in (("P", data.prefill, plan.prefill), ("D", data.decode, plan.decode))
        for name, n in zip(part.configurations, side.replicas, strict=True)
        if n
    }
    if ran != planned:
        raise ValueError(f"the fleet ran {ran}, its plan names {planned}")
    if pd_plan_violations(data, plan):
        return math.inf
    price = {
        f"{tag}:{name}": p
        for tag, part in (("P", data.prefill), ("D", data.decode))
        for name, p in zip(part.configurations, part.prices, strict=True)
    }
    return float(sum(price[name] * n for name, n in ran.items()))


PROBLEM = register_problem(
    Problem(
        name="deployment-pd",
        title="the deployment problem disaggregated: prefill and decode servers per (GPU, TP) "
        "configuration, class shares, KV links; minimize the price per hour",
        objective=Objective(
            "cost_per_hour",
            "min",
            pd_fleet_cost,
            "price per hour of both pools the engine ran (inf when the plan exceeds the "
            "measured capacities or links)",
        ),
        builder="slolab.problems.deployment_pd:pd_deployment_instance",
        options=(
            Option("trace", str, "azure_conv_2023", "trace file or vendored trace name"),
            *READ_OPTIONS,
            Option(
                "configurations",
                str,
                "llama2-7b/h100/tp1,llama2-7b/a100/tp2",
                "comma-separated configurations, each a candidate for either pool",
            ),
            Option("target", float, 0.9, "attainment the capacities are measured at"),
            Option(
                "limit", int, 200, "use the first N requests of the trace", flag="--n", minimum=1
            ),
            Option(
                "traffic", float, 1.0, "arrivals time-scaled to this multiple of the cut's rate"
            ),
            Option("stream_requests", int, 400, "requests of each capacity probe", minimum=1),
            Option("seed", int, 0, "seed of the SLO draws and of the capacity probes", minimum=0),
            Option(
                "link",
                str,
                DEFAULT_LINK,
                "KV link per GPU between the pools: nvlink, infiniband-ndr, infiniband-hdr, "
                "ethernet-100g, ethernet-25g or GB/s",
                flag="--kv-link",
            ),
            Option(
                "prices",
                str,
                None,
                "CSV of GPU prices per GPU-hour, columns gpu,usd_per_gpu_hour",
            ),
        ),
        models=("deployment-pd",),
        aliases={"enumeration-pd": "deployment-pd:brute"},
        heuristics=(
            Heuristic(
                "best-pair",
                "the cheapest fleet of one prefill and one decode configuration",
                policy=pd_best_pair_online,
                baseline=True,
            ),
            Heuristic(
                "greedy-pd",
                "per side, classes placed whole, largest first, where the price rises least",
                policy=pd_greedy_online,
            ),
        ),
        docs="deployment.md",
        settings=("deployment_pd", "class_of"),
        run_result="slolab.problems.deployment_pd:pd_result_scheduler",
    )
)
