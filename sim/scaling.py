"""Scaling actions, plans, events and the Scaler protocol.

A server's life::

    off --switch on--> starting --startup delay--> ready --drain--> draining --last request--> departed
        (pays from here)                           (serves)     (no new work)               (cost stops)

- ``on``: switch a server on into a pool. It pays from that moment and serves after its pool's
  start-up delay (:attr:`slolab.instances.Pool.startup_s`). A starting server already accepts
  requests (they queue until it is ready).
- ``drain``: the server takes no new work and departs when its last request finishes (at once
  when it has none).
- ``move``: drain, then join another pool: when the drain completes the server's next life
  starts in the target pool, ready after the cluster's ``move_s`` (both delays count).
- ``assign``: the server joins another pool at once, keeping the requests it holds (PolyServe's
  pending server joining the tier of the requests it runs). The two pools must be the same
  hardware and configuration (role, timing, limits, start-up delay); the server keeps its id
  and its cost is split between the pools at the action's time.

Actions come from a :class:`Scaler` (called every ``interval_s``), from a policy at a
decision point (:attr:`slolab.sim.Batch.scale`), or from a :class:`ScalePlan` given in advance.
Server ids are assigned in order: the cluster's initial servers first (in pool order), then one
id per ``on`` or ``move`` in the order the actions are executed (a move's new id is taken when
the move is issued, its life begins when the drain completes). A plan that names servers this
way replays exactly.

References
----------
HyperFlexis, Sec. 6 (threshold scaler, P/D role transitions, fast scaling); PolyServe, Sec. 4.3
(tiers grow from and return to a best-effort pool; a server leaves only once empty).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from slolab.instances.records import Instance, Pool
    from slolab.sim.engine import Server
    from slolab.sim.outcome import Outcome

#: The scaling actions.
ACTIONS = ("on", "drain", "move", "assign")


@dataclass(frozen=True, slots=True)
class ScaleAction:
    """One scaling action.

    Parameters
    ----------
    kind : str
        ``"on"`` (needs ``pool``), ``"drain"`` (needs ``server``), ``"move"`` or ``"assign"``
        (need both: the server and its target pool).
    pool : str, optional
        Name of the pool a server is switched on into or moved to.
    server : int, optional
        Id of the server drained or moved.
    """

    kind: str
    pool: str | None = None
    server: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTIONS:
            raise ValueError(f"kind must be one of {', '.join(ACTIONS)}, got {self.kind!r}")
        if self.kind in ("on", "move", "assign") and not self.pool:
            raise ValueError(f"a {self.kind!r} action needs a pool")
        if self.kind == "on" and self.server is not None:
            raise ValueError("an 'on' action names no server (ids are given in order)")
        if self.kind in ("drain", "move", "assign"):
            if self.server is None or isinstance(self.server, bool) or self.server < 0:
                raise ValueError(
                    f"a {self.kind!r} action needs a server id >= 0, got {self.server!r}"
                )
        if self.kind == "drain" and self.pool is not None:
            raise ValueError("a 'drain' action names no pool")

    @classmethod
    def on(cls, pool: str) -> ScaleAction:
        """Switch a server on into ``pool``."""
        return cls("on", pool=pool)

    @classmethod
    def drain(cls, server: int) -> ScaleAction:
        """Drain ``server``."""
        return cls("drain", server=server)

    @classmethod
    def move(cls, server: int, pool: str) -> ScaleAction:
        """Drain ``server``, then start it in ``pool``."""
        return cls("move", pool=pool, server=server)

    @classmethod
    def assign(cls, server: int, pool: str) -> ScaleAction:
        """Make ``server`` a member of ``pool`` now, with the requests it holds."""
        return cls("assign", pool=pool, server=server)


@dataclass(frozen=True, slots=True)
class ScalePlan:
    """Scaling actions decided in advance: ``(time_s, action)`` pairs in time order.

    Actions at equal times run in the order given, before arrivals at that time.
    """

    actions: tuple[tuple[float, ScaleAction], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.actions, tuple):
            object.__setattr__(self, "actions", tuple(self.actions))
        last = 0.0
        for i, item in enumerate(self.actions):
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ValueError(f"actions[{i}] must be a (time_s, ScaleAction) pair, got {item!r}")
            t, action = item
            if not isinstance(action, ScaleAction):
                raise TypeError(
                    f"actions[{i}] must hold a ScaleAction, got {type(action).__name__}"
                )
            if not (isinstance(t, int | float) and math.isfinite(t) and t >= 0):
                raise ValueError(f"actions[{i}]: time must be a finite number >= 0, got {t!r}")
            if t < last:
                raise ValueError(f"actions[{i}]: times must not decrease, got {t} after {last}")
            last = float(t)

    @classmethod
    def of(cls, actions: Iterable[tuple[float, ScaleAction]]) -> ScalePlan:
        """A plan of ``actions``, sorted by time (stable)."""
        return cls(tuple(sorted(actions, key=lambda a: a[0])))

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> ScalePlan:
        """The actions a run executed (``outcome.scale_events``), as a plan that repeats them."""
        return cls(
            tuple(
                (
                    ev.time_s,
                    ScaleAction(
                        ev.action,
                        ev.pool if ev.action != "drain" else None,
                        None if ev.action == "on" else ev.server,
                    ),
                )
                for ev in outcome.scale_events
            )
        )


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """A scaling action as executed (recorded in :attr:`slolab.sim.Outcome.scale_events`).

    Attributes
    ----------
    time_s : float
        When it was executed.
    action : str
        ``"on"``, ``"drain"``, ``"move"`` or ``"assign"``.
    server : int
        The server switched on (``on``), drained, moved or assigned.
    pool : str
        The pool switched on into, moved or assigned to; for ``drain`` the server's pool.
    new_server : int
        The id of the server's next life (``move``; -1 otherwise; for ``on`` and ``assign``
        equal to ``server``).
    """

    time_s: float
    action: str
    server: int
    pool: str
    new_server: int = -1


class ClusterView:
    """What a scaler sees: the time, the pools and every server that has not departed.

    Attributes
    ----------
    now : float
        Current time (s).
    pools : tuple of Pool
        The cluster's pools with their limits filled in.
    servers : tuple of Server
        Servers switched on and not departed (starting, ready or draining), by id.
    """

    __slots__ = ("now", "pools", "servers")

    def __init__(self, now: float, pools: tuple[Pool, ...], servers: tuple[Server, ...]) -> None:
        self.now = now
        self.pools = pools
        self.servers = servers

    def in_pool(self, pool: str) -> list[Server]:
        """Servers of ``pool`` (starting, ready or draining)."""
        return [s for s in self.servers if s.pool == pool]

    def active(self, pool: str) -> list[Server]:
        """Servers of ``pool`` that accept new work (starting or ready)."""
        return [s for s in self.servers if s.pool == pool and s.accepting]


@runtime_checkable
class Scaler(Protocol):
    """Decides how many servers run in which pool, every ``interval_s`` seconds.

    The engine calls :meth:`decide` at time 0 and then every ``interval_s`` while the run has
    work left; the actions it returns are executed at once, in order.

    Passing idle ticks (optional). A scaler may define ``skip_idle_ticks(cluster, ticks) ->
    bool``. After a tick that returned no action while the cluster holds no request (nothing
    queued, running, held or in transfer, no server starting), the engine offers it the next
    tick times before the next arrival, server event or plan action (``ticks``, an increasing
    float array, in blocks; ``cluster`` is the view the last tick saw). It returns True only
    if :meth:`decide` at each of those times, on that unchanged cluster, would return no
    action; it then updates its state as those calls would have, and the engine skips them.
    False: the engine ticks as usual. The run is the same either way, and a probe at a low
    rate no longer pays a tick every ``interval_s`` through its idle spans. A scaler whose
    state counts ticks it cannot account for this way (HyperFlexis's sustained scale-in)
    does not define it.

    Passing quiet ticks (optional). A scaler may define ``quiet_until(cluster) -> float``:
    after a tick that returned no action with no request held, a time before which every tick
    would return no action and change nothing its decisions depend on, whatever the servers
    do, as long as no request is routed or held first (-inf: no such time). The engine then
    skips the ticks before that time, the next arrival, plan action or KV transfer. Only a
    scaler whose requests are held at arrivals alone may give one (PolyServe co-located).

    Passing held ticks (optional). A scaler that routes held requests may define
    ``held_quiet_until(cluster) -> float`` and ``pass_held_ticks(ticks)``. After a tick with
    requests held that returned no action and placed none, the cluster not idle, the engine
    asks ``held_quiet_until`` for a time before which every tick would repeat that one
    exactly (the same answers, nothing placed, no action), provided no server event, arrival,
    plan action or KV transfer comes first (the engine bounds the span by those); inside a
    fast-forwarded decode window a server's ``free_at_s`` and ``kv_used_tokens`` move at each
    iteration end without an event, so the time must also come before the next such change of
    any server whose answer it relies on (-inf: no such time). The engine then passes the
    tick times before it (a list, each the previous plus ``interval_s``) to
    ``pass_held_ticks``, which updates the scaler's state as those ticks would have, and skips
    them. PolyServe's co-located controller defines them (its registered scheduler turns them
    on).
    """

    interval_s: float

    def start(self, instance: Instance, seed: int) -> None:
        """Called once before the run (reset internal state)."""

    def decide(self, cluster: ClusterView) -> Sequence[ScaleAction]:
        """The actions to take now (empty: none)."""
