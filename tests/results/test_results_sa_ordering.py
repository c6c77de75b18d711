"""Guard of docs/results.md: sa-ordering's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['sa-ordering']`` (what ``python -m
slolab.benchmarks.results --quick --only sa-ordering`` writes). The stored values are in
``test_results_sa_ordering/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_sa_ordering_quick_figures(guard):
    """SA ordering's quick figures (HiGHS optima, SA/ordering gaps, the 1% verdict) match the stored ones."""
    guard(guarded(PAPERS["sa-ordering"](True)))
