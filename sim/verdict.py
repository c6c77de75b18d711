"""Early verdicts: stop a simulation as soon as its attainment is known to meet or miss a target.

A capacity search asks of each probe only whether attainment reaches the target. During a run
some requests are already settled: a request that was rejected, or one with a token (or its
first token, or its last) that can no longer arrive by its bound, has missed its SLO whatever
happens next; a request whose every token is out has met it or not for good. When more than
``(1 - target) n`` requests have missed, the run fails the target; when ``target n`` have met
it, the run meets it. :class:`AttainmentWatch` counts both during the run (the engine calls it
every few hundred events) and stops the run at the first certainty, so the verdict is the one
the full run would give, at a fraction of its cost.

Times not yet emitted are bounded below by :meth:`slolab.sim.engine.Engine.unemitted_floor_s`:
every token still to come is emitted at or after it (an iteration in progress ends after now; a
fast-forwarded decode window or a static batch emits its tokens after its start). A bound
``t <= b + tol`` is certainly broken when the lower bound of ``t`` already exceeds ``b + tol``.
The arithmetic is :func:`slolab.sim.metrics.request_table`'s, so the counts agree with it
exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from slolab.sim.metrics import (
    ON_TIME_TOLERANCE_S,
    check_definition,
    deadline_slos,
    token_deadline_s,
)

if TYPE_CHECKING:
    from slolab.instances.records import Instance
    from slolab.sim.engine import Engine


@dataclass(frozen=True, slots=True)
class Settled:
    """Requests already settled at a point of a run, under one attainment definition.

    Attributes
    ----------
    met, missed : int
        Requests whose SLO is met for good, and missed for good.
    counted : int
        Requests the definition counts (all; for ``e2e`` those with an e2e SLO).
    """

    met: int
    missed: int
    counted: int

    def __post_init__(self) -> None:
        if not 0 <= self.met + self.missed <= self.counted:
            raise ValueError(
                f"met + missed must be in [0, counted={self.counted}], got {self.met} + {self.missed}"
            )

    @property
    def lower(self) -> float:
        """Smallest attainment the full run can end with (``met / counted``)."""
        return self.met / self.counted if self.counted else float("nan")

    @property
    def upper(self) -> float:
        """Largest attainment the full run can end with (``(counted - missed) / counted``)."""
        return (self.counted - self.missed) / self.counted if self.counted else float("nan")


class AttainmentWatch:
    """Stops a run once its attainment is certain to meet ``target`` or to miss it.

    Pass it as ``stop`` to :func:`slolab.sim.run`; after the run, :attr:`verdict` is
    ``"meets"``, ``"misses"`` or None (the run went to its end), and :attr:`settled` the counts
    at the stop. The attainment a stopped run implies is :attr:`bound`: ``settled.lower``
    (at or above the target) for ``"meets"``, ``settled.upper`` (below it) for ``"misses"``.

    Parameters
    ----------
    instance : Instance
        The instance simulated (its workload's SLOs and lengths).
    definition : str
        Attainment definition (:data:`slolab.sim.metrics.DEFINITIONS`).
    target : float
        Attainment target in (0, 1]; "meets" is ``attainment >= target``.
    every : int, optional
        Engine events between checks (default: one per 128 of the run's output tokens, at
        least 100 events; each check costs O(tokens)).
    """

    def __init__(
        self, instance: Instance, definition: str, target: float, *, every: int | None = None
    ) -> None:
        check_definition(definition)
        if not 0.0 < target <= 1.0:
            raise ValueError(f"target must be an attainment in (0, 1], got {target!r}")
        wl = instance.workload
        out = wl.output_tokens.astype(np.int64)
        n = len(out)
        self.definition = definition
        self.target = float(target)
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(out, out=self.offsets[1:])
        self.request_of = np.repeat(np.arange(n), out)
        ttft, tpot = deadline_slos(wl)
        k = np.arange(len(self.request_of)) - self.offsets[self.request_of]
        self.deadline = token_deadline_s(
            wl.arrival_s[self.request_of], ttft[self.request_of], tpot[self.request_of], k + 1
        )
        self.arrival = wl.arrival_s
        self.out = out
        self.ttft_slo = wl["ttft_slo_s"]
        self.tpot_slo = wl["tpot_slo_s"]
        self.e2e_slo = wl["e2e_slo_s"]
        self.has_e2e = ~np.isnan(self.e2e_slo)
        self.counted = int(self.has_e2e.sum()) if definition == "e2e" else n
        # a token's predecessor in the same request (-1 for first tokens)
        prev = np.arange(len(self.request_of)) - 1
        prev[self.offsets[:-1][out > 0]] = -1
        self.prev = prev
        self.all_tokens = bool(n) and bool((out > 0).all())
        self.every = every if every is not None else max(100, len(self.request_of) // 128)
        self.checks = 0
        self.verdict: str | None = None
        self.settled: Settled | None = None
        self.stopped_at_s: float | None = None

    @property
    def bound(self) -> float | None:
        """The attainment bound a stopped run proved (None when it ran to its end)."""
        if self.verdict is None or self.settled is None:
            return None
        return self.settled.lower if self.verdict == "meets" else self.settled.upper

    def count(self, token_times: np.ndarray, rejected: np.ndarray, floor_s: float) -> Settled:
        """Requests settled given emitted ``token_times`` (inf: not yet emitted), ``rejected``,
        and ``floor_s``, a time no token still to come is emitted before."""
        tol = ON_TIME_TOLERANCE_S
        times = token_times
        low = np.where(np.isposinf(times), floor_s, times)  # NaN (before the run) stays NaN
        starts = self.offsets[:-1]
        ends = self.offsets[1:] - 1
        last = times[ends]
        finished = np.isfinite(last) & ~rejected
        low_last = low[ends]
        with np.errstate(invalid="ignore"):
            missed = rejected | ((low_last - self.arrival) > self.e2e_slo + tol)
            if self.definition == "deadline":
                late = low > self.deadline + tol
                missed |= np.bincount(self.request_of, weights=late, minlength=len(self.out)) > 0
            elif self.definition in ("ttft+mean-tpot", "ttft+max-tpot"):
                first = times[starts]
                missed |= (low[starts] - self.arrival) > self.ttft_slo + tol
                multi = self.out > 1
                if self.definition == "ttft+mean-tpot":
                    mean_low = (low_last - first) / np.maximum(self.out - 1, 1)
                    missed |= multi & np.isfinite(first) & (mean_low > self.tpot_slo + tol)
                else:
                    before = times[self.prev]
                    gap = np.where((self.prev >= 0) & np.isfinite(before), low - before, -np.inf)
                    gap = np.where(np.isnan(gap), -np.inf, gap)
                    if self.all_tokens:
                        worst = np.maximum.reduceat(gap, starts)
                    else:
                        worst = np.full(len(self.out), -np.inf)
                        np.maximum.at(worst, self.request_of, gap)
                    missed |= multi & (worst > self.tpot_slo + tol)
        met = finished & ~missed
        if self.definition == "e2e":
            met &= self.has_e2e
            missed &= self.has_e2e
        return Settled(met=int(met.sum()), missed=int(missed.sum()), counted=self.counted)

    def __call__(self, engine: Engine) -> bool:
        """Whether ``engine``'s run can stop now (sets :attr:`verdict` when it can)."""
        self.checks += 1
        if not self.counted:
            return False
        settled = self.count(engine.token_times, engine.rejected, engine.unemitted_floor_s())
        if settled.lower >= self.target:
            self.verdict = "meets"
        elif settled.upper < self.target:
            self.verdict = "misses"
        else:
            return False
        self.settled = settled
        self.stopped_at_s = engine.now
        return True


class RampedStop:
    """Asks a watch at gaps that double from a sixteenth of its pace up to its pace.

    The engine calls a stop every ``stop.every`` server events. A run far from meeting its
    target is usually certain to miss within its first checks, and a run with few events per
    token (long decode windows) may end before its first check at the watch's own pace, so
    this stop is called every ``max(100, watch.every // ramp)`` events and asks the watch at
    calls 1, 3, 7, 15, ... (gaps of 1, 2, 4, ... calls) up to a gap of ``watch.every`` events,
    then at that pace: about ``log2(ramp)`` checks more than the watch alone (a check costs
    O(tokens)). The verdicts are the watch's, hence the full run's.

    Parameters
    ----------
    watch : AttainmentWatch
        The watch asked (or anything callable on the engine with an ``every`` and a
        ``verdict``).
    stop_on : tuple of str
        The verdicts that stop the run. A verdict that does not stop it (e.g. ``"meets"`` when
        only misses stop) ends the asking: the run goes to its end.
    ramp : int
        The first gap is ``watch.every // ramp`` events (at least 100).
    """

    def __init__(
        self, watch: Any, stop_on: tuple[str, ...] = ("meets", "misses"), ramp: int = 16
    ) -> None:
        self.watch = watch
        self.stop_on = stop_on
        self.every = max(100, watch.every // ramp)
        self.max_gap = max(1, watch.every // self.every)
        self.done = False
        self.calls = 0
        self.gap = 1

    def __call__(self, engine: Engine) -> bool:
        """Whether ``engine``'s run can stop now."""
        if self.done:
            return False
        self.calls += 1
        if self.calls < self.gap:
            return False
        self.calls = 0
        self.gap = min(2 * self.gap, self.max_gap)
        if not self.watch(engine):
            return False
        if self.watch.verdict in self.stop_on:
            return True
        self.done = True
        return False
