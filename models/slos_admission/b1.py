"""B1: admission under SLOs-Serve's fixed-duration batch process (exact 0-1 MILP, brute force)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from slolab.models.slos_admission.base import AdmissionModel
from slolab.models.slos_admission.plans import plan_b1, plan_schedule
from slolab.models.slos_admission.process import BatchProcess
from slolab.sim.schedule import Schedule
from slolab.solvers.base import MilpFormulation
from slolab.solvers.registry import register_model

__all__ = ["AdmissionB1"]

logger = logging.getLogger("slolab")


@register_model("slos-b1")
class AdmissionB1(AdmissionModel):
    """B1: admission under SLOs-Serve's fixed-duration batch process (exact 0-1 MILP).

    Variables ``x_i`` (admit new request ``i``); running requests have ``x = 1``. With
    ``b_r = floor(d_r / t0)``, ``G_l`` the tier cadence and ``C = time2bs(t0)``:

    - cumulative budget at every distinct deadline batch ``B``:
      ``sum_{r: b_r <= B} p_r x_r + sum_r x_r (G_{l_r}(B) - G_{l_r}(b_r))^+ <= B C``;
    - decode load of every batch ``i < K``: ``sum_{r: b_r <= i} g_{l_r}(i) x_r <= C``;
    - memory ``sum_r m_r x_r <= M``.

    The constraints are necessary and sufficient for the batch process with earliest-deadline
    prefill allocation (docs/slos_serve.md, "B1").

    Parameters
    ----------
    instance : Instance or AdmissionProblem
        An ``"slos-admission"`` instance, or the problem itself.

    References
    ----------
    SLOs-Serve, Sec. 3.2 (the token-budget view of Fig. 5), Sec. 3.2.2 and Algorithm 2.
    """

    def milp(self) -> MilpFormulation:
        import pulp

        prob = pulp.LpProblem("slos_b1", pulp.LpMaximize)
        x, keep = self._admission_variables(prob)
        self._objective(prob, x, pulp)
        self._memory(prob, x, keep, pulp)
        self._cumulative_budget(prob, x, keep, pulp)
        self._decode_load(prob, x, keep, pulp)
        self.variables = {"x": x, "keep_running": keep}
        logger.debug(
            "slos-b1: %d new requests, %d batches of %.4g s, %d constraints",
            len(x),
            self.process.n_batches,
            self.process.batch_duration_s,
            prob.numConstraints(),
        )
        return MilpFormulation(prob, to_schedule=lambda: self._to_schedule(self._admitted(x)))

    def _cumulative_budget(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """At each distinct deadline batch ``B`` of a prefilling row:
        ``sum_{b_r <= B} p_r x_r + sum_r x_r (G_{l_r}(B) - G_{l_r}(b_r))^+ <= B C``."""
        p, proc = self.problem, self.process
        tier = p.tier
        b = proc.deadline_batch
        prefilling = np.flatnonzero(p.remaining_prefill_tokens > 0)
        for B in np.unique(b[prefilling]):
            terms = []
            for r in range(p.n_requests):
                if b[r] > B:
                    continue
                tokens = proc.decode_demand(int(tier[r]), int(b[r]), int(B))
                if p.remaining_prefill_tokens[r] > 0:
                    tokens += int(p.remaining_prefill_tokens[r])
                if tokens:
                    terms.append(tokens * self._coef(r, x, keep))
            prob += pulp.lpSum(terms) <= int(B) * proc.batch_tokens, f"budget_b{int(B)}"

    def _decode_load(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """Per batch ``i``: ``sum_{r: b_r <= i} g_{l_r}(i) x_r <= C``, one constraint per
        segment between consecutive deadline batches and maximal slot pattern in it."""
        p, proc = self.problem, self.process
        tier, b = p.tier, proc.deadline_batch
        for seg_start, seg_end, pattern in _segment_patterns(proc, np.unique(b)):
            active = np.flatnonzero((b <= seg_start) & pattern[tier])
            if active.size == 0:
                continue
            prob += (
                pulp.lpSum(self._coef(int(r), x, keep) for r in active) <= proc.batch_tokens,
                f"decode_b{seg_start}_{seg_end}_{_mask_label(pattern)}",
            )

    def _to_schedule(self, admitted: Sequence[int]) -> Schedule:
        plan = plan_b1(self.problem, admitted, self.process)
        if plan is None:
            raise RuntimeError(
                f"the B1 solution admitting {list(admitted)} fails the batch process"
            )
        return plan_schedule(self.problem, plan)

    def brute_force(self, time_limit: float) -> tuple[float, Schedule] | None:
        """Every subset of new requests, by decreasing value; the first whose batch process
        succeeds (:func:`plan_b1`) is optimal."""
        deadline = time.perf_counter() + time_limit
        p = self.problem
        new = [int(r) for r in p.new_rows]
        values = p.value[new] if new else np.zeros(0)
        subsets = list(itertools.product((0, 1), repeat=len(new)))
        totals = np.array([float(np.dot(s, values)) for s in subsets]) if new else np.zeros(1)
        for count, k in enumerate(np.argsort(-totals, kind="stable")):
            if count % 256 == 0 and time.perf_counter() > deadline:
                raise TimeoutError(f"brute force over 2^{len(new)} subsets passed {time_limit} s")
            chosen = [r for r, pick in zip(new, subsets[k], strict=True) if pick]
            plan = plan_b1(p, chosen, self.process)
            if plan is not None:
                return float(totals[k]), plan_schedule(p, plan)
        return None


def _mask_label(pattern: np.ndarray) -> str:
    return "".join("1" if v else "0" for v in pattern)


def _segment_patterns(
    proc: BatchProcess, boundaries: np.ndarray
) -> list[tuple[int, int, np.ndarray]]:
    """Per segment ``[B_k, B_{k+1})`` of batches between deadline batches, the maximal tier
    slot patterns occurring in it (a pattern contained in another adds no constraint)."""
    cuts = sorted({int(v) for v in boundaries if 0 <= v < proc.n_batches} | {0, proc.n_batches})
    out = []
    for lo, hi in itertools.pairwise(cuts):
        patterns = {tuple(proc.slot[:, i]) for i in range(lo, hi)}
        for pat in patterns:
            dominated = any(
                other != pat and all(o >= q for o, q in zip(other, pat, strict=True))
                for other in patterns
            )
            if any(pat) and not dominated:
                out.append((lo, hi, np.array(pat, dtype=bool)))
    return out
