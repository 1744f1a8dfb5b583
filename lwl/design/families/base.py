"""The interface between the bilevel stepper and the family it moves."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from lwl.design.adaptive import WhitenedGaussian
from lwl.measures import Measure

Params = dict[str, np.ndarray]  # a family's natural parameters, e.g. {"mean": m, "chol": L}


class BilevelFamily(Protocol):
    """What the bilevel method needs of a parametric family nu_theta.

    ``phi`` is theta in Q's whitened coordinates (:mod:`lwl.design.adaptive`): a unit step in
    any coordinate of phi is about one standard deviation of Q, which is what makes the
    adaptive optimiser's step size scale-free. ``params`` are the natural parameters stored in
    the stepper's state under ``param_names`` (arrays, so checkpoints stay pickle-free).
    """

    name: str
    param_names: tuple[str, ...]

    def initial(self) -> Params:
        """theta^0 as the (data-filled) family spec gives it."""

    def start_points(self) -> list[tuple[str, Params]]:
        """Distributions checked at iteration 0, in order; the last is ``("given", theta^0)``."""

    # optional: ``broadened(params, factor) -> Params | None``, the distribution with its
    # covariance scaled by ``factor`` (extra start points, ``algorithm.broaden``)

    def measure(self, params: Params) -> Measure:
        """nu_theta as a sampler with a distribution spec (sampling must be reproducible)."""

    def to_phi(self, params: Params) -> np.ndarray: ...

    def from_phi(self, phi: np.ndarray) -> Params: ...

    def mask(self) -> np.ndarray:
        """1 on the coordinates of phi that move (the spec's ``free``), 0 elsewhere."""

    def bounds(self, phi0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box phi stays in; it contains phi0."""

    def score(self, params: Params, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, ...]:
        """sum_i c_i grad_theta log p_theta(x_i) in the natural parameters, in ``param_names``
        order: the score-function gradient of the bilevel objective (paper eqn
        derivative_bilevel_parametric_approx) when c are the weights of the adjoint."""

    def phi_gradient(self, phi: np.ndarray, grads: tuple[np.ndarray, ...]) -> np.ndarray:
        """The gradient in phi from the gradient in the natural parameters (chain rule)."""

    def plain_step(self, params: Params, grads: tuple[np.ndarray, ...], step: float) -> tuple[Params, float]:
        """The paper's step theta <- theta - t grad in natural parameters and the gradient norm;
        raises ValueError for a family the paper does not define it for."""

    def diagnostics(self, params: Params) -> dict:
        """JSON facts about a result (e.g. per-component weights); may be empty."""


def softmax(logits: np.ndarray) -> np.ndarray:
    """Mixture weights from logits (shifted by their maximum: no overflow)."""
    w = np.exp(logits - logits.max())
    return w / w.sum()


def build_bilevel_family(family_spec, coords: WhitenedGaussian, q) -> BilevelFamily:
    """The family object of a job's ``family`` block: the ``bilevel`` builder of its entry in
    :data:`lwl.registry.FAMILIES`, called as ``builder(family_spec, coords, q)``."""
    from lwl.registry import FAMILIES

    builder = FAMILIES.get(family_spec.name).resolve("bilevel")
    if builder is None:
        raise ValueError(f"family.name: the bilevel method cannot move a {family_spec.name} family")
    return builder(family_spec, coords, q)
