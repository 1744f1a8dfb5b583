"""The fast loop (``./scripts/test.sh --fast``) leaves out tests marked server, browser,
distributed or slow: a module that starts such processes must carry the mark (on the module,
or on the tests that start them)."""

from __future__ import annotations

import re

from tests.conftest import ROOT

# what a test module writes when it starts each kind of process
STARTS = {"server": re.compile(r"\bServer\(|\bstart_worker\(|\bProc\("),
          "browser": re.compile(r"chromium"),
          "distributed": re.compile(r"\bredis_url\b|\bpostgres_url\b")}


def test_modules_that_start_processes_are_marked():
    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name == "test_markers.py":
            continue
        text = path.read_text()
        for mark, pattern in STARTS.items():
            if pattern.search(text) and f"pytest.mark.{mark}" not in text:
                unmarked.append(f"{path.relative_to(ROOT)}: {mark}")
    assert unmarked == []
