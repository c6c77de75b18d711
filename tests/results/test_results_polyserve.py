"""Guard of docs/results.md: polyserve's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['polyserve']`` (what ``python -m
slolab.benchmarks.results --quick --only polyserve`` writes). The stored values are in
``test_results_polyserve/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_polyserve_quick_figures(guard):
    """PolyServe's quick goodputs, bounds, long-prompt attainment and capacities match the stored ones."""
    guard(guarded(PAPERS["polyserve"](True)))
