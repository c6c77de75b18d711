"""B2's time grid: cells, batch arcs and their capacities, each request's decode starts, and
what each arc allows each start (its decode releases and token limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from slolab.models.slos_admission.problem import TIME_TOL, AdmissionProblem
from slolab.models.slos_admission.process import BatchProcess, tier_releases_before
from slolab.timing.base import TimingModel
from slolab.timing.inverse import time2bs

__all__ = ["B2Grid", "b2_grid"]


@dataclass(frozen=True)
class B2Grid:
    """Cells, arcs and decode starts of B2, with what each arc allows each start.

    A decode start ``v`` belongs to row ``start_row[v]``: the row decodes the releases of its
    tier from cell ``start_cell[v]`` on, the first being release ``start_first_release[v]``
    (index ``k``, at ``k TPOT``); its ``m``-th decode token (``m >= 1``) is due at
    ``start_deadline_s[v] + m TPOT`` (``inf`` for a decoding running row). A batch of ``t0``
    after the horizon may decode at most ``start_tail_requests[v]`` requests when ``v`` is
    served.
    """

    cell_s: float
    n_cells: int
    capacity: np.ndarray
    arcs: list[tuple[int, int]]
    timing: TimingModel
    tier_tpot_s: np.ndarray
    tier_releases: np.ndarray
    start_row: np.ndarray
    start_cell: np.ndarray
    start_tier: np.ndarray
    start_first_release: np.ndarray
    start_deadline_s: np.ndarray
    start_tail_requests: np.ndarray
    _arc_cache: dict[tuple[int, int], tuple[dict[int, int], dict[int, int]]] = field(
        default_factory=dict
    )

    @property
    def n_starts(self) -> int:
        return len(self.start_row)

    def starts_of(self, row: int) -> np.ndarray:
        """Decode starts of ``row``, earliest first (empty: the row cannot be served)."""
        return np.flatnonzero(self.start_row == row)

    def _arc(self, arc: tuple[int, int]) -> tuple[dict[int, int], dict[int, int]]:
        if arc not in self._arc_cache:
            s, e = arc
            active = self.start_cell < e
            lo = np.maximum(self.start_cell, s)
            tiers = self.start_tier
            first = self.tier_releases[tiers, lo]
            counts = np.where(active, self.tier_releases[tiers, e] - first, 0)
            tpot = self.tier_tpot_s[tiers]
            token_deadline = self.start_deadline_s + (first - self.start_first_release + 1) * tpot
            limits = {}
            for v in np.flatnonzero((counts > 0) & (e * self.cell_s > token_deadline + TIME_TOL)):
                wait_s = float(token_deadline[v]) - s * self.cell_s
                most = time2bs(self.timing, wait_s) if wait_s > 0 else 0
                limits[int(v)] = most if most >= 1 else -1
            for v in np.flatnonzero(active & (tpot < (e - s) * self.cell_s - TIME_TOL)):
                limits[int(v)] = -1
            self._arc_cache[arc] = (
                {int(v): int(counts[v]) for v in np.flatnonzero(counts)},
                limits,
            )
        return self._arc_cache[arc]

    def releases(self, arc: tuple[int, int]) -> dict[int, int]:
        """Decode starts with releases in ``arc`` (from their start cell on): start -> count."""
        return self._arc(arc)[0]

    def token_limits(self, arc: tuple[int, int]) -> dict[int, int]:
        """Starts the arc serves only with fewer tokens than its capacity: start -> the most
        tokens (prefill and decode) the arc may then carry, -1 when it may not serve the start.

        An arc longer than the start's TPOT (while it decodes) may not serve it. When the arc
        ends after the deadline ``D`` of a token it gives the start, its iteration (starting
        at ``s delta``, taking ``T(tokens)``) must end by ``D``: at most
        ``time2bs(D - s delta)`` tokens.
        """
        return self._arc(arc)[1]

    def arc_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(releases, limit)`` as (starts, arcs) arrays, arcs in :attr:`arcs` order; ``limit``
        is the arc's capacity where :meth:`token_limits` sets none."""
        counts = np.zeros((self.n_starts, len(self.arcs)), dtype="int64")
        limit = np.empty((self.n_starts, len(self.arcs)), dtype="int64")
        for i, arc in enumerate(self.arcs):
            for v, k in self.releases(arc).items():
                counts[v, i] = k
            limit[:, i] = self.capacity[arc[1] - arc[0]]
            for v, most in self.token_limits(arc).items():
                limit[v, i] = most
        return counts, limit


def _decode_starts(
    problem: AdmissionProblem, t0: float, delta: float, n_cells: int, releases: np.ndarray
) -> list[tuple[int, int, int, float, int]]:
    """``(row, cell, first release, deadline, tail requests)`` of every decode start of B2.

    A decoding running row starts at cell 0 (no token deadline). A prefilling row with
    deadline ``d`` and TPOT ``T`` may start at any cell ``sigma <= g = floor(d / delta)`` (its
    prefill done by ``sigma``); for one first release the latest such cell dominates, and a
    first release before ``k_d = floor(d / T)`` only adds load, so two cells remain: the cell
    of release ``k_d`` and ``g``. A start at cell 0 leaves no time for the prefill. Tail
    requests: how many requests a batch after the horizon may decode, ``time2bs(min(t0, w))``
    with ``w = d + T - k T`` the time from each release (``k T``, ``k`` the first) to its
    token's deadline; a start whose limit is 0 cannot be served.
    """
    out = []
    tier = problem.tier
    per_batch = time2bs(problem.timing, t0)
    for r in range(problem.n_requests):
        tpot = float(problem.tier_tpot_s[tier[r]])
        if problem.remaining_prefill_tokens[r] == 0:
            out.append((r, 0, 0, math.inf, per_batch))
            continue
        d = float(problem.prefill_deadline_s[r])
        last = int(np.clip(math.floor(d / delta + TIME_TOL), 0, n_cells))
        released = math.floor(d / tpot + TIME_TOL)
        early = int(np.clip(math.floor(released * tpot / delta + TIME_TOL), 0, last))
        by_release: dict[int, int] = {}
        for cell in (early, last):
            if cell > 0:
                first = int(releases[tier[r], cell])
                by_release[first] = max(by_release.get(first, cell), cell)
        for first, cell in sorted(by_release.items()):
            wait_s = d + tpot - first * tpot
            limit = per_batch if wait_s >= t0 - TIME_TOL else time2bs(problem.timing, wait_s)
            if limit >= 1:
                out.append((r, cell, first, d, limit))
    return out


def b2_grid(problem: AdmissionProblem, proc: BatchProcess, cells_per_batch: int) -> B2Grid:
    """B2's grid of ``problem``: cells of ``t0 / cells_per_batch``, arcs no longer than the
    tightest TPOT of a decoding running row (else the loosest tier), and the decode starts."""
    t0 = proc.batch_duration_s
    delta = t0 / cells_per_batch
    n_cells = proc.n_batches * cells_per_batch
    tier_tpot = problem.tier_tpot_s
    decoding = problem.remaining_prefill_tokens == 0
    limit_s = (
        float(problem.tpot_s[problem.running & decoding].min())
        if (problem.running & decoding).any()
        else float(tier_tpot.max())
    )
    longest = max(1, int(math.floor(limit_s / delta + TIME_TOL)))
    capacity = np.array(
        [0] + [time2bs(problem.timing, length * delta) for length in range(1, longest + 1)]
    )
    arcs = [(s, e) for s in range(n_cells) for e in range(s + 1, min(s + longest, n_cells) + 1)]
    units = np.arange(n_cells + 1)
    releases = np.stack(
        [tier_releases_before(float(t), t0, units, cells_per_batch) for t in tier_tpot]
    )
    starts = _decode_starts(problem, t0, delta, n_cells, releases)
    rows = np.array([s[0] for s in starts], dtype="int64")
    return B2Grid(
        delta,
        n_cells,
        capacity,
        arcs,
        problem.timing,
        tier_tpot,
        releases,
        rows,
        np.array([s[1] for s in starts], dtype="int64"),
        problem.tier[rows],
        np.array([s[2] for s in starts], dtype="int64"),
        np.array([s[3] for s in starts], dtype=float),
        np.array([s[4] for s in starts], dtype="int64"),
    )
