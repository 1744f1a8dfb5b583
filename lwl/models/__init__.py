"""Surrogate models trained on labelled samples of a training distribution."""

from lwl.models.krr import KernelRidge

__all__ = ["KernelRidge"]
