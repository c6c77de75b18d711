"""Guard of docs/results.md: proserve's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['proserve']`` (what ``python -m
slolab.benchmarks.results --quick --only proserve`` writes). The stored values are in
``test_results_proserve/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_proserve_quick_figures(guard):
    """ProServe's quick tdg-batch and tdg-horizon optima and SlideBatching's gaps match the stored ones."""
    guard(guarded(PAPERS["proserve"](True)))
