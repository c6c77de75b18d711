"""Admission plans: the batches of one call, B1's batch process run on an admitted set, and the
engine-replayable schedule of a plan.

An :class:`AdmissionPlan` is the model's view of a decision through the horizon;
:func:`plan_b1` runs B1's batch process for an admitted set, :func:`fill_prefill` gives the
prefill budget of batches earliest deadline first (B1 and B2 both), and :func:`plan_schedule`
turns a plan into a :class:`~slolab.sim.schedule.Schedule` for one server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from slolab.models.slos_admission.problem import AdmissionProblem, served_rows
from slolab.models.slos_admission.process import (
    BatchProcess,
    batch_process,
    tier_releases_before,
)
from slolab.sim.schedule import PlannedIteration, Schedule

__all__ = ["AdmissionPlan", "Entry", "fill_prefill", "plan_b1", "plan_schedule"]

Entry = tuple[int, str, int]


@dataclass(frozen=True, slots=True, eq=False)
class AdmissionPlan:
    """Admitted set and batches of one call, in the model's view (through the horizon).

    Compared by identity (it holds arrays); :func:`~slolab.models.slos_admission.check.plan_violations`
    checks one.

    Attributes
    ----------
    admitted : tuple of int
        New rows admitted (sorted).
    batch_start_s, batch_end_s : float arrays (B,)
        Planned start and end of each batch, relative to the call (batches tile
        ``[0, horizon]``; a batch may be empty).
    prefill : tuple of tuple of (row, tokens)
        Prefill chunks of each batch.
    decode_rows : int array (D,)
        Rows that receive decode tokens (running and admitted).
    decode : bool array (D, B)
        ``decode[k, i]``: row ``decode_rows[k]`` gets one decode token in batch ``i``.
    """

    admitted: tuple[int, ...]
    batch_start_s: np.ndarray
    batch_end_s: np.ndarray
    prefill: tuple[tuple[tuple[int, int], ...], ...]
    decode_rows: np.ndarray
    decode: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.batch_start_s)
        if not len(self.batch_end_s) == len(self.prefill) == n:
            raise ValueError(
                f"batch_start_s, batch_end_s and prefill must have one entry per batch, got "
                f"{n}, {len(self.batch_end_s)}, {len(self.prefill)}"
            )
        if self.decode.shape != (len(self.decode_rows), n):
            raise ValueError(
                f"decode has shape {self.decode.shape}, expected ({len(self.decode_rows)}, {n})"
            )
        for name in ("batch_start_s", "batch_end_s", "decode_rows", "decode"):
            getattr(self, name).setflags(write=False)

    @property
    def n_batches(self) -> int:
        return len(self.batch_start_s)

    @property
    def batches(self) -> tuple[tuple[Entry, ...], ...]:
        """Entries of each batch: prefill chunks ``(r, "prefill", tokens)`` then ``(r, "decode", 1)``."""
        rows = self.decode_rows.tolist()
        out = []
        for i, chunks in enumerate(self.prefill):
            entries: list[Entry] = [(r, "prefill", t) for r, t in chunks]
            entries.extend(
                (rows[k], "decode", 1) for k in np.flatnonzero(self.decode[:, i]).tolist()
            )
            out.append(tuple(entries))
        return tuple(out)


def _edf_fill(pending: list[int], left: dict[int, int], budget: int) -> tuple[tuple[int, int], ...]:
    """Give ``budget`` prefill tokens to ``pending`` rows in order (earliest deadline first)."""
    chunks = []
    while budget > 0 and pending:
        r = pending[0]
        take = min(budget, left[r])
        chunks.append((r, take))
        left[r] -= take
        budget -= take
        if left[r] == 0:
            pending.pop(0)
    return tuple(chunks)


def fill_prefill(
    deadline: np.ndarray,
    rows: np.ndarray,
    problem: AdmissionProblem,
    budgets: np.ndarray,
    ends: np.ndarray,
) -> tuple[tuple[tuple[int, int], ...], ...] | None:
    """Earliest-deadline-first prefill over batches with residual ``budgets``; a row must be
    complete in batches ending at or before its ``deadline`` (same units as ``ends``)."""
    prefill = problem.remaining_prefill_tokens
    pending = sorted((int(r) for r in rows if prefill[r] > 0), key=lambda r: (int(deadline[r]), r))
    left = {r: int(prefill[r]) for r in pending}
    out = []
    for budget, end in zip(budgets.tolist(), ends.tolist(), strict=True):
        if pending and deadline[pending[0]] < end:
            return None
        out.append(_edf_fill(pending, left, int(budget)))
    if pending:
        return None
    return tuple(out)


def plan_b1(
    problem: AdmissionProblem, admitted: Sequence[int], process: BatchProcess | None = None
) -> AdmissionPlan | None:
    """Run B1's batch process for ``admitted`` (plus the running rows); None if it fails.

    Batch ``i`` serves the decode token of every served request ``r`` with ``b_r <= i`` and a
    slot of its tier in batch ``i`` (Algorithm 2's cadence); the rest of its ``C`` tokens go to
    prefills, earliest deadline batch first (ties by row). The plan fails when a batch's decode
    tokens exceed ``C``, a prefill is not complete by its deadline batch, or memory exceeds
    the capacity.
    """
    proc = process if process is not None else batch_process(problem)
    rows = served_rows(problem, admitted)
    if int(problem.kv_tokens[rows].sum()) > problem.kv_capacity_tokens:
        return None
    b = proc.deadline_batch
    n_batches = proc.n_batches
    decode = (b[rows][:, None] <= np.arange(n_batches)[None, :]) & proc.slot[problem.tier[rows], :]
    load = decode.sum(axis=0)
    if (load > proc.batch_tokens).any():
        return None
    prefill = fill_prefill(b, rows, problem, proc.batch_tokens - load, np.arange(1, n_batches + 1))
    if prefill is None:
        return None
    starts = np.arange(n_batches) * proc.batch_duration_s
    used = decode.any(axis=1)
    return AdmissionPlan(
        tuple(sorted(int(r) for r in admitted)),
        starts,
        starts + proc.batch_duration_s,
        prefill,
        rows[used],
        decode[used],
    )


def plan_schedule(
    problem: AdmissionProblem, plan: AdmissionPlan, complete: bool = True
) -> Schedule:
    """The engine-replayable schedule of a plan (one server).

    Empty batches are dropped; each iteration has ``not_before_s = call_time_s + planned start``
    so that no iteration runs before its planned start. Decode entries stop once the request
    has all its output tokens. With ``complete``, batches of ``t0`` continue after the plan on
    Algorithm 2's cadence until every served request has finished (decode only: a later
    scheduler call re-plans); their tokens are on time when the ``n`` served requests fit one
    batch and every token is released at least ``T(n)`` before its deadline, which B2 requires
    and B1 gives for ``n <= C`` when every TPOT is a multiple of ``t0`` (docs/slos_serve.md,
    Sec. 3 and 4). Declined new requests are ``rejected``.
    """
    proc = batch_process(problem)
    left = problem.decode_tokens_left.copy()
    rows = served_rows(problem, plan.admitted)
    its: list[PlannedIteration] = []
    call = problem.call_time_s

    def emit(entries: Sequence[Entry], start_s: float) -> None:
        kept: list[Entry] = []
        for r, phase, t in entries:
            if phase == "decode":
                if left[r] == 0:
                    continue
                left[r] -= 1
            kept.append((int(r), phase, int(t)))
        if kept:
            its.append(PlannedIteration(tuple(kept), not_before_s=max(0.0, call + start_s)))

    for entries, start_s in zip(plan.batches, plan.batch_start_s, strict=True):
        emit(entries, float(start_s))
    if complete and left[rows].sum() > 0:
        t0 = proc.batch_duration_s
        first = int(round(float(plan.batch_end_s[-1]) / t0))
        ratio = problem.tier_tpot_s / t0
        span = int(np.ceil(left[rows].max() * ratio.max())) + 2
        units = np.arange(first, first + span + 1)
        due = np.stack([tier_releases_before(float(t), t0, units) for t in problem.tier_tpot_s])
        has_slot = np.diff(due, axis=1) > 0
        tiers = problem.tier[rows]
        for k in range(span):
            if left[rows].sum() == 0:
                break
            emit([(int(r), "decode", 1) for r in rows[has_slot[tiers, k]]], (first + k) * t0)
    rejected = frozenset(int(r) for r in problem.new_rows if int(r) not in set(plan.admitted))
    return Schedule((tuple(its),), rejected=rejected)
