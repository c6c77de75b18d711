"""Reference scalers every elastic method is compared with.

- :class:`FixedScaler` — today's cluster: the servers the run starts with, never changed.
- :class:`ThresholdScaler` — a threshold rule on one pool: every ``interval_s`` it measures
  queue length, load or utilization per server; above ``upper`` it switches servers on, below
  ``lower`` it drains one, at most one action per ``cooldown_s``, keeping between
  ``min_servers`` and ``max_servers``.

Scalers are registered by name (:func:`register_scaler`); a paper's module registers its own
(HyperFlexis's in :mod:`slolab.heuristics.hyperflexis`), which makes it an ``--autoscale``
choice.

References
----------
HyperFlexis, Sec. 6 and Algorithm 3 (a scaler run every few seconds on utilization and queue
thresholds, scaling in after a sustained low period). PolyServe, Sec. 4.3 (a server leaves a
tier only when empty).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slolab.sim.scaling import ClusterView, ScaleAction

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server

__all__ = [
    "SCALERS",
    "SCALER_METRICS",
    "STARTUP_SOURCES",
    "FixedScaler",
    "ScalerEntry",
    "ThresholdParams",
    "ThresholdScaler",
    "elastic_setup",
    "make_scaler",
    "register_scaler",
    "scaler_entry",
    "scaler_names",
    "with_startup",
]

#: Where a switched-on server loads its weights from: ``instant`` (no delay, as PolyServe
#: assumes for servers joining a tier from its best-effort pool) or a start-up preset's source.
STARTUP_SOURCES = ("instant", "disk", "host", "d2d")


def with_startup(instance: Instance, startup: str) -> Instance:
    """``instance`` whose servers switched on wait the start-up delay of ``startup``:
    ``"instant"`` (0 s) or ``"disk"``, ``"host"``, ``"d2d"``, the instance's timing preset's
    delay (:func:`slolab.timing.startup.startup_delay_s`)."""
    from slolab.timing.startup import startup_delay_s

    if startup not in STARTUP_SOURCES:
        raise ValueError(f"startup must be one of {', '.join(STARTUP_SOURCES)}, got {startup!r}")
    delay = (
        0.0
        if startup == "instant"
        else startup_delay_s(getattr(instance.timing, "name", ""), startup)
    )
    cluster = dataclasses.replace(instance.cluster, startup_s=delay)
    return dataclasses.replace(instance, cluster=cluster)


#: What the threshold scaler measures, per server of its pool.
SCALER_METRICS = ("queue", "load", "utilization")


class FixedScaler:
    """No scaling: the cluster keeps the servers it starts with (the engine's behaviour
    without a scaler)."""

    name = "fixed"
    interval_s = math.inf

    def start(self, instance: Instance, seed: int) -> None:
        return None

    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        return ()


@dataclass(frozen=True, slots=True)
class ThresholdParams:
    """Settings of :class:`ThresholdScaler`.

    Parameters
    ----------
    metric : {"queue", "load", "utilization"}
        ``queue``: requests waiting (not admitted) per accepting server; ``load``: requests
        queued or running per accepting server; ``utilization``: the fraction of the last
        interval the pool's ready servers spent running iterations (their mean).
    upper, lower : float
        Scale out above ``upper``, in below ``lower`` (``lower < upper``). The defaults (load,
        8 and 2) follow demand; utilization stays near 1 under continuous batching (a server
        holding one request is busy), so a utilization rule drifts to ``max_servers``.
    min_servers, max_servers : int
        Bounds on the pool's servers: at least ``min_servers`` accept new work, at most
        ``max_servers`` are on (draining ones included).
    cooldown_s : float
        Least time between two actions (s).
    interval_s : float
        How often the scaler looks (s).
    step : int
        Servers switched on per scale-out.
    pool : str, optional
        The pool it scales (default: the cluster's first pool).
    """

    metric: str = "load"
    upper: float = 8.0
    lower: float = 2.0
    min_servers: int = 1
    max_servers: int = 16
    cooldown_s: float = 10.0
    interval_s: float = 1.0
    step: int = 1
    pool: str | None = None

    def __post_init__(self) -> None:
        if self.metric not in SCALER_METRICS:
            raise ValueError(
                f"metric must be one of {', '.join(SCALER_METRICS)}, got {self.metric!r}"
            )
        if not (math.isfinite(self.lower) and math.isfinite(self.upper)) or not (
            0 <= self.lower < self.upper
        ):
            raise ValueError(
                f"thresholds must satisfy 0 <= lower < upper, got lower={self.lower}, "
                f"upper={self.upper}"
            )
        for name in ("min_servers", "max_servers", "step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.min_servers > self.max_servers:
            raise ValueError(
                f"min_servers must be <= max_servers, got {self.min_servers} > {self.max_servers}"
            )
        if not (math.isfinite(self.cooldown_s) and self.cooldown_s >= 0):
            raise ValueError(f"cooldown_s must be a finite number >= 0, got {self.cooldown_s}")
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise ValueError(f"interval_s must be a finite number > 0, got {self.interval_s}")


class ThresholdScaler:
    """Threshold autoscaling of one pool with a cool-down (see :class:`ThresholdParams`).

    Each call: first, switch servers on until ``min_servers`` accept work. Then, if the last
    action is at least ``cooldown_s`` old: above ``upper`` switch on ``step`` servers (within
    ``max_servers``); below ``lower`` drain one accepting server (a starting one first, then the
    least loaded, the newest on ties), keeping ``min_servers``.

    References
    ----------
    HyperFlexis, Sec. 6, Algorithm 3.
    """

    name = "threshold"

    def __init__(self, params: ThresholdParams | None = None) -> None:
        self.params = params if params is not None else ThresholdParams()
        self.interval_s = self.params.interval_s
        self._pool = ""
        self._last_action_s = -math.inf
        self._busy: dict[int, tuple[float, float]] = {}

    def start(self, instance: Instance, seed: int) -> None:
        """Reset for a run (the rule makes no random choice; ``seed`` is unused)."""
        pools = instance.cluster.resolved_pools()
        names = [p.name for p in pools]
        pool = self.params.pool or names[0]
        if pool not in names:
            raise ValueError(f"unknown pool {pool!r}; the cluster has {', '.join(names)}")
        self._pool = pool
        self._last_action_s = -math.inf
        self._busy = {}

    def measure(self, cluster: ClusterView) -> float:
        """The metric now over the pool (nan when it cannot be measured yet)."""
        present = cluster.in_pool(self._pool)
        active = [s for s in present if s.accepting]
        metric = self.params.metric
        if metric == "queue":
            return sum(len(s.waiting) for s in present) / max(len(active), 1)
        if metric == "load":
            return sum(s.load for s in present) / max(len(active), 1)
        now = cluster.now
        fractions = []
        samples: dict[int, tuple[float, float]] = {}
        for s in present:
            if not s.ready:
                continue
            busy = s.busy_s
            samples[s.id] = (now, busy)
            before = self._busy.get(s.id)
            if before is not None and now > before[0] and s.accepting:
                fractions.append(min(max((busy - before[1]) / (now - before[0]), 0.0), 1.0))
        self._busy = samples
        return sum(fractions) / len(fractions) if fractions else math.nan

    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        """The actions for now (see the class docstring)."""
        p = self.params
        value = self.measure(cluster)
        present = cluster.in_pool(self._pool)
        active = [s for s in present if s.accepting]
        if len(active) < p.min_servers:
            room = p.max_servers - len(present)
            count = max(min(p.min_servers - len(active), room), 0)
            if count:
                self._last_action_s = cluster.now
            return [ScaleAction.on(self._pool)] * count
        if math.isnan(value) or cluster.now - self._last_action_s < p.cooldown_s:
            return ()
        if value > p.upper and len(present) < p.max_servers:
            self._last_action_s = cluster.now
            return [ScaleAction.on(self._pool)] * min(p.step, p.max_servers - len(present))
        if value < p.lower and len(active) > p.min_servers:
            self._last_action_s = cluster.now
            victim = min(active, key=drain_order)
            return [ScaleAction.drain(victim.id)]
        return ()

    def skip_idle_ticks(self, cluster: ClusterView, ticks: Sequence[float]) -> bool:
        """Account for ticks at ``ticks`` on an idle cluster (no request anywhere) and let the
        engine skip them (:class:`slolab.sim.scaling.Scaler`): True when no call there would
        act. Idle, every metric reads 0 (or cannot be measured), below ``upper``; so no call
        acts once the pool has ``min_servers`` accepting servers and no scale-in is possible
        (at most ``min_servers`` of them, or ``lower`` 0). The utilization samples move to the
        last skipped tick (the busy times they hold do not change while nothing runs)."""
        p = self.params
        active = cluster.active(self._pool)
        if len(active) < p.min_servers or (len(active) > p.min_servers and p.lower > 0):
            return False
        if self._busy and len(ticks):
            last = float(ticks[-1])
            self._busy = {sid: (last, busy) for sid, (_, busy) in self._busy.items()}
        return True


def drain_order(server: Server) -> tuple[bool, int, int]:
    """Sort key of the server to drain first (the minimum): one still starting, then the
    least loaded, then the newest."""
    return (server.ready, server.load, -server.id)


@dataclass(frozen=True, slots=True)
class ScalerEntry:
    """A registered scaler: ``make(min_servers=, max_servers=, **params)`` returns a fresh
    one (``params``: the scaler's own settings, checked by it)."""

    name: str
    make: Callable[..., Any]
    description: str


def _fixed(min_servers: int = 1, max_servers: int = 16, **params: Any) -> FixedScaler:
    if params:
        raise ValueError(f"the fixed scaler takes no settings, got {', '.join(sorted(params))}")
    return FixedScaler()


def _threshold(min_servers: int = 1, max_servers: int = 16, **params: Any) -> ThresholdScaler:
    return ThresholdScaler(
        ThresholdParams(min_servers=min_servers, max_servers=max_servers, **params)
    )


#: The scalers by name (:func:`register_scaler` adds more; a paper's module registers its own).
SCALERS: dict[str, ScalerEntry] = {}


def register_scaler(name: str, make: Callable[..., Any], description: str) -> None:
    """Make the scaler factory ``make`` available as ``name`` (``--autoscale NAME``)."""
    if not name or "," in name:
        raise ValueError(f"scaler name must be non-empty without ',', got {name!r}")
    existing = SCALERS.get(name)
    if existing is not None and existing.make is not make:
        raise ValueError(f"scaler {name!r} is already registered")
    SCALERS[name] = ScalerEntry(name, make, description)


register_scaler("fixed", _fixed, "never scales: the servers the run starts with")
register_scaler(
    "threshold",
    _threshold,
    "a threshold on load, queue or utilization per server, checked every second, 10 s cool-down",
)


def _load() -> None:
    import slolab.heuristics  # noqa: F401  (its modules register their scalers)
    from slolab.plugin_loading import load_plugins

    load_plugins("scalers", _register_plugin_scaler)


def _as_entry(name: str, obj: Any) -> ScalerEntry:
    """``obj`` (a ScalerEntry, or a Scaler class or factory) as the entry ``name``: a factory
    is passed ``min_servers`` and ``max_servers`` only when it accepts them."""
    from slolab.plugin_loading import accepted_keywords, description_of

    if isinstance(obj, ScalerEntry):
        return dataclasses.replace(obj, name=name)
    if not callable(obj):
        raise ValueError(
            f"scaler {name!r} must be a Scaler class or factory, or a ScalerEntry, got "
            f"{type(obj).__name__}"
        )
    accepted = accepted_keywords(obj)

    def make(min_servers: int = 1, max_servers: int = 16, **params: Any) -> Any:
        bounds = {"min_servers": min_servers, "max_servers": max_servers}
        if accepted is not None:
            bounds = {k: v for k, v in bounds.items() if k in accepted}
        return obj(**bounds, **params)

    return ScalerEntry(name, make, description_of(obj, "a plugin scaler"))


def _register_plugin_scaler(name: str, obj: Any) -> None:
    entry = _as_entry(name, obj)
    register_scaler(name, entry.make, entry.description)


_REFERENCED: dict[str, ScalerEntry] = {}


def scaler_names() -> list[str]:
    """Names of the registered scalers (the heuristics' and the plugins')."""
    _load()
    return sorted(SCALERS)


def scaler_entry(name: str) -> ScalerEntry:
    """The scaler ``name``: registered, or ``package.module:Name`` of a Scaler class;
    ValueError listing the known ones."""
    from slolab.plugin_loading import lookup

    _load()
    return lookup(name, SCALERS, _REFERENCED, _as_entry, "scaler")


def make_scaler(name: str, *, min_servers: int = 1, max_servers: int = 16, **params: Any) -> Any:
    """A fresh scaler ``name``; ValueError listing the known ones."""
    return scaler_entry(name).make(min_servers=min_servers, max_servers=max_servers, **params)


def elastic_setup(
    instance: Instance,
    autoscale: str | None,
    *,
    min_servers: int = 1,
    max_servers: int = 16,
    startup: str = "disk",
    **params: object,
) -> tuple[Instance, Any]:
    """The instance and scaler for an elastic run from command-line style options.

    Parameters
    ----------
    instance : Instance
        The run's instance; its cluster's start-up delay is set from ``startup``.
    autoscale : str or None
        A registered scaler name (:func:`scaler_names`) or ``package.module:Name`` of a
        Scaler class, or None for no scaler (the instance is returned unchanged).
    min_servers, max_servers : int
        Bounds of the scaler.
    startup : {"disk", "host", "d2d", "instant"}
        Where a switched-on server loads its weights from; the delay is the start-up preset of
        the instance's timing model (:func:`slolab.timing.startup.startup_delay_s`), 0 for
        ``"instant"``.
    **params
        The scaler's own settings (for ``threshold``: further :class:`ThresholdParams`
        fields).
    """
    if autoscale is None:
        return instance, None
    scaler_entry(autoscale)
    instance = with_startup(instance, startup)
    return instance, make_scaler(
        autoscale, min_servers=min_servers, max_servers=max_servers, **params
    )
