"""SCIP set up for branch-and-price: the one configuration both SCIP trees of the project use.

The models own their pricers and branching rules (:mod:`slolab.models.sa_bp`,
:mod:`slolab.models.tdg_bp`); what they share is how SCIP itself is set: presolve, separation
and SCIP's primal heuristics off (the master is a restricted column set that presolve and
SCIP's cuts would not know how to extend), Ctrl-C left to the caller, one thread, a seeded
randomization, and optionally the node of the least bound always next.
"""

from __future__ import annotations

from typing import Any

__all__ = ["price_model"]


def price_model(name: str, seed: int, best_first: bool = True) -> Any:
    """A ``pyscipopt.Model`` named ``name`` set up for branch-and-price, seeded by ``seed``;
    with ``best_first``, best-bound node selection with no plunging (the open node of the least
    bound is always solved next)."""
    import pyscipopt

    model = pyscipopt.Model(name)
    model.hideOutput()
    model.setPresolve(pyscipopt.SCIP_PARAMSETTING.OFF)
    model.setSeparating(pyscipopt.SCIP_PARAMSETTING.OFF)
    model.setHeuristics(pyscipopt.SCIP_PARAMSETTING.OFF)
    model.setParam("misc/catchctrlc", False)
    model.setParam("randomization/randomseedshift", int(seed))
    model.setParam("parallel/maxnthreads", 1)
    if best_first:
        model.setParam("nodeselection/bfs/stdpriority", 10_000_000)
        model.setParam("nodeselection/bfs/minplungedepth", 0)
        model.setParam("nodeselection/bfs/maxplungedepth", 0)
    return model
