"""Models: kernel ridge regression (bilevel inner problem) and DeepONet (AMA)."""

from lwl.models.krr import KernelRidge  # noqa: I001  (krr registers first: the catalog's order)
from lwl.models.deeponet import DeepONetRegressor

__all__ = ["DeepONetRegressor", "KernelRidge"]
