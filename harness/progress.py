"""Progress display for runs whose own loop cannot report (a solver call, say)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from tqdm.auto import tqdm

#: Seconds between two updates of :func:`elapsed_bar`.
TICK_S = 0.5


@contextmanager
def elapsed_bar(
    desc: str, limit_s: float, enabled: bool = True, file: IO[str] | None = None
) -> Iterator[None]:
    """Show the wall time spent in the ``with`` block against a time limit.

    A tqdm bar of seconds, updated every :data:`TICK_S` by a background thread while the
    block runs; shown on a terminal only (tqdm's ``disable=None``), never when ``enabled``
    is False, and removed when the block ends (normally or by an exception).

    Parameters
    ----------
    desc : str
        Label, such as ``"solve highs"``.
    limit_s : float
        The run's time limit in seconds (the bar's end).
    enabled : bool
        False silences it (``--quiet``, ``--json``).
    file : text stream, optional
        Where to draw (default: standard error).
    """
    bar = tqdm(
        total=limit_s,
        desc=desc,
        unit="s",
        leave=False,
        disable=None if enabled else True,
        bar_format="{desc}: {n:.0f} of {total:.0f} s {bar}",
        file=file,
    )
    if bar.disable:
        yield
        return
    stop = threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        while not stop.wait(TICK_S):
            bar.n = min(time.perf_counter() - start, limit_s)
            bar.refresh()

    ticker = threading.Thread(target=tick, name="slolab-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.close()
