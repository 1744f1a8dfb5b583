"""Bilevel gradient descent on a parametrised training distribution (paper Alg. 1 / Alg. 3).

One iteration k, with nu_k = N(m, LL^T) and Q's validation samples V_j (weights w_j, sizes M_j):

1. draw U = (u_1..u_N) ~ nu_k and label them, y = G*(U);
2. model update (Lem. "model update"): beta = (K(U,U) + N sigma_k^2 I)^{-1} y by Cholesky;
3. adjoint (Lem. "adjoint state update"), reusing the factor:
   lambda = (K(U,U) + N sigma_k^2 I)^{-1} N sum_j (w_j / M_j) K(U, V_j)(y_j - G_hat(V_j));
4. gradient (eqn derivative_bilevel_parametric_approx):
   grad = (1/N) sum_i (G_hat(u_i) - y_i) lambda_i grad_theta log p_theta(u_i);
5. theta <- theta - t_k grad, with t_k and sigma_k^2 cosine-annealed; diag(L) kept >= 1e-7.

This is the exact derivative of 1/2 E_Q|G_hat - G*|^2 with respect to theta when the empirical
training measure is importance-reweighted, nu_theta^N = sum_i (p_theta(u_i) / (N p_k(u_i)))
delta_{u_i}; tests check it against finite differences of that objective.

The training residual uses the identity G_hat(U) - y = -N sigma^2 beta, residuals are formed
out of place (the authors' code overwrote its held-out labels with an in-place ``-=``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from lwl.design.schedules import cosine
from lwl.device import DTYPE, resolve_device
from lwl.measures import Gaussian, project_cholesky
from lwl.meta import STREAM_DESIGN, DatasetResolver, MetaTestSamples, _no_datasets
from lwl.models import KernelRidge
from lwl.spec import JobSpec

PHASE_VALIDATION = "label_validation"
PHASE_ITERATE = "iterate"
PHASE_DONE = "done"


def bilevel_gradient_weights(model: KernelRidge, V: torch.Tensor, yV: torch.Tensor,
                             a: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Objective E_Q|G_hat - G*|^2 on V and the per-sample weights c_i of the gradient.

    Returns ``(objective, c)`` with c_i = (G_hat(u_i) - y_i) lambda_i / N, so that
    grad_theta J = sum_i c_i grad_theta log p_theta(u_i). ``a`` holds w_j / M_j per point of V.
    """
    n = model.X_.shape[0]
    k_uv = model.kernel_matrix(model.X_, V)  # (N, |V|), the one large matrix of the iteration
    residual_v = yV - model.predict_from_kernel(k_uv)  # G*(V) - G_hat(V), out of place
    weighted = a * residual_v
    lam = model.solve(k_uv @ weighted * n)
    train_residual = -n * model.sigma2 * model.coef_  # G_hat(U) - y
    return float(weighted @ residual_v), train_residual * lam / n


class BilevelDesign:
    """The bilevel method as a stepper (DESIGN.md "Algorithms are steppers").

    ``init() -> state``; while not ``done(state)``: label ``queries(state)`` and call
    ``step(state, labels) -> state``; ``result(state)`` gives the distribution and history.
    The state is a flat dict of numpy arrays and JSON values (see :mod:`lwl.design.state`);
    every random draw derives from (seed, stream, iteration), so a state restored from a
    checkpoint continues exactly as the uninterrupted run would.

    The first query batch is Q's validation samples (their labels drive the adjoint); each
    following batch is the N_k training samples of one iteration.
    """

    def __init__(self, spec: JobSpec, q: MetaTestSamples):
        self.spec = spec
        self.q = q
        self.algo = spec.algorithm
        self.device = resolve_device(spec.device)
        self._v = torch.as_tensor(np.concatenate(q.validation), dtype=DTYPE, device=self.device)
        self._a = torch.as_tensor(MetaTestSamples.point_weights(q.validation, q.weights), dtype=DTYPE,
                                  device=self.device)
        self._queries_cache: tuple = (None, None)

    @classmethod
    def from_spec(cls, spec: JobSpec, resolve: DatasetResolver = _no_datasets) -> "BilevelDesign":
        return cls(spec, MetaTestSamples.from_spec(spec.test_distributions, spec.seed, resolve))

    # -- stepper protocol -------------------------------------------------------------------
    def init(self) -> dict[str, Any]:
        fam = Gaussian(self.spec.family.mean, cov=self.spec.family.cov)
        return {"phase": PHASE_VALIDATION, "iteration": 0, "mean": fam.mean, "chol": fam.chol, "history": []}

    def done(self, state: dict[str, Any]) -> bool:
        return state["phase"] == PHASE_DONE

    def queries(self, state: dict[str, Any]) -> np.ndarray:
        if state["phase"] == PHASE_VALIDATION:
            return self._v.cpu().numpy()
        if state["phase"] == PHASE_DONE:
            return np.zeros((0, self.q.dim))
        # the loop asks for an iteration's queries and step() needs them again: draw once
        key = (state["iteration"], state["mean"].tobytes(), state["chol"].tobytes())
        if self._queries_cache[0] != key:
            x = self.distribution(state).sample(self.algo.samples_per_iteration,
                                                [self.spec.seed, STREAM_DESIGN, state["iteration"]])
            self._queries_cache = (key, x)
        return self._queries_cache[1].copy()

    def step(self, state: dict[str, Any], labels) -> dict[str, Any]:
        labels = np.asarray(labels, dtype=np.float64).reshape(-1)
        expected = len(self.queries(state)) if state["phase"] != PHASE_ITERATE else self.algo.samples_per_iteration
        if labels.shape[0] != expected:
            raise ValueError(f"labels: expected {expected} labels, got {labels.shape[0]}")
        if not np.all(np.isfinite(labels)):
            raise ValueError("labels: values must be finite")
        if state["phase"] == PHASE_VALIDATION:
            return {**state, "phase": PHASE_ITERATE, "validation_labels": labels}
        if state["phase"] == PHASE_DONE:
            raise ValueError("step: the design is finished")
        return self._iterate(state, labels)

    def result(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"distribution": self.distribution(state).to_spec(), "history": list(state["history"])}

    # -- one iteration of Alg. 3 -------------------------------------------------------------
    def distribution(self, state: dict[str, Any]) -> Gaussian:
        return Gaussian.from_parameters(state["mean"], state["chol"])

    def schedules(self, k: int) -> tuple[float, float]:
        a, T = self.algo, self.algo.iterations
        return (cosine(a.learning_rate, a.final_learning_rate, k, T), cosine(a.nugget, a.final_nugget, k, T))

    def gradient(self, state: dict[str, Any], U: np.ndarray, y: np.ndarray, sigma2: float):
        """(objective, validation Err, grad_mean, grad_chol) at the state's theta for data (U, y)."""
        model = KernelRidge(self.spec.model.kernel, self.spec.model.lengthscale, sigma2, device=str(self.device))
        model.fit(U, y)
        yv = torch.as_tensor(state["validation_labels"], dtype=DTYPE, device=self.device)
        objective, c = bilevel_gradient_weights(model, self._v, yv, self._a)
        scale = float(self._a @ yv.square())  # E_Q(0) on the validation samples
        if self.algo.gradient_scale == "relative":
            c = c / scale
        g_mean, g_chol = self.distribution(state).score(U, weights=c.cpu().numpy())
        return objective, float(np.sqrt(objective / scale)), g_mean, g_chol

    def _iterate(self, state: dict[str, Any], y: np.ndarray) -> dict[str, Any]:
        t0 = time.perf_counter()
        k = state["iteration"]
        step, sigma2 = self.schedules(k)
        U = self.queries(state)
        objective, err, g_mean, g_chol = self.gradient(state, U, y, sigma2)
        mean, chol = state["mean"], state["chol"]
        free = self.spec.family.free
        if "mean" in free:
            mean = mean - step * g_mean
        if "cov" in free:
            chol = project_cholesky(chol - step * g_chol)
        record = {"iteration": k, "objective": objective, "validation_err": err, "step_size": step,
                  "nugget": sigma2, "grad_norm": float(np.sqrt(np.sum(g_mean**2) + np.sum(g_chol**2))),
                  "seconds": time.perf_counter() - t0}
        k += 1
        phase = PHASE_DONE if k >= self.algo.iterations else PHASE_ITERATE
        return {**state, "phase": phase, "iteration": k, "mean": mean, "chol": chol,
                "history": [*state["history"], record]}
