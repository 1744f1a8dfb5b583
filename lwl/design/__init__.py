"""Design algorithms (steppers) and baselines."""

from lwl.design.bilevel import BilevelDesign
from lwl.design.state import pack, unpack

__all__ = ["BilevelDesign", "pack", "unpack"]
