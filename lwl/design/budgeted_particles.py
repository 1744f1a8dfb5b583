"""Particle AMA under a solve budget (a ``particle_ama`` job with ``budget``; issue #47,
docs/method/particles.md "Particle AMA under a budget"): every radiative-transport solve counted, on the
budget layer (:mod:`lwl.design.budget`: the plan, the ledger, the rounds, selection, the race
against Q's law, the validation verdict) and the operator designs' DeepONet, pool rule and served
model (:mod:`lwl.design.budgeted_operator`).

What the particle design supplies, its **candidates** (laws of the scattering field a, fixed in
advance, no solve spent on choosing them):

- ``initial_particles``: particle AMA's own start, the N particles a_q = exp(L c_q), c ~ N(0, init_std^2)
  of :meth:`lwl.design.particles.ParticleAMADesign.init` (same seed, same particles), drawn with
  replacement as their empirical measure is (:class:`lwl.measures.LogSineParticles`);
- when Q has several members and all are log-normal fields (``lognormal``, exp of a KLE Gaussian
  on the sine basis): each member itself (``member_k``), and, when they share basis, grid and modes,
  ``q_fit``: the single log-normal KLE whose log-field is nearest Q's in W2,
  argmin_theta sum_k w_k W2^2(nu_theta, nu'_k) over the KLE parameters in which the members differ
  (bounded by their range), the transport part of the AMA bound (paper eqn AMAobjective) in closed
  form for the Gaussian log-fields (:func:`lwl.design.budgeted_ama.w2_projection`).

The budget layer adds Q's law, the exact mixture of its members, the default of selection. The
served solves are i.i.d. draws of their law (``algorithm.pool`` ``iid``, this algorithm's default;
``qbc`` by name): on the RTE problem the committee's choice was behind Q's law (docs/method/particles.md).

Why not the particle flow itself: each Wasserstein step of particle AMA (paper Cor. "Wasserstein
gradient") labels the moved particles and evaluates its training-error term and the adjoint there,
N fresh solves per step that the unbudgeted design discards when it moves on; under a budget every
solve must end in the training set, and a step's trial particles (the halvings of eta) would be paid
for without being kept. No move between rounds yet (:meth:`BudgetedDesign.propose`), as for AMA.

**Ask/tell** (``external``) and the **HTTP callback** (``http``): every solve goes through the
rounds' queries, so no adjoint is needed; the lab returns each density field on the input's grid
(the closed grid x grid nodes of [0, 1]^2, flattened with ``indexing="ij"``), normed with the
trapezoid rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lwl.design.budget.design import Candidate
from lwl.design.budgeted_ama import w2_projection
from lwl.design.budgeted_operator import BudgetedOperatorDesign, NoMoves, lab_or_oracle_grid
from lwl.design.particles import initial_coefficients
from lwl.grids import square_nodes, trapezoid_weights
from lwl.measures import KLEGaussian, LogSineParticles, Measure
from lwl.measures.kle import LogNormal
from lwl.measures.kle_family import PARAMETERS, KLEFamily
from lwl.q_samples import DatasetResolver, MetaTestSamples, _no_datasets

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

def initial_particles(spec: JobSpec) -> LogSineParticles:
    """Particle AMA's initial particles (:func:`lwl.design.particles.initial_coefficients`, as the
    unbudgeted design's :meth:`~lwl.design.particles.ParticleAMADesign.init` draws them)."""
    fam = spec.family
    return LogSineParticles(initial_coefficients(spec.seed, fam.particles, fam.modes, fam.init_std), fam.grid)


def log_field_projection(bases: list[KLEGaussian], weights) -> KLEGaussian | None:
    """The KLE Gaussian nearest (W2, weights ``weights``) to the log-fields ``bases`` of Q's
    members, over the parameters in which they differ, each bounded by the members' range (module
    docstring); None when the members cannot share a family (basis, grid, modes or endpoints
    differ) or do not differ at all."""
    first = bases[0]
    if any((b.basis, b.grid, b.modes, b.endpoints) != (first.basis, first.grid, first.modes, first.endpoints)
           for b in bases):
        return None
    values = {p: np.array([getattr(b, p) for b in bases], dtype=np.float64) for p in PARAMETERS}
    free = [p for p in PARAMETERS if np.ptp(values[p]) > 0]
    if not free:
        return None
    family = KLEFamily(first, free, {p: (float(values[p].min()), float(values[p].max())) for p in free})
    w = np.asarray(weights, dtype=np.float64)
    theta0 = np.array([float(w @ values[p] / w.sum()) for p in free])
    return family.measure(w2_projection(family, bases, w, theta0))


class BudgetedParticleAMA(BudgetedOperatorDesign):
    """The budgeted particle AMA design as a stepper (module docstring). One step = one round of solves."""

    def __init__(self, spec: JobSpec, q: MetaTestSamples, q_members: list[Measure], z: np.ndarray, output_weights,
                 log_bases: list[KLEGaussian] | None):
        self.initial = initial_particles(spec)
        candidates = [Candidate("initial_particles", self.initial, None)]
        if log_bases is not None and len(log_bases) > 1:  # one member is Q's law, which the layer adds
            fit = log_field_projection(log_bases, q.weights)
            if fit is not None:
                candidates.append(Candidate("q_fit", LogNormal(fit), None))
            candidates += [Candidate(f"member_{k}", LogNormal(b), None) for k, b in enumerate(log_bases)]
        super().__init__(spec, q, q_members, z, output_weights, NoMoves(), candidates)

    def initial_law(self) -> Measure:
        """Particle AMA's initial particles (its Table 3 column "initial")."""
        return self.initial

    @classmethod
    def from_spec(cls, spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BudgetedParticleAMA:
        tests = spec.test_distributions
        q = MetaTestSamples.from_spec(tests, spec.seed, resolve)
        grid = spec.family.grid
        z, out_w = lab_or_oracle_grid(spec, oracle, q.dim, lambda: (square_nodes(grid), trapezoid_weights(grid)))
        members = [m.lognormal.measure() if m.lognormal is not None else m.kle.measure() for m in tests.members]
        lognormal = all(m.lognormal is not None for m in tests.members)
        q_members = [LogNormal(b) if m.lognormal is not None else b for b, m in zip(members, tests.members)]
        return cls(spec, q, q_members, z, out_w, members if lognormal else None)


def label_width(spec: JobSpec) -> int:
    """Values per label an ask/tell lab returns: one density field on the input's grid (the
    ``label_width`` hook of the particle_ama algorithm, read by the service's tell route)."""
    return int(spec.family.grid) ** 2


def build(spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BudgetedParticleAMA:
    """The stepper of a ``particle_ama`` job with a ``budget`` (the ``budgeted`` entry of the algorithm)."""
    return BudgetedParticleAMA.from_spec(spec, oracle, resolve)
