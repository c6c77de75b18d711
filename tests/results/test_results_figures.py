"""The figures the docs show exist and were drawn from the committed full profile's JSON.

Each SVG carries in its metadata the paper, the run (date and commit) and a SHA-256 of the
paper's figures and series it was drawn from (:func:`slolab.harness.figures.provenance`); a
figure left over from another run, or drawn before its data moved, fails here. The images
themselves are not compared (fonts and anti-aliasing differ between machines).
"""

import re
from pathlib import Path

import pytest
from slolab.benchmarks import render
from slolab.harness import figures

DOCS = render.ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [render.ROOT / "README.md"]
NAMED = re.compile(r"\]\((?:docs/)?results/([\w.-]+\.svg)\)")


def _named() -> list[tuple[Path, str]]:
    return [(page, name) for page in PAGES for name in NAMED.findall(page.read_text())]


def _description(svg: Path) -> str:
    found = re.search(r"<dc:description>(.*?)</dc:description>", svg.read_text(), re.S)
    assert found, f"{svg.name} has no description in its metadata"
    return found.group(1)


def test_the_docs_show_every_figure_the_full_profile_draws():
    """docs/results.md embeds each figure the committed JSON can draw, and the README one."""
    data = render.load()
    shown = {name for page, name in _named() if page == render.PAGE}
    assert shown == {f"{f.name}.svg" for f in figures.result_figures(data)}
    assert any(page.name == "README.md" for page, _ in _named())


@pytest.mark.parametrize(("page", "name"), _named(), ids=lambda v: getattr(v, "name", v))
def test_each_figure_a_page_names_was_drawn_from_the_same_run(page, name):
    """The file exists and its metadata names the committed JSON's run and data digest."""
    svg = DOCS / "results" / name
    assert svg.is_file(), f"{page.name} shows {name}, which is not in docs/results/"
    data = render.load()
    (figure,) = [f for f in figures.RESULT_FIGURES if f"{f.name}.svg" == name]
    assert figure.available(data)
    expected = figures.provenance(data, figure, "docs/results/full.json")
    # e.g. "... run 2026-11-29 09:52 UTC at commit 700222902a; data sha256 8a76..."
    assert _description(svg) == expected


def test_no_stale_figure_is_left_in_docs_results():
    """Every SVG under docs/results/ is one the committed JSON draws."""
    data = render.load()
    drawn = {f"{f.name}.svg" for f in figures.result_figures(data)}
    assert {p.name for p in (DOCS / "results").glob("*.svg")} == drawn
