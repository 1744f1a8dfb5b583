"""Families the bilevel method moves, behind one interface (:class:`BilevelFamily`).

The bilevel stepper (:mod:`lwl.design.bilevel`) never names a family: it asks the family for
its parameters, samples, the score of its log-density and its parameter box in Q's whitened
coordinates. A family is one module with its parameter model, a builder
``build(family_spec, coords, q)`` and a ``fill`` hook, registered at its end in
:data:`lwl.registry.FAMILIES` (and named in :mod:`lwl.builtins`)::

    FAMILIES.register("gaussian", GaussianFamilySpec, bilevel=build, fill=fill, paper_optimizer=True)
"""

from lwl.design.families.base import BilevelFamily, Params, build_bilevel_family

__all__ = ["BilevelFamily", "Params", "build_bilevel_family"]
