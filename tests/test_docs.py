"""The README is a front door (at most 250 lines) and every relative link in it and in docs/ resolves: to a file
of the repository and, with an anchor, to a heading of that file."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)")


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of the headings of a markdown file."""
    headings = re.findall(r"^#{1,6} (.*)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_the_readme_is_a_front_door():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page):
    for target, anchor in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: {target} does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path), f"{page.name}: no heading #{anchor} in {path.name}"
