"""The measure interface and the versioned distribution spec envelope.

A distribution spec is a JSON document ::

    {"kind": "lwl.distribution", "version": 1, "lwl_version": "0.1.0",
     "family": "gaussian", ...family fields...}

that :func:`lwl.measures.from_spec` turns back into a sampler. Sampling draws from numpy's
PCG64 generator seeded by the caller, so the same document and seed give the same samples
bit for bit wherever lwl runs (the service's sampler endpoint is this same code).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable

import numpy as np

SPEC_KIND = "lwl.distribution"
SPEC_VERSION = 1

SeedLike = int | list[int] | tuple[int, ...] | np.random.Generator | None


def as_generator(seed: SeedLike) -> np.random.Generator:
    """A numpy Generator from an int, an int sequence or an existing Generator."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        raise ValueError("an explicit seed is required: sampling in lwl is always reproducible")
    return np.random.default_rng(seed)


class Measure(ABC):
    """A probability measure on R^d that samples reproducibly and serialises to a spec."""

    family: str = ""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Dimension d of the ambient space."""

    @abstractmethod
    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        """Draw an (n, d) float64 array of i.i.d. samples."""

    @abstractmethod
    def _spec_fields(self) -> dict[str, Any]:
        """Family-specific fields of the distribution spec."""

    def to_spec(self) -> dict[str, Any]:
        """The versioned distribution spec (plain JSON types only)."""
        from lwl import __version__

        return {
            "kind": SPEC_KIND,
            "version": SPEC_VERSION,
            "lwl_version": __version__,
            "family": self.family,
            **self._spec_fields(),
        }

    def mean_and_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """First two moments; every family in this package has them in closed form."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form moments")


_READERS: dict[str, Callable[[dict[str, Any]], Measure]] = {}


def register_family(name: str):
    """Class decorator: register ``cls.from_fields`` as the reader of family ``name``."""

    def wrap(cls):
        cls.family = name
        _READERS[name] = cls.from_fields
        return cls

    return wrap


def from_spec(doc: dict[str, Any]) -> Measure:
    """Rebuild a measure from its distribution spec (see module docstring)."""
    if not isinstance(doc, dict):
        raise ValueError("a distribution spec must be a JSON object")
    kind = doc.get("kind", SPEC_KIND)
    if kind != SPEC_KIND:
        raise ValueError(f"kind: expected {SPEC_KIND!r}, got {kind!r}")
    version = doc.get("version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise ValueError(f"version: this lwl reads distribution spec version {SPEC_VERSION}, got {version!r}")
    family = doc.get("family")
    if family not in _READERS:
        raise ValueError(f"family: unknown family {family!r}; known: {sorted(_READERS)}")
    return _READERS[family](doc)


def as_matrix(value: Any, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Float64 array from nested lists, refusing non-finite values and wrong shapes."""
    arr = np.asarray(value, dtype=np.float64)
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: values must be finite")
    return arr
