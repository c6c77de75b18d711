"""Guard of docs/results.md: hyperflexis's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['hyperflexis']`` (what ``python -m
slolab.benchmarks.results --quick --only hyperflexis`` writes). The stored values are in
``test_results_hyperflexis/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_hyperflexis_quick_figures(guard):
    """HyperFlexis's quick dispatch-scale windows (statuses, optima) match the stored ones."""
    guard(guarded(PAPERS["hyperflexis"](True)))
