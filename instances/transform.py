"""Workload transformations: windows, prefixes, rate scaling, re-timing and sampling.

Every function returns a new :class:`~slolab.instances.records.Workload` (extra columns such as
``hash_ids`` or ``task`` travel with their rows) whose ``source`` records what was done, for
example ``"azure_conv_2023.csv | window [600, 660) s | rate x2.5"``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from slolab.instances.records import Workload

#: Named arrival processes for :func:`draw_arrivals`.
ARRIVAL_PROCESSES = ("poisson", "gamma", "uniform")


def _check_seed(seed: Any, what: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"{what} needs an integer seed, got {seed!r}")
    return int(seed)


def _check_rate(rate: Any) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.number)):
        raise ValueError(f"rate must be a number of requests per second, got {rate!r}")
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a finite number > 0 (requests per second), got {rate!r}")
    return float(rate)


def _rebuild(workload: Workload, columns: dict[str, np.ndarray], note: str) -> Workload:
    return workload.derived(columns, source=f"{workload.source} | {note}")


def draw_arrivals(
    n: int, process: str, rate: float, seed: int | None = None, cv: float | None = None
) -> np.ndarray:
    """Arrival times (s) of ``n`` requests from a named process, the first at 0.

    Parameters
    ----------
    n : int
        Number of requests (>= 1).
    process : {"poisson", "gamma", "uniform"}
        ``"poisson"``: exponential gaps of mean ``1 / rate``. ``"gamma"``: gamma gaps of mean
        ``1 / rate`` and coefficient of variation ``cv`` (shape ``1 / cv**2``, scale
        ``cv**2 / rate``; ``cv = 1`` is Poisson, larger is burstier). ``"uniform"``: evenly
        spaced at ``1 / rate`` (deterministic).
    rate : float
        Mean arrival rate in requests per second.
    seed : int
        Required for ``"poisson"`` and ``"gamma"``.
    cv : float
        Required for ``"gamma"`` (> 0).

    Returns
    -------
    numpy.ndarray
        ``n`` non-decreasing times; ``n - 1`` gaps follow the process.
    """
    if process not in ARRIVAL_PROCESSES:
        raise ValueError(
            f"unknown arrival process {process!r}; known: {', '.join(ARRIVAL_PROCESSES)}"
        )
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rate = _check_rate(rate)
    if process == "uniform":
        return np.arange(n, dtype=float) / rate
    rng = np.random.default_rng(_check_seed(seed, f"arrival process {process!r}"))
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n - 1)
    else:
        if cv is None or not (math.isfinite(cv) and cv > 0):
            raise ValueError(f"the gamma arrival process needs cv > 0, got {cv!r}")
        shape = 1.0 / cv**2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def uniform_lengths(
    n: int,
    max_prompt_tokens: int,
    max_output_tokens: int,
    *,
    rate: float,
    seed: int,
    arrivals: str = "poisson",
) -> Workload:
    """``n`` requests with prompt and output lengths drawn uniformly from
    ``[1, max_prompt_tokens]`` and ``[1, max_output_tokens]``, arriving by ``arrivals`` at
    ``rate`` req/s (PolyServe's synthetic ``uniform_4096_1024`` trace is ``8192, 2048``).

    References
    ----------
    PolyServe, Sec. 5.1 (Table of traces) and 5.3 (uniform input [1, 8192], output [1, 2048]).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for name, value in (
        ("max_prompt_tokens", max_prompt_tokens),
        ("max_output_tokens", max_output_tokens),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    rng = np.random.default_rng(_check_seed(seed, "uniform_lengths"))
    prompt = rng.integers(1, max_prompt_tokens + 1, size=n)
    output = rng.integers(1, max_output_tokens + 1, size=n)
    return Workload(
        {
            "arrival_s": draw_arrivals(n, arrivals, rate, seed=seed + 1),
            "prompt_tokens": prompt,
            "output_tokens": output,
        },
        source=f"uniform [1, {max_prompt_tokens}] x [1, {max_output_tokens}] ({n} requests)",
    )


def mean_rate(workload: Workload) -> float:
    """Mean arrival rate (requests per second): ``(n - 1) / (last - first arrival)``.

    This is the reciprocal of the mean inter-arrival gap, so :func:`scale_rate` hits its
    target exactly. Needs at least two requests spread over a positive time.
    """
    arr = workload.arrival_s
    if len(arr) < 2 or not arr[-1] > arr[0]:
        raise ValueError(
            f"{workload.source}: the mean rate needs >= 2 requests over a positive time span, "
            f"got {len(arr)} request(s) over {float(arr[-1] - arr[0]) if len(arr) else 0.0} s"
        )
    return float((len(arr) - 1) / (arr[-1] - arr[0]))


def window(workload: Workload, start_s: float, end_s: float, rezero: str = "start") -> Workload:
    """Requests arriving in ``[start_s, end_s)``, with times re-zeroed.

    Parameters
    ----------
    workload : Workload
    start_s, end_s : float
        Window bounds in seconds of the workload's clock (``start_s < end_s``).
    rezero : {"start", "first"}
        Subtract ``start_s`` (default: the window's own clock, idle time before the first
        arrival kept) or the first arrival in the window (the first request arrives at 0).

    Raises
    ------
    ValueError
        When no request arrives in the window.
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s) and start_s < end_s):
        raise ValueError(f"window needs finite start_s < end_s, got [{start_s}, {end_s})")
    if rezero not in ("start", "first"):
        raise ValueError(f"rezero must be 'start' or 'first', got {rezero!r}")
    arr = workload.arrival_s
    lo, hi = np.searchsorted(arr, [start_s, end_s], side="left")
    if hi <= lo:
        raise ValueError(f"{workload.source}: no request arrives in [{start_s}, {end_s}) s")
    cols = {name: workload[name][lo:hi] for name in workload.columns}
    origin = start_s if rezero == "start" else arr[lo]
    cols["arrival_s"] = arr[lo:hi] - origin
    return _rebuild(workload, cols, f"window [{start_s}, {end_s}) s")


def first_n(workload: Workload, n: int) -> Workload:
    """The first ``n`` requests (by arrival; times unchanged)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if n > len(workload):
        raise ValueError(
            f"{workload.source}: asked for the first {n} requests, it has {len(workload)}"
        )
    cols = {name: workload[name][:n] for name in workload.columns}
    return _rebuild(workload, cols, f"first {n}")


def scale_rate(workload: Workload, rate: float) -> Workload:
    """Compress (or stretch) time so the mean arrival rate becomes ``rate``.

    Every gap is multiplied by ``mean_rate(workload) / rate``, so the shape of the arrival
    process (its burstiness, the coefficient of variation of the gaps) is preserved and the
    first request keeps its time.

    Parameters
    ----------
    workload : Workload
        At least two requests over a positive time span.
    rate : float
        Target mean rate in requests per second (see :func:`mean_rate`).

    References
    ----------
    ProServe Sec. 5.1 ("expands the timestamps according to a pre-defined overall request
    rate, and then replays the requests following the scaled intervals").
    """
    target = _check_rate(rate)
    factor = mean_rate(workload) / target
    arr = workload.arrival_s
    cols = {name: workload[name] for name in workload.columns}
    cols["arrival_s"] = arr[0] + (arr - arr[0]) * factor
    return _rebuild(workload, cols, f"rate {target:g}/s")


def retime(
    workload: Workload, process: str, rate: float, seed: int | None = None, cv: float | None = None
) -> Workload:
    """Replace the arrival times by draws from a named process (rows keep their order).

    See :func:`draw_arrivals` for the processes and parameters; the first request arrives at 0.
    """
    cols = {name: workload[name] for name in workload.columns}
    cols["arrival_s"] = draw_arrivals(len(workload), process, rate, seed=seed, cv=cv)
    note = f"{process} arrivals at {float(rate):g}/s"
    if seed is not None:
        note += f" (seed {seed})"
    return _rebuild(workload, cols, note)


def retime_poisson(workload: Workload, rate: float, seed: int) -> Workload:
    """Poisson arrivals at ``rate`` requests per second (requests keep their order)."""
    return retime(workload, "poisson", rate, seed=_check_seed(seed, "retime_poisson"))


def sample(workload: Workload, k: int, seed: int) -> Workload:
    """``k`` requests drawn without replacement, kept in arrival order with their times."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= len(workload):
        raise ValueError(f"k must be an integer in [1, {len(workload)}], got {k!r}")
    rng = np.random.default_rng(_check_seed(seed, "sample"))
    rows = np.sort(rng.choice(len(workload), size=int(k), replace=False))
    cols = {name: workload[name][rows] for name in workload.columns}
    return _rebuild(workload, cols, f"sample {k} (seed {seed})")
