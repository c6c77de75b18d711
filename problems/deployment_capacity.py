"""What the deployment MILP takes, measured: request classes, configurations and their prices,
the attainment each class is held to, and per-(configuration, class) capacities.

1. :func:`request_classes`: the trace's requests in classes, size buckets (prompt plus output
   tokens) x groups of SLO tiers, with their arrival rates.
2. :func:`configuration_names`, :func:`configuration_price`, :func:`read_prices`: the grid of
   generated presets ``MODEL/GPU/tpN`` the data supports, and their prices per server-hour.
3. :func:`class_targets`: the attainment each class is held to so that the classes together
   meet the target (their solo ceilings less the trace's spare misses).
4. :func:`measure_capacities`: for every (configuration, class), the largest arrival rate of
   that class alone that one server of the configuration serves at the class's target, by the
   capacity search of :func:`slolab.solvers.capacity.capacity` (every probe a simulation on
   Poisson arrivals, stopped early once its verdict is certain; each class's search on the
   next configuration starts from the capacity found on the last one).
5. :class:`CapacityCache`: searches and solo ceilings already measured, keyed by everything
   they depend on, so that plans sharing them (a sweep's grid points, a rerun) reuse them.
6. :func:`capacity_data` and :func:`deployment_instance`: the decision problem of a measured
   table, and the ``deployment`` problem's instance builder (the table stored in the
   instance), here below the harness so that the problem's record names no module above it.

:mod:`slolab.harness.deploy` solves, simulates and tightens on these; docs/deployment.md gives
the formulation and what each step guarantees.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from slolab.instances.records import Cluster, Instance
from slolab.models.deployment import DeploymentData
from slolab.problems.deployment import DEFAULT_CONFIGURATIONS
from slolab.problems.registry import OptionValueError
from slolab.solvers.capacity import ProbeVerdict, capacity

__all__ = [
    "capacity_data",
    "check_probe_arrivals",
    "deployment_instance",
    "CAPACITY_CACHE_VERSION",
    "DEFAULT_TIER_GROUPS",
    "MAX_THINNED_REQUESTS",
    "PROBE_ARRIVALS",
    "SOLO_GAP_S",
    "CapacityCache",
    "CapacityTable",
    "RequestClasses",
    "class_stream",
    "class_targets",
    "configuration_names",
    "configuration_price",
    "measure_capacities",
    "pool_policy",
    "probe_arrivals",
    "read_prices",
    "source_fingerprint",
    "reference_configuration",
    "request_classes",
    "timing_of",
    "trace_instance",
]


#: SLO tiers grouped into classes: PolyServe's TPOT tiers 20 and 30 ms, then 50 and 100 ms
#: with the best-effort requests (tier 4).
DEFAULT_TIER_GROUPS: tuple[tuple[int, ...], ...] = ((0, 1), (2, 3, 4))


@functools.cache
def timing_of(name: str) -> Any:
    """The timing model of preset ``name`` (one object per name, shared)."""
    from slolab.timing.presets import preset

    return preset(name)


@dataclass(frozen=True, slots=True, eq=False)
class RequestClasses:
    """The requests of an instance in classes (compared by identity: it holds an array).

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


def check_grid_names(model: str, gpus: Sequence[str]) -> None:
    """Raise ValueError (naming the known ones) for a model or GPU the profiles do not have."""
    from slolab.timing.generated import vidur_fits_table

    table = vidur_fits_table()
    if model not in table["models"]:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(sorted(table['models']))}")
    for gpu in gpus:
        if gpu not in table["gpus"]:
            raise ValueError(f"unknown GPU {gpu!r}; known: {', '.join(sorted(table['gpus']))}")


def configuration_names(
    model: str, gpus: Sequence[str], tps: Sequence[int], calibrated: bool = True
) -> tuple[list[str], dict[str, str]]:
    """The generated presets of the grid the data supports, and why each of the others is
    refused (name -> one line): ``MODEL/GPU/tpN/calibrated`` (the profile's timing with the
    serving terms measured on real serving, :mod:`slolab.timing.overheads`; docs/timing.md),
    or with ``calibrated=False`` the profile-only ``MODEL/GPU/tpN``.

    Raises
    ------
    ValueError
        For a model or GPU the profiles do not have (naming the known ones), or when the data
        supports no configuration of the grid.
    """
    from slolab.timing.generated import CALIBRATED_SUFFIX, preset_refusal

    check_grid_names(model, gpus)
    suffix = CALIBRATED_SUFFIX if calibrated else ""
    names, refused = [], {}
    for gpu in gpus:
        for tp in tps:
            name = f"{model}/{gpu}/tp{tp}{suffix}"
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


def read_prices(path: str | Path, gpus: Sequence[str] = ()) -> dict[str, float]:
    """GPU prices per GPU-hour from a CSV file with the columns ``gpu,usd_per_gpu_hour``;
    every GPU of ``gpus`` (the grid's) must have a line (a missing one would otherwise take
    the profiles' dated price unseen).

    Raises
    ------
    ValueError
        One line naming the file, line, field and value of the first bad entry.
    """
    from slolab.timing.generated import vidur_fits_table

    known = set(vidur_fits_table()["gpus"])
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
        if gpu not in known:
            raise ValueError(
                f"{path} line {line}: field gpu names an unknown GPU {gpu!r}; known: "
                f"{', '.join(sorted(known))}"
            )
        prices[gpu] = price
    missing = [gpu for gpu in dict.fromkeys(gpus) if gpu not in prices]
    if missing:
        raise ValueError(
            f"{path}: no price for GPU {', '.join(missing)} of the grid (it lists "
            f"{', '.join(prices) or 'none'}); add a line gpu,usd_per_gpu_hour for each"
        )
    return prices


def _gpus_of(names: Sequence[str]) -> list[str]:
    """The GPU types of configurations ``MODEL/GPU/tpN`` (a name not of that form: none)."""
    return [name.split("/")[1] for name in names if name.count("/") == 2]


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
        return float(idle_decode_s(timing_of(name), np.array([1000.0]), np.array([2.0]))[0])

    return min(configurations, key=lambda name: (decode_s(name), name))


def trace_instance(
    trace: str,
    configurations: Sequence[str],
    *,
    seed: int = 0,
    limit: int | None = None,
    slos: str = "polyserve",
    rate: float | None = None,
    traffic: float = 1.0,
    max_batch_tokens: int = 2048,
    **reading: Any,
) -> Instance:
    """The trace with SLOs assigned under :func:`reference_configuration`'s timing (the same
    SLOs whichever configuration serves a request), cut to ``limit`` requests; with
    ``traffic`` its arrivals time-scaled to that multiple of the cut's own mean rate (or of
    ``rate``)."""
    from slolab.instances import mean_rate, scale_rate
    from slolab.problems.serving import serving_instance

    if not (math.isfinite(traffic) and traffic > 0):
        raise ValueError(f"traffic must be a number > 0, got {traffic!r}")
    from slolab.timing.presets import DEFAULT_KV_CAPACITY_TOKENS

    # the cut's own cluster runs nothing: each fleet pool and capacity probe runs at its
    # configuration's own KV capacity (fleet_instance, _class_instance)
    instance = serving_instance(
        trace,
        seed=seed,
        kv_capacity_tokens=DEFAULT_KV_CAPACITY_TOKENS,
        timing=reference_configuration(configurations),
        slos=slos,
        rate=rate,
        limit=limit,
        max_batch_tokens=max_batch_tokens,
        # the capacity probes repeat and thin a class's requests and the fleets are built
        # anew: neither keeps a prefix cache, so the cut reads no block ids
        prefix_cache="off",
        **reading,
    )
    if traffic == 1.0:
        return instance
    scaled = scale_rate(instance.workload, traffic * mean_rate(instance.workload))
    return dataclasses.replace(instance, workload=scaled)


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
    reused : int
        Capacity searches taken from a :class:`CapacityCache` instead of run.
    saved : int
        Simulations the cache saved: the probes of the reused searches and the solo runs of
        the reused class ceilings (:func:`class_targets`).
    """

    configurations: tuple[str, ...]
    classes: tuple[str, ...]
    capacity: tuple[tuple[float, ...], ...]
    class_targets: tuple[float, ...]
    probes: int
    early: int
    wall_s: float
    reused: int = 0
    saved: int = 0


#: Part of every :class:`CapacityCache` key: raise it when the format of an entry changes.
#: (A change to the code a search runs needs no raise: :func:`source_fingerprint` is in the key.)
CAPACITY_CACHE_VERSION = 1

#: Folders of the package whose code no capacity search runs, left out of
#: :func:`source_fingerprint`.
_NOT_RUN = frozenset({"tests", "benchmarks", "notebooks", "examples", "docs"})


def source_fingerprint(root: str | os.PathLike[str] | None = None) -> str:
    """A hash of the package's Python source (the ``.py`` files under ``root``, the package's
    own folder by default, by relative path and bytes; the folders in ``_NOT_RUN`` left out).

    It is part of every :class:`CapacityCache` key, so an entry measured by other code (the
    engine, a policy, the search) is never read: after any edit to the package the searches
    run again. Policies registered by plugins live outside the package and are not in it.
    """
    base = Path(root) if root is not None else Path(__file__).resolve().parent.parent
    return _source_fingerprint(str(base))


@functools.cache
def _source_fingerprint(base: str) -> str:
    """:func:`source_fingerprint` of the folder ``base``, read once per process."""
    digest = hashlib.sha256()
    root = Path(base)
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] in _NOT_RUN or any(part.startswith(".") for part in relative.parts):
            continue
        digest.update(relative.as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


class CapacityCache:
    """Capacity searches and class ceilings already measured, by everything they depend on.

    A key (:meth:`key`) is a hash of the whole instance the classes come from (its workload's
    columns, cluster and settings: the trace cut, its SLOs, its arrival times), the class's
    requests, the configuration and its timing model (the fitted preset, in full), the class's
    target, the definition, the policy, the seed, the search's options, how its probes'
    arrivals are drawn (:data:`PROBE_ARRIVALS`: a trace-probed capacity is never read for a
    Poisson plan) and its start rate (the
    capacity found on the previous configuration: a search from another start bisects to
    another point), with :data:`CAPACITY_CACHE_VERSION`, the package version and the hash of
    the package's source (:func:`source_fingerprint`: an entry measured by other code is not
    read). The price of
    a configuration and the closed loop's options are not part of it, nor the plan's target
    beyond the class targets it gives: plans that differ only there share every search. An
    entry holds what the search returned (the capacity, its probes and early verdicts), so a
    plan reading it finds the capacity a fresh search would.

    Entries live in memory, and in ``directory`` (one JSON file each, written atomically)
    when given, so that processes sharing the directory (a sweep's workers, a rerun) share
    them; a directory that cannot be written leaves the cache in memory. Counters:
    ``searches_reused``, ``probes_saved`` (simulations the entries read did not rerun).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        if self.directory is not None and self.directory.exists() and not self.directory.is_dir():
            raise ValueError(
                f"capacity cache {self.directory}: a file, not a directory (give a directory to "
                "keep the capacity searches in)"
            )
        self._memory: dict[str, dict[str, Any]] = {}
        self.searches_reused = 0
        self.probes_saved = 0

    @staticmethod
    def key(*parts: Any) -> str:
        """A hash of ``parts`` (JSON-ready values) with the cache and package versions and the
        package's source fingerprint."""
        from slolab import __version__

        text = json.dumps(
            [CAPACITY_CACHE_VERSION, __version__, source_fingerprint(), *parts], sort_keys=True
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str, needs: Sequence[str] = ()) -> dict[str, Any] | None:
        """The entry stored under ``key`` (None: none). An entry in the directory that is not
        a JSON object holding a number under each field of ``needs`` is named in a warning and
        treated as absent (measured again, and rewritten)."""
        if key in self._memory:
            return self._memory[key]
        if self.directory is None:
            return None
        path = self.directory / f"{key}.json"
        try:
            entry = json.loads(path.read_text())
        except OSError:
            return None
        except ValueError:
            entry = None
        bad = next(
            (
                field
                for field in needs
                if not isinstance(entry, dict)
                or isinstance(entry.get(field), bool)
                or not isinstance(entry.get(field), int | float)
            ),
            None,
        )
        if entry is None or bad is not None:
            what = "is not JSON" if entry is None else f"has no number under {bad!r}"
            logging.getLogger("slolab").warning(
                "capacity cache entry %s %s: measured again", path, what
            )
            return None
        self._memory[key] = entry
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store ``entry`` under ``key`` (in the directory too, when it can be written)."""
        self._memory[key] = entry
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = self.directory / f".{key}.{os.getpid()}.tmp"
            temporary.write_text(json.dumps(entry))
            os.replace(temporary, self.directory / f"{key}.json")
        except OSError:
            pass


def _instance_fingerprint(instance: Instance) -> str:
    """A hash of what a capacity or solo run reads from ``instance``: every workload column
    (values and dtype), the cluster and the settings."""
    digest = hashlib.sha256()
    workload = instance.workload
    for name in sorted(workload.columns):
        column = np.ascontiguousarray(workload[name])
        digest.update(f"{name}:{column.dtype.str}:{column.shape}".encode())
        digest.update(column.tobytes())
    digest.update(repr(instance.cluster).encode())
    digest.update(json.dumps(instance.settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _run_key(
    cache: CapacityCache,
    kind: str,
    whole: str,
    members: np.ndarray,
    configuration: str,
    definition: str,
    policy: str,
    seed: int,
    *rest: Any,
) -> str:
    """The cache key of a ``kind`` run (``solo``, ``search``) of the class ``members`` of the
    instance fingerprinted ``whole`` on ``configuration`` (its timing model in full), with the
    run's further inputs ``rest``."""
    return cache.key(
        kind,
        whole,
        hashlib.sha256(np.ascontiguousarray(members, dtype=np.int64).tobytes()).hexdigest(),
        configuration,
        repr(timing_of(configuration)),
        definition,
        policy,
        seed,
        *rest,
    )


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


#: The stream of a class's requests (:func:`_class_stream`), for the disaggregated planner's
#: probes (:mod:`slolab.problems.deployment_pd`).
class_stream = _class_stream

#: How a capacity probe's arrivals are drawn (both planners): ``"poisson"`` (the class's
#: stream with Poisson arrivals) or ``"trace"`` (the class's own arrival pattern, thinned to
#: one server's share or time-compressed, :func:`probe_arrivals`).
PROBE_ARRIVALS = ("trace", "poisson")

#: Most requests a thinned stream is cut from.
MAX_THINNED_REQUESTS = 200_000


def check_probe_arrivals(arrivals: str, field: str = "arrivals") -> None:
    """ValueError in one line, naming the field (``field``) and the value, unless
    ``arrivals`` is one of :data:`PROBE_ARRIVALS`."""
    if arrivals not in PROBE_ARRIVALS:
        raise ValueError(f"{field} must be one of {', '.join(PROBE_ARRIVALS)}, got {arrivals!r}")


def probe_arrivals(
    instance: Instance, members: np.ndarray, count: int, rate: float, seed: int, arrivals: str
) -> tuple[Any, np.ndarray]:
    """``count`` or so of the class's requests arriving at ``rate`` req/s, and the position in
    ``members`` of each (the stream repeats the members in order).

    ``"poisson"``: the class's stream (its requests repeated, :func:`_class_stream`) with
    Poisson arrivals seeded by ``seed``.
    ``"trace"``: the stream at its own arrival times (the trace's, scaled to the instance's
    traffic), as one server of a pool sees them: when ``rate`` is below the class's own rate
    ``lambda``, the server carries a share ``rate / lambda`` of it and a least-loaded router
    hands it every ``lambda / rate``-th request (a burst of ``B`` simultaneous arrivals puts
    about ``B rate / lambda`` on it); above, the server carries the whole class and its time is
    compressed (a burst stays a burst). The thinned stream is cut from at most
    :data:`MAX_THINNED_REQUESTS` of the class's requests, so far below ``lambda`` (a search
    bisecting down to a rate the configuration serves) the server sees fewer than ``count``,
    and at least one: below ``lambda / MAX_THINNED_REQUESTS``, the cut's last request.
    """
    from slolab.instances import mean_rate, retime_poisson, scale_rate

    check_probe_arrivals(arrivals)
    if arrivals == "poisson":
        stream = _class_stream(instance.workload, members, count)
        return retime_poisson(stream, rate, seed), np.arange(len(stream)) % len(members)
    own = _class_stream(instance.workload, members, count)
    own_rate = mean_rate(own)
    if rate >= own_rate:
        return scale_rate(own, rate), np.arange(len(own)) % len(members)
    share = own_rate / rate
    longer = _class_stream(
        instance.workload, members, min(MAX_THINNED_REQUESTS, math.ceil(count * share - 1e-9))
    )
    index = np.arange(len(longer))
    # request i is kept when the running count of shares passes a whole number there (a
    # tolerance keeps a share of 2.0000000000000004 from shifting the pattern by one)
    kept = np.flatnonzero(np.floor((index + 1) / share + 1e-9) > np.floor(index / share + 1e-9))
    if len(kept) == 0:  # the share outruns the cut: one request, the nearest to the first share
        kept = np.array([len(longer) - 1])
    return longer.take(kept), kept % len(members)


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
        timing_of(configuration),
        problem="serving",
        settings=instance.settings,
    )


def _drawn(
    instance: Instance, members: np.ndarray, count: int, rate: float, *, seed: int, arrivals: str
) -> Any:
    """The workload of :func:`probe_arrivals` (without the positions)."""
    return probe_arrivals(instance, members, count, rate, seed, arrivals)[0]


def pool_policy(instance: Instance, configuration: str, policy: str) -> Any:
    """A fresh ``policy`` for a server of ``configuration`` serving ``instance``'s trace: a
    budgeted policy's token budget is the largest batch within the tightest TPOT of the whole
    trace on that configuration's timing (:func:`slolab.heuristics.policies.sarathi_token_budget`),
    the same whether the server runs one class (a capacity probe) or a pool's mix (the fleet),
    so the capacities are measured under the budget the fleet runs."""
    from slolab.heuristics.policies import make_policy

    return make_policy(policy, dataclasses.replace(instance, timing=timing_of(configuration)))


def _class_probe(
    base: Instance,
    make: Any,
    definition: str,
    target: float,
    seed: int,
    early: bool,
    draw: Any = None,
) -> Any:
    """``probe(rate)``: ``base`` under the policy ``make()`` returns with the workload
    ``draw(rate)`` (the class's requests arriving at ``rate`` req/s as :func:`probe_arrivals`
    draws them), simulated, stopped once its verdict is certain when ``early``. Without
    ``draw`` the arrivals are ``base``'s own (``rate`` ignored: the solo runs)."""
    from slolab.sim import metrics, run
    from slolab.sim.verdict import AttainmentWatch, RampedStop

    def probe(rate: float) -> ProbeVerdict:
        start = time.perf_counter()
        instance = base if draw is None else dataclasses.replace(base, workload=draw(rate))
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
    cache: CapacityCache | None = None,
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
    (target 0: carried at no load). A solo run already in ``cache`` (same instance, class,
    configuration, timing, definition, policy and seed) is read, not run again.

    Raises
    ------
    ValueError
        When ``A < target``: no fleet of the grid can meet the target, however large.
    """
    ceilings = []
    whole = _instance_fingerprint(instance) if cache is not None else ""
    for k in range(len(classes.names)):
        members = classes.members(k)
        best = 0.0
        for configuration in configurations:
            key = ""
            if cache is not None:
                key = _run_key(
                    cache, "solo", whole, members, configuration, definition, policy, seed
                )
                entry = cache.get(key, ("attainment",))
                if entry is not None:
                    cache.probes_saved += 1
                    best = max(best, float(entry["attainment"]))
                    continue
            alone = _class_instance(instance, members, configuration, 1)
            spaced = np.arange(len(members), dtype=float) * SOLO_GAP_S
            solo = dataclasses.replace(
                alone, workload=alone.workload.derived({**_columns(alone), "arrival_s": spaced})
            )
            make = functools.partial(pool_policy, instance, configuration, policy)
            probe = _class_probe(solo, make, definition, target, seed, False)
            verdict = probe(1.0 / SOLO_GAP_S)
            _refuse_stall(verdict.stalled, policy, classes.names[k], configuration, "alone")
            attainment = verdict.attainment
            if cache is not None:
                cache.put(key, {"attainment": attainment})
            best = max(best, attainment)
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


def _refuse_stall(stalled: int, policy: str, name: str, configuration: str, how: str) -> None:
    """One line when a class's run stalled: no attainment to hold a class to or measure a
    capacity by."""
    if stalled:
        raise ValueError(
            f"policy {policy} stalled on class {name} ({how} on {configuration}): {stalled} "
            "request(s) left waiting with nothing to run, no valid attainment (slolab simulate "
            "shows the stall)"
        )


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
    cache: CapacityCache | None = None,
    arrivals: str = "poisson",
) -> CapacityTable:
    """The capacity of one server of each configuration for each class alone.

    Each (configuration, class) is a capacity search (bracketing and bisection to ``rel_tol``,
    :func:`slolab.solvers.capacity.capacity`) at the class's target (:func:`class_targets`)
    over the rate of the class's own requests,
    repeated to at least ``stream_requests`` (:func:`_class_stream`) and arriving as
    ``arrivals`` says (:data:`PROBE_ARRIVALS`, :func:`probe_arrivals`: Poisson at the probed
    rate by default, or the class's own arrival pattern thinned to one server's share); every
    probe a simulation on one server with the configuration's timing and KV
    capacity, stopped once certain to meet or miss the target when ``early``. A class's search
    on the next configuration starts at the capacity found on the last one (or at the class's
    own rate), which saves most of the bracketing. A class no rate down to 1/1024 of its start
    serves gets capacity 0 (the configuration cannot serve it). A search (or a solo run of
    :func:`class_targets`) already in ``cache`` is read, not run (:class:`CapacityCache`; the
    table's ``reused`` and ``saved`` count them).
    """
    from tqdm.auto import tqdm

    check_probe_arrivals(arrivals)
    start = time.perf_counter()
    reused_before = 0 if cache is None else cache.searches_reused
    saved_before = 0 if cache is None else cache.probes_saved
    targets = class_targets(
        instance,
        classes,
        configurations,
        target,
        definition=definition,
        policy=policy,
        seed=seed,
        cache=cache,
    )
    whole = _instance_fingerprint(instance) if cache is not None else ""
    rows: list[list[float]] = [[0.0] * len(classes.names) for _ in configurations]
    probes = early_count = 0
    #: per class, the best attainment of a search's lowest-rate probe that missed its target
    floor: dict[int, float] = {}
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
                key = ""
                entry = None
                if cache is not None:
                    key = _run_key(
                        cache,
                        "search",
                        whole,
                        members,
                        configuration,
                        definition,
                        policy,
                        seed,
                        targets[k],
                        early,
                        rel_tol,
                        stream_requests,
                        start_rate,
                        arrivals,
                    )
                    entry = cache.get(key, ("capacity", "probes"))
                if cache is not None and entry is not None:
                    cache.searches_reused += 1
                    cache.probes_saved += int(entry["probes"])
                    found_capacity = float(entry["capacity"])
                else:
                    base = _class_instance(instance, members, configuration, stream_requests)
                    make = functools.partial(pool_policy, instance, configuration, policy)
                    draw = functools.partial(
                        _drawn, instance, members, stream_requests, seed=seed, arrivals=arrivals
                    )
                    probe = _class_probe(base, make, definition, targets[k], seed, early, draw=draw)
                    found = capacity(
                        probe,
                        target=targets[k],
                        start_rate=start_rate,
                        rel_tol=rel_tol,
                        progress=False,
                        floor_first=True,
                    )
                    if found.stop_reason == "stalled":
                        _refuse_stall(
                            found.stalled[-1], policy, classes.names[k], configuration, "streamed"
                        )
                    found_capacity = found.capacity
                    if found.capped_low:
                        lowest = min(found.probes)[1]
                        floor[k] = max(floor.get(k, 0.0), lowest)
                    probes += len(found.probes)
                    early_count += found.n_early
                    if cache is not None:
                        cache.put(
                            key,
                            {
                                "capacity": found.capacity,
                                "probes": len(found.probes),
                                "early": found.n_early,
                            },
                        )
                rows[c][k] = found_capacity
                if found_capacity > 0:
                    start_rate = found_capacity
                bar.update(1)
                bar.set_postfix(configuration=configuration, cls=classes.names[k])
    finally:
        bar.close()
    for k in range(len(classes.names)):
        if targets[k] > 0 and all(row[k] == 0 for row in rows):
            seen = (
                f" (at best {floor[k]:.4f}, an upper bound when the probe stopped early)"
                if k in floor
                else ""
            )
            raise ValueError(
                f"class {classes.names[k]} is held to {targets[k]:.4f}, at or near its ceiling "
                "(every request alone on an idle server), and no configuration of "
                f"{', '.join(configurations)} keeps that even at 1/1024 of its rate{seen}: its "
                "target sits at the idle ceiling; give a lower --target"
            )
    return CapacityTable(
        tuple(configurations),
        classes.names,
        tuple(tuple(row) for row in rows),
        targets,
        probes,
        early_count,
        time.perf_counter() - start,
        0 if cache is None else cache.searches_reused - reused_before,
        0 if cache is None else cache.probes_saved - saved_before,
    )


def capacity_data(
    table: CapacityTable,
    classes: RequestClasses,
    target: float,
    prices: dict[str, float] | None = None,
    refused: dict[str, str] | None = None,
) -> DeploymentData:
    """The decision problem of a measured capacity table: a configuration that serves no class
    at all carries nothing and is left out (named in ``refused``, when given); a class held to
    0 (it may miss every request, :func:`class_targets`) is carried at no load (rate 0, and
    any configuration may take it)."""
    configurations = table.configurations
    usable = [c for c, row in enumerate(table.capacity) if any(v > 0 for v in row)]
    for c, name in enumerate(configurations):
        if c not in usable and refused is not None:
            refused[name] = f"{name}: meets the class targets for no request class at any rate"
    if not usable:
        raise ValueError(
            f"no configuration of {', '.join(configurations)} meets the target {target} for any "
            "request class, even at 1/1024 of its rate"
        )
    hopeless = [t == 0 for t in table.class_targets]
    return DeploymentData(
        tuple(configurations[c] for c in usable),
        tuple(configuration_price(configurations[c], prices) for c in usable),
        classes.names,
        tuple(0.0 if h else rate for h, rate in zip(hopeless, classes.rates, strict=True)),
        tuple(
            tuple(1.0 if h else v for h, v in zip(hopeless, table.capacity[c], strict=True))
            for c in usable
        ),
    )


def deployment_instance(
    *,
    trace: str = "azure_conv_2023",
    configurations: str | Sequence[str] = DEFAULT_CONFIGURATIONS,
    target: float = 0.9,
    limit: int | None = 200,
    traffic: float = 1.0,
    stream_requests: int = 400,
    seed: int = 0,
    policy: str = "sarathi",
    definition: str = "deadline",
    name: str | None = None,
    prices: str | Path | None = None,
    **reading: Any,
) -> Instance:
    """A ``deployment`` instance (:mod:`slolab.problems.deployment`): the trace cut with SLOs
    (:func:`trace_instance`), its classes (:func:`request_classes`), and the capacities of
    ``configurations`` (comma-separated or a sequence) measured at ``target``
    (:func:`measure_capacities`, probes of ``stream_requests`` requests) stored in the
    settings as the decision problem's data (:func:`capacity_data`; prices from the CSV file
    ``prices``, :func:`read_prices`, else the presets')."""
    if not 0 < target <= 1:
        raise OptionValueError(
            f"target must be an attainment in (0, 1], got {target}",
            f"--target must be an attainment in (0, 1], got {target}",
        )
    names = (
        [c.strip() for c in configurations.split(",") if c.strip()]
        if isinstance(configurations, str)
        else list(configurations)
    )
    if not names:
        raise ValueError("give at least one configuration")
    price_table = None if prices is None else read_prices(prices, _gpus_of(names))
    base = trace_instance(trace, names, seed=seed, limit=limit, traffic=traffic, **reading)
    classes = request_classes(base)
    table = measure_capacities(
        base,
        classes,
        names,
        target=target,
        definition=definition,
        policy=policy,
        seed=seed,
        stream_requests=stream_requests,
    )
    data = capacity_data(table, classes, target, price_table)
    settings = {
        **base.settings,
        "deployment": data.to_dict(),
        "class_of": [int(k) for k in classes.class_of],
        "class_targets": list(table.class_targets),
        "target": float(target),
        "policy": policy,
        "definition": definition,
        "stream_requests": int(stream_requests),
    }
    label = name or f"deploy-{base.name}-{len(names)}cfg"
    return dataclasses.replace(base, name=label, problem="deployment", settings=settings)
