"""Guard of docs/timing.md's fidelity block: the timing model against real serving.

The figures come from ``slolab.benchmarks.results.PAPERS['fidelity']`` (what ``python -m
slolab.benchmarks.results --quick --only fidelity`` writes). The stored values are in
``test_results_fidelity/`` beside this file; a deliberate change regenerates them with ``python
-m pytest tests/results --force-regen`` and the diff shows each figure before and after.
"""

from slolab.benchmarks.results import PAPERS, guarded


def test_fidelity_quick_figures(guard):
    """The fitted serving terms, the errors before, fitted and held out, each preset's
    real-hardware error and the verdicts on the targets match the stored ones."""
    guard(guarded(PAPERS["fidelity"](True)))
