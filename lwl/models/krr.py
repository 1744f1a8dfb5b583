"""Kernel ridge regression, the inner problem of the bilevel method (paper Lem. "model update").

Given training points U (N, d) and labels y, the model is G(x) = sum_n k(x, u_n) beta_n with
beta = (k(U, U) + N sigma^2 I)^{-1} y, solved by a float64 Cholesky factorisation
(:mod:`lwl.cholesky`) that is kept (``chol_``) so the adjoint system of the same matrix
(Lem. "adjoint state update") costs two triangular solves.

Kernel matrices against many points (predictions, the adjoint's right-hand side) are formed in
column blocks of about BLOCK_ELEMENTS entries and used at once, so no (N, m) matrix is held
whole: a block stays in the CPU cache between its exponentials and its products (4.6x faster at
N = 1024 against 5,000 validation points than one 40 MB matrix; bench/bilevel.py).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import Field

from lwl.cholesky import cholesky_inplace
from lwl.device import DTYPE, resolve_device
from lwl.kernels import KERNELS, get_kernel, kernel_rows
from lwl.params import StrictModel
from lwl.registry import MODELS, block_rebuilt

#: entries of one kernel block on a CPU (1 MiB of float64: an L2 cache); on a GPU the blocks
#: only add launches, so they are as large as memory comfortably allows
BLOCK_ELEMENTS = {"cpu": 1 << 17, "cuda": 1 << 26}


def block_columns(device: torch.device, rows: int) -> int:
    """Columns of a kernel block with ``rows`` rows (at least 64)."""
    return max(64, BLOCK_ELEMENTS.get(device.type, BLOCK_ELEMENTS["cpu"]) // max(rows, 1))


class KernelRidge:
    """Kernel ridge regression with the paper's N sigma^2 ridge scaling.

    Parameters
    ----------
    kernel : "squared_exponential" | "laplace" | "matern52" (lwl.kernels)
    lengthscale : l in exp(-||x-x'||^2 / l^2)
    sigma2 : sigma^2; the ridge added to the kernel matrix is N * sigma2
    device : "cpu" | "cuda" | "auto"
    """

    def __init__(self, kernel: str = "squared_exponential", lengthscale: float = 1.0,
                 sigma2: float = 1e-3, device: str = "cpu"):
        self.kernel = kernel
        self.lengthscale = lengthscale
        self.sigma2 = sigma2
        self.device = device

    def _tensor(self, a) -> torch.Tensor:
        return torch.as_tensor(a, dtype=DTYPE, device=self.device_)

    def kernel_matrix(self, x, y) -> torch.Tensor:
        return get_kernel(self.kernel)(self._tensor(x), self._tensor(y), self.lengthscale)

    def fit(self, X, y) -> "KernelRidge":
        self.device_ = resolve_device(self.device)
        self.X_ = self._tensor(X)
        self.y_ = np.asarray(y, dtype=np.float64).reshape(-1)
        self.n_features_in_ = self.X_.shape[1]
        y_t = self._tensor(self.y_)
        n = self.X_.shape[0]
        gram = get_kernel(self.kernel)(self.X_, self.X_, self.lengthscale)
        gram.diagonal().add_(n * self.sigma2)
        self.chol_, ok = cholesky_inplace(gram)
        if not ok:
            raise np.linalg.LinAlgError(
                f"kernel matrix + N sigma^2 I is not positive definite (sigma2={self.sigma2:g}); raise the nugget")
        self.coef_ = self.solve(y_t)
        return self

    def solve(self, rhs: torch.Tensor) -> torch.Tensor:
        """(k(U,U) + N sigma^2 I)^{-1} rhs with the stored factor: L z = rhs, then L^T x = z.
        (``torch.cholesky_solve`` copies the factor into LAPACK's layout on every call: 7x
        slower at N = 1024.)"""
        rhs = self._tensor(rhs)
        z = torch.linalg.solve_triangular(self.chol_, rhs.reshape(rhs.shape[0], -1), upper=False)
        return torch.linalg.solve_triangular(self.chol_.mT, z, upper=True).reshape(rhs.shape)

    def predict_from_kernel(self, k_train_x: torch.Tensor) -> torch.Tensor:
        """Predictions given the (N, m) kernel matrix between training points and x."""
        return k_train_x.T @ self.coef_

    def predict(self, X, return_std: bool = False):
        """G_hat(X), the kernel formed block by block. ``return_std`` adds the posterior standard
        deviation of KRR read as a GP with this kernel as prior covariance (unit prior variance,
        k(x, x) = 1) and the ridge N sigma^2 as noise variance (R&W eq. 2.26):
        sqrt(1 - k(x, U) (K + N sigma^2 I)^{-1} k(U, x)). It measures where the training points
        are, not the labels' scale: a fitted GP (:class:`lwl.models.gp.GaussianProcess`) has one."""
        X = self._tensor(X)
        step = block_columns(self.device_, self.X_.shape[0])
        rows = kernel_rows(self.kernel, self.X_, self.lengthscale)
        out, sd = [], []
        for i in range(0, X.shape[0], step):
            k = rows(X[i:i + step])
            out.append(self.predict_from_kernel(k))
            if return_std:
                v = torch.linalg.solve_triangular(self.chol_, k, upper=False)
                sd.append((1.0 - (v * v).sum(0)).clamp_min(0.0).sqrt())
        mean = torch.cat(out).cpu().numpy() if out else np.zeros(0)
        if not return_std:
            return mean
        return mean, (torch.cat(sd).cpu().numpy() if sd else np.zeros(0))

    def to_spec(self, training_set: bool = True) -> dict:
        """The versioned model document (:func:`lwl.models.from_spec` reads it back)."""
        from lwl import __version__
        from lwl.models.gp import DOCUMENT_KIND, DOCUMENT_VERSION

        doc = {"kind": DOCUMENT_KIND, "version": DOCUMENT_VERSION, "lwl_version": __version__, "model": "krr",
               "kernel": self.kernel, "lengthscale": float(self.lengthscale), "sigma2": float(self.sigma2),
               "std": "KRR read as a GP: unit prior variance, noise variance N sigma2 (KernelRidge.predict)"}
        if training_set:
            doc["training_set"] = {"inputs": self.X_.cpu().numpy().tolist(), "labels": self.y_.tolist()}
        return doc

    @classmethod
    def from_spec(cls, doc: dict, device: str = "cpu") -> "KernelRidge":
        from lwl.models import document_training_set

        ts = document_training_set(doc)
        return cls(doc["kernel"], doc["lengthscale"], doc["sigma2"], device=device).fit(ts["inputs"], ts["labels"])

    def adjoint_pass(self, V: torch.Tensor, yV: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass over the points V with labels yV and weights a: the residuals
        r = yV - G_hat(V) and K(U, V) (a * r), the right-hand side of the adjoint system
        (paper Lem. "adjoint state update") before its factor N. Each block K(U, V_b) serves
        both products while it is in cache."""
        n = self.X_.shape[0]
        step = block_columns(self.device_, n)
        rhs = torch.zeros(n, dtype=DTYPE, device=self.device_)
        residual = torch.empty_like(yV)
        rows = kernel_rows(self.kernel, self.X_, self.lengthscale)
        for i in range(0, V.shape[0], step):
            k = rows(V[i:i + step])
            r = torch.sub(yV[i:i + step], k.T @ self.coef_, out=residual[i:i + step])
            rhs.addmv_(k, a[i:i + step] * r)
        return residual, rhs


# -- the job spec's block for this component, and its registration (lwl.registry) --


class KRRSpec(StrictModel):
    """Kernel ridge regression, k(x,x') = exp(-||x-x'||^2 / lengthscale^2) (the paper's
    convention), the Laplace kernel exp(-||x-x'||_1 / lengthscale) or Matern 5/2 (lwl.kernels)."""

    name: Literal["krr"] = "krr"
    kernel: Literal[tuple(KERNELS.names())] = "squared_exponential"
    lengthscale: float | None = Field(
        default=None, gt=0, description="default: selected by validation from the median distance between Q's "
                                          "validation samples (a bilevel job chooses it with the design)")


MODELS.register("krr", KRRSpec, document="lwl.models.krr:KernelRidge.from_spec")


def _accept_registered_kernels() -> None:
    """``model.kernel`` accepts every registered kernel, a plugin's too (a registration
    rebuilds this block and the job spec)."""
    accepted = Literal[tuple(KERNELS.names())]
    if KRRSpec.model_fields["kernel"].annotation != accepted:
        KRRSpec.model_fields["kernel"].annotation = accepted
        KRRSpec.model_rebuild(force=True)
        block_rebuilt()  # the job spec nesting KRRSpec rebuilds (lwl.spec)


KERNELS.on_change(_accept_registered_kernels)
