"""One search driver: stopping rules, the incumbent rule, a progress bar and a report.

Every improvement search of slolab (the dispatch-scale LNS and its pooled-start search, the
tdg-horizon steering and slice searches) runs its moves through :class:`Search`. A search
gives it a stopping rule and a step; the driver owns the loop:

- **stopping rules** are small callables on a :class:`Progress` (:class:`MaxRuntime`,
  :class:`MaxIterations`, :class:`NoImprovement`, composed by :class:`FirstOf`); a step that
  has nothing left to try raises :class:`Exhausted`;
- **one incumbent rule**, :func:`improves`: a candidate replaces the incumbent when it is
  better by more than :data:`IMPROVEMENT_TOLERANCE` relative to the incumbent's size;
- **Ctrl-C keeps the incumbent**: a KeyboardInterrupt in the loop or in a step's inner exact
  move (a solver call re-raises it) ends the search, which returns its incumbent marked
  ``interrupted`` (:func:`interruptible` does the same for a search's start phase);
- **one progress bar** on stderr (tqdm: elapsed seconds against the time box, the incumbent's
  objective), drawn on a terminal only and never when ``quiet``;
- **one replay**: a search that gives a ``replay`` (the incumbent's objective recomputed by
  the engine) has it called once at the end; a replay that differs from the search's own
  objective by more than the incumbent rule's tolerance raises, and the result's objective is
  the replay's;
- **one report**, :class:`SearchResult`: incumbent, objective, iterations, improvements, why
  it stopped, whether it was interrupted, wall time, and the start it began from (name,
  objective, starts tried); a search with fields of its own reports a small subclass of it
  (:meth:`SearchResult.extended`);
- **one start-policy declaration**, :class:`StartPolicies`: the online policies a search may
  start from, in the order tried, with its rule (:data:`ALWAYS_A_START`, :data:`WITHIN_TIME`).

The stopping rules and the result follow PyVRP's search loop (``StoppingCriterion``,
``MaxRuntime``, ``MaxIterations``, ``NoImprovement``, ``MultipleCriteria``, ``Result``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "ALWAYS_A_START",
    "IMPROVEMENT_TOLERANCE",
    "DISPATCH_LNS_STARTS",
    "TDG_HORIZON_STARTS",
    "WITHIN_TIME",
    "Exhausted",
    "FirstOf",
    "Interruption",
    "MaxIterations",
    "MaxRuntime",
    "NoImprovement",
    "Progress",
    "Search",
    "SearchResult",
    "StartPolicies",
    "StopRule",
    "agrees",
    "best_of",
    "improves",
    "interruptible",
]

logger = logging.getLogger("slolab")

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R", bound="SearchResult[Any]")

#: Relative margin by which a candidate must beat the incumbent (of ``max(1, |incumbent|)``):
#: equal values, and values one rounding apart, never replace it.
IMPROVEMENT_TOLERANCE = 1e-12
#: Seconds between two redraws of the progress bar.
PROGRESS_EVERY_S = 0.5


def agrees(replayed: float, claimed: float) -> bool:
    """Whether a replayed objective equals the search's ``claimed`` one within the incumbent
    rule's tolerance (:data:`IMPROVEMENT_TOLERANCE` x ``max(1, |claimed|)``)."""
    return abs(replayed - claimed) <= IMPROVEMENT_TOLERANCE * max(1.0, abs(claimed))


def improves(new: float, old: float, sense: str = "max") -> bool:
    """Whether objective ``new`` beats the incumbent's ``old`` (the incumbent rule).

    ``new`` must be better by more than :data:`IMPROVEMENT_TOLERANCE` x ``max(1, |old|)``;
    an infinite ``old`` (no incumbent yet) is beaten by any better value.
    """
    if sense not in ("max", "min"):
        raise ValueError(f"sense must be 'max' or 'min', got {sense!r}")
    if not math.isfinite(old):
        return new > old if sense == "max" else new < old
    margin = IMPROVEMENT_TOLERANCE * max(1.0, abs(old))
    return new > old + margin if sense == "max" else new < old - margin


def best_of(candidates: Iterable[tuple[T, float]], sense: str = "max") -> tuple[T, float]:
    """The first ``(candidate, objective)`` that no later one :func:`improves` on."""
    best: tuple[T, float] | None = None
    for item in candidates:
        if best is None or improves(item[1], best[1], sense):
            best = item
    if best is None:
        raise ValueError("best_of needs at least one candidate")
    return best


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a search is, as a stopping rule reads it before each iteration: iterations made,
    improvements kept, iterations since the last one, seconds since the search began."""

    iterations: int
    improvements: int
    stalled: int
    elapsed_s: float


class StopRule(Protocol):
    """A stopping rule: ``rule(progress)`` is True when the search should stop now.
    ``reason`` names it in :attr:`SearchResult.stop_reason`; ``limit_s`` is its time box in
    seconds (infinite when it has none)."""

    @property
    def reason(self) -> str: ...

    def __call__(self, progress: Progress) -> bool: ...

    @property
    def limit_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class MaxRuntime:
    """Stop once ``seconds`` have passed since the search began."""

    seconds: float
    reason: str = "time limit"

    def __post_init__(self) -> None:
        if not self.seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")

    def __call__(self, progress: Progress) -> bool:
        return progress.elapsed_s >= self.seconds

    @property
    def limit_s(self) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class MaxIterations:
    """Stop after ``iterations`` iterations."""

    iterations: int
    reason: str = "iterations"

    def __post_init__(self) -> None:
        if self.iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")

    def __call__(self, progress: Progress) -> bool:
        return progress.iterations >= self.iterations

    @property
    def limit_s(self) -> float:
        return math.inf


@dataclass(frozen=True, slots=True)
class NoImprovement:
    """Stop after ``iterations`` iterations in a row that kept nothing."""

    iterations: int
    reason: str = "no improvement"

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"iterations must be >= 1, got {self.iterations}")

    def __call__(self, progress: Progress) -> bool:
        return progress.stalled >= self.iterations

    @property
    def limit_s(self) -> float:
        return math.inf


class FirstOf:
    """Stop when any of ``rules`` says so; its reason is the first such rule's."""

    def __init__(self, *rules: StopRule | None) -> None:
        self.rules = tuple(r for r in rules if r is not None)
        if not self.rules:
            raise ValueError("FirstOf needs at least one stopping rule")
        self.reason = ""

    def __call__(self, progress: Progress) -> bool:
        for rule in self.rules:
            if rule(progress):
                self.reason = rule.reason
                return True
        return False

    @property
    def limit_s(self) -> float:
        return min((r.limit_s for r in self.rules), default=math.inf)


class Exhausted(Exception):
    """Raised by a step when the search has nothing left to try (it ends, not counted as an
    iteration)."""


@dataclass
class Interruption:
    """Set by :func:`interruptible` when Ctrl-C ended its block."""

    interrupted: bool = False

    def __bool__(self) -> bool:
        return self.interrupted


@contextmanager
def interruptible(what: str = "search") -> Iterator[Interruption]:
    """Run a block that Ctrl-C may end early: a KeyboardInterrupt in it is caught, logged and
    recorded in the yielded :class:`Interruption`, so the caller keeps what it has."""
    flag = Interruption()
    try:
        yield flag
    except KeyboardInterrupt:
        flag.interrupted = True
        logger.warning("%s: interrupted; keeping the incumbent", what)


#: Rule of a start table whose first policy runs whatever the time box says (the search
#: always has a start from it); the later ones run while the time box lasts.
ALWAYS_A_START = "always a start"
#: Rule of a start table whose policies run only while the time box lasts (the search has
#: starts of its own that are always candidates).
WITHIN_TIME = "within time"


@dataclass(frozen=True, slots=True)
class StartPolicies:
    """The online policies a search may start from, in the order tried, and its rule.

    Every start tried is scored and the best one by the incumbent rule (:func:`best_of`: the
    first among equals) is the search's start; ``rule`` says which starts run when the time
    box runs out: :data:`ALWAYS_A_START` (the first always runs) or :data:`WITHIN_TIME`
    (none past the time box)."""

    search: str
    names: tuple[str, ...]
    rule: str

    def __post_init__(self) -> None:
        if self.rule not in (ALWAYS_A_START, WITHIN_TIME):
            raise ValueError(
                f"rule must be {ALWAYS_A_START!r} or {WITHIN_TIME!r}, got {self.rule!r}"
            )
        if self.rule == ALWAYS_A_START and not self.names:
            raise ValueError(f"{self.search}: {ALWAYS_A_START!r} needs at least one policy")

    def tried(self, starts: Iterable[T], out_of_time: Callable[[], bool]) -> Iterator[T]:
        """``starts`` (this table's policies, or what a caller made of them, in order) as the
        rule lets them run: each while ``out_of_time()`` is False, the first whatever it says
        under :data:`ALWAYS_A_START`."""
        for k, start in enumerate(starts):
            if (k > 0 or self.rule == WITHIN_TIME) and out_of_time():
                return
            yield start


#: The start table of tdg-horizon's ``lns`` (:func:`slolab.heuristics.tdg_search.
#: steered_search`): steerable policies (they read priorities or deadlines);
#: ``deadline-admission/N`` is its Moore-Hodgson admission with chunks of at most ``N`` tokens
#: (0: whole prompts), ``deadline-lookahead/N`` the same with clairvoyant chunk sizes,
#: ``deadline-packing/N`` and ``deadline-packing-lookahead/N`` the two packing several prompts
#: per iteration, ``deadline-packing-wait/N`` and ``deadline-packing-lookahead-wait/N`` those
#: that also idle for an urgent arrival (last, so that a tie keeps the former start), the
#: others are registered policies.
TDG_HORIZON_STARTS = StartPolicies(
    "tdg-horizon lns",
    (
        "deadline-admission/1024",
        "deadline-admission/2048",
        "deadline-admission/512",
        "deadline-admission/0",
        "deadline-lookahead/1024",
        "deadline-lookahead/2048",
        "deadline-packing/0",
        "deadline-packing/1024",
        "deadline-packing/2048",
        "deadline-packing-lookahead/1024",
        "deadline-packing-lookahead/2048",
        "slide-batching",
        "sarathi-priority",
        "fairbatching",
        "sarathi-fcfs",
        "deadline-packing-wait/0",
        "deadline-packing-wait/1024",
        "deadline-packing-wait/2048",
        "deadline-packing-lookahead-wait/0",
        "deadline-packing-lookahead-wait/1024",
    ),
    ALWAYS_A_START,
)
#: The online heuristics ``dispatch-lns`` (:func:`slolab.models.dispatch_lns.lns`) may start
#: from, beside its own greedy and pooled starts; the problem's declaration hands in their runs.
DISPATCH_LNS_STARTS = StartPolicies(
    "dispatch-lns", ("hyperflexis", "round-robin", "hyperflexis-scaling"), WITHIN_TIME
)


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[S]):
    """What a search ended with: its incumbent and objective (the replay's when the search
    gave one), iterations made and improvements kept, why it stopped (a rule's ``reason``,
    ``"exhausted"`` or ``"interrupted"``), whether Ctrl-C ended it, its wall time in seconds,
    and the start it began from: its name, its objective and how many starts were tried
    (set by the search through :meth:`extended`). Its repr leaves the incumbent out (a
    search's state, a run or a schedule: large)."""

    incumbent: S = dataclasses.field(repr=False)
    objective: float
    iterations: int
    improvements: int
    stop_reason: str
    interrupted: bool
    wall_s: float
    start: str = ""
    start_objective: float = math.nan
    starts_tried: int = 0

    @property
    def start_policy(self) -> str:
        """The start's name (the name both searches' reports have always used)."""
        return self.start

    @property
    def runtime_s(self) -> float:
        """The wall time in seconds (the name both searches' reports have always used)."""
        return self.wall_s

    def extended(self, kind: type[R], **fields: Any) -> R:
        """This result as ``kind`` (a subclass holding a search's own fields), with ``fields``
        set or replacing this result's."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(SearchResult)}
        return kind(**{**own, **fields})


class Search(Generic[S]):
    """The search loop: before each iteration the stopping rule reads the :class:`Progress`;
    the step (``step(search)``) tries one move and calls :meth:`keep` when the move improves
    on :attr:`objective` (by :func:`improves`, or a local form of it on the part it changed).

    Parameters
    ----------
    stop : StopRule
        When to stop; its time box (``limit_s``) is the bar's end and :meth:`remaining_s`.
    desc : str
        The bar's label.
    objective_name : str
        How the bar names the objective (``"J"``, ``"TDG"``).
    quiet : bool
        No progress bar (otherwise one on a terminal's stderr).
    started : float, optional
        ``time.perf_counter()`` when the time box began (default: when :meth:`run` is called),
        for a search whose start phase spends the same time box.
    replay : callable, optional
        ``replay(incumbent)``: the incumbent's objective recomputed by the engine, called once
        when the search ends; it must agree with the search's objective within the incumbent
        rule's tolerance (:func:`agrees`; otherwise RuntimeError), and the result's objective
        is the replay's.
    """

    def __init__(
        self,
        stop: StopRule,
        *,
        desc: str = "search",
        objective_name: str = "objective",
        quiet: bool = False,
        started: float | None = None,
        replay: Callable[[S], float] | None = None,
    ) -> None:
        self.stop = stop
        self.replay = replay
        self.desc = desc
        self.objective_name = objective_name
        self.quiet = quiet
        self.started = started
        self.incumbent: S | None = None
        self.objective = math.nan
        self.note = ""
        self.iterations = self.improvements = self.stalled = 0

    def elapsed_s(self) -> float:
        """Seconds since the time box began."""
        assert self.started is not None
        return time.perf_counter() - self.started

    def remaining_s(self) -> float:
        """Seconds left in the time box (never negative; infinite without one)."""
        return max(self.stop.limit_s - self.elapsed_s(), 0.0)

    def keep(self, incumbent: S, objective: float, note: str | None = None) -> None:
        """Make ``incumbent`` (objective ``objective``) the incumbent; ``note`` replaces the
        bar's note (what the incumbent is)."""
        self.incumbent, self.objective = incumbent, objective
        if note is not None:
            self.note = note
        self.improvements += 1
        self.stalled = 0

    def replayed(self, incumbent: S, objective: float) -> float:
        """``objective`` checked against the replay of ``incumbent`` (the replay's value; the
        same ``objective`` without a ``replay``)."""
        if self.replay is None:
            return objective
        value = self.replay(incumbent)
        if not agrees(value, objective):
            raise RuntimeError(
                f"{self.desc}: the incumbent's {self.objective_name} {objective!r} replays to "
                f"{value!r} (tolerance {IMPROVEMENT_TOLERANCE:g} relative)"
            )
        return value

    def interrupted_before(self, incumbent: S, objective: float) -> SearchResult[S]:
        """The result of a search that Ctrl-C ended before its loop (in its start phase, see
        :func:`interruptible`): ``incumbent`` replayed, no iteration, ``interrupted``."""
        return SearchResult(
            incumbent, self.replayed(incumbent, objective), 0, 0, "interrupted", True, 0.0
        )

    def run(
        self, incumbent: S, objective: float, step: Callable[[Search[S]], None]
    ) -> SearchResult[S]:
        """Improve ``incumbent`` (objective ``objective``) by ``step`` until the stopping rule,
        :class:`Exhausted` or Ctrl-C ends the search; the incumbent is then replayed once
        (:meth:`replayed`)."""
        from tqdm.auto import tqdm

        if self.started is None:
            self.started = time.perf_counter()
        began = time.perf_counter()
        self.incumbent, self.objective = incumbent, objective
        limit = self.stop.limit_s
        bar = tqdm(
            total=limit if math.isfinite(limit) else None,
            desc=self.desc,
            unit="s",
            leave=False,
            disable=True if self.quiet else None,
            bar_format="{desc}: {n:.0f} of {total:.0f} s {postfix}"
            if math.isfinite(limit)
            else "{desc}: {n:.0f} s {postfix}",
        )
        shown = -math.inf
        reason = ""
        interrupted = False
        try:
            while True:
                progress = Progress(
                    self.iterations, self.improvements, self.stalled, self.elapsed_s()
                )
                if self.stop(progress):
                    reason = self.stop.reason
                    break
                kept = self.improvements
                self.stalled += 1
                try:
                    step(self)
                except Exhausted:
                    reason = "exhausted"
                    break
                self.iterations += 1
                if self.improvements > kept:
                    shown = -math.inf  # redraw at once after an improvement
                if not bar.disable and progress.elapsed_s - shown >= PROGRESS_EVERY_S:
                    shown = progress.elapsed_s
                    bar.n = min(self.elapsed_s(), limit)
                    bar.set_postfix_str(
                        f"{self.note}{': ' if self.note else ''}"
                        f"{self.objective_name} {self.objective:.6g}"
                    )
        except KeyboardInterrupt:
            interrupted, reason = True, "interrupted"
            logger.warning(
                "%s: interrupted; keeping the incumbent (%s %.6g)",
                self.desc,
                self.objective_name,
                self.objective,
            )
        finally:
            bar.close()
        assert self.incumbent is not None
        return SearchResult(
            incumbent=self.incumbent,
            objective=self.replayed(self.incumbent, self.objective),
            iterations=self.iterations,
            improvements=self.improvements,
            stop_reason=reason,
            interrupted=interrupted,
            wall_s=time.perf_counter() - began,
        )
