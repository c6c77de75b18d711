"""Claim-capacity cuts under a branch-and-price node's decisions (docs/sa_ordering.md Sec. 6,
"Cuts at tree nodes").

A node's decisions (forbidden arcs, excluded and fixed requests, position decisions, missed
requests, unclaimed pairs) shrink the arcs at which a request can be claimed met. Where a
request can be claimed at no arc of size ``s`` whose start floor ``LB'_q`` is at most its
latest start ``L_r(s)``, it can be claimed at size ``s`` in no plan of the node's subtree; where
it can, its batch starts by ``min(L_r(s), max UB'_q)`` over those arcs. With these *claimable
latest starts* in place of ``L_r(s)``, the claim capacity :func:`claim_capacity` bounds the
claims of a set in every plan of the subtree (with ``F <= 0`` at the step's ``lambda``, which
the ceilings ``UB'_q`` already assume), so ``sum_c |T_c ∩ R| lambda_c <= K_node(R)`` is valid
in the subtree and nowhere else.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from slolab.models.sa_columns import CUT_VIOLATION, ColumnMaster, claim_capacity

__all__ = ["NodeCutFamily", "claimable_latest"]


def claimable_latest(master: ColumnMaster, decisions: Any) -> np.ndarray:
    """``L'[r, s - 1]``: the latest start of request ``r`` at size ``s`` as far as the node's
    ``decisions`` (a :class:`slolab.models.sa_bp.Decisions`) let it be claimed met (s), ``-inf``
    where they let it be claimed at no arc of size ``s``.

    ``r`` may be claimed at arc ``(p, s)`` (start node ``q = p - s``) only when the arc is not
    forbidden, ``r`` is not excluded from it, not banned from it by a position decision, not
    fixed to another arc, not missed and not unclaimed there, and ``L_r(s) >= LB'_q`` (the
    master's column test). A claimed batch at ``q`` starts by ``min(L_r(s), UB'_q)``, so
    ``L'[r, s - 1] = min(L_r(s), max UB'_q)`` over those arcs (``UB'_0 = 0``: the first batch
    starts at 0)."""
    n, b = master.n, master.b
    lb = np.asarray(master.lb, dtype=float)
    ub = np.asarray(master.ub, dtype=float)
    out = np.full((n, b), -np.inf)
    banned = {p: decisions.banned_at(p) for p in range(1, n + 1)}
    for s in range(1, b + 1):
        for r in range(n):
            if r in decisions.missed:
                continue
            late = float(master.latest[r, s])
            if late == -np.inf:
                continue
            fixed = decisions.fixed_arc(r)
            cap = -np.inf
            for p in range(s, n + 1):
                arc = (p, s)
                q = p - s
                if (
                    late < lb[q]
                    or arc in decisions.forbidden
                    or r in banned[p]
                    or (fixed is not None and fixed != arc)
                    or (r, arc) in decisions.excluded
                    or (r, arc) in decisions.unclaimed
                ):
                    continue
                cap = max(cap, 0.0 if q == 0 else float(ub[q]))
            if cap > -np.inf:
                out[r, s - 1] = min(late, cap)
    return out


class NodeCutFamily:
    """The claim-capacity cuts of one Dinkelbach step's tree: per node, the horizon sets of
    its claimable latest starts (:func:`claimable_latest`; one set per distinct horizon, as
    :func:`~slolab.models.sa_columns.claim_capacity_cuts` builds them at the root) and their
    capacities, cached by the set and its members' claimable latest starts."""

    def __init__(self, master: ColumnMaster) -> None:
        self.master = master
        self.execs = np.asarray(master.exec, dtype=float)[:, 1 : master.b + 1]
        self._cache: dict[tuple[tuple[int, ...], bytes], int] = {}

    def capacity(self, requests: tuple[int, ...], latest: np.ndarray) -> int:
        """``K_node(R)`` of ``requests`` under the claimable latest starts ``latest``."""
        rows = latest[list(requests)]
        key = (requests, rows.tobytes())
        if key not in self._cache:
            self._cache[key] = claim_capacity(self.execs[list(requests)], rows, self.master.b)
        return self._cache[key]

    def violated(self, decisions: Any, claimed: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
        """The node's cuts ``(R, K_node(R))`` that the claims ``claimed`` (per request, the LP's
        ``y_r``) violate by more than :data:`CUT_VIOLATION`."""
        latest = claimable_latest(self.master, decisions)
        horizon = latest.max(axis=1)
        can = horizon > -np.inf
        out = []
        for h in sorted({float(v) for v in horizon[can]}):
            members = tuple(int(r) for r in np.flatnonzero(can & (horizon <= h)))
            total = float(claimed[list(members)].sum())
            if total <= CUT_VIOLATION:
                continue
            limit = self.capacity(members, latest)
            if total > limit + CUT_VIOLATION:
                out.append((members, limit))
        return out
