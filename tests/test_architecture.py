"""The layering rules of docs/architecture.md, checked on the source: the library (``lwl``)
never imports its faces (``service``, ``worker``) nor the HTTP client; the worker builds on the
service's core (store, queue, settings), never on the API's routes or app."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative imports resolved against its package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def _violations(package: str, forbidden, root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted((root / package).rglob("*.py")):
        for line, module in _imports(path, root):
            if any(module == f or module.startswith(f + ".") for f in forbidden):
                found.append(f"{path.relative_to(root)}:{line} imports {module}")
    return found


def test_the_library_never_imports_its_faces():
    assert _violations("lwl", ("service", "worker", "lwl.client")) == []


def test_the_worker_never_imports_the_api():
    assert _violations("worker", ("service.app", "service.routers", "service.deps", "service.openapi",
                                  "service.cli")) == []


def test_the_core_never_imports_the_api_or_the_worker():
    forbidden = ("service.app", "service.routers", "service.deps", "worker")
    assert [v for v in _violations("service/core", forbidden)] == []


@pytest.mark.parametrize("source, bad", [
    ("from service.core.store import Store\n", True),
    ("import worker.tasks\n", True),
    ("from lwl.client import Client\n", True),
    ("from lwl.measures import Gaussian\n", False),
    ("from . import client\n", True),  # relative, inside lwl/
])
def test_the_rule_sees_imports_in_every_form(tmp_path, source, bad):
    (tmp_path / "lwl" / "design").mkdir(parents=True)
    (tmp_path / "lwl" / "design" / "probe.py").write_text(source.replace("from . import", "from .. import"))
    assert bool(_violations("lwl", ("service", "worker", "lwl.client"), root=tmp_path)) == bad
