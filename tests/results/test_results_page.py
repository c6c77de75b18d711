"""docs/results.md is exactly the rendering of the committed full profile (no hand edits)."""

import pytest
from slolab.benchmarks import render


def test_results_page_is_rendered_from_full_json():
    """Rendering docs/results/full.json gives the committed docs/results.md, byte for byte."""
    data = render.load()
    assert data["header"]["profile"] == "full"
    assert render.render(data) == render.PAGE.read_text()


@pytest.mark.parametrize("name", sorted(render.PAPER_PAGES))
def test_each_paper_page_carries_its_rendered_block(name):
    """Each per-paper page's results block is the rendering of the committed full profile."""
    data = render.load()
    page = render.paper_page(name).read_text()
    assert render.splice(page, name, render.render_block(data, name)) == page
    # the block is really there, not an empty pair of markers
    begin, end = render.block_markers(name)
    inside = page.partition(begin + "\n")[2].partition(end)[0]
    assert inside == render.render_block(data, name) and "|" in inside


def test_a_page_without_its_markers_is_refused():
    """A page that lost its markers fails loudly rather than losing its block silently."""
    with pytest.raises(ValueError, match="exactly one pair of markers for 'proserve'"):
        render.splice("# ProServe\n\nno block here\n", "proserve", "x\n")


def test_a_part_from_an_earlier_run_is_named_with_its_run():
    """After ``--docs --only NAME``, the parts not re-run keep their own date and commit, and
    the page says so beside them instead of claiming the header's run."""
    import copy

    data = copy.deepcopy(render.load())
    names = list(data["papers"])
    h = data["header"]
    for name in names:
        data["papers"][name]["run"] = {k: h[k] for k in ("date_utc", "commit", "dirty")}
    assert "earlier run" not in render.render(data)
    data["papers"][names[0]]["run"] = {
        "date_utc": "2000-01-01 00:00",
        "commit": "0ld",
        "dirty": True,
    }
    data["header"]["ran"] = names[1:]
    page = render.render(data)
    assert page.count("From an earlier run than the header's") == 1
    assert "run 2000-01-01 00:00 UTC at commit `0ld` (uncommitted changes)" in page
    assert f"{names[0]} come from earlier runs" in page
    block = render.render_block(data, names[0])
    assert "commit `0ld`" in block and "an earlier run than the last one" in block
    assert "the same run as" in render.render_block(data, names[1])
