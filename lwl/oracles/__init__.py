"""Labelling oracles: ``make_oracle({"name": ..., "params": {...}}).label(inputs)``."""

from lwl.oracles import functions as _functions  # noqa: F401  (registers the built-ins)
from lwl.oracles.base import Oracle, as_numpy, make_oracle, oracle_names, register_oracle

__all__ = ["Oracle", "make_oracle", "oracle_names", "register_oracle", "as_numpy"]
