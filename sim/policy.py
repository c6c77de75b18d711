"""Policy and Router protocols, and the Batch a policy returns.

A :class:`Policy` is asked, whenever a server is free, for the server's next batch; a
:class:`Router` picks a server for each arriving request among the servers that accept new
work. Both see servers through the read-only view :class:`slolab.sim.engine.Server`: a policy
changes state only by returning a Batch.

These protocols, the Server view and Batch are public API for policies written outside the
package (:data:`slolab.plugins.PUBLIC_API`, versioned by
:data:`slolab.plugins.PLUGIN_API_VERSION`; docs/extending.md states what each call may read,
must return and is promised).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Server
    from slolab.sim.scaling import ScaleAction


@dataclass(slots=True)
class Batch:
    """What a server runs next.

    Parameters
    ----------
    prefill : sequence of (request, tokens)
        Prefill chunks. A waiting request listed here is admitted (moves to running).
    decode : sequence or array of request ids
        Requests that generate one token each. They must have finished their prefill; in
        disaggregated decode servers a waiting (transferred) request listed here is admitted.
    static : sequence of request ids
        Static-batching mode only: waiting requests forming one static batch that runs to
        completion.
    preempt : sequence of request ids
        Running requests whose KV cache is dropped before this batch (recomputed later:
        their prompt plus generated tokens are prefilled again, and that prefill emits their
        next token).
    reject : sequence of request ids
        Waiting requests declined for good.
    forward : sequence of (request, server)
        Waiting requests handed to another server of the same pool (multi-replica sequential
        routing); they join the end of its queue at once.
    pull : sequence of request ids
        Requests held in the central queue of this server's side (:attr:`Server.held`: a
        router returned :data:`HOLD` for them) that this server takes: they join the end of
        its queue before the batch starts, so the batch may admit them (a central
        dispatcher's decision; the request counts as routed, or transferred, now).
    repeat : bool
        A decode-only batch the policy would choose again, unchanged, at every iteration until
        a request finishes, a request is routed to this server, or memory runs out (or until
        ``wake_at_s``). The engine then fast-forwards those iterations in one vectorised step
        (the same floats as asking the policy every iteration).
    wake_at_s : float
        With an empty batch: when to ask the policy again (default: at the next event that
        concerns this server). With a repeated decode batch: the policy is asked again at the
        end of the first iteration ending at or after it (a choice that changes at a known
        time, such as a periodic sample).
    scale : sequence of ScaleAction
        Scaling actions to execute now, before the batch starts (switch servers on, drain or
        move them; see :mod:`slolab.sim.scaling`).
    """

    prefill: Sequence[tuple[int, int]] = ()
    decode: Sequence[int] | np.ndarray = ()
    static: Sequence[int] = ()
    preempt: Sequence[int] = ()
    reject: Sequence[int] = ()
    forward: Sequence[tuple[int, int]] = ()
    pull: Sequence[int] = ()
    repeat: bool = False
    wake_at_s: float = math.inf
    scale: Sequence[ScaleAction] = ()
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.prefill and len(self.decode) == 0 and not self.static


@runtime_checkable
class Policy(Protocol):
    """Chooses a server's next batch.

    A policy may declare the cluster modes it runs in as a ``modes`` attribute (a tuple of
    ``"colocated"``, ``"disaggregated"``, ``"static"``); without it, the continuous modes
    (:data:`CONTINUOUS_MODES`). A run in another mode is refused before it starts
    (:func:`refuse_mode`).
    """

    def start(self, instance: Instance, seed: int) -> None:
        """Called once before the run (reset internal state)."""

    def next_batch(self, server: Server) -> Batch:
        """The batch to run now on ``server`` (an empty batch idles it)."""


#: What a router returns to keep a request in the central queue of its side instead of
#: routing it: every server of that side is woken and its policy may pull the request
#: (:attr:`Batch.pull`).
HOLD = -1


@runtime_checkable
class Router(Protocol):
    """Chooses a server for an arriving request.

    A router may keep a request in a central queue by returning :data:`HOLD`. What happens
    to it then depends on the router:

    - a router with the attribute ``central = True`` leaves it to the servers: every server
      of that side is woken and its policy may pull the request (:attr:`Batch.pull`); while
      no server accepts new requests, arrivals are held rather than an error;
    - any other router gets its held requests offered again, in arrival order, at every
      *retry point*: when a request leaves a server (it finished, or its prefill server
      handed it on), when a server becomes ready, and after every scaling action or scaler
      call (PolyServe's per-tier queues). A router with a method
      ``dispatch(held, servers, now) -> [(request, index), ...]`` gets all its held requests
      in one call (and may place any subset); otherwise ``route`` is called for each of them.

    Either way a server's policy sees the held requests of its side (:attr:`Server.held`).

    A router that can tell a request no server of its side will ever serve (one no server's
    admission could take even alone) has a method ``unservable(request) -> str | None``: the
    engine asks it as the request reaches the router (an arrival; a KV transfer landing, for
    a decode router), before ``route``, and a reason rejects the request there and then,
    kept in ``Outcome.info["unservable"]``. Held instead, such a request would wait for good,
    and a router that keeps a queue behind it would hold back the requests after it.
    """

    def start(self, instance: Instance, seed: int) -> None:
        """Called once before the run."""

    def route(self, request: int, servers: Sequence[Server], now: float) -> int:
        """Index into ``servers`` of the chosen server (``servers``: those accepting new
        requests, starting or ready, by id), or :data:`HOLD` to keep the request in the
        central queue (see above)."""


class PolicyError(RuntimeError):
    """A policy returned a batch that breaks a rule of the engine."""


#: The cluster modes a policy runs in when it declares none: it forms continuous
#: (iteration-level) batches, which a static cluster does not run.
CONTINUOUS_MODES = ("colocated", "disaggregated")


def policy_modes(policy: Any) -> tuple[str, ...]:
    """The cluster modes ``policy`` (a Policy, or its class) runs in: its ``modes`` attribute,
    else :data:`CONTINUOUS_MODES`."""
    return tuple(getattr(policy, "modes", CONTINUOUS_MODES))


def refuse_mode(policy: Any, mode: str, name: str | None = None) -> None:
    """ValueError, in one line naming the policy (``name``, else its ``name`` attribute, else
    its class) and ``mode``, when ``policy`` does not run on a ``mode`` cluster."""
    modes = policy_modes(policy)
    if mode in modes:
        return
    if name is None:
        cls = policy if isinstance(policy, type) else type(policy)
        name = str(getattr(policy, "name", cls.__name__))
    raise ValueError(
        f"policy {name!r} does not run on a {mode} cluster (it runs {' or '.join(modes)})"
    )
