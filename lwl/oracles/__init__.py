"""Labelling oracles: ``make_oracle({"name": ..., "params": {...}}).label(inputs)``."""

from lwl.oracles import external as _external  # noqa: F401  (registers the built-ins)
from lwl.oracles import burgers as _burgers  # noqa: F401
from lwl.oracles import darcy as _darcy  # noqa: F401
from lwl.oracles import eit as _eit  # noqa: F401
from lwl.oracles import functions as _functions  # noqa: F401
from lwl.oracles import http as _http  # noqa: F401
from lwl.oracles import ntd as _ntd  # noqa: F401
from lwl.oracles import rte as _rte  # noqa: F401
from lwl.oracles.base import Oracle, as_numpy, make_oracle, oracle_names, register_oracle
from lwl.oracles.external import LabelsRequired

__all__ = ["Oracle", "make_oracle", "oracle_names", "register_oracle", "as_numpy", "LabelsRequired"]
