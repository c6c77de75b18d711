"""The admission rules checked on a plan, independently of the model that built it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from slolab.models.slos_admission.plans import AdmissionPlan
from slolab.models.slos_admission.problem import TIME_TOL, AdmissionProblem, served_rows
from slolab.timing.inverse import time2bs

__all__ = ["plan_violations"]


def plan_violations(
    problem: AdmissionProblem, plan: AdmissionPlan, token_deadlines: bool = False
) -> list[str]:
    """Check a plan against the admission rules, independently of how it was built.

    Rules: batches are ordered and tile ``[0, end]`` without gaps; each batch carries at most
    ``time2bs(duration)`` tokens and each request at most one entry; every served prefill
    totals its remaining tokens and ends by its deadline; no decode entry precedes the
    request's prefill completion; every decode release ``k * TPOT_r`` at or after the
    request's decode start (its prefill deadline, 0 when decoding) and before the plan's end
    falls in a batch that gives the request a decode token; a batch is no longer than the TPOT
    of any request it gives a decode token; memory within capacity. With ``token_deadlines``
    also the metric's token deadlines (docs/slos_serve.md, Sec. 4): the ``m``-th decode token
    of a prefilling request comes from a batch whose iteration, started at the batch start
    and taking the time of its tokens, ends by ``d_r + m TPOT_r`` (it carries at most
    ``time2bs(d_r + m TPOT_r - start)`` tokens), and every token due by the plan's end is in
    it. B2's plans meet them; B1's when every TPOT is a multiple of ``t0``. Returns the
    violations (empty when clean).
    """
    out: list[str] = []
    rows = served_rows(problem, plan.admitted)
    if int(problem.kv_tokens[rows].sum()) > problem.kv_capacity_tokens:
        out.append(
            f"memory {int(problem.kv_tokens[rows].sum())} exceeds {problem.kv_capacity_tokens}"
        )
    start, end = np.asarray(plan.batch_start_s), np.asarray(plan.batch_end_s)
    if plan.n_batches == 0:
        return out + ["the plan has no batches"]
    if (
        abs(start[0]) > TIME_TOL
        or (np.abs(start[1:] - end[:-1]) > TIME_TOL).any()
        or (end <= start).any()
    ):
        out.append("batches do not tile the time line from 0 without gaps")
    served = set(int(r) for r in rows)
    prefill_left = {r: int(problem.remaining_prefill_tokens[r]) for r in served}
    prefill_done = {r: 0.0 for r in served if prefill_left[r] == 0}
    decode_batches: dict[int, list[int]] = {r: [] for r in served}
    capacity_of: dict[float, int] = {}
    batch_tokens = []
    for k, entries in enumerate(plan.batches):
        duration = round(float(end[k] - start[k]), 12)
        if duration not in capacity_of:
            capacity_of[duration] = time2bs(problem.timing, duration)
        tokens = sum(t for _, _, t in entries)
        batch_tokens.append(tokens)
        if tokens > capacity_of[duration]:
            out.append(f"batch {k} carries {tokens} tokens, more than {capacity_of[duration]}")
        seen: set[int] = set()
        for r, phase, t in entries:
            if r not in served:
                out.append(f"batch {k} serves request {r}, which is neither running nor admitted")
                continue
            if r in seen:
                out.append(f"request {r} appears twice in batch {k}")
            seen.add(r)
            if phase == "prefill":
                prefill_left[r] -= t
                if prefill_left[r] < 0:
                    out.append(f"request {r} gets more prefill tokens than it needs")
                if prefill_left[r] == 0:
                    prefill_done[r] = float(end[k])
            else:
                if r not in prefill_done or prefill_done[r] > start[k] + TIME_TOL:
                    out.append(f"request {r} decodes in batch {k} before its prefill is complete")
                if end[k] - start[k] > problem.tpot_s[r] + TIME_TOL:
                    out.append(f"batch {k} is longer than the TPOT of request {r} it serves")
                decode_batches[r].append(k)
    horizon_end = float(end[-1])
    for r in sorted(served):
        if prefill_left[r] > 0:
            out.append(f"request {r} has {prefill_left[r]} prefill tokens never scheduled")
            continue
        if problem.remaining_prefill_tokens[r] > 0:
            if prefill_done[r] > problem.prefill_deadline_s[r] + TIME_TOL:
                out.append(
                    f"request {r} completes its prefill at {prefill_done[r]:.6g} s, after its "
                    f"deadline {problem.prefill_deadline_s[r]:.6g} s"
                )
            decode_start = float(problem.prefill_deadline_s[r])
        else:
            decode_start = 0.0
        tpot = float(problem.tpot_s[r])
        first = max(0, math.ceil(decode_start / tpot - TIME_TOL))
        releases = np.arange(first, int(horizon_end / tpot) + 2) * tpot
        releases = releases[releases < horizon_end - TIME_TOL]
        holder = np.searchsorted(end, releases + TIME_TOL, side="right")
        holder = np.minimum(holder, plan.n_batches - 1)
        missing = sorted(set(holder.tolist()) - set(decode_batches[r]))
        if missing:
            out.append(f"request {r} misses decode tokens released during batches {missing[:5]}")
        if token_deadlines and problem.remaining_prefill_tokens[r] > 0:
            out.extend(_late_tokens(problem, r, decode_batches[r], start, end, batch_tokens))
    return out


def _late_tokens(
    problem: AdmissionProblem,
    row: int,
    batches: Sequence[int],
    start: np.ndarray,
    end: np.ndarray,
    batch_tokens: Sequence[int],
) -> list[str]:
    """Token-deadline violations of a prefilling ``row`` decoding in ``batches`` (in order)."""
    out = []
    d, tpot = float(problem.prefill_deadline_s[row]), float(problem.tpot_s[row])
    for m, k in enumerate(batches, start=1):
        due = d + m * tpot
        if end[k] <= due + TIME_TOL:
            continue
        if due <= start[k] or batch_tokens[k] > time2bs(problem.timing, due - float(start[k])):
            out.append(
                f"request {row}'s decode token {m} comes from batch {k}, whose iteration ends "
                f"after the token's deadline {due:.6g} s"
            )
    owed = math.floor((float(end[-1]) - d) / tpot + TIME_TOL)
    if len(batches) < owed:
        out.append(
            f"request {row} gets {len(batches)} decode tokens in the plan, but {owed} fall due "
            "by its end"
        )
    return out
