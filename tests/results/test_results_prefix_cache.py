"""Guard of docs/results.md: prefix_cache's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['prefix_cache']`` (what ``python -m
slolab.benchmarks.results --quick --only prefix_cache`` writes). The stored values are in
``test_results_prefix_cache/`` beside this file; a deliberate change regenerates them with
``python -m pytest tests/results --force-regen`` and the diff shows each figure before and
after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_prefix_cache_quick_figures(guard):
    """Prefix caching's quick figures (Mooncake reuse, hit rates by router, capacity off and on) match the stored ones."""
    guard(guarded(PAPERS["prefix_cache"](True)))
