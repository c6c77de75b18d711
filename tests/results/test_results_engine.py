"""Guard of docs/results.md: engine's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['engine']`` (what ``python -m
slolab.benchmarks.results --quick --only engine`` writes). The stored values are in
``test_results_engine/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_engine_quick_figures(guard):
    """Engine speed's quick figures (tokens simulated, attainment on 2,000 Azure conv requests) match the stored ones."""
    guard(guarded(PAPERS["engine"](True)))
