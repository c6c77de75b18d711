"""Online policies and routers by name: the one place ``simulate``, ``compare`` and the studies
build a scheduler from its name.

A policy that runs on a token budget per iteration (Sarathi-style) gets it from one rule,
:func:`sarathi_token_budget`, unless the caller gives a number.

Most policies only form batches and take any router. A policy that decides across servers
(PolyServe: its own router, decode router and scaler, and a cluster of its own pools)
registers a ``setup`` that builds all of it as a :class:`Scheduler`; :func:`make_scheduler`
builds either kind. A policy may also register a ``capacity_bound``: the largest arrival rate
an exact bound allows on the instance, which ``slolab capacity`` prints beside the measured
capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.outcome import Outcome
    from slolab.sim.policy import Policy, Router


@dataclass(frozen=True, slots=True)
class Scheduler:
    """Everything an online run needs from a policy family: the policy, the routers and the
    scaler (None: the engine's defaults, no scaling), and the instance it runs on when the
    family lays out its own cluster (its own pools; None: the instance it was given)."""

    policy: Policy
    router: Router | None = None
    decode_router: Router | None = None
    scaler: Any = None
    instance: Instance | None = None

    @classmethod
    def of(cls, made: Any) -> Scheduler:
        """``made`` (a Scheduler or a ``(policy, router)`` pair) as a Scheduler."""
        if isinstance(made, Scheduler):
            return made
        if isinstance(made, tuple) and len(made) == 2:
            return cls(made[0], made[1])
        raise TypeError(
            f"an online heuristic returns (policy, router) or a Scheduler, got {made!r}"
        )

    def on(self, instance: Instance) -> Instance:
        """The instance the run uses: the family's own, else ``instance``."""
        return self.instance if self.instance is not None else instance

    def run(self, instance: Instance, *, seed: int, **options: Any) -> Outcome:
        """Simulate :meth:`on` ``instance`` with this policy, its routers and its scaler
        (``options``: further keywords of :func:`slolab.sim.run`)."""
        from slolab.sim import run

        return run(
            self.on(instance),
            self.policy,
            self.router,
            seed=seed,
            decode_router=self.decode_router,
            scaler=self.scaler,
            **options,
        )


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """A registered policy: ``make(**params)`` returns a fresh one.

    ``token_budget``: the policy takes a ``token_budget`` argument (tokens per iteration),
    set by :func:`sarathi_token_budget` unless given. ``router`` / ``decode_router``: the
    registered routers the policy runs with when the caller names none (a central dispatcher
    needs the ``hold`` router). ``setup(instance, *, mode, servers, token_budget,
    prefill_servers) -> Scheduler``: the policy brings its own routers, scaler and cluster
    layout (``make`` is then not called). ``capacity_bound(instance, mode=..., servers=...) ->
    req/s``: an upper bound of the capacity, from an exact model.
    """

    name: str
    make: Callable[..., Any]
    description: str
    token_budget: bool = False
    router: str | None = None
    decode_router: str | None = None
    setup: Callable[..., Scheduler] | None = None
    capacity_bound: Callable[..., float] | None = None


_POLICIES: dict[str, PolicyEntry] = {}
_ROUTERS: dict[str, tuple[Callable[[], Any], str]] = {}


def register_policy(
    name: str,
    make: Callable[..., Any],
    description: str,
    *,
    token_budget: bool = False,
    router: str | None = None,
    decode_router: str | None = None,
    setup: Callable[..., Scheduler] | None = None,
    capacity_bound: Callable[..., float] | None = None,
) -> None:
    """Make ``make`` (a Policy class or factory) available as ``name`` (see
    :class:`PolicyEntry` for ``router``, ``decode_router``, ``setup`` and
    ``capacity_bound``)."""
    if not name or "," in name:
        raise ValueError(f"policy name must be non-empty without ',', got {name!r}")
    existing = _POLICIES.get(name)
    if existing is not None and existing.make is not make:
        raise ValueError(f"policy {name!r} is already registered")
    _POLICIES[name] = PolicyEntry(
        name, make, description, token_budget, router, decode_router, setup, capacity_bound
    )


def register_router(name: str, make: Callable[[], Any], description: str) -> None:
    """Make the router class or factory ``make`` available as ``name``."""
    existing = _ROUTERS.get(name)
    if existing is not None and existing[0] is not make:
        raise ValueError(f"router {name!r} is already registered")
    _ROUTERS[name] = (make, description)


_REFERENCED: dict[str, PolicyEntry] = {}
_REFERENCED_ROUTERS: dict[str, tuple[Callable[[], Any], str]] = {}


def _load() -> None:
    import slolab.heuristics  # noqa: F401  (its modules register their policies)
    from slolab.plugin_loading import load_plugins

    load_plugins("policies", _register_plugin_policy)
    load_plugins("routers", _register_plugin_router)


def _as_entry(name: str, obj: Any) -> PolicyEntry:
    """``obj`` (a PolicyEntry, or a Policy class or factory) as the entry ``name``."""
    from slolab.plugin_loading import accepted_keywords, description_of

    if isinstance(obj, PolicyEntry):
        return dataclasses.replace(obj, name=name)
    if not callable(obj):
        raise ValueError(
            f"policy {name!r} must be a Policy class or factory, or a PolicyEntry, got "
            f"{type(obj).__name__}"
        )
    accepted = accepted_keywords(obj)
    return PolicyEntry(
        name,
        obj,
        description_of(obj, "a plugin policy"),
        token_budget=accepted is not None and "token_budget" in accepted,
    )


def _register_plugin_policy(name: str, obj: Any) -> None:
    entry = _as_entry(name, obj)
    register_policy(
        name,
        entry.make,
        entry.description,
        token_budget=entry.token_budget,
        router=entry.router,
        decode_router=entry.decode_router,
        setup=entry.setup,
        capacity_bound=entry.capacity_bound,
    )


def _register_plugin_router(name: str, obj: Any) -> None:
    register_router(name, *_as_router(name, obj))


def is_policy(name: str) -> bool:
    """True when ``name`` is a registered policy or an importable ``module:Name`` one."""
    try:
        policy_entry(name)
    except ValueError:
        return False
    return True


def policy_names() -> list[str]:
    """Names of the registered policies."""
    _load()
    return sorted(_POLICIES)


def router_names() -> list[str]:
    """Names of the registered routers."""
    _load()
    return sorted(_ROUTERS)


def policy_entry(name: str) -> PolicyEntry:
    """The policy ``name``: registered (a plugin's included), or ``package.module:Name`` of a
    Policy class, imported; ValueError listing the known ones."""
    from slolab.plugin_loading import lookup

    _load()
    return lookup(name, _POLICIES, _REFERENCED, _as_entry, "policy")


def sarathi_token_budget(instance: Instance) -> int:
    """Tokens per iteration of a budgeted policy: the largest batch within the tightest TPOT.

    ``min(time2bs(timing, tightest TPOT SLO), max_batch_tokens)``, as Sarathi-Serve configures
    its budget; ``max_batch_tokens`` when no request has a TPOT SLO or the timing model fits no
    token in it (and 2048 when the cluster sets no cap either).

    References
    ----------
    SLOs-Serve, Sec. 6 ("Baseline": Sarathi's batch size is the largest that does not violate
    the tightest decode SLO). Agrawal et al., Sarathi-Serve, OSDI 2024, Sec. 4.3.
    """
    from slolab.timing import time2bs

    cap = int(instance.cluster.max_batch_tokens) or 2048
    tpot = np.asarray(instance.workload["tpot_slo_s"], dtype=float)
    tpot = tpot[np.isfinite(tpot)]
    if not len(tpot):
        return cap
    budget = time2bs(instance.timing, float(tpot.min()))
    return min(budget, cap) if budget > 0 else cap


def make_policy(name: str, instance: Instance, *, token_budget: int | None = None) -> Policy:
    """A fresh policy ``name`` for ``instance``.

    ``token_budget`` overrides :func:`sarathi_token_budget` for budgeted policies (and is an
    error for the others).
    """
    entry = policy_entry(name)
    if entry.setup is not None:
        raise ValueError(
            f"policy {name!r} brings its own routers and cluster layout: build it with "
            "make_scheduler"
        )
    if not entry.token_budget:
        if token_budget is not None:
            raise ValueError(f"policy {name!r} takes no token budget")
        return _checked(name, entry.make())
    if token_budget is None:
        token_budget = sarathi_token_budget(instance)
    if not (isinstance(token_budget, int) and token_budget >= 1) or isinstance(token_budget, bool):
        raise ValueError(f"token budget must be an integer >= 1, got {token_budget!r}")
    return _checked(name, entry.make(token_budget=token_budget))


def _checked(name: str, policy: Any) -> Policy:
    """``policy``, when it has the Policy protocol's methods; ValueError otherwise."""
    from slolab.sim.policy import Policy

    if not isinstance(policy, Policy):
        raise ValueError(
            f"policy {name!r} made a {type(policy).__name__}, which lacks the Policy methods "
            "start(instance, seed) and next_batch(server)"
        )
    return policy


def make_scheduler(
    name: str,
    instance: Instance,
    *,
    token_budget: int | None = None,
    router: str | None = None,
    decode_router: str | None = None,
    mode: str | None = None,
    servers: int | None = None,
    prefill_servers: int = 0,
) -> Scheduler:
    """Policy ``name`` ready to run on ``instance``, with its routers and scaler.

    A policy that does not run in ``mode`` (default: the instance's cluster's; see
    :func:`slolab.sim.policy.refuse_mode`) is refused first. A policy with a ``setup`` builds
    everything (a router given by name is then an error, since
    the policy routes itself; ``mode`` and ``servers`` default to the instance's cluster). Any
    other runs on ``instance`` as it is, with ``router`` (default: the policy's own, else
    ``least-loaded``) and ``decode_router`` (default: the policy's own in disaggregated mode,
    else the engine's).
    """
    from slolab.sim.policy import refuse_mode

    entry = policy_entry(name)
    if mode is None:
        mode = instance.cluster.mode
    if entry.setup is not None:
        refuse_mode(entry.make, mode, name)
        for flag, given in (("--router", router), ("--decode-router", decode_router)):
            if given is not None:
                raise ValueError(f"policy {name!r} routes requests itself: drop {flag}")
        if token_budget is not None and not entry.token_budget:
            raise ValueError(f"policy {name!r} takes no token budget")
        return entry.setup(
            instance,
            mode=mode,
            servers=servers,
            token_budget=token_budget,
            prefill_servers=prefill_servers,
        )
    policy = make_policy(name, instance, token_budget=token_budget)
    refuse_mode(policy, mode, name)
    own = entry.decode_router if mode == "disaggregated" else None
    chosen = decode_router or own
    return Scheduler(
        policy,
        make_router(router or entry.router or "least-loaded"),
        make_router(chosen) if chosen is not None else None,
        instance=instance,
    )


def make_router(name: str) -> Router:
    """A fresh router ``name``; ValueError listing the known ones, or naming the methods a
    router ``name`` made lacks (a policy class given as a router, say)."""
    router = router_factory(name)()
    if not callable(getattr(router, "route", None)):
        raise ValueError(
            f"router {name!r} made a {type(router).__name__}, which lacks the Router method "
            "route(request, servers, now)"
        )
    return router


def router_factory(name: str) -> Callable[[], Any]:
    """The class or factory of router ``name`` (registered, or ``package.module:Name``);
    ValueError listing the known ones."""
    from slolab.plugin_loading import lookup

    _load()
    return lookup(name, _ROUTERS, _REFERENCED_ROUTERS, _as_router, "router")[0]


def _as_router(name: str, obj: Any) -> tuple[Callable[[], Any], str]:
    from slolab.plugin_loading import description_of

    if not callable(obj):
        raise ValueError(f"router {name!r} is not a Router class or factory")
    return obj, description_of(obj, "a plugin router")


def is_router(name: str) -> bool:
    """True when ``name`` is a registered router or an importable ``module:Name`` one."""
    try:
        router_factory(name)
    except ValueError:
        return False
    return True


def describe() -> dict[str, dict[str, str]]:
    """``{"policies": {name: description}, "routers": {...}}`` for help texts and docs."""
    _load()
    return {
        "policies": {k: v.description for k, v in sorted(_POLICIES.items())},
        "routers": {k: v[1] for k, v in sorted(_ROUTERS.items())},
    }


def parse_token_budget(text: str) -> int | None:
    """``"auto"`` -> None (the rule), else a positive integer; ValueError naming the flag."""
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--token-budget must be an integer or auto, got {text!r}") from None
    if value < 1:
        raise ValueError(f"--token-budget must be >= 1, got {value}")
    return value
