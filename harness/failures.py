"""How the command line reports a run that failed: a plugin's exception and a stalled run.

A :class:`slolab.plugins.PluginFailure` (an exception raised inside a policy, router or
scaler from outside slolab, during a simulation) is one line on stderr naming the plugin, the exception, the
plugin's file and line and, in a simulation, the simulated time and server; ``slolab
--traceback`` (or :data:`slolab.plugins.TRACEBACK_ENV` set) prints the original traceback
first. A run with requests left neither finished nor rejected
(:class:`slolab.sim.engine.UnsettledRunError`) is one line too. Both exit with
:data:`EXIT_RUN_FAILED`; slolab's own errors keep their one-line form and status 2.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Mapping
from typing import Any, TextIO

#: Exit status of a command whose run failed: a plugin raised, the run stalled (without
#: ``--allow-stall``) or its requests do not add up.
EXIT_RUN_FAILED = 1


def report_failure(
    exc: BaseException, show_traceback: bool, file: TextIO | None = None
) -> int | None:
    """Print ``exc`` as one line when it is a run failure and return the exit status; None
    for any other exception (the caller reports it as before)."""
    from slolab.plugin_loading import PluginFailure, traceback_wanted
    from slolab.sim.engine import UnsettledRunError

    file = sys.stderr if file is None else file
    if isinstance(exc, UnsettledRunError):
        print(f"slolab: error: {exc}", file=file)
        return EXIT_RUN_FAILED
    if not isinstance(exc, PluginFailure):
        return None
    if show_traceback or traceback_wanted():
        traceback.print_exception(exc.__cause__ or exc, file=file)
        print(f"slolab: error: {exc}", file=file)
    else:
        print(f"slolab: error: {exc} (--traceback shows the whole traceback)", file=file)
    return EXIT_RUN_FAILED


def stall_status(summary: Mapping[str, Any], allow_stall: bool, file: TextIO | None = None) -> int:
    """Exit status of ``slolab simulate`` after its summary: 0, or when the run stalled and
    ``allow_stall`` is off, :data:`EXIT_RUN_FAILED` with one line naming the stall."""
    if not (summary.get("stalled") or summary.get("rejected_held")) or allow_stall:
        return 0
    print(
        f"slolab: error: {summary['stall']} (--allow-stall keeps such a run, exit status 0)",
        file=sys.stderr if file is None else file,
    )
    return EXIT_RUN_FAILED
