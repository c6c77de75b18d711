"""Guard of docs/results.md: the deployment planner's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['deployment']`` (what ``python -m
slolab.benchmarks.results --quick --only deployment`` writes). The stored values are in
``test_results_deployment/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_deployment_quick_figures(guard):
    """The nested grids' fleets, costs, attainments and the nesting verdict match the stored
    ones."""
    guard(guarded(PAPERS["deployment"](True)))
