"""Models: kernel ridge regression (bilevel inner problem) and DeepONet (AMA)."""

from lwl.models.deeponet import DeepONetRegressor
from lwl.models.krr import KernelRidge

__all__ = ["DeepONetRegressor", "KernelRidge"]
