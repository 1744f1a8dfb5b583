"""The AMA design under a label budget (an ``ama`` job with ``budget``; issue #47, docs/method/budgets.md
"Designs for a label budget"): every PDE solve counted, the operator half of the paper on the
budget layer (:mod:`lwl.design.budget`), which holds the plan, the ledger, the rounds, selection,
the race against Q's law and the validation verdict.

What the AMA design supplies:

- **Candidates**, members of its KLE family nu_theta fixed in advance (no solve spent on choosing
  them): the given theta^0; Q's projection onto the family, argmin_theta sum_k w_k W2^2(nu_theta,
  nu'_k) (the transport part of the AMA bound, paper eqn AMAobjective, in closed form for KLE
  Gaussians); and, when Q has several members, each member's own projection. The budget layer adds
  Q's law itself (the mixture of its KLE members), the default of selection (``explore`` 0.25:
  three quarters of every selection round; another candidate replaces it only beyond noise).
- **The DeepONet, the pool rule and the served model** are every operator design's
  (:mod:`lwl.design.budgeted_operator`): scores by two-fold validation of the job's DeepONet, the
  served solves chosen by query by committee (``algorithm.pool`` ``qbc``, ``pool_factor`` 4), the
  dropped candidates' solves left out of the served DeepONet when it validates better without them.

**Ask/tell** (an ``external`` oracle: a lab computes the solves) and the **HTTP callback**
(``http``: lwl posts each round's inputs to the lab's endpoint): every solve goes through the
rounds' queries, so nothing is labelled inside a step; the lab returns each solution field on its
input's grid (the family's nodes, in the order the inputs are flattened), and the DeepONet's output
points and the L2 norm are that grid's nodes and quadrature weights.

No move between rounds yet (:meth:`BudgetedDesign.propose`): the AMA distribution step evaluates
its training-error term with fresh oracle labels at every trial theta, which a budget forbids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from lwl.design.budget.design import Candidate
from lwl.design.budgeted_operator import BudgetedOperatorDesign, lab_or_oracle_grid
from lwl.measures import KLEGaussian, Measure
from lwl.measures.kle_family import KLEFamily
from lwl.q_samples import DatasetResolver, MetaTestSamples, _no_datasets

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

HELDOUT_PER_MEMBER = 500  # samples of a KLE member without ``size`` beyond its validation ones (the audit's)
SAME_THETA = 1e-6  # candidates closer than this (relative) are one


class _ThetaFamily:
    """The KLE family as the budget layer reads a family: parameters {"theta": theta}."""

    def __init__(self, family: KLEFamily):
        self.kle = family

    def measure(self, params) -> KLEGaussian:
        return self.kle.measure(np.asarray(params["theta"], dtype=np.float64))


PROJECTION_STARTS = 8  # starts spread over a bounded family's box besides theta0 (the W2 objective is multimodal)


def w2_projection(family: KLEFamily, members: list[KLEGaussian], weights, theta0: np.ndarray) -> np.ndarray:
    """argmin_theta sum_k w_k W2^2(nu_theta, nu'_k) within the family's bounds: L-BFGS-B on the
    closed-form W2 of KLE Gaussians (autograd), from ``theta0`` and, when every free parameter is
    bounded, from ``PROJECTION_STARTS`` points of a scrambled Sobol sequence in the box (fixed
    seed); the lowest end wins. The objective is multimodal in a frequency (NtD's omega: from
    omega0 = 8 pi alone L-BFGS-B stays at 8 pi, Q's omegas lie in [-2 pi, 2 pi])."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()

    def value(theta: np.ndarray) -> tuple[float, np.ndarray]:
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        v = sum(float(wk) * family.w2_squared(th, m) for wk, m in zip(w, members))
        v.backward()
        return float(v.detach()), th.grad.numpy().copy()

    box = np.array([family.bounds[p] for p in family.free], dtype=np.float64)
    bounds = [tuple(None if not np.isfinite(b) else float(b) for b in row) for row in box]
    starts = [np.asarray(theta0, dtype=np.float64)]
    if np.all(np.isfinite(box)):
        u = qmc.Sobol(len(box), scramble=True, seed=0).random(PROJECTION_STARTS)
        starts += list(box[:, 0] + u * (box[:, 1] - box[:, 0]))
    ends = [minimize(value, x0, jac=True, method="L-BFGS-B", bounds=bounds) for x0 in starts]
    finite = [r for r in ends if np.isfinite(r.fun) and np.all(np.isfinite(r.x))]
    if not finite:  # no start reached a finite value: the given start, inside the bounds
        return family.clip(np.asarray(theta0, dtype=np.float64))
    return family.clip(min(finite, key=lambda r: float(r.fun)).x)


def start_points(family: KLEFamily, members: list[KLEGaussian], weights) -> list[tuple[str, np.ndarray]]:
    """(name, theta) of the candidates (module docstring), duplicates dropped."""
    theta0 = family.theta0()
    out = [("initial", theta0), ("q_fit", w2_projection(family, members, weights, theta0))]
    if len(members) > 1:
        out += [(f"member_{k}_fit", w2_projection(family, [m], [1.0], theta0)) for k, m in enumerate(members)]
    kept: list[tuple[str, np.ndarray]] = []
    for name, theta in out:
        if all(np.max(np.abs(theta - t)) > SAME_THETA * (1.0 + np.max(np.abs(t))) for _, t in kept):
            kept.append((name, theta))
    return kept


class BudgetedAMA(BudgetedOperatorDesign):
    """The budgeted AMA design as a stepper (module docstring). One step = one round of solves."""

    selection_rule = ("successive halving of KLE family members on two-fold validation of the DeepONet, with Q's "
                      "law racing the selected candidate")

    def __init__(self, spec: JobSpec, q: MetaTestSamples, members: list[KLEGaussian], z: np.ndarray,
                 output_weights):
        fam = spec.family
        self.kle = KLEFamily(fam.kle_parameters().measure(), list(fam.free), dict(fam.bounds))
        self.members = members
        candidates = [Candidate(name, self.kle.measure(theta), {"theta": theta})
                      for name, theta in start_points(self.kle, members, q.weights)]
        super().__init__(spec, q, members, z, output_weights, _ThetaFamily(self.kle), candidates)

    def initial_law(self) -> Measure:
        """nu_theta0, the given start of the family."""
        return self.kle.measure(self.kle.theta0())

    @classmethod
    def from_spec(cls, spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> "BudgetedAMA":
        tests = spec.test_distributions
        members = [m.model_copy(update={"size": m.size or tests.validation_per_member + HELDOUT_PER_MEMBER})
                   for m in tests.members]
        q = MetaTestSamples.from_spec(tests.model_copy(update={"members": members}), spec.seed, resolve)
        template = spec.family.kle_parameters().measure()
        z, out_w = lab_or_oracle_grid(spec, oracle, q.dim, lambda: (template.nodes(), template.quadrature_weights()))
        return cls(spec, q, [m.kle.measure() for m in tests.members], z, out_w)


def label_width(spec: JobSpec) -> int:
    """Values per label an ask/tell lab returns: one solution field on the input's grid (the
    ``label_width`` hook of the ama algorithm, read by the service's tell route)."""
    return int(spec.family.kle_parameters().measure().dim)


def build(spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BudgetedAMA:
    """The stepper of an ``ama`` job with a ``budget`` (the ``budgeted`` entry of the algorithm)."""
    return BudgetedAMA.from_spec(spec, oracle, resolve)
