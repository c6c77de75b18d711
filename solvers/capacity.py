"""Capacity search: the largest arrival rate at which SLO attainment stays at a target.

Goodput in the PolyServe sense is the highest load a system serves while keeping SLO
attainment at or above a target (90% by default). Each evaluation ("probe") is a full
simulation of a workload rescaled to an arrival rate, so the search spends as few probes as it
can: it brackets the threshold by doubling or halving the rate, then bisects the bracket until
its relative width is within a tolerance. :func:`capacity` is generic: it takes any
``probe(rate) -> attainment`` and knows nothing of workloads or engines.

:func:`smallest_count` is the same idea turned around for capacity planning: the smallest
integer count (of servers) whose attainment meets the target, by doubling and bisection over
the integers.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

logger = logging.getLogger("slolab")

#: Why the search stopped: bracket within tolerance, target met at the maximum rate, target
#: missed at the minimum rate, or the probe budget ran out first.
STOP_REASONS = ("tolerance", "max_rate", "min_rate", "max_probes", "stalled")


def _json_float(value: float) -> float | None:
    return None if math.isinf(value) else value


@dataclass(frozen=True, slots=True)
class ProbeVerdict:
    """What a probe that may stop early returns to :func:`capacity`.

    Attributes
    ----------
    attainment : float
        The run's attainment in [0, 1]; when ``early``, the bound the stopped run proved: a
        lower bound (at or above the target) when it met the target, an upper bound (below
        it) when it missed.
    early : bool
        The run stopped as soon as its verdict was certain
        (:class:`slolab.sim.verdict.AttainmentWatch`).
    wall_s : float
        Wall time of the probe (s); NaN when not measured.
    stalled : int
        Requests the run rejected because it stalled (its policy left them waiting with
        nothing left to run, ``Outcome.info["stalled"]``); a probe with any is no valid
        attainment and ends the search (``stop_reason="stalled"``).
    """

    attainment: float
    early: bool = False
    wall_s: float = math.nan
    stalled: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.attainment <= 1.0:
            raise ValueError(f"attainment must be in [0, 1], got {self.attainment!r}")
        if self.stalled < 0:
            raise ValueError(f"stalled must be >= 0, got {self.stalled!r}")


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """What :func:`capacity` found.

    Attributes
    ----------
    capacity : float
        Largest probed rate whose attainment met the target (the probe's rate unit, e.g.
        requests per second or a scale factor); 0.0 when no probed rate met it.
    target : float
        Attainment target in (0, 1].
    bracket : tuple of float
        ``(lo, hi)``: ``lo`` met the target (0.0 if none did) and ``hi`` missed it (``inf``
        if none did). With a non-increasing attainment the threshold lies in ``[lo, hi)``.
    probes : tuple of (rate, attainment)
        Every probe, in the order made.
    n_probes : int
        ``len(probes)``.
    monotone : bool
        False when two probes contradict a non-increasing attainment: a higher rate with an
        attainment above a lower rate's by more than ``monotone_tol``.
    capped_high : bool
        The target was met at the maximum rate: ``capacity`` is that maximum, a lower bound
        on the true capacity.
    capped_low : bool
        The target was missed even at the minimum rate: ``capacity`` is 0.0 and the true
        capacity (if any) is below the minimum rate.
    rel_tol : float
        Requested relative bracket width.
    stop_reason : str
        One of :data:`STOP_REASONS`.
    early : tuple of bool
        Per probe, whether it stopped as soon as its verdict was certain (its attainment is
        then the bound it proved, :class:`ProbeVerdict`); empty when no probe could stop early.
    probe_wall_s : tuple of float
        Per probe, its wall time (s) when measured; empty otherwise.
    stalled : tuple of int
        Per probe, the requests its run rejected because it stalled; empty when none did. A
        stalled probe is the last one (``stop_reason="stalled"``) and counts neither in the
        bracket nor in ``monotone``.
    """

    capacity: float
    target: float
    bracket: tuple[float, float]
    probes: tuple[tuple[float, float], ...]
    n_probes: int
    monotone: bool
    capped_high: bool
    capped_low: bool
    rel_tol: float
    stop_reason: str
    early: tuple[bool, ...] = ()
    probe_wall_s: tuple[float, ...] = ()
    stalled: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_target(self.target)
        _check_per_probe(self, ("early", "probe_wall_s", "stalled"), self.n_probes)
        lo, hi = self.bracket
        if not 0.0 <= lo <= hi:
            raise ValueError(f"bracket must satisfy 0 <= lo <= hi, got {self.bracket}")
        if not math.isfinite(self.capacity) or self.capacity < 0:
            raise ValueError(f"capacity must be a finite number >= 0, got {self.capacity}")
        if self.n_probes != len(self.probes):
            raise ValueError(
                f"n_probes must equal len(probes) = {len(self.probes)}, got {self.n_probes}"
            )
        if self.capped_high and self.capped_low:
            raise ValueError("capped_high and capped_low cannot both be true")
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"stop_reason must be one of {STOP_REASONS}, got {self.stop_reason!r}")

    @property
    def n_early(self) -> int:
        """Probes that stopped as soon as their verdict was certain."""
        return sum(self.early)

    @property
    def converged(self) -> bool:
        """Whether the bracket reached the relative tolerance (not capped, budget not out)."""
        return self.stop_reason == "tolerance"

    def to_record(self) -> dict[str, Any]:
        """Flat record of scalars (for a DataFrame row or a results-store row).

        ``probes`` is the JSON text of ``[[rate, attainment], ...]``; ``bracket_hi`` is
        ``inf`` when no probe missed the target.
        """
        return {
            "capacity": self.capacity,
            "target": self.target,
            "bracket_lo": self.bracket[0],
            "bracket_hi": self.bracket[1],
            "n_probes": self.n_probes,
            "monotone": self.monotone,
            "capped_high": self.capped_high,
            "capped_low": self.capped_low,
            "rel_tol": self.rel_tol,
            "stop_reason": self.stop_reason,
            "probes": json.dumps([list(probe) for probe in self.probes]),
            "n_early": self.n_early,
            "n_stalled": sum(1 for k in self.stalled if k),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (strict JSON: an infinite ``bracket`` end is written as None)."""
        return {
            "capacity": self.capacity,
            "target": self.target,
            "bracket": [_json_float(self.bracket[0]), _json_float(self.bracket[1])],
            "probes": [list(probe) for probe in self.probes],
            "n_probes": self.n_probes,
            "monotone": self.monotone,
            "capped_high": self.capped_high,
            "capped_low": self.capped_low,
            "rel_tol": self.rel_tol,
            "stop_reason": self.stop_reason,
            "early": list(self.early),
            "probe_wall_s": list(self.probe_wall_s),
            "stalled": list(self.stalled),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapacityResult:
        """Inverse of :meth:`to_dict`."""
        lo, hi = data["bracket"]
        return cls(
            capacity=float(data["capacity"]),
            target=float(data["target"]),
            bracket=(float(lo), math.inf if hi is None else float(hi)),
            probes=tuple((float(rate), float(value)) for rate, value in data["probes"]),
            n_probes=int(data["n_probes"]),
            monotone=bool(data["monotone"]),
            capped_high=bool(data["capped_high"]),
            capped_low=bool(data["capped_low"]),
            rel_tol=float(data["rel_tol"]),
            stop_reason=str(data["stop_reason"]),
            early=tuple(bool(e) for e in data.get("early", ())),
            probe_wall_s=tuple(float(w) for w in data.get("probe_wall_s", ())),
            stalled=tuple(int(k) for k in data.get("stalled", ())),
        )


def _check_target(target: float) -> None:
    if not (isinstance(target, int | float) and 0.0 < target <= 1.0):
        raise ValueError(f"target must be an attainment in (0, 1], got {target!r}")


def _check_per_probe(record: object, names: Sequence[str], n_probes: int) -> None:
    """Each field ``names`` of ``record`` holds one entry per probe, or none."""
    for name in names:
        size = len(getattr(record, name))
        if size not in (0, n_probes):
            raise ValueError(
                f"{name} must have one entry per probe ({n_probes}) or none, got {size}"
            )


def _known_intervals(
    probes: Sequence[tuple[float, float]], early: Sequence[bool], target: float
) -> list[tuple[float, float]]:
    """Per probe, the ``(low, high)`` its attainment is known to lie in: the value itself for a
    full run; ``[bound, 1]`` for a run stopped once certain to meet ``target``, ``[0, bound]``
    for one stopped once certain to miss it."""
    return [
        ((a, 1.0) if a >= target else (0.0, a)) if stopped else (a, a)
        for (_, a), stopped in zip(probes, early, strict=True)
    ]


def _is_monotone(
    probes: list[tuple[float, float]],
    tolerance: float,
    intervals: list[tuple[float, float]] | None = None,
) -> bool:
    """No probe at a higher rate has attainment above a lower rate's by more than tolerance.

    ``intervals``: per probe, the ``(low, high)`` its attainment is known to lie in (a probe
    stopped early knows a bound only); a rise is counted only when certain, a higher rate's
    ``low`` above a lower rate's ``high``.
    """
    if intervals is None:
        intervals = [(attainment, attainment) for _, attainment in probes]
    lowest_high = math.inf
    order = sorted(range(len(probes)), key=lambda i: probes[i][0])
    for i in order:
        low, high = intervals[i]
        if low > lowest_high + tolerance:
            return False
        lowest_high = min(lowest_high, high)
    return True


#: How far from its first probe a search goes by default: rates in [start / SPAN, start * SPAN].
SEARCH_SPAN = 1024


def capacity(
    probe: Callable[[float], float | ProbeVerdict],
    *,
    target: float = 0.9,
    start_rate: float = 1.0,
    min_rate: float | None = None,
    max_rate: float | None = None,
    rel_tol: float = 0.02,
    max_probes: int = 30,
    monotone_tol: float = 0.0,
    progress: bool = True,
    floor_first: bool = False,
    workers: int = 1,
    executor: Executor | None = None,
) -> CapacityResult:
    """Largest rate whose attainment meets ``target``, by bracketing and bisection.

    1. Probe ``start_rate``. If it meets the target, double the rate (capped at
       ``max_rate``) until a probe misses; if the target is met at ``max_rate``, stop with
       ``capped_high``. If ``start_rate`` misses, halve the rate (floored at ``min_rate``)
       until a probe meets it; if it is missed at ``min_rate``, stop with ``capped_low`` and
       capacity 0.0. Either way the bracket ``(lo, hi)`` has ``lo`` meeting the target and
       ``hi`` missing it, with ``hi <= 2 lo``.
    2. Bisect: probe ``(lo + hi) / 2``, replace ``lo`` if it meets the target, ``hi`` if not,
       until ``(hi - lo) / hi <= rel_tol``.

    "Meets" means ``attainment >= target``. The search assumes attainment is non-increasing
    in the rate. When it is not, the result is still a rate that met the target when probed
    (the bracket's ``lo``, and every probe that met the target is at or below it), but the
    crossing found need not be the highest one: a rate above ``hi`` that was never probed may
    meet the target again. The probes record what was seen, and ``monotone`` is False when
    they show attainment rising with rate by more than ``monotone_tol``.

    Probe count: reaching the bracket from ``start_rate`` upward to a threshold ``T`` takes
    ``floor(log2(T / start_rate)) + 2`` probes (downward: ``ceil(log2(start_rate / T)) + 1``);
    bisection takes at most ``ceil(log2(1 / rel_tol))`` more, because the width halves each
    step while ``hi`` stays above the initial ``lo >= width``.

    Parameters
    ----------
    probe : callable
        ``probe(rate) -> attainment`` in [0, 1]; typically a full simulation of the workload
        rescaled to ``rate``. It may return a :class:`ProbeVerdict` instead: a run stopped as
        soon as its verdict was certain gives a bound, on the right side of ``target``.
    target : float, default 0.9
        Attainment to keep, in (0, 1].
    start_rate : float, default 1.0
        First rate probed (> 0).
    min_rate, max_rate : float, optional
        Search limits; default ``start_rate / SEARCH_SPAN`` and ``start_rate * SEARCH_SPAN``
        (:data:`SEARCH_SPAN` = 1024).
    rel_tol : float, default 0.02
        Stop when the bracket's relative width ``(hi - lo) / hi`` is at most this, in (0, 1).
    max_probes : int, default 30
        Probe budget; when it runs out the result has ``stop_reason="max_probes"``.
    monotone_tol : float, default 0.0
        Attainment rise with rate tolerated (noise) before ``monotone`` is set False.
    progress : bool, default True
        Show a tqdm progress bar (on a terminal only; ``False`` silences it).
    floor_first : bool, default False
        When ``start_rate`` misses, probe ``min_rate`` next: if it misses too, stop there
        (``capped_low`` after 2 probes instead of ``log2(start_rate / min_rate) + 1``); if it
        meets, halve from ``start_rate`` as without it (one probe more). The capacity found is
        the same either way.
    workers : int, default 1
        Probes run at once (with ``executor``). The search is the sequential one, walked on
        verdicts probed ahead: the next ``workers`` rungs of the doubling (halving) ladder,
        then the next ``workers`` midpoints bisection may need, breadth first (the next
        bisection levels: k-section). Every verdict the walk uses is the one sequential
        search would probe at the same rate, so capacity, bracket and stop reason are
        identical (while the probe budget lasts); the probes not on the walk's path are
        recorded too.
    executor : concurrent.futures.Executor, optional
        Runs a batch of probes (``executor.map(probe, rates)``); a process pool needs a
        picklable ``probe``. None: one probe at a time.

    Returns
    -------
    CapacityResult

    References
    ----------
    PolyServe, Section 5.2 ("Goodput Evaluation"): goodput is the load served at 90% SLO
    attainment. The bracketing and bisection are the standard root-bracketing search.
    """
    _check_target(target)
    if not (math.isfinite(start_rate) and start_rate > 0):
        raise ValueError(f"start_rate must be a finite number > 0, got {start_rate!r}")
    min_rate = start_rate / SEARCH_SPAN if min_rate is None else min_rate
    max_rate = start_rate * SEARCH_SPAN if max_rate is None else max_rate
    if not (0 < min_rate <= start_rate):
        raise ValueError(f"min_rate must be in (0, start_rate={start_rate}], got {min_rate!r}")
    if not (start_rate <= max_rate < math.inf):
        raise ValueError(
            f"max_rate must be finite and >= start_rate={start_rate}, got {max_rate!r}"
        )
    if not (0 < rel_tol < 1):
        raise ValueError(f"rel_tol must be in (0, 1), got {rel_tol!r}")
    if max_probes < 1:
        raise ValueError(f"max_probes must be >= 1, got {max_probes!r}")
    if not monotone_tol >= 0:
        raise ValueError(f"monotone_tol must be >= 0, got {monotone_tol!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")

    probes: list[tuple[float, float]] = []
    early: list[bool] = []
    walls: list[float] = []
    stalled: list[int] = []
    lo, hi = 0.0, math.inf
    bar = tqdm(desc="capacity probes", unit="probe", disable=None if progress else True)

    def meets(rate: float, answer: float | ProbeVerdict) -> bool:
        attainment = float(answer.attainment if isinstance(answer, ProbeVerdict) else answer)
        if not 0.0 <= attainment <= 1.0:
            raise ValueError(f"probe({rate}) returned attainment {attainment!r}, not in [0, 1]")
        verdict = answer if isinstance(answer, ProbeVerdict) else ProbeVerdict(attainment)
        probes.append((rate, attainment))
        early.append(verdict.early)
        walls.append(verdict.wall_s)
        stalled.append(verdict.stalled)
        if verdict.stalled:
            logger.warning(
                "capacity probe at rate %g stalled (%d requests): the search stops",
                rate,
                verdict.stalled,
            )
            raise _ProbeStalled
        logger.debug("capacity probe %d: rate %g -> attainment %g", len(probes), rate, attainment)
        bar.update(1)
        bar.set_postfix(rate=f"{rate:.4g}", attainment=f"{attainment:.3f}")
        return attainment >= target

    def result(stop_reason: str) -> CapacityResult:
        valid = len(probes) - (stop_reason == "stalled")
        intervals = _known_intervals(probes[:valid], early[:valid], target)
        found = CapacityResult(
            capacity=lo,
            target=target,
            bracket=(lo, hi),
            probes=tuple(probes),
            n_probes=len(probes),
            monotone=_is_monotone(probes[:valid], monotone_tol, intervals),
            capped_high=stop_reason == "max_rate",
            capped_low=stop_reason == "min_rate",
            rel_tol=rel_tol,
            stop_reason=stop_reason,
            early=tuple(early),
            probe_wall_s=tuple(walls) if not all(math.isnan(w) for w in walls) else (),
            stalled=tuple(stalled) if any(stalled) else (),
        )
        logger.info(
            "capacity %g (bracket %s, %d probes, stop: %s)",
            found.capacity,
            found.bracket,
            found.n_probes,
            stop_reason,
        )
        return found

    known: dict[float, bool] = {}

    def ask(rates: list[float]) -> None:
        """Probe ``rates`` not yet known (in parallel with an executor), within the budget."""
        todo = [r for r in dict.fromkeys(rates) if r not in known]
        todo = todo[: max(max_probes - len(probes), 0)]
        if executor is None or len(todo) < 2:
            for r in todo:
                known[r] = meets(r, probe(r))
            return
        for r, answer in zip(todo, executor.map(probe, todo), strict=True):
            known[r] = meets(r, answer)

    def ladder(rate: float, factor: float, limit: float) -> list[float]:
        """The next ``workers`` rates of the doubling (halving) ladder from ``rate``."""
        rungs = []
        for _ in range(workers):
            rate = min(rate * factor, limit) if factor > 1 else max(rate * factor, limit)
            rungs.append(rate)
            if rate == limit:
                break
        return rungs

    def tree(lo: float, hi: float) -> list[float]:
        """The next ``workers`` midpoints bisection may probe from ``(lo, hi)``, breadth first."""
        mids: list[float] = []
        queue = [(lo, hi)]
        while queue and len(mids) < workers:
            a, b = queue.pop(0)
            if (b - a) / b <= rel_tol:
                continue
            mid = (a + b) / 2
            mids.append(mid)
            queue += [(a, mid), (mid, b)]
        return mids

    try:
        rate = start_rate
        ask([rate])
        if known[rate]:
            lo = rate
            while True:
                if rate >= max_rate:
                    return result("max_rate")
                if len(probes) >= max_probes:
                    return result("max_probes")
                ask(ladder(rate, 2.0, max_rate))
                rate = min(2 * rate, max_rate)
                if not known[rate]:
                    hi = rate
                    break
                lo = rate
        else:
            hi = rate
            if floor_first and min_rate < rate:
                # one probe at the floor settles a target no rate can meet
                ask([min_rate])
                if not known[min_rate]:
                    hi = min_rate
                    return result("min_rate")
                lo = min_rate
            while True:
                if rate <= min_rate:
                    return result("min_rate")
                if len(probes) >= max_probes:
                    return result("max_probes")
                ask(ladder(rate, 0.5, min_rate))
                rate = max(rate / 2, min_rate)
                if known[rate]:
                    lo = rate
                    break
                hi = rate
        while (hi - lo) / hi > rel_tol:
            if len(probes) >= max_probes:
                return result("max_probes")
            rate = (lo + hi) / 2
            if rate not in known:
                ask(tree(lo, hi))
            if known[rate]:
                lo = rate
            else:
                hi = rate
        return result("tolerance")
    except _ProbeStalled:
        return result("stalled")
    finally:
        bar.close()


class _ProbeStalled(Exception):
    """A capacity probe's run stalled: the search stops there."""


#: Why :func:`smallest_count` stopped: the target was met (bisection closed on the smallest
#: count, or the scan reached it), it was missed at every count up to the range's top, or a
#: probe's run stalled (no valid attainment).
COUNT_STOP_REASONS = ("met", "missed_at_max", "stalled")


@dataclass(frozen=True, slots=True)
class CountSearchResult:
    """What :func:`smallest_count` found.

    Attributes
    ----------
    count : int or None
        Smallest count found meeting the target; None when the range's top missed it or a
        probe stalled.
    target : float
        Attainment target in (0, 1].
    bounds : tuple of int
        The searched range ``(lo, hi)``, both ends included.
    probes : tuple of (count, attainment)
        Every probe, in the order made.
    monotone : bool
        False when two probes contradict a non-decreasing attainment: a larger count with an
        attainment below a smaller count's by more than ``monotone_tol``.
    scan : bool
        Whether counts were probed one by one (exact even on a non-monotone curve).
    stop_reason : str
        One of :data:`COUNT_STOP_REASONS`.
    early : tuple of bool
        Per probe, whether it stopped as soon as its verdict was certain (its attainment is
        then the bound it proved, :class:`ProbeVerdict`).
    stalled : tuple of int
        Per probe, the requests its run rejected because it stalled; empty when none did. A
        stalled probe is the last one (``stop_reason="stalled"``) and does not count in
        ``monotone``.
    """

    count: int | None
    target: float
    bounds: tuple[int, int]
    probes: tuple[tuple[int, float], ...]
    monotone: bool
    scan: bool
    stop_reason: str
    early: tuple[bool, ...] = ()
    stalled: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_target(self.target)
        _check_per_probe(self, ("early", "stalled"), len(self.probes))
        lo, hi = self.bounds
        if not 1 <= lo <= hi:
            raise ValueError(f"bounds must satisfy 1 <= lo <= hi, got {self.bounds}")
        if self.count is not None and not lo <= self.count <= hi:
            raise ValueError(f"count must lie in bounds {self.bounds}, got {self.count}")
        if self.stop_reason not in COUNT_STOP_REASONS:
            raise ValueError(
                f"stop_reason must be one of {COUNT_STOP_REASONS}, got {self.stop_reason!r}"
            )
        if (self.count is None) != (self.stop_reason in ("missed_at_max", "stalled")):
            raise ValueError(
                "count is None exactly when stop_reason is 'missed_at_max' or 'stalled'"
            )

    @property
    def curve(self) -> tuple[tuple[int, float], ...]:
        """The probes sorted by count."""
        return tuple(sorted(self.probes))

    @property
    def n_early(self) -> int:
        """Probes that stopped as soon as their verdict was certain."""
        return sum(self.early)


def smallest_count(
    probe: Callable[[int], float | ProbeVerdict],
    *,
    target: float = 0.9,
    lo: int = 1,
    hi: int = 32,
    scan: bool = False,
    monotone_tol: float = 0.0,
) -> CountSearchResult:
    """Smallest integer count (of servers, say) in ``[lo, hi]`` whose attainment meets ``target``.

    Default search, for attainment non-decreasing in the count: probe ``lo``; if it misses,
    double the count (capped at ``hi``) until a probe meets the target, then bisect the
    integers between the last miss ``m`` and the first meet ``M`` until ``M = m + 1``. The
    result ``M`` met the target and ``M - 1`` was probed and missed it (unless ``M = lo``).
    It takes at most ``ceil(log2(hi / lo)) + 1`` probes to bracket and
    ``ceil(log2(M - m))`` to bisect: 11 for the range 1..32.

    On a non-monotone curve a count below ``M - 1`` that was never probed may meet the target
    again; ``monotone`` is False when the probes show attainment falling as the count grows
    by more than ``monotone_tol``. With ``scan`` the counts ``lo, lo + 1, ...`` are probed in
    turn until one meets the target: the true smallest count whatever the curve's shape, at
    up to ``hi - lo + 1`` probes.

    A probe may return a :class:`ProbeVerdict`: a run stopped as soon as its verdict was
    certain gives a bound on the right side of ``target``. The search only asks which side
    a probe is on, so it probes the same counts and finds the same count as with the full
    attainments; ``monotone`` then counts a fall only when the bounds prove it.

    Parameters
    ----------
    probe : callable
        ``probe(count) -> attainment`` in [0, 1], or a :class:`ProbeVerdict`.
    target : float, default 0.9
        Attainment to reach, in (0, 1]; "meets" means ``attainment >= target``.
    lo, hi : int, default 1, 32
        The range searched, both ends included (``1 <= lo <= hi``).
    scan : bool, default False
        Probe every count in turn instead of doubling and bisecting.
    monotone_tol : float, default 0.0
        Attainment fall tolerated (noise) before ``monotone`` is set False.

    Returns
    -------
    CountSearchResult
    """
    _check_target(target)
    for name, value in (("lo", lo), ("hi", hi)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    if not monotone_tol >= 0:
        raise ValueError(f"monotone_tol must be >= 0, got {monotone_tol!r}")
    probes: list[tuple[int, float]] = []
    early: list[bool] = []
    stalled: list[int] = []

    def meets(count: int) -> bool:
        answer = probe(count)
        attainment = float(answer.attainment if isinstance(answer, ProbeVerdict) else answer)
        if not 0.0 <= attainment <= 1.0:
            raise ValueError(f"probe({count}) returned attainment {attainment!r}, not in [0, 1]")
        probes.append((count, attainment))
        early.append(isinstance(answer, ProbeVerdict) and answer.early)
        stalled.append(answer.stalled if isinstance(answer, ProbeVerdict) else 0)
        logger.debug("count probe %d: count %d -> attainment %g", len(probes), count, attainment)
        if stalled[-1]:
            logger.warning(
                "count probe %d stalled (%d requests): the search stops", count, stalled[-1]
            )
            raise _ProbeStalled
        return attainment >= target

    def result(count: int | None, stop_reason: str = "") -> CountSearchResult:
        # Attainment non-decreasing in the count is -attainment non-increasing in it (and a
        # known interval [low, high] is [-high, -low] mirrored).
        valid = len(probes) - (stop_reason == "stalled")
        mirrored = [(float(c), -attainment) for c, attainment in probes[:valid]]
        intervals = [
            (-high, -low) for low, high in _known_intervals(probes[:valid], early[:valid], target)
        ]
        return CountSearchResult(
            count=count,
            target=target,
            bounds=(lo, hi),
            probes=tuple(probes),
            monotone=_is_monotone(mirrored, monotone_tol, intervals),
            scan=scan,
            stop_reason=stop_reason or ("met" if count is not None else "missed_at_max"),
            early=tuple(early),
            stalled=tuple(stalled) if any(stalled) else (),
        )

    try:
        return _count_search(meets, result, lo, hi, scan)
    except _ProbeStalled:
        return result(None, "stalled")


def _count_search(
    meets: Callable[[int], bool],
    result: Callable[[int | None], CountSearchResult],
    lo: int,
    hi: int,
    scan: bool,
) -> CountSearchResult:
    """The probes of :func:`smallest_count` (its scan, or doubling then bisection)."""
    if scan:
        for count in range(lo, hi + 1):
            if meets(count):
                return result(count)
        return result(None)
    if meets(lo):
        return result(lo)
    missed, count = lo, lo
    while True:
        if count >= hi:
            return result(None)
        count = min(hi, 2 * count)
        if meets(count):
            met = count
            break
        missed = count
    while met - missed > 1:
        middle = (missed + met) // 2
        if meets(middle):
            met = middle
        else:
            missed = middle
    return result(met)
