"""The self-tuning step of lwl's default bilevel optimiser (docs/method/bilevel.md "The adaptive optimiser").

The paper moves theta = (m, L) by plain gradient steps t_k grad J whose size must be tuned per
problem: the gradient scales with the square of the oracle's outputs and with the geometry of
Q. lwl's default removes both scales:

- **Whitened coordinates.** With Q's moment-matched Gaussian N(mu_Q, S S^T) (S its Cholesky
  factor), the design is written m = mu_Q + S m~, L = S L~, L~ = offdiag + diag(exp s). A unit
  step in phi = (m~, s, offdiag(L~)) is one standard deviation of Q, whatever the units of the
  inputs; the log-diagonal keeps L's diagonal positive (the covariance cannot collapse to a
  non-positive factor), and the box :meth:`WhitenedGaussian.clip` keeps it from running away.
- **Adam on phi** (Kingma & Ba): each step has length about ``lr`` in those units whatever the
  gradient's magnitude (the oracle's output scale drops out), and shrinks by itself where the
  score-function gradient is noise.
- **A gradient guard**: non-finite gradients are rejected and gradients far above their running
  RMS are clipped before they enter Adam's moments, so one outlier cannot launch a runaway step.

The chain rule from (m, L) to phi: g_m~ = S^T g_m, G~ = tril(S^T g_L), g_s = diag(G~) exp(s).
"""

from __future__ import annotations

import numpy as np

# bounds of the whitened parameters: the design stays within MAX_MEAN standard deviations of
# Q's centre, with per-axis scales between exp(MIN_LOG_SCALE) and exp(MAX_LOG_SCALE) of Q's
MAX_MEAN = 10.0
MIN_LOG_SCALE = float(np.log(1e-3))
MAX_LOG_SCALE = float(np.log(10.0))
MAX_OFFDIAG = 10.0


class WhitenedGaussian:
    """The map theta = (m, L) <-> phi in Q's whitened coordinates (see module docstring)."""

    def __init__(self, centre: np.ndarray, scale_chol: np.ndarray):
        self.centre = np.asarray(centre, dtype=np.float64)
        self.S = np.asarray(scale_chol, dtype=np.float64)
        self.d = self.centre.shape[0]
        self._low = np.tril_indices(self.d, -1)
        self._diag = np.arange(self.d)

    @property
    def size(self) -> int:
        return 2 * self.d + len(self._low[0])

    def to_phi(self, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
        from scipy.linalg import solve_triangular

        mt = solve_triangular(self.S, mean - self.centre, lower=True)
        Lt = solve_triangular(self.S, chol, lower=True)
        return np.concatenate([mt, np.log(np.diag(Lt)), Lt[self._low]])

    def from_phi(self, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = self.d
        Lt = np.zeros((d, d))
        Lt[self._low] = phi[2 * d:]
        Lt[self._diag, self._diag] = np.exp(phi[d:2 * d])
        return self.centre + self.S @ phi[:d], np.tril(self.S @ Lt)

    def gradient(self, phi: np.ndarray, g_mean: np.ndarray, g_chol: np.ndarray) -> np.ndarray:
        """grad_phi J from grad_m J and grad_L J (chain rule of the module docstring)."""
        d = self.d
        Gt = self.S.T @ g_chol
        return np.concatenate([self.S.T @ g_mean, np.diag(Gt) * np.exp(phi[d:2 * d]), Gt[self._low]])

    def mask(self, free: list[str]) -> np.ndarray:
        """1 for the coordinates of phi that move (``free`` holds "mean" and/or "cov")."""
        d = self.d
        m = np.zeros(self.size)
        if "mean" in free:
            m[:d] = 1.0
        if "cov" in free:
            m[d:] = 1.0
        return m

    def bounds(self, phi0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box phi must stay in: see the module constants; it always contains phi0."""
        d = self.d
        lo = np.concatenate([np.full(d, -MAX_MEAN), np.full(d, MIN_LOG_SCALE), np.full(self.size - 2 * d, -MAX_OFFDIAG)])
        hi = -lo
        hi[d:2 * d] = MAX_LOG_SCALE
        return np.minimum(lo, phi0), np.maximum(hi, phi0)


def adam_step(phi: np.ndarray, grad: np.ndarray, m1: np.ndarray, m2: np.ndarray, t: int, lr: float,
              beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-12):
    """One Adam update; returns (phi', m1', m2'). ``t`` counts updates from 1."""
    m1 = beta1 * m1 + (1 - beta1) * grad
    m2 = beta2 * m2 + (1 - beta2) * grad * grad
    m1_hat = m1 / (1 - beta1**t)
    m2_hat = m2 / (1 - beta2**t)
    return phi - lr * m1_hat / (np.sqrt(m2_hat) + eps), m1, m2


def guard_gradient(grad: np.ndarray, mean_square: float, count: int, *, clip: float = 10.0,
                   decay: float = 0.98, warmup: int = 5) -> tuple[np.ndarray | None, float, str | None]:
    """Refuse non-finite gradients and clip outliers against the running mean square of norms.

    Returns ``(grad or None, new mean_square, event)``; ``event`` is ``"rejected"``,
    ``"clipped"`` or ``None``. The running statistic is updated with the (clipped) norm.
    """
    if not np.all(np.isfinite(grad)):
        return None, mean_square, "rejected"
    norm2 = float(grad @ grad)
    event = None
    if count >= warmup and mean_square > 0 and norm2 > clip**2 * mean_square:
        grad = grad * (clip * np.sqrt(mean_square) / np.sqrt(norm2))
        norm2 = clip**2 * mean_square
        event = "clipped"
    mean_square = norm2 if count == 0 else decay * mean_square + (1 - decay) * norm2
    return grad, mean_square, event
