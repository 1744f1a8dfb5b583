"""docs/README.md is the index of the documentation: it links every page in docs/ and every
study folder in docs/results/, and every link it has leads to a file or folder that exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = ROOT / "docs"


def links() -> set[str]:
    return set(re.findall(r"\]\(([^)#]+)\)", (DOCS / "README.md").read_text()))


def test_the_index_links_every_page_and_every_result():
    linked = {link.rstrip("/") for link in links()}
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"}
    results = {p.name for p in (DOCS / "results").iterdir() if p.is_dir()}
    linked_results = {link.split("/")[1] for link in linked if link.startswith("results/")}
    assert pages - linked == set(), "pages missing from docs/README.md"
    assert results - linked_results == set(), "result folders missing from docs/README.md"
    assert "ui" in linked


def test_every_link_of_the_index_exists():
    assert [link for link in links() if not (DOCS / link).exists()] == []
