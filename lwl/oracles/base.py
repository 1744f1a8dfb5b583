"""The oracle protocol and the registry behind :func:`make_oracle`.

An oracle labels a batch: ``label(inputs)`` maps an (n, d) array to an (n,) array (scalar
outputs) or an (n, m) array. Built-in oracles are deterministic functions of their parameters
and accept numpy arrays or torch tensors (CPU or CUDA), returning the same kind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from lwl.registry import ORACLES


class Oracle(ABC):
    name: str = ""
    #: smallest input dimension the function is defined for
    min_dim: int = 1
    #: output shape of one label: () for scalar functions
    output_shape: tuple[int, ...] = ()
    #: None: a design chooses whole inputs. k: a design chooses k coordinates of each input
    #: (Q and the family live in R^k) and the algorithm completes the rows (eit: omega)
    design_dim: int | None = None
    #: True: ``label`` may return NaN rows for points whose measurement failed (lwl.outcomes);
    #: only the ask/tell oracle does, anywhere else a non-finite label is refused
    reports_failures: bool = False

    def __init__(self, dim: int | None = None):
        if dim is not None and dim < self.min_dim:
            raise ValueError(f"oracle.params.dim: {self.name} needs inputs of dimension >= {self.min_dim}, got {dim}")
        self.dim = dim

    def check_inputs(self, inputs) -> None:
        if inputs.ndim != 2:
            raise ValueError(f"inputs: expected an (n, d) batch, got shape {tuple(inputs.shape)}")
        d = inputs.shape[1]
        if d < self.min_dim or (self.dim is not None and d != self.dim):
            want = self.dim if self.dim is not None else f">= {self.min_dim}"
            raise ValueError(f"inputs: {self.name} takes dimension {want}, got {d}")

    def label(self, inputs):
        """Labels of a batch of inputs (rows)."""
        self.check_inputs(inputs)
        return self._label(inputs)

    @abstractmethod
    def _label(self, inputs): ...

    def output_grid(self, input_dim: int) -> tuple[np.ndarray, np.ndarray]:
        """(query points z (n_out, dz), quadrature weights (n_out,)) of the outputs of inputs of
        dimension ``input_dim``: a DeepONet's trunk inputs and the L^2 norm of labels."""
        raise ValueError(f"oracle.name: {self.name} has no output grid (DeepONet models need one: "
                         "ntd, darcy, burgers, rte)")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "min_dim": self.min_dim, "output_shape": list(self.output_shape)}


def register_oracle(name: str):
    """Class decorator: register an :class:`Oracle` subclass as ``name`` in
    :data:`lwl.registry.ORACLES` (the spec's ``oracle.name``; its constructor takes ``params``)."""

    def wrap(cls):
        cls.name = name
        ORACLES.register(name, None, cls)
        return cls

    return wrap


def oracle_names() -> list[str]:
    return sorted(ORACLES.names())


def make_oracle(spec: dict[str, Any] | Any) -> Oracle:
    """Build an oracle from ``{"name": ..., "params": {...}}`` (a dict or an OracleSpec)."""
    if hasattr(spec, "model_dump"):
        spec = spec.model_dump()
    name = spec.get("name")
    if name not in ORACLES:
        raise ValueError(f"oracle.name: unknown oracle {name!r}; known: {oracle_names()}")
    cls = ORACLES.get(name).build
    if hasattr(cls, "from_spec"):  # oracles configured by top-level fields (url, batch_size)
        return cls.from_spec(spec)
    params = dict(spec.get("params") or {})
    try:
        return cls(**params)
    except TypeError as exc:  # unexpected keyword
        raise ValueError(f"oracle.params: {exc}") from None


def as_numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)
