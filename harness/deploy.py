"""Deployment planning: which (GPU, TP) configurations, how many servers, for a trace and its SLOs.

The steps, each a function:

1. :func:`request_classes`: the trace's requests in classes, size buckets (prompt plus output
   tokens) x groups of SLO tiers, with their arrival rates.
2. :func:`measure_capacities`: for every (configuration, class), the largest arrival rate of
   that class alone that one server of the configuration serves at the attainment target, by
   the capacity search of :func:`slolab.harness.capacity.capacity` (every probe a simulation,
   stopped early once its verdict is certain; each class's search on the next configuration
   starts from the capacity found on the last one).
3. :func:`slolab.models.deployment.solve_milp`: the cheapest fleet and class assignment.
4. :func:`close_loop`: the chosen fleet simulated on the trace as a mixed cluster
   (:func:`fleet_instance`: one pool per configuration, each with its own timing and KV
   capacity) under :class:`slolab.heuristics.deployment.PlanRouter`; a miss adds one server
   where the misses concentrate and solves again, for at most ``max_rounds`` rounds.

:func:`plan_deployment` runs them all; ``slolab plan TRACE --model ...`` prints it.
docs/deployment.md gives the formulation and what each step guarantees.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from slolab.harness.capacity import ProbeVerdict, capacity
from slolab.heuristics.deployment import (
    PlanRouter,
    PoolPolicies,
    best_single,
    greedy_cost_per_capacity,
    single_configuration_plans,
)
from slolab.instances.records import Cluster, Instance, Pool
from slolab.models.deployment import (
    DeploymentData,
    DeploymentPlan,
    DeploymentResult,
    plan_cost,
    plan_violations,
    solve_milp,
)
from slolab.solvers.base import Status

__all__ = [
    "DEFAULT_TIER_GROUPS",
    "CapacityTable",
    "ClosedLoop",
    "DeploymentReport",
    "FleetRun",
    "LoopRound",
    "RequestClasses",
    "close_loop",
    "configuration_names",
    "fleet_instance",
    "measure_capacities",
    "plan_deployment",
    "read_prices",
    "request_classes",
    "fleet_text",
    "trim_fleet",
    "simulate_fleet",
    "simulate_plan",
]

#: SLO tiers grouped into classes: PolyServe's TPOT tiers 20 and 30 ms, then 50 and 100 ms
#: with the best-effort requests (tier 4).
DEFAULT_TIER_GROUPS: tuple[tuple[int, ...], ...] = ((0, 1), (2, 3, 4))


@functools.cache
def _timing(name: str) -> Any:
    from slolab.timing.presets import preset

    return preset(name)


@dataclass(frozen=True, slots=True)
class RequestClasses:
    """The requests of an instance in classes.

    Attributes
    ----------
    names : tuple of str
        Class names (``tokens<=1234/tiers0-1``).
    class_of : numpy.ndarray
        Class index of every request.
    rates : tuple of float
        Arrival rate of each class (req/s): its share of the requests times the instance's
        mean rate.
    """

    names: tuple[str, ...]
    class_of: np.ndarray
    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        counts = np.bincount(self.class_of, minlength=len(self.names))
        if len(counts) != len(self.names) or (counts == 0).any():
            raise ValueError(f"every class needs a request, got counts {counts.tolist()}")
        if len(self.rates) != len(self.names):
            raise ValueError(f"rates must have {len(self.names)} entries, got {len(self.rates)}")

    @property
    def counts(self) -> tuple[int, ...]:
        """Requests in each class."""
        return tuple(int(v) for v in np.bincount(self.class_of, minlength=len(self.names)))

    def members(self, k: int) -> np.ndarray:
        """Indices of the requests of class ``k``, ascending."""
        return np.flatnonzero(self.class_of == k)


def request_classes(
    instance: Instance,
    *,
    buckets: int = 2,
    size_edges: Sequence[int] | None = None,
    tier_groups: Sequence[Sequence[int]] = DEFAULT_TIER_GROUPS,
    min_requests: int = 4,
) -> RequestClasses:
    """Size buckets x SLO tier groups, from the instance's requests.

    A request's size is its prompt plus output tokens (the KV it ends up holding). The bucket
    edges are ``size_edges`` (ascending token counts; a request of size <= edge goes in that
    edge's bucket, larger ones in the last) or the ``1/buckets`` quantiles of the sizes. The
    tier is the ``tier`` column (0 without one), grouped by ``tier_groups`` (a tier in no group
    forms its own). A class of fewer than ``min_requests`` requests is merged into the largest
    class of its tier group, or, alone in its group, into the largest class overall (its
    capacity is measured by time-scaling its own arrivals, which needs a few of them).
    """
    from slolab.instances import mean_rate

    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    workload = instance.workload
    size = np.asarray(workload.prompt_tokens, dtype=np.int64) + np.asarray(
        workload.output_tokens, dtype=np.int64
    )
    if size_edges is None:
        quantiles = np.quantile(size, [i / buckets for i in range(1, buckets)])
        edges = sorted({int(q) for q in quantiles})
    else:
        edges = [int(e) for e in size_edges]
        if edges != sorted(set(edges)):
            raise ValueError(f"size_edges must be ascending and distinct, got {list(size_edges)}")
    bucket = np.searchsorted(np.asarray(edges, dtype=np.int64), size, side="left")
    tiers = (
        np.asarray(workload["tier"], dtype=np.int64)
        if "tier" in workload.columns
        else np.zeros(len(size), dtype=np.int64)
    )
    group_of: dict[int, int] = {}
    groups = [tuple(int(t) for t in g) for g in tier_groups]
    for g, members in enumerate(groups):
        for t in members:
            group_of[t] = g
    for t in sorted(set(tiers.tolist()) - set(group_of)):
        group_of[t] = len(groups)
        groups.append((t,))
    group = np.array([group_of[int(t)] for t in tiers], dtype=np.int64)
    keys = sorted({(int(g), int(b)) for g, b in zip(group, bucket, strict=True)})
    label = {key: i for i, key in enumerate(keys)}
    raw = np.array([label[(int(g), int(b))] for g, b in zip(group, bucket, strict=True)])
    owner = list(range(len(keys)))  # raw class -> the raw class it is merged into

    def root(i: int) -> int:
        while owner[i] != i:
            i = owner[i]
        return i

    while True:
        counts: dict[int, int] = {}
        for i in range(len(keys)):
            counts[root(i)] = counts.get(root(i), 0) + int((raw == i).sum())
        small = sorted((n, i) for i, n in counts.items() if n < min_requests)
        if not small or len(counts) == 1:
            break
        _, i = small[0]
        others = [j for j in counts if j != i]
        same = [j for j in others if keys[j][0] == keys[i][0]]
        owner[i] = max(same or others, key=lambda j: (counts[j], -j))
    roots = sorted({root(i) for i in range(len(keys))})
    index = {r: k for k, r in enumerate(roots)}
    class_of = np.array([index[root(int(i))] for i in raw], dtype=np.int64)
    names = []
    for r in roots:
        merged = [keys[i] for i in range(len(keys)) if root(i) == r]
        tiers_in = sorted({t for g, _ in merged for t in groups[g]})
        size_text = _size_text(edges, min(b for _, b in merged), max(b for _, b in merged))
        names.append(f"{size_text}/tiers{'-'.join(str(t) for t in tiers_in)}")
    rate = mean_rate(workload)
    n = len(class_of)
    counts_final = np.bincount(class_of, minlength=len(roots))
    return RequestClasses(tuple(names), class_of, tuple(float(rate * c / n) for c in counts_final))


def _size_text(edges: Sequence[int], low: int, high: int) -> str:
    """The sizes of buckets ``low..high``: bucket ``b`` holds sizes in ``(edges[b - 1],
    edges[b]]`` (open below for the first, above for the last)."""
    above = f"{edges[low - 1] + 1}" if low > 0 else ""
    below = f"{edges[high]}" if high < len(edges) else ""
    if above and below:
        return f"tokens{above}-{below}"
    if below:
        return f"tokens<={below}"
    return f"tokens>={above}" if above else "tokens:all"


def configuration_names(
    model: str, gpus: Sequence[str], tps: Sequence[int]
) -> tuple[list[str], dict[str, str]]:
    """The generated presets ``MODEL/GPU/tpN`` of the grid the data supports, and why each
    of the others is refused (name -> one line).

    Raises
    ------
    ValueError
        For a model or GPU the profiles do not have (naming the known ones), or when the data
        supports no configuration of the grid.
    """
    from slolab.timing.generated import _table, preset_refusal

    table = _table()
    if model not in table["models"]:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(sorted(table['models']))}")
    for gpu in gpus:
        if gpu not in table["gpus"]:
            raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(sorted(table['gpus']))}")
    names, refused = [], {}
    for gpu in gpus:
        for tp in tps:
            name = f"{model}/{gpu}/tp{tp}"
            why = preset_refusal(name)
            if why is None:
                names.append(name)
            else:
                refused[name] = why
    if not names:
        raise ValueError(
            "the data supports no configuration of the grid: " + "; ".join(refused.values())
        )
    return names, refused


def read_prices(path: str | Path) -> dict[str, float]:
    """GPU prices per GPU-hour from a CSV file with the columns ``gpu,usd_per_gpu_hour``.

    Raises
    ------
    ValueError
        One line naming the file, line, field and value of the first bad entry.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"{path}: cannot read the prices file ({error.strerror})") from None
    rows = csv.DictReader(text.splitlines())
    fields = ("gpu", "usd_per_gpu_hour")
    if rows.fieldnames is None or any(f not in rows.fieldnames for f in fields):
        raise ValueError(
            f"{path} line 1: the header must name the columns {','.join(fields)}, got "
            f"{','.join(rows.fieldnames or [])!r}"
        )
    prices: dict[str, float] = {}
    for line, row in enumerate(rows, start=2):
        gpu = (row.get("gpu") or "").strip()
        if not gpu:
            raise ValueError(f"{path} line {line}: field gpu is empty")
        value = (row.get("usd_per_gpu_hour") or "").strip()
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not (math.isfinite(price) and price > 0):
            raise ValueError(
                f"{path} line {line}: field usd_per_gpu_hour must be a number > 0, got {value!r}"
            )
        if gpu in prices:
            raise ValueError(f"{path} line {line}: field gpu lists {gpu!r} twice")
        prices[gpu] = price
    return prices


def configuration_price(name: str, prices: dict[str, float] | None = None) -> float:
    """Price of one server of configuration ``name`` per hour: ``tp`` x the GPU's price
    (``prices`` per GPU-hour, else the table's dated price)."""
    from slolab.timing.generated import generated_preset

    found = generated_preset(name)
    if prices is not None and found.gpu in prices:
        return found.tp * prices[found.gpu]
    return found.price_usd_per_hour


def reference_configuration(configurations: Sequence[str]) -> str:
    """The configuration whose idle server decodes fastest (one 1,000-token context): the SLO
    schemes that bump a tier an idle server cannot attain judge by it, so every request keeps
    the tightest SLO some configuration of the grid can attain."""
    from slolab.instances.slos import idle_decode_s

    def decode_s(name: str) -> float:
        return float(idle_decode_s(_timing(name), np.array([1000.0]), np.array([2.0]))[0])

    return min(configurations, key=lambda name: (decode_s(name), name))


def trace_instance(
    trace: str,
    configurations: Sequence[str],
    *,
    seed: int = 0,
    limit: int | None = None,
    slos: str = "polyserve",
    rate: float | None = None,
    max_batch_tokens: int = 2048,
    **reading: Any,
) -> Instance:
    """The trace with SLOs assigned under :func:`reference_configuration`'s timing (the same
    SLOs whichever configuration serves a request), cut to ``limit`` requests."""
    from slolab.problems.serving import serving_instance

    return serving_instance(
        trace,
        seed=seed,
        timing=reference_configuration(configurations),
        slos=slos,
        rate=rate,
        limit=limit,
        max_batch_tokens=max_batch_tokens,
        **reading,
    )


@dataclass(frozen=True, slots=True)
class CapacityTable:
    """Measured capacities: ``capacity[c][k]`` req/s of class ``k`` on one server of ``c``.

    Attributes
    ----------
    configurations : tuple of str
    classes : tuple of str
    capacity : tuple of tuple of float
    class_targets : tuple of float
        The attainment each class's searches held it to (:func:`class_targets`).
    probes : int
        Simulations run.
    early : int
        Of those, stopped as soon as their verdict was certain.
    wall_s : float
        Wall time of the measurement.
    """

    configurations: tuple[str, ...]
    classes: tuple[str, ...]
    capacity: tuple[tuple[float, ...], ...]
    class_targets: tuple[float, ...]
    probes: int
    early: int
    wall_s: float


def _class_stream(workload: Any, members: np.ndarray, stream_requests: int) -> Any:
    """The requests ``members`` of ``workload``, repeated until there are at least
    ``stream_requests`` of them: copy ``j`` arrives ``j * (span + gap)`` later (``span`` the
    class's arrival span, ``gap`` its mean inter-arrival gap), so the stream keeps the class's
    own arrival pattern and lasts long enough that its capacity is a sustained rate, not the
    rate at which its few requests fit in one burst."""
    from slolab.instances import mean_rate

    part = workload.take(members)
    copies = max(1, math.ceil(stream_requests / len(part)))
    if copies == 1:
        return part
    arrival = np.asarray(part.arrival_s, dtype=float)
    gap = 1.0 / mean_rate(part)
    period = float(arrival[-1] - arrival[0]) + gap
    columns = {name: np.concatenate([np.asarray(part[name])] * copies) for name in part.columns}
    columns["arrival_s"] = np.concatenate([arrival + j * period for j in range(copies)])
    return part.derived(columns)


def _class_instance(
    instance: Instance, members: np.ndarray, configuration: str, stream_requests: int
) -> Instance:
    """The requests ``members`` of ``instance`` (:func:`_class_stream`) on one server of
    ``configuration``."""
    from slolab.timing.generated import generated_preset

    cluster = Cluster(
        servers=1,
        kv_capacity_tokens=generated_preset(configuration).kv_capacity_tokens,
        max_batch_size=instance.cluster.max_batch_size,
        max_batch_tokens=instance.cluster.max_batch_tokens,
    )
    return Instance(
        f"{instance.name}-{configuration}",
        _class_stream(instance.workload, members, stream_requests),
        cluster,
        _timing(configuration),
        problem="serving",
        settings=instance.settings,
    )


def pool_policy(instance: Instance, configuration: str, policy: str) -> Any:
    """A fresh ``policy`` for a server of ``configuration`` serving ``instance``'s trace: a
    budgeted policy's token budget is the largest batch within the tightest TPOT of the whole
    trace on that configuration's timing (:func:`slolab.heuristics.policies.sarathi_token_budget`),
    the same whether the server runs one class (a capacity probe) or a pool's mix (the fleet),
    so the capacities are measured under the budget the fleet runs."""
    from slolab.heuristics.policies import make_policy

    return make_policy(policy, dataclasses.replace(instance, timing=_timing(configuration)))


def _class_probe(
    base: Instance,
    make: Any,
    definition: str,
    target: float,
    seed: int,
    early: bool,
    poisson: bool = True,
) -> Any:
    """``probe(rate)``: ``base`` under the policy ``make()`` returns, with Poisson arrivals at
    ``rate`` req/s (seeded by ``seed``),
    simulated, stopped once its verdict is certain when ``early``. Poisson, not the trace's
    own times scaled: a trace's simultaneous arrivals stay simultaneous at any rate, and a
    burst that one server must take alone a pool of servers shares. Without ``poisson`` the
    arrivals are ``base``'s own (``rate`` ignored)."""
    from slolab.instances import retime_poisson
    from slolab.sim import metrics, run
    from slolab.sim.verdict import AttainmentWatch, RampedStop

    def probe(rate: float) -> ProbeVerdict:
        start = time.perf_counter()
        instance = (
            dataclasses.replace(base, workload=retime_poisson(base.workload, rate, seed))
            if poisson
            else base
        )
        watch = AttainmentWatch(instance, definition, target) if early else None
        outcome = run(
            instance,
            make(),
            None,
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

    return probe


#: Seconds between the requests of a class run one at a time (:func:`class_targets`): longer
#: than any request takes alone.
SOLO_GAP_S = 10_000.0


def _columns(instance: Instance) -> dict[str, np.ndarray]:
    workload = instance.workload
    return {name: np.asarray(workload[name]) for name in workload.columns}


def class_targets(
    instance: Instance,
    classes: RequestClasses,
    configurations: Sequence[str],
    target: float,
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> tuple[float, ...]:
    """The attainment each class is held to, so that the classes together meet ``target``.

    A class's ceiling ``a_k`` is the best attainment any configuration reaches for it with
    every request alone on an idle server (its requests :data:`SOLO_GAP_S` apart, under
    ``policy``): the requests above it miss whatever the fleet. (Time-scaling the trace to a
    trickle would not do: a trace's simultaneous arrivals stay simultaneous at any rate.) Of
    ``n`` requests at most ``(1 - target) n`` may miss; ``(1 - A) n`` miss anyway, with ``A =
    sum_k share_k a_k``; so each class may miss ``A - target`` of its requests beyond its own
    unavoidable ones, and is held to ``a_k - (A - target)``: the classes at their targets make
    ``sum_k share_k (a_k - A + target) = target`` exactly. When every ceiling is 1, every
    class is held to ``target``. A class whose target comes out <= 0 may miss all its requests
    (target 0: carried at no load).

    Raises
    ------
    ValueError
        When ``A < target``: no fleet of the grid can meet the target, however large.
    """
    ceilings = []
    for k in range(len(classes.names)):
        members = classes.members(k)
        best = 0.0
        for configuration in configurations:
            alone = _class_instance(instance, members, configuration, 1)
            spaced = np.arange(len(members), dtype=float) * SOLO_GAP_S
            solo = dataclasses.replace(
                alone, workload=alone.workload.derived({**_columns(alone), "arrival_s": spaced})
            )
            make = functools.partial(pool_policy, instance, configuration, policy)
            probe = _class_probe(solo, make, definition, target, seed, False, poisson=False)
            best = max(best, probe(1.0 / SOLO_GAP_S).attainment)
        ceilings.append(best)
    total = sum(classes.rates)
    reach = sum(rate / total * a for rate, a in zip(classes.rates, ceilings, strict=True))
    if reach < target:
        raise ValueError(
            f"the target {target} is out of reach: even with every request alone on an idle "
            f"server of the best configuration of the grid for its class, {reach:.3f} of the "
            "requests meet their SLO"
        )
    return tuple(max(0.0, a - (reach - target)) for a in ceilings)


def measure_capacities(
    instance: Instance,
    classes: RequestClasses,
    configurations: Sequence[str],
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    early: bool = True,
    rel_tol: float = 0.05,
    stream_requests: int = 400,
    progress: bool = False,
) -> CapacityTable:
    """The capacity of one server of each configuration for each class alone.

    Each (configuration, class) is a capacity search (bracketing and bisection to ``rel_tol``,
    :func:`slolab.harness.capacity.capacity`) at the class's target (:func:`class_targets`)
    over the rate of the class's own requests,
    repeated to at least ``stream_requests`` (:func:`_class_stream`) and time-scaled; every
    probe a simulation on one server with the configuration's timing and KV
    capacity, stopped once certain to meet or miss the target when ``early``. A class's search
    on the next configuration starts at the capacity found on the last one (or at the class's
    own rate), which saves most of the bracketing. A class no rate down to 1/1024 of its start
    serves gets capacity 0 (the configuration cannot serve it).
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    targets = class_targets(
        instance,
        classes,
        configurations,
        target,
        definition=definition,
        policy=policy,
        seed=seed,
    )
    rows: list[list[float]] = [[0.0] * len(classes.names) for _ in configurations]
    probes = early_count = 0
    bar = tqdm(
        total=len(configurations) * len(classes.names),
        desc="capacities",
        unit="search",
        disable=None if progress else True,
    )
    try:
        for k in range(len(classes.names)):
            members = classes.members(k)
            start_rate = classes.rates[k]
            for c, configuration in enumerate(configurations):
                if targets[k] == 0:  # the class may miss every request: nothing to measure
                    bar.update(1)
                    continue
                base = _class_instance(instance, members, configuration, stream_requests)
                make = functools.partial(pool_policy, instance, configuration, policy)
                probe = _class_probe(base, make, definition, targets[k], seed, early)
                found = capacity(
                    probe,
                    target=targets[k],
                    start_rate=start_rate,
                    rel_tol=rel_tol,
                    progress=False,
                    floor_first=True,
                )
                rows[c][k] = found.capacity
                probes += len(found.probes)
                early_count += found.n_early
                if found.capacity > 0:
                    start_rate = found.capacity
                bar.update(1)
                bar.set_postfix(configuration=configuration, cls=classes.names[k])
    finally:
        bar.close()
    return CapacityTable(
        tuple(configurations),
        classes.names,
        tuple(tuple(row) for row in rows),
        targets,
        probes,
        early_count,
        time.perf_counter() - start,
    )


def fleet_instance(
    instance: Instance, configurations: Sequence[str], replicas: Sequence[int]
) -> Instance:
    """``instance`` on a mixed cluster: one pool per configuration with servers, named after
    it, running at its timing with its KV capacity."""
    from slolab.timing.generated import generated_preset

    pools = [
        Pool(
            name,
            "mixed",
            int(n),
            kv_capacity_tokens=generated_preset(name).kv_capacity_tokens,
            timing=name,
        )
        for name, n in zip(configurations, replicas, strict=True)
        if n > 0
    ]
    if not pools:
        raise ValueError("the fleet has no server")
    cluster = Cluster.from_pools(
        pools,
        kv_capacity_tokens=instance.cluster.kv_capacity_tokens,
        max_batch_size=instance.cluster.max_batch_size,
        max_batch_tokens=instance.cluster.max_batch_tokens,
    )
    return dataclasses.replace(instance, cluster=cluster)


@dataclass(frozen=True, slots=True)
class FleetRun:
    """One simulation of a plan's fleet.

    Attributes
    ----------
    attainment : float
        Attainment of the whole trace.
    pool_requests, pool_missed : dict of str to int
        Requests the router sent to each pool, and how many of them missed their SLO.
    rejected_kv : int
        Requests rejected because they never fit a server's KV cache.
    wall_s : float
        Wall time of the simulation.
    """

    attainment: float
    pool_requests: dict[str, int]
    pool_missed: dict[str, int]
    rejected_kv: int
    wall_s: float


def simulate_plan(
    instance: Instance,
    classes: RequestClasses,
    data: DeploymentData,
    plan: DeploymentPlan,
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> FleetRun:
    """The plan's fleet simulated on ``instance`` (:func:`simulate_fleet`)."""
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    return simulate_fleet(
        instance,
        classes,
        [data.configurations[c] for c in present],
        [plan.replicas[c] for c in present],
        [[row[c] for c in present] for row in plan.fractions],
        definition=definition,
        policy=policy,
        seed=seed,
    )


def simulate_fleet(
    instance: Instance,
    classes: RequestClasses,
    names: Sequence[str],
    replicas: Sequence[int],
    fractions: Sequence[Sequence[float]],
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> FleetRun:
    """``replicas[i]`` servers of configuration ``names[i]`` (:func:`fleet_instance`)
    simulated on ``instance`` under :class:`PlanRouter` (``fractions[k][i]``, each row
    rescaled to sum to 1) and one ``policy`` per pool (:func:`pool_policy`)."""
    from slolab.sim import metrics, run

    start = time.perf_counter()
    fleet = fleet_instance(instance, names, replicas)
    shares = np.asarray(fractions, dtype=float)
    router = PlanRouter(classes.class_of, names, shares / shares.sum(axis=1, keepdims=True))
    policies = PoolPolicies.build(names, lambda name: pool_policy(instance, name, policy))
    outcome = run(fleet, policies, router, seed=seed, record_iterations=False)
    table = metrics.request_table(fleet, outcome)
    met = table[f"met_{definition}"].to_numpy(dtype=bool)
    pool_requests = {name: 0 for name in names}
    pool_missed = {name: 0 for name in names}
    for r, c in enumerate(router.chosen.tolist()):
        pool_requests[names[c]] += 1
        pool_missed[names[c]] += int(not met[r])
    rejected_kv = 0 if outcome.rejected_kv is None else int(outcome.rejected_kv.sum())
    return FleetRun(
        metrics.attainment_from_table(table, definition),
        pool_requests,
        pool_missed,
        rejected_kv,
        time.perf_counter() - start,
    )


@dataclass(frozen=True, slots=True)
class LoopRound:
    """One round of the closed loop: the plan solved, and its simulation.

    Attributes
    ----------
    lower : tuple of int
        Least servers per configuration the round's solve was held to.
    result : DeploymentResult
        The plan adopted: the solve's, or with ``how == "added"`` the previous round's plan
        with one server more (its cost recomputed, its status FEASIBLE: not re-optimised).
    run : FleetRun or None
        Its simulation (None when the solve found no plan).
    how : str
        ``"solved"`` or ``"added"`` (see :func:`close_loop`).
    """

    lower: tuple[int, ...]
    result: DeploymentResult
    run: FleetRun | None
    how: str = "solved"


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """What the closed loop found.

    Attributes
    ----------
    configurations : tuple of str
        The configurations the plans' replica counts refer to.
    prices : tuple of float
        Their prices per server-hour.
    target : float
    rounds : tuple of LoopRound
    met : bool
        The last round's simulated attainment meets the target.
    """

    configurations: tuple[str, ...]
    prices: tuple[float, ...]
    target: float
    rounds: tuple[LoopRound, ...]
    met: bool

    def fleet_text(self) -> str:
        """``2 x llama2-7b/a100/tp1 + 1 x ...`` of the last round's plan."""
        plan = self.final.result.plan
        return "none" if plan is None else fleet_text(self.configurations, plan.replicas)

    @property
    def final(self) -> LoopRound:
        return self.rounds[-1]

    def summary(self) -> str:
        """One line: the verified answer, or how far the last round missed."""
        last = self.final
        if last.run is None:
            return f"no plan within the bounds after {len(self.rounds)} rounds"
        if self.met:
            return (
                f"met: attainment {last.run.attainment:.3f} >= {self.target} after "
                f"{len(self.rounds)} round(s)"
            )
        return (
            f"not met after {len(self.rounds)} rounds: attainment {last.run.attainment:.3f}, "
            f"{self.target - last.run.attainment:.3f} short of {self.target}"
        )


def close_loop(
    instance: Instance,
    classes: RequestClasses,
    data: DeploymentData,
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    max_rounds: int = 8,
    lower: Sequence[int] | None = None,
) -> ClosedLoop:
    """Solve, simulate, tighten, until the simulated fleet meets ``target``.

    The first round solves :func:`slolab.models.deployment.solve_milp` (with ``lower`` bounds
    on the servers per configuration, if given) and simulates the plan
    (:func:`simulate_plan`). While the simulated attainment misses the target, the
    configuration whose pool missed the largest share of the requests sent to it (ties: more
    misses, then the earlier configuration) gets a lower bound of one server more than the
    plan gave it, and the MILP is solved again. The re-solved plan may move traffic between
    configurations (the bound changes the optimum's fractions, not only one count); when its
    simulation falls below the last round's, the last plan with that one server added and its
    fractions kept (feasible for the model, at most as dear as the bound allows more) is
    simulated too, and the round adopts whichever of the two attains more (``how``). It stops
    when the target is met, when the solve finds no plan, or after ``max_rounds`` rounds.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    bound = list(lower) if lower is not None else [0] * len(data.configurations)
    rounds: list[LoopRound] = []

    def simulate(plan: DeploymentPlan) -> FleetRun:
        if plan_violations(data, plan):
            raise RuntimeError(f"the plan breaks the model: {plan_violations(data, plan)}")
        return simulate_plan(
            instance, classes, data, plan, definition=definition, policy=policy, seed=seed
        )

    for _ in range(max_rounds):
        result = solve_milp(data, lower=bound)
        if result.plan is None or result.status not in (Status.OPTIMAL, Status.FEASIBLE):
            rounds.append(LoopRound(tuple(bound), result, None))
            return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), False)
        found = simulate(result.plan)
        adopted = LoopRound(tuple(bound), result, found)
        last = rounds[-1] if rounds else None
        if (
            found.attainment < target
            and last is not None
            and last.run is not None
            and last.result.plan is not None
            and found.attainment < last.run.attainment
        ):
            replicas = [max(n, b) for n, b in zip(last.result.plan.replicas, bound, strict=True)]
            added = DeploymentPlan(tuple(replicas), last.result.plan.fractions)
            added_run = simulate(added)
            if added_run.attainment > found.attainment:
                cost = plan_cost(data, added)
                adopted = LoopRound(
                    tuple(bound),
                    DeploymentResult(
                        Status.FEASIBLE, added, cost, result.bound, 0.0, "closed-loop"
                    ),
                    added_run,
                    "added",
                )
        rounds.append(adopted)
        plan, run = adopted.result.plan, adopted.run
        assert plan is not None and run is not None
        if run.attainment >= target:
            return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), True)
        worst = max(
            (name for name in run.pool_requests if run.pool_requests[name]),
            key=lambda name: (
                run.pool_missed[name] / run.pool_requests[name],
                run.pool_missed[name],
                -data.configurations.index(name),
            ),
        )
        c = data.configurations.index(worst)
        bound[c] = max(bound[c], plan.replicas[c] + 1)
    return ClosedLoop(data.configurations, data.prices, target, tuple(rounds), False)


def trim_fleet(
    instance: Instance,
    classes: RequestClasses,
    loop: ClosedLoop,
    *,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
) -> tuple[tuple[int, ...], FleetRun]:
    """The met loop's last fleet with servers removed while the simulation still meets the
    target: one server at a time, from the dearest configuration that has more than one
    (the plan's fractions kept), the first removal that still meets is made and the search
    starts again; it ends when no single removal meets the target. For one configuration
    this is the fewest servers meeting the target (attainment assumed non-increasing as
    servers go).

    The loop only adds servers to what the capacities asked for, and the capacities'
    rounding can ask for more than the trace needs; both fleets the saving compares are
    trimmed the same way, so neither side is a fleet the capacities over-provisioned.
    """
    last = loop.final
    if not loop.met or last.run is None or last.result.plan is None:
        raise ValueError("trim_fleet needs a loop that met its target")
    plan = last.result.plan
    present = [c for c, n in enumerate(plan.replicas) if n > 0]
    names = [loop.configurations[c] for c in present]
    fractions = [[row[c] for c in present] for row in plan.fractions]
    prices = {name: price for name, price in zip(loop.configurations, loop.prices, strict=True)}
    replicas = [plan.replicas[c] for c in present]
    best = last.run
    while True:
        for i in sorted(range(len(names)), key=lambda i: (-prices[names[i]], i)):
            if replicas[i] <= 1:  # a pool the plan sends traffic to keeps a server
                continue
            fewer = [n - 1 if j == i else n for j, n in enumerate(replicas)]
            found = simulate_fleet(
                instance,
                classes,
                names,
                fewer,
                fractions,
                definition=definition,
                policy=policy,
                seed=seed,
            )
            if found.attainment >= loop.target:
                replicas, best = fewer, found
                break
        else:
            break
    full = [0] * len(loop.configurations)
    for c, n in zip(present, replicas, strict=True):
        full[c] = n
    return tuple(full), best


def _trimmed_cost(
    loop: ClosedLoop | None, trimmed: tuple[tuple[int, ...], FleetRun] | None
) -> float:
    if loop is None or not loop.met or trimmed is None:
        return math.inf
    return float(sum(n * p for n, p in zip(trimmed[0], loop.prices, strict=True)))


def fleet_text(configurations: Sequence[str], replicas: Sequence[int]) -> str:
    """``2 x llama2-7b/a100/tp1 + 1 x ...``."""
    return " + ".join(
        f"{n} x {name}" for name, n in zip(configurations, replicas, strict=True) if n > 0
    )


@dataclass(frozen=True, slots=True)
class DeploymentReport:
    """The planner's answer for one model and configuration grid.

    Attributes
    ----------
    data : DeploymentData
        Classes, prices and measured capacities.
    capacities : CapacityTable
    refused : dict of str to str
        Configurations of the grid the data cannot support, and why.
    single : dict of str to int
        Per configuration that serves every class: the fewest servers carrying all the traffic.
    mixed : ClosedLoop
        The mixed optimum, closed-loop.
    best_single : ClosedLoop or None
        The best single configuration, closed-loop on its own.
    mixed_trimmed, single_trimmed : (tuple of int, FleetRun) or None
        Each met loop's fleet trimmed (:func:`trim_fleet`): replicas per configuration of
        the loop and the run that met the target (None when the loop did not meet it).
    greedy_cost : float
        Cost of :func:`greedy_cost_per_capacity` ($/h) on the measured capacities.
    best_single_cost : float
        Cost of :func:`best_single` on the measured capacities (inf: none).
    optimum_cost : float
        The MILP's cost on the measured capacities (first round).
    optimum_status : str
        Its status (``OPTIMAL`` when HiGHS proved it).
    wall_s : float
        Wall time of the whole plan.
    """

    data: DeploymentData
    capacities: CapacityTable
    refused: dict[str, str]
    single: dict[str, int]
    mixed: ClosedLoop
    best_single: ClosedLoop | None
    greedy_cost: float
    best_single_cost: float
    optimum_cost: float
    optimum_status: str
    wall_s: float
    mixed_trimmed: tuple[tuple[int, ...], FleetRun] | None = None
    single_trimmed: tuple[tuple[int, ...], FleetRun] | None = None

    @property
    def mixed_cost(self) -> float:
        """The verified mixed fleet's cost ($/h), trimmed (inf when not met)."""
        return _trimmed_cost(self.mixed, self.mixed_trimmed)

    @property
    def single_cost(self) -> float:
        """The verified best single configuration's cost ($/h), trimmed (inf when not met)."""
        return _trimmed_cost(self.best_single, self.single_trimmed)

    @property
    def saving(self) -> float:
        """``1 - mixed / single`` of the verified, trimmed fleets (NaN unless both met the
        target)."""
        if math.isinf(self.mixed_cost) or math.isinf(self.single_cost):
            return math.nan
        return 1.0 - self.mixed_cost / self.single_cost

    def to_dict(self) -> dict[str, Any]:
        """What ``slolab plan --model ... --json`` prints."""

        def loop_dict(loop: ClosedLoop | None) -> dict[str, Any] | None:
            if loop is None:
                return None
            last = loop.final
            return {
                "met": loop.met,
                "summary": loop.summary(),
                "fleet": loop.fleet_text(),
                "cost_per_hour": last.result.cost if last.result.plan is not None else None,
                "attainment": None if last.run is None else last.run.attainment,
                "rounds": [
                    {
                        "lower": list(r.lower),
                        "status": r.result.status.value,
                        "how": r.how,
                        "cost_per_hour": r.result.cost if r.result.plan is not None else None,
                        "replicas": None if r.result.plan is None else list(r.result.plan.replicas),
                        "attainment": None if r.run is None else r.run.attainment,
                        "pool_requests": None if r.run is None else r.run.pool_requests,
                        "pool_missed": None if r.run is None else r.run.pool_missed,
                    }
                    for r in loop.rounds
                ],
            }

        saving = self.saving
        return {
            "configurations": [
                {
                    "name": name,
                    "price_per_hour": price,
                    "replicas": self.single.get(name),
                    "cost_per_hour": None if name not in self.single else self.single[name] * price,
                }
                for name, price in zip(self.data.configurations, self.data.prices, strict=True)
            ],
            "refused": self.refused,
            "classes": [
                {"name": name, "rate": rate, "requests": None}
                for name, rate in zip(self.data.classes, self.data.rates, strict=True)
            ],
            "capacity": [list(row) for row in self.data.capacity],
            "class_targets": list(self.capacities.class_targets),
            "capacity_probes": self.capacities.probes,
            "capacity_early": self.capacities.early,
            "optimum_cost_per_hour": self.optimum_cost,
            "optimum_status": self.optimum_status,
            "best_single_cost_per_hour": None
            if math.isinf(self.best_single_cost)
            else self.best_single_cost,
            "greedy_cost_per_hour": self.greedy_cost,
            "mixed": loop_dict(self.mixed),
            "best_single": loop_dict(self.best_single),
            "mixed_trimmed": _trimmed_dict(self.mixed, self.mixed_trimmed),
            "best_single_trimmed": _trimmed_dict(self.best_single, self.single_trimmed),
            "saving": None if math.isnan(saving) else saving,
            "wall_s": self.wall_s,
        }


def _trimmed_dict(
    loop: ClosedLoop | None, trimmed: tuple[tuple[int, ...], FleetRun] | None
) -> dict[str, Any] | None:
    if loop is None or trimmed is None:
        return None
    return {
        "fleet": fleet_text(loop.configurations, trimmed[0]),
        "replicas": list(trimmed[0]),
        "cost_per_hour": _trimmed_cost(loop, trimmed),
        "attainment": trimmed[1].attainment,
    }


def plan_deployment(
    instance: Instance,
    configurations: Sequence[str],
    *,
    target: float = 0.9,
    definition: str = "deadline",
    policy: str = "sarathi",
    seed: int = 0,
    prices: dict[str, float] | None = None,
    refused: dict[str, str] | None = None,
    classes: RequestClasses | None = None,
    max_rounds: int = 8,
    progress: bool = False,
) -> DeploymentReport:
    """Classes, capacities, the mixed optimum and the best single configuration, each fleet
    simulated and tightened until it meets ``target`` (:func:`close_loop`)."""
    start = time.perf_counter()
    classes = classes or request_classes(instance)
    table = measure_capacities(
        instance,
        classes,
        configurations,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        progress=progress,
    )
    # a configuration that serves no class at all carries nothing: left out of the model
    usable = [c for c, row in enumerate(table.capacity) if any(v > 0 for v in row)]
    refused = dict(refused or {})
    for c, name in enumerate(configurations):
        if c not in usable:
            refused[name] = f"{name}: meets the class targets for no request class at any rate"
    if not usable:
        raise ValueError(
            f"no configuration of {', '.join(configurations)} meets the target {target} for any "
            "request class, even at 1/1024 of its rate"
        )
    # a class held to 0 (it may miss every request, class_targets) is carried at no load:
    # rate 0, and any configuration may take it
    hopeless = [t == 0 for t in table.class_targets]
    data = DeploymentData(
        tuple(configurations[c] for c in usable),
        tuple(configuration_price(configurations[c], prices) for c in usable),
        classes.names,
        tuple(0.0 if h else rate for h, rate in zip(hopeless, classes.rates, strict=True)),
        tuple(
            tuple(1.0 if h else v for h, v in zip(hopeless, table.capacity[c], strict=True))
            for c in usable
        ),
    )
    single_plan = best_single(data)
    single = {
        data.configurations[c]: plan.replicas[c]
        for c, plan in single_configuration_plans(data).items()
    }
    optimum = solve_milp(data)
    mixed = close_loop(
        instance,
        classes,
        data,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        max_rounds=max_rounds,
    )
    single_loop = None
    if single_plan is not None:
        c = next(j for j, n in enumerate(single_plan.replicas) if n > 0)
        alone = DeploymentData(
            (data.configurations[c],),
            (data.prices[c],),
            data.classes,
            data.rates,
            (data.capacity[c],),
        )
        single_loop = close_loop(
            instance,
            classes,
            alone,
            target=target,
            definition=definition,
            policy=policy,
            seed=seed,
            max_rounds=max_rounds,
        )
    mixed_trimmed = single_trimmed = None
    if mixed.met:
        mixed_trimmed = trim_fleet(
            instance, classes, mixed, definition=definition, policy=policy, seed=seed
        )
    if single_loop is not None and single_loop.met:
        single_trimmed = trim_fleet(
            instance, classes, single_loop, definition=definition, policy=policy, seed=seed
        )
    return DeploymentReport(
        data=data,
        capacities=table,
        refused=refused,
        single=single,
        mixed=mixed,
        best_single=single_loop,
        greedy_cost=plan_cost(data, greedy_cost_per_capacity(data)),
        best_single_cost=math.inf if single_plan is None else plan_cost(data, single_plan),
        optimum_cost=optimum.cost,
        optimum_status=optimum.status.value,
        wall_s=time.perf_counter() - start,
        mixed_trimmed=mixed_trimmed,
        single_trimmed=single_trimmed,
    )
