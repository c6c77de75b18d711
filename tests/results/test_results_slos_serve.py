"""Guard of docs/results.md: slos-serve's quick profile against its stored figures.

The figures come from ``slolab.benchmarks.results.PAPERS['slos-serve']`` (what ``python -m
slolab.benchmarks.results --quick --only slos-serve`` writes). The stored values are in
``test_results_slos_serve/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_slos_serve_quick_figures(guard):
    """SLOs-Serve's quick capacities against Sarathi and vLLM and the ~2x verdicts match the stored ones."""
    guard(guarded(PAPERS["slos-serve"](True)))
