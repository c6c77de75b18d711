"""docs/results.md is exactly the rendering of the committed full profile (no hand edits)."""

from slolab.benchmarks import render


def test_results_page_is_rendered_from_full_json():
    """Rendering docs/results/full.json gives the committed docs/results.md, byte for byte."""
    data = render.load()
    assert data["header"]["profile"] == "full"
    assert render.render(data) == render.PAGE.read_text()
