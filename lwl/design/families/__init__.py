"""Families the bilevel method moves, behind one interface (:class:`BilevelFamily`).

The bilevel stepper (:mod:`lwl.design.bilevel`) never names a family: it asks the family for
its parameters, samples, the score of its log-density in Q's whitened coordinates and its
parameter box. A family is one module that registers a builder here::

    @BILEVEL_FAMILIES.register("gaussian")
    def _build(spec, coords): return GaussianFamily(spec.family, coords)
"""

from lwl.design.families.base import BILEVEL_FAMILIES, BilevelFamily, Params, build_bilevel_family
from lwl.design.families import gaussian as _gaussian, mixture as _mixture  # noqa: F401  (registration)

__all__ = ["BilevelFamily", "Params", "BILEVEL_FAMILIES", "build_bilevel_family"]
