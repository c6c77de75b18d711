"""Schedule: what a method decided, in a form the engine replays.

Per server, an ordered list of iterations, each a tuple of entries ``(request, phase, tokens)``:

- ``phase = "prefill"``: ``tokens`` prompt tokens of the request are processed (a chunk); the
  request's first output token is emitted at the end of the iteration that completes its
  prompt;
- ``phase = "decode"``: one decode token (``tokens`` must be 1);
- ``phase = "static"`` (static-batching mode only): the request is a member of a static batch
  that runs to completion; ``tokens`` is ignored (0).

An iteration may carry an earliest start time (``not_before_s``); the engine starts it at
``max(previous iteration end, not_before_s, arrival of every request in it)``.
Requests listed in ``rejected`` are never served. ``routing[r]`` is the server of request ``r``
(``-1`` if rejected); it must agree with the iterations. A schedule that decides scaling too
carries its :class:`~slolab.sim.scaling.ScalePlan` (``plan``): servers switched on by the plan
follow the initial ones in the order of its actions, and :func:`slolab.sim.replay` runs the
plan with the iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from slolab.sim.outcome import Outcome
    from slolab.sim.scaling import ScalePlan

PHASES = ("prefill", "decode", "static")


@dataclass(frozen=True, slots=True)
class PlannedIteration:
    """One iteration of a schedule: entries ``(request, phase, tokens)``."""

    entries: tuple[tuple[int, str, int], ...]
    not_before_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError("a planned iteration needs at least one entry")
        seen = set()
        for r, phase, tokens in self.entries:
            if phase not in PHASES:
                raise ValueError(
                    f"phase must be one of {', '.join(PHASES)}, got {phase!r} (request {r})"
                )
            if phase == "decode" and tokens != 1:
                raise ValueError(f"a decode entry carries 1 token, got {tokens} (request {r})")
            if phase == "prefill" and tokens < 1:
                raise ValueError(f"a prefill entry carries >= 1 token, got {tokens} (request {r})")
            if r in seen:
                raise ValueError(f"request {r} appears twice in one iteration")
            seen.add(r)
        if not self.not_before_s >= 0:
            raise ValueError(f"not_before_s must be >= 0, got {self.not_before_s}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A replayable decision: per-server ordered iterations, routing and rejections, and the
    scaling plan when the method decided one (None: the cluster as the instance gives it)."""

    iterations: tuple[tuple[PlannedIteration, ...], ...]
    rejected: frozenset[int] = field(default_factory=frozenset)
    plan: ScalePlan | None = None

    @classmethod
    def static_batches(
        cls, batches: Sequence[Sequence[int]], server: int = 0, servers: int = 1
    ) -> Schedule:
        """A static-batching schedule: ``batches`` run in order on ``server``."""
        if not 0 <= server < servers:
            raise ValueError(f"server must be in [0, {servers}), got {server}")
        its = tuple(PlannedIteration(tuple((int(r), "static", 0) for r in b)) for b in batches)
        per_server: list[tuple[PlannedIteration, ...]] = [() for _ in range(servers)]
        per_server[server] = its
        return cls(tuple(per_server))

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> Schedule:
        """The schedule a run followed, read from its iteration log: every server's iterations
        in order, each not before its logged start, and the rejections.

        With :meth:`slolab.sim.ScalePlan.from_outcome` it replays the run exactly
        (:func:`slolab.sim.replay`). Runs with preemptions or forwards cannot be written as a
        Schedule and raise ValueError.
        """
        if not outcome.recorded_iterations:
            raise ValueError("the outcome has no iteration log (run with record_iterations=True)")
        if len(outcome.preempt_request):
            raise ValueError("a run with preemptions cannot be written as a Schedule")
        if outcome.forward_request is not None and len(outcome.forward_request):
            raise ValueError("a run with forwarded requests cannot be written as a Schedule")
        n_servers = len(outcome.busy_s)
        per_server: list[list[PlannedIteration]] = [[] for _ in range(n_servers)]
        eo = outcome.entry_offsets
        names = {0: "prefill", 1: "decode", 2: "static"}
        for i in np.argsort(outcome.it_start, kind="stable").tolist():
            a, b = int(eo[i]), int(eo[i + 1])
            entries = tuple(
                (int(r), names[int(ph)], 0 if ph == 2 else int(c))
                for r, ph, c in zip(
                    outcome.entry_request[a:b].tolist(),
                    outcome.entry_phase[a:b].tolist(),
                    outcome.entry_tokens[a:b].tolist(),
                    strict=True,
                )
            )
            per_server[int(outcome.it_server[i])].append(
                PlannedIteration(entries, float(outcome.it_start[i]))
            )
        return cls(
            tuple(tuple(its) for its in per_server),
            frozenset(np.flatnonzero(outcome.rejected).tolist()),
        )

    @property
    def servers(self) -> int:
        return len(self.iterations)

    def routing(self, n_requests: int) -> list[int]:
        """Server of each request (-1 when never scheduled)."""
        route = [-1] * n_requests
        for s, its in enumerate(self.iterations):
            for it in its:
                for r, _, _ in it.entries:
                    if not 0 <= r < n_requests:
                        raise ValueError(f"request {r} is out of range [0, {n_requests})")
                    if route[r] not in (-1, s):
                        raise ValueError(f"request {r} is scheduled on servers {route[r]} and {s}")
                    route[r] = s
        return route
