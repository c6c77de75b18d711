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
(``-1`` if rejected); it must agree with the iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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
    """A replayable decision: per-server ordered iterations, routing and rejections."""

    iterations: tuple[tuple[PlannedIteration, ...], ...]
    rejected: frozenset[int] = field(default_factory=frozenset)

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
