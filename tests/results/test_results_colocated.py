"""Guard of docs/results.md: colocated's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['colocated']`` (what ``python -m
slolab.benchmarks.results --quick --only colocated`` writes). The stored values are in
``test_results_colocated/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_colocated_quick_figures(guard):
    """Every co-located policy's quick attainment at fixed rates matches the stored one."""
    guard(guarded(PAPERS["colocated"](True)))
