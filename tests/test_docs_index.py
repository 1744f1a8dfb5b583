"""docs/README.md is the index of the documentation: it links every page in docs/, every page of
the method reference in docs/method/ and every study folder in docs/results/ (with its README.md,
the study's measurement log, where it has one), and every link it has leads to a file or folder
that exists."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = ROOT / "docs"


def links() -> set[str]:
    return set(re.findall(r"\]\(([^)#]+)\)", (DOCS / "README.md").read_text()))


def test_the_index_links_every_page_and_every_result():
    linked = {link.rstrip("/") for link in links()}
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"}
    method_pages = {f"method/{p.name}" for p in (DOCS / "method").glob("*.md")}
    results = {p.name for p in (DOCS / "results").iterdir() if p.is_dir()}
    linked_results = {link.split("/")[1] for link in linked if link.startswith("results/")}
    result_logs = {f"results/{p.parent.name}/README.md" for p in (DOCS / "results").glob("*/README.md")}
    assert pages - linked == set(), "pages missing from docs/README.md"
    assert method_pages - linked == set(), "docs/method/ pages missing from docs/README.md"
    assert results - linked_results == set(), "result folders missing from docs/README.md"
    assert result_logs - linked == set(), "results READMEs (measurement logs) missing from docs/README.md"
    assert "ui" in linked


def test_the_method_page_map_links_every_method_page():
    method = DOCS / "method"
    mapped = set(re.findall(r"\]\(([^)#/]+\.md)\)", (method / "README.md").read_text()))
    assert {p.name for p in method.glob("*.md") if p.name != "README.md"} - mapped == set()


def test_every_link_of_the_index_exists():
    assert [link for link in links() if not (DOCS / link).exists()] == []
