"""Outcome: what happened when a workload ran, down to every token's time.

Per request: server, admission/rejection, prefill completion, and the time of every output
token (flat array with offsets: the tokens of request ``r`` are
``token_times[token_offsets[r]:token_offsets[r + 1]]``; ``inf`` marks a token never emitted).
Per server: its pool, when it was switched on, ready, drained and switched off, and its busy
time; every scaling action; the cost in server-seconds. The iteration log (one row per
iteration: server, start, end, the seven shape features, and its entries) is what
:func:`slolab.sim.check` verifies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from slolab.instances.records import Cluster
    from slolab.sim.scaling import ScaleEvent

PHASE_PREFILL, PHASE_DECODE, PHASE_STATIC = 0, 1, 2


@dataclass(frozen=True, eq=False)
class Outcome:
    """Result of :func:`slolab.sim.run` or :func:`slolab.sim.replay`.

    Attributes
    ----------
    server : int array (n,)
        Server that served each request (the decode server when disaggregated); -1 if none.
    prefill_server : int array (n,)
        Server that ran the prefill (equal to ``server`` unless disaggregated); -1 if none.
    rejected : bool array (n,)
        Requests declined by the scheduler (never served), or ended unfinished by the engine.
        Why, where it is known: ``rejected_kv`` (no server could hold them),
        ``info["unservable"]`` (request id -> the reason its router gave that no server could
        ever serve it: rejected as it reached that router), ``info["rejected_held"]`` (how many
        were still held in a central queue at the end) and ``info["stalled_requests"]``.
    first_scheduled_s : float array (n,)
        Start of the first iteration that included the request (inf if never).
    prefill_done_s : float array (n,)
        End of the iteration that completed the prompt (inf if never).
    token_offsets : int array (n + 1,), token_times : float array (sum of output_tokens,)
        Time of every output token (inf if never emitted).
    preemptions : int array (n,)
        Times each request was preempted (its KV dropped, to be recomputed).
    busy_s : float array (servers,)
        Sum of iteration durations per server.
    it_server, it_start, it_end : arrays (iterations,)
        The iteration log; ``it_features`` is ``(iterations, 7)`` in the order of
        :data:`slolab.timing.FEATURES`; ``it_kv_tokens`` is the KV tokens resident on the
        server during the iteration (after its allocations).
    entry_offsets : int array (iterations + 1,)
        Entries of iteration ``i`` are ``entry_request[a:b]`` etc. with
        ``a, b = entry_offsets[i], entry_offsets[i + 1]``; ``entry_phase`` is 0 prefill /
        1 decode, 2 static-batch member, ``entry_tokens`` the tokens processed (static
        members: output tokens). Empty when the run did not record iterations.
    preempt_request, preempt_server, preempt_s : arrays (preemptions,)
        Every preemption: which request, on which server, at what time (its KV is dropped).
    transfer_done_s : float array (n,)
        Disaggregated mode: when the request's KV reached its decode server (inf otherwise).
    end_s : float
        End of the run: the end of the last iteration, or the last scaling action if later.
    wall_s : float
        Wall-clock time of the simulation.
    rejected_kv : bool array (n,), optional
        Requests the engine rejected because their server could never hold them
        (``prompt + output`` KV tokens, ``prompt + 1`` on a prefill server, above its capacity);
        they are also ``rejected``.
    rejected_s : float array (n,), optional
        When each rejected request was rejected (inf otherwise).
    forward_request, forward_from, forward_to, forward_s : arrays (forwards,), optional
        Every forward of a waiting request from one server to another, with its time.
    routed_s : float array (n,), optional
        When each request joined its (prefill) server: its arrival, or the time it was
        forwarded there (inf if never routed).
    pool_names : tuple of str
        Names of the cluster's pools (``server_pool`` indexes them).
    server_pool : int array (servers,), optional
        Pool of each server when it was switched on. A server is one life of a device: a moved
        server continues under a new id (``server_origin`` names the one it came from, else
        -1); an ``assign`` action changes a server's pool without a new life (see
        ``scale_events``).
    server_on_s, server_ready_s, server_drain_s, server_off_s : float arrays (servers,), optional
        When each server was switched on (paying from then), became ready to serve, was drained
        (inf if never) and was switched off (departed; the run's end for a server still on; inf
        for a move whose drain never completed).
    scale_events : tuple of ScaleEvent
        Every scaling action executed (servers on at the start are not actions).
    cost_server_s : float
        Server-seconds from switch-on to switch-off, summed over servers (nan when not
        recorded); ``cost_by_pool`` splits it by pool.
    info : dict
        The run's notes: ``iterations``, ``stopped_early``, ``rejected_held``, ``stalled`` and
        ``stall``, and with prefix caching on (``Cluster.prefix_block_tokens``)
        ``prefix_cache``: every hit and eviction and each server's counts
        (:class:`slolab.sim.prefix_cache.PrefixCacheLog`; read it with
        :func:`slolab.sim.prefix_cache.cache_log`).
    """

    server: np.ndarray
    prefill_server: np.ndarray
    rejected: np.ndarray
    first_scheduled_s: np.ndarray
    prefill_done_s: np.ndarray
    token_offsets: np.ndarray
    token_times: np.ndarray
    preemptions: np.ndarray
    busy_s: np.ndarray
    it_server: np.ndarray
    it_start: np.ndarray
    it_end: np.ndarray
    it_features: np.ndarray
    it_kv_tokens: np.ndarray
    entry_offsets: np.ndarray
    entry_request: np.ndarray
    entry_phase: np.ndarray
    entry_tokens: np.ndarray
    preempt_request: np.ndarray
    preempt_server: np.ndarray
    preempt_s: np.ndarray
    transfer_done_s: np.ndarray
    end_s: float
    wall_s: float
    recorded_iterations: bool = True
    info: dict[str, Any] = field(default_factory=dict)
    rejected_kv: np.ndarray | None = None
    rejected_s: np.ndarray | None = None
    forward_request: np.ndarray | None = None
    forward_from: np.ndarray | None = None
    forward_to: np.ndarray | None = None
    forward_s: np.ndarray | None = None
    routed_s: np.ndarray | None = None
    pool_names: tuple[str, ...] = ()
    server_pool: np.ndarray | None = None
    server_on_s: np.ndarray | None = None
    server_ready_s: np.ndarray | None = None
    server_drain_s: np.ndarray | None = None
    server_off_s: np.ndarray | None = None
    server_origin: np.ndarray | None = None
    scale_events: tuple[ScaleEvent, ...] = ()
    cost_server_s: float = float("nan")
    cost_by_pool: dict[str, float] = field(default_factory=dict)

    @property
    def n_requests(self) -> int:
        return len(self.server)

    @property
    def n_iterations(self) -> int:
        return len(self.it_start)

    def tokens_of(self, r: int) -> np.ndarray:
        """Output-token times of request ``r`` (inf where never emitted)."""
        return self.token_times[self.token_offsets[r] : self.token_offsets[r + 1]]

    @property
    def first_token_s(self) -> np.ndarray:
        """Time of each request's first output token (inf if never)."""
        return self.token_times[self.token_offsets[:-1]]

    @property
    def last_token_s(self) -> np.ndarray:
        """Time of each request's last output token (inf if unfinished)."""
        return self.token_times[self.token_offsets[1:] - 1]

    @property
    def finished(self) -> np.ndarray:
        return np.isfinite(self.last_token_s)

    @property
    def tokens_emitted(self) -> int:
        return int(np.isfinite(self.token_times).sum())


class ServerLives(NamedTuple):
    """Per server: pool index, on / ready / drain / off times (s) and origin; pool names."""

    pool: np.ndarray
    on_s: np.ndarray
    ready_s: np.ndarray
    drain_s: np.ndarray
    off_s: np.ndarray
    origin: np.ndarray
    pool_names: tuple[str, ...]


def server_lives(cluster: Cluster, outcome: Outcome) -> ServerLives:
    """The servers' lives recorded in ``outcome``; for an outcome without them (built by hand),
    the fixed cluster's: its initial servers, in pool order, on and ready from 0 to ``end_s``."""
    if outcome.server_on_s is not None:
        assert outcome.server_pool is not None and outcome.server_ready_s is not None
        assert outcome.server_drain_s is not None and outcome.server_off_s is not None
        assert outcome.server_origin is not None
        return ServerLives(
            outcome.server_pool,
            outcome.server_on_s,
            outcome.server_ready_s,
            outcome.server_drain_s,
            outcome.server_off_s,
            outcome.server_origin,
            outcome.pool_names,
        )
    pools = cluster.resolved_pools()
    pool = np.repeat(np.arange(len(pools)), [p.servers for p in pools])
    n = len(pool)
    return ServerLives(
        pool,
        np.zeros(n),
        np.zeros(n),
        np.full(n, np.inf),
        np.full(n, float(outcome.end_s)),
        np.full(n, -1, dtype=np.int64),
        tuple(p.name for p in pools),
    )


def pool_seconds(lives: ServerLives, events: Sequence[ScaleEvent] = ()) -> dict[str, float]:
    """Server-seconds per pool: each server's on-interval, split at its ``assign`` actions.

    A server counts for the pool it was switched on into until it is assigned to another, then
    for that one (``events``: the outcome's scale events; the others change no pool).
    """
    on, off = lives.on_s, lives.off_s
    names = lives.pool_names
    spans = np.where(np.isfinite(on), off - on, 0.0)
    parts: dict[str, list[float]] = {name: [] for name in names}
    assigned: dict[int, list[tuple[float, str]]] = {}
    for ev in events:
        if ev.action == "assign":
            assigned.setdefault(ev.server, []).append((ev.time_s, ev.pool))
    for k, name in enumerate(names):
        rows = np.flatnonzero(lives.pool == k)
        parts[name].extend(spans[[r for r in rows.tolist() if r not in assigned]].tolist())
    for s, changes in assigned.items():
        pool, start = names[int(lives.pool[s])], float(on[s])
        for t, target in changes:
            parts[pool].append(t - start)
            pool, start = target, t
        parts[pool].append(float(off[s]) - start)
    return {name: math.fsum(values) for name, values in parts.items()}
