"""Kernel ridge regression, the inner problem of the bilevel method (paper Lem. "model update").

Given training points U (N, d) and labels y, the model is G(x) = sum_n k(x, u_n) beta_n with
beta = (k(U, U) + N sigma^2 I)^{-1} y, solved by a float64 Cholesky factorisation that is kept
(``chol_``) so the adjoint system of the same matrix (Lem. "adjoint state update") costs two
triangular solves.
"""

from __future__ import annotations

import numpy as np
import torch

from lwl.device import DTYPE, resolve_device
from lwl.kernels import get_kernel


class KernelRidge:
    """Kernel ridge regression with the paper's N sigma^2 ridge scaling.

    Parameters
    ----------
    kernel : "squared_exponential" | "laplace"
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
        y_t = self._tensor(y).reshape(-1)
        n = self.X_.shape[0]
        gram = get_kernel(self.kernel)(self.X_, self.X_, self.lengthscale)
        gram.diagonal().add_(n * self.sigma2)
        self.chol_, info = torch.linalg.cholesky_ex(gram)
        if int(info) != 0:
            raise np.linalg.LinAlgError(
                f"kernel matrix + N sigma^2 I is not positive definite (sigma2={self.sigma2:g}); raise the nugget")
        self.coef_ = torch.cholesky_solve(y_t[:, None], self.chol_)[:, 0]
        return self

    def solve(self, rhs: torch.Tensor) -> torch.Tensor:
        """(k(U,U) + N sigma^2 I)^{-1} rhs with the stored factor."""
        rhs = self._tensor(rhs)
        return torch.cholesky_solve(rhs.reshape(rhs.shape[0], -1), self.chol_).reshape(rhs.shape)

    def predict_from_kernel(self, k_train_x: torch.Tensor) -> torch.Tensor:
        """Predictions given the (N, m) kernel matrix between training points and x."""
        return k_train_x.T @ self.coef_

    def predict(self, X, batch: int = 8192) -> np.ndarray:
        X = self._tensor(X)
        out = [self.predict_from_kernel(self.kernel_matrix(self.X_, X[i:i + batch]))
               for i in range(0, X.shape[0], batch)]
        return torch.cat(out).cpu().numpy() if out else np.zeros(0)
