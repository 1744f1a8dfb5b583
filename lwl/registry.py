"""Registries: everything a job spec chooses by name (families, models, algorithms, kernels,
baselines, oracles, test-member kinds).

An entry carries the pydantic **parameter model** of its spec block (the wire format, with a
``name: Literal[...]`` field), its **builder** and its **compatibility check** (a function of the
whole job spec that raises ``ValueError("field.path: why")``). :mod:`lwl.spec` derives the
``family`` / ``model`` / ``algorithm`` unions of :class:`lwl.spec.JobSpec` from these registries
and rebuilds them when an entry is added, so a new family or algorithm is one module plus one
``register`` call; the service's catalog and OpenAPI document list whatever is registered.

Builders may be given as ``"module:attribute"`` strings, imported on first use: the spec layer
can then name the built-in algorithms without importing them (and without import cycles).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # (annotations only: importing lwl stays light, issue 85)
    from pydantic import BaseModel


@dataclass
class Entry:
    """One registered name. ``extra`` holds kind-specific facts (e.g. an algorithm's
    ``evaluate`` hook and ``final_steps``, its default ``baselines``)."""

    name: str
    params: type[BaseModel]
    build: Callable[..., Any] | str | None = None
    check: Callable[[Any], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def resolve(self, what: str = "build") -> Callable[..., Any] | None:
        """The callable stored under ``build`` or ``extra[what]``, importing a ``"module:attr"``."""
        target = self.build if what == "build" else self.extra.get(what)
        if isinstance(target, str):
            module, _, attr = target.partition(":")
            obj = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part)
            target = obj
            if what == "build":
                self.build = target
            else:
                self.extra[what] = target
        return target

    @property
    def doc(self) -> str:
        source = self.params if self.params is not None else self.build
        return (getattr(source, "__doc__", None) or "").strip().split("\n\n")[0]


_FIRST_READ: list[str] = []  # modules imported on the first read of a component registry (on_first_read)


class _Load:
    """Where the first-read import stands: not yet (or failed: tried again at the next read),
    under way (a read from inside it, by the importing thread, sees what is registered so far),
    done. One thread imports; another thread's read waits for it."""

    lock = threading.RLock()
    state = "idle"  # "idle" | "loading" | "loaded"


def on_first_read(module: str) -> None:
    """Import ``module`` (whose import registers components) the first time a component registry
    is read: ``lwl`` names :mod:`lwl.builtins` here, so that importing the package costs nothing
    (the light client path) and every reader still sees every built-in name."""
    _FIRST_READ.append(module)


def _load_on_first_read() -> None:
    """Import the first-read modules once. A read made while one of lwl's own modules is still
    being imported (``from lwl.models import ...`` first: its parameter models read the kernel
    registry at class creation) can meet that module half-imported in the built-ins' import
    chain; that attempt is given up, the reader sees what is registered so far (the spec blocks
    rebuild as names register), and the next read imports them again. Any other error is raised,
    and the next read tries again too."""
    if _Load.state == "loaded":
        return
    with _Load.lock:
        if _Load.state != "idle":  # loaded meanwhile, or this thread's own read from inside the load
            return
        _Load.state = "loading"
        try:
            for module in _FIRST_READ:
                importlib.import_module(module)
        except ImportError as exc:
            _Load.state = "idle"
            if "partially initialized module" in str(exc):  # CPython's words for an import cycle
                return
            raise
        except BaseException:
            _Load.state = "idle"
            raise
        _Load.state = "loaded"


def _registered_by_lwl() -> bool:
    """Whether :meth:`Registry.register` was called from lwl's own code (a built-in registering
    itself, possibly while the built-ins load) rather than a plugin's."""
    import sys

    caller = sys._getframe(2).f_globals.get("__name__", "")
    return caller == "lwl" or caller.startswith("lwl.")


class Registry:
    """Name -> :class:`Entry` for one kind of component (``family``, ``model``, ``algorithm``).
    ``builtin``: a registry of lwl's components, which a read fills first (:func:`on_first_read`)."""

    def __init__(self, kind: str, builtin: bool = False):
        self.kind = kind
        self.builtin = builtin
        self._entries: dict[str, Entry] = {}
        self._listeners: list[Callable[[], None]] = []

    def _read(self) -> dict[str, Entry]:
        if self.builtin:
            _load_on_first_read()
        return self._entries

    def register(self, name: str, params: type[BaseModel] | None, build=None, check=None, *,
                 replace: bool = False, **extra) -> Entry:
        """Add ``name``; ``params.model_fields["name"]`` must be ``Literal[name]``. Components
        chosen by a plain string (kernels, baselines) have no parameter model (``None``)."""
        annotation = params.model_fields.get("name") if params is not None else None
        if params is not None and (annotation is None or annotation.default != name):
            raise ValueError(f"{params.__name__} needs a field name: Literal[{name!r}] = {name!r}")
        if self.builtin and not _registered_by_lwl():  # a plugin's: after the built-ins, so that a clash is told here
            _load_on_first_read()
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is registered already")
        entry = Entry(name, params, build, check, dict(extra))
        self._entries[name] = entry
        self._changed()
        return entry

    def unregister(self, name: str) -> None:
        if self._entries.pop(name, None) is not None:
            self._changed()

    def get(self, name: str) -> Entry:
        try:
            return self._read()[name]
        except KeyError:
            raise ValueError(f"{self.kind}.name: unknown {self.kind} {name!r}; known: {self.names()}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._read()

    def names(self) -> list[str]:
        return list(self._read())

    def entries(self) -> list[Entry]:
        return list(self._read().values())

    def params_models(self) -> tuple[type[BaseModel], ...]:
        return tuple(e.params for e in self._read().values() if e.params is not None)

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()


_REBUILT: list[Callable[[], None]] = []


def on_block_rebuilt(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever a spec block rebuilds its own schema (:func:`block_rebuilt`);
    :mod:`lwl.spec` rebuilds the job spec that nests the blocks."""
    _REBUILT.append(listener)


def block_rebuilt() -> None:
    """A spec block rebuilt its schema after a registration (``model.kernel`` after a kernel,
    ``evaluation.baselines`` after a baseline): whatever nests it rebuilds too. The block's module
    says so here rather than import the spec layer that nests it."""
    for listener in _REBUILT:
        listener()


FAMILIES = Registry("family", builtin=True)
MODELS = Registry("model", builtin=True)
ALGORITHMS = Registry("algorithm", builtin=True)
ORACLES = Registry("oracle", builtin=True)  # build: the Oracle class (lwl.oracles.register_oracle)
KERNELS = Registry("kernel", builtin=True)  # build: (x, y, lengthscale) -> kernel matrix (lwl.kernels)
BASELINES = Registry("baseline", builtin=True)  # build: see lwl.evaluation.baselines


def load_plugins(modules: str | None = None) -> list[str]:
    """Import the modules that register extra components: ``modules`` (comma-separated) or the
    ``LWL_PLUGINS`` environment variable, then the ``lwl.plugins`` entry points. The CLI, the
    service and the workers call this at start-up so that they all know the same names."""
    import os
    from importlib.metadata import entry_points

    names = [m.strip() for m in (modules if modules is not None else os.environ.get("LWL_PLUGINS", "")).split(",")
             if m.strip()]
    plugins = list(entry_points(group="lwl.plugins"))
    if names or plugins:  # the built-ins first: a plugin that reuses one of their names is told so
        _load_on_first_read()
    for name in names:
        importlib.import_module(name)  # a module imports once per process: loading again is a no-op
    for ep in plugins:
        ep.load()
        names.append(ep.value)
    return names
