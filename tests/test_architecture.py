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


# packages drawn as one unit by the layering rule; every other module of lwl is its own unit
UNITS = ("lwl/design", "lwl/evaluation", "lwl/measures", "lwl/oracles", "lwl/models", "lwl/experiments",
         "lwl/ui", "lwl/integrations", "service", "worker")


def _unit(module: str, root: Path) -> str | None:
    """The unit (see UNITS) of a module name of this tree; None for a third-party module."""
    path = root / module.replace(".", "/")
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.exists():
            rel = candidate.relative_to(root).as_posix()
            return next((u for u in UNITS if rel.startswith(u + "/")), rel)
    return None


def _loops(root: Path = ROOT) -> list[list[str]]:
    """Strongly connected sets of units (more than one unit each) of the import graph of lwl/,
    service/ and worker/; a package's face (__init__.py) counts for nothing."""
    graph: dict[str, set[str]] = {}
    for package in ("lwl", "service", "worker"):
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            here = _unit(".".join(path.relative_to(root).with_suffix("").parts), root)
            for _, module in _imports(path, root):
                there = _unit(module, root)
                if there is not None and there != here and not there.endswith("__init__.py"):
                    graph.setdefault(here, set()).add(there)
    return _strongly_connected(graph)


def test_no_two_units_import_each_other():
    assert _loops() == []


def test_the_loop_rule_sees_a_loop_through_a_third_module(tmp_path):
    (tmp_path / "lwl" / "design").mkdir(parents=True)
    (tmp_path / "lwl" / "design" / "step.py").write_text("from lwl.bound import b\n")
    (tmp_path / "lwl" / "bound.py").write_text("def f():\n    from lwl.defaults import d\n")
    (tmp_path / "lwl" / "defaults.py").write_text("import lwl.design.step\n")
    (tmp_path / "lwl" / "spec.py").write_text("from lwl.bound import b\n")
    (tmp_path / "service").mkdir()
    (tmp_path / "worker").mkdir()
    assert _loops(tmp_path) == [["lwl/bound.py", "lwl/defaults.py", "lwl/design"]]


def _module_file(module: str, root: Path) -> str | None:
    """The source file of a module name of this tree (None: third-party, or a package's face)."""
    path = root / module.replace(".", "/")
    return path.with_suffix(".py").relative_to(root).as_posix() if path.with_suffix(".py").exists() else None


def _file_loops(root: Path = ROOT) -> list[list[str]]:
    """Files of lwl/, service/ and worker/ that import each other in a loop, at module level or
    inside functions (packages' __init__ faces left out: they only hand names on)."""
    graph: dict[str, set[str]] = {}
    for package in ("lwl", "service", "worker"):
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__init__.py":
                continue
            here = path.relative_to(root).as_posix()
            for _, module in _imports(path, root):
                there = _module_file(module, root)
                if there is not None and there != here:
                    graph.setdefault(here, set()).add(there)
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def test_no_two_files_import_each_other():
    assert _file_loops() == []


def test_the_file_rule_sees_a_loop_inside_a_package(tmp_path):
    (tmp_path / "lwl" / "oracles").mkdir(parents=True)
    (tmp_path / "lwl" / "oracles" / "base.py").write_text("def f():\n    from lwl.oracles.http import check_url\n")
    (tmp_path / "lwl" / "oracles" / "http.py").write_text("from lwl.oracles.base import f\n")
    (tmp_path / "service").mkdir()
    (tmp_path / "worker").mkdir()
    assert _file_loops(tmp_path) == [["lwl/oracles/base.py", "lwl/oracles/http.py"]]
