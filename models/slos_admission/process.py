"""B1's batch process: fixed batches of ``t0`` and Algorithm 2's decode cadence per TPOT tier.

:func:`tier_releases_before` counts a tier's decode-token releases before a time,
:func:`batch_process` builds the :class:`BatchProcess` of a problem (``t0``, the tokens of a
batch, the number of batches, each request's deadline batch and each tier's decode slots).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from slolab.models.slos_admission.problem import TIME_TOL, AdmissionProblem
from slolab.timing.inverse import time2bs

__all__ = ["BatchProcess", "batch_process", "tier_releases_before"]


def tier_releases_before(
    tpot_s: float, batch_duration_s: float, units: np.ndarray, per_batch: int = 1
) -> np.ndarray:
    """Decode-token releases ``k * tpot_s`` (``k >= 0``) strictly before ``units * t0 / per_batch``.

    Algorithm 2 releases a tier's ``k``-th decode token at ``k * TPOT`` (``schDDL`` starts at
    0 and grows by TPOT); a token released during a batch is served by that batch. The count
    of releases before time ``x`` is ``ceil(x / TPOT)`` for ``x > 0`` (0 at ``x = 0``).
    """
    x = np.asarray(units, dtype=float) * (batch_duration_s / per_batch) / tpot_s
    return np.maximum(np.ceil(x - TIME_TOL), 0).astype("int64")


@dataclass(frozen=True, slots=True)
class BatchProcess:
    """B1's batch process for one problem: batches ``[i t0, (i + 1) t0)``, ``i < n_batches``.

    Attributes
    ----------
    batch_duration_s : float
        ``t0``.
    batch_tokens : int
        ``C = time2bs(t0)``, tokens per batch.
    n_batches : int
        ``K = ceil(horizon / t0)``.
    deadline_batch : int array (n,)
        ``b_r = floor(d_r / t0)`` (clipped to ``[0, K]``): batches complete by the prefill
        deadline; the prefill runs in batches ``< b_r`` and decoding starts at batch ``b_r``.
        0 for decoding requests.
    tier_slots : int array (L, K + 1)
        ``G_l(J)``: decode tokens a tier-``l`` request decoding since time 0 receives in
        batches ``< J`` (Algorithm 2 cadence).
    slot : bool array (L, K)
        ``g_l(i) = G_l(i + 1) - G_l(i)``: whether tier ``l`` has a decode token in batch ``i``.
    """

    batch_duration_s: float
    batch_tokens: int
    n_batches: int
    deadline_batch: np.ndarray
    tier_slots: np.ndarray
    slot: np.ndarray

    def decode_demand(self, tier: int, start_batch: int, end_batch: int) -> int:
        """Decode tokens of a tier-``tier`` request decoding from ``start_batch``, in batches ``< end_batch``."""
        if end_batch <= start_batch:
            return 0
        return int(self.tier_slots[tier, end_batch] - self.tier_slots[tier, start_batch])


def batch_process(problem: AdmissionProblem) -> BatchProcess:
    """The B1 batch process of ``problem`` (``t0``, ``C``, ``K``, deadline batches, cadence)."""
    t0 = float(problem.batch_duration_s)  # type: ignore[arg-type]
    capacity = time2bs(problem.timing, t0)
    n_batches = max(1, int(math.ceil(float(problem.horizon_s) / t0 - TIME_TOL)))  # type: ignore[arg-type]
    deadline = np.where(problem.remaining_prefill_tokens > 0, problem.prefill_deadline_s, 0.0)
    b = np.clip(np.floor(deadline / t0 + TIME_TOL), 0, n_batches).astype("int64")
    b[problem.remaining_prefill_tokens == 0] = 0
    units = np.arange(n_batches + 1)
    tiers = problem.tier_tpot_s
    slots = np.stack([tier_releases_before(float(t), t0, units) for t in tiers])
    per_batch = np.diff(slots, axis=1)
    if (per_batch > 1).any():
        raise ValueError("a TPOT tier is tighter than batch_duration_s")
    slot = per_batch.astype(bool)
    for arr in (b, slots, slot):
        arr.setflags(write=False)
    return BatchProcess(t0, int(capacity), n_batches, b, slots, slot)
