"""Brute-force backend: the model's own exhaustive search, run against a deadline."""

from __future__ import annotations

import time

from slolab.solvers.backend import Backend, RawSolve, model_label, summary_line
from slolab.solvers.base import ExactModel, Status


class BruteForceBackend(Backend):
    """Runs :meth:`ExactModel.brute_force` (tiny instances only); takes no options.

    A finished search is OPTIMAL (its value is also the bound) or INFEASIBLE; a search that
    raises :class:`TimeoutError` is TIME_LIMIT with no incumbent. ``threads`` and ``seed`` do
    not apply.
    """

    name = "brute"
    formulation = "brute"

    def solve_brute(self, model: ExactModel, time_limit: float) -> RawSolve:
        """Enumerate every decision of ``model`` within ``time_limit`` seconds."""
        start = time.perf_counter()
        try:
            found = model.brute_force(time_limit)
        except TimeoutError:
            found, timed_out = None, True
        else:
            timed_out = False
        runtime_s = time.perf_counter() - start
        if timed_out:
            status = Status.TIME_LIMIT
            message = f"search of {model_label(model)!r} stopped at the time limit"
        elif found is None:
            status = Status.INFEASIBLE
            message = "no feasible decision"
        else:
            status = Status.OPTIMAL
            message = "every decision enumerated"
        value = None if found is None else float(found[0])
        return RawSolve(
            status=status,
            objective=value,
            bound=value,
            runtime_s=runtime_s,
            schedule=None if found is None else found[1],
            log=summary_line("brute", message),
            backend=self.name,
            details={"solver_status": status.value},
        )
