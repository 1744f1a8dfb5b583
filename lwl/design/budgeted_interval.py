"""The EIT interval search under a solve budget (an ``interval_search`` job with ``budget``; issue
#47, docs/method/eit.md "The interval search under a budget"): every Dirichlet-to-Neumann solve
counted, on the budget layer (:mod:`lwl.design.budget`: the plan, the ledger, the rounds,
selection, the race against Q's law, the validation verdict).

**A point is a conductivity with its L pairs.** AMINO learns a conductivity a from its L
Dirichlet-Neumann pairs (f_l, Lambda_a f_l), so one labelled point of the ledger is one draw of a
from the prior with L frequencies omega_1..omega_L: the row ``[c_1..c_4, omega_1..omega_L]``
(:class:`PairedConductivities`), whose label is the L Neumann data on the 4M - 4 boundary nodes,
one row of L (4M - 4) values. It costs L solves (``plan.solves_per_label`` = ``algorithm.pairs``):
the budget is in solves, the oracle is asked for the ``eit`` rows ``[omega, theta, c]`` of every
pair (:meth:`BudgetedIntervalSearch.solve_rows`), and a point with a failed solve is paid for (all
its L solves) and never data.

What the interval search supplies:

- **Candidates**: the laws U[l, l + width] of omega at the unbudgeted search's grid of
  ``candidates`` positions over the family's range (no solve spent on choosing them); the layer
  adds Q's law, each point's omegas drawn from one member of Q (by its weight), from that member's
  validation samples (inputs cost nothing; the held-out ones stay for the audit).
- **Q's labelled validation points**: ``per_member`` conductivities of the prior per member of Q,
  each with L omegas drawn from that member's validation samples (the unbudgeted search's
  validation pairs, stratified by member).
- **The score**: two-fold validation of the job's AMINO, trained on half of the validation points
  plus the candidate's; the error of a point is AMINO's relative L^1 error of its conductivity
  (paper eqn app_amino_error), so a score is the root mean square of those errors over Q's
  validation points, weighted by member (the layer's Err with a norm of 1 per point).
- **The served model**: AMINO trained on the whole training set, served with its weights
  (:class:`lwl.models.amino.AMINOOperator`: rows of L frequencies and their Neumann data in, the
  conductivity on the grid out); ``training_set`` holds the points and their Neumann data.

**Ask/tell** (an ``external`` oracle: a lab computes the solves) and the **HTTP callback**
(``http``): every solve goes through the rounds' queries, rows ``[omega, theta, c_1..c_4]`` as the
``eit`` oracle's, the lab answering each with its Neumann data on the 4M - 4 boundary nodes of its
M x M grid (``algorithm.grid``).

No move between rounds (the unbudgeted search's midpoint refinement would need its own round of
scores per midpoint); the candidates are the grid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lwl.design.budget.design import BudgetedDesign, Candidate
from lwl.measures import Empirical, Measure, Mixture, UniformBox
from lwl.measures.base import SeedLike, as_generator
from lwl.oracles.eit import MAX_TERMS, angles, conductivity, dirichlet_data, draw_coefficients
from lwl.q_samples import DatasetResolver, MetaTestSamples, _no_datasets
from lwl.streams import STREAM_EVAL

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

STREAM_VALIDATION_POINTS = 23  # the conductivities and frequencies of the labelled validation points
HELDOUT_POINTS = 64  # the audit's held-out points per member of Q (each L solves)


class PairedConductivities(Measure):
    """Points of the EIT interval search: a conductivity from the paper's prior (eqn
    app_conductivity: coefficients c_1..c_4) with L frequencies drawn i.i.d. from ``omega``; rows
    ``[c_1..c_4, omega_1..omega_L]``. Its spec is the law of omega's (the design's choice; the
    conductivities' prior is the problem's)."""

    def __init__(self, omega: Measure, pairs: int):
        if omega.dim != 1:
            raise ValueError(f"omega: a law of one frequency, got dimension {omega.dim}")
        self.omega, self.pairs = omega, int(pairs)
        self.family = omega.family

    @property
    def dim(self) -> int:
        return MAX_TERMS + self.pairs

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        rng = as_generator(seed)  # one stream: the conductivities, then the frequencies
        c = draw_coefficients(n, rng)
        omega = self.omega.sample(n * self.pairs, rng).reshape(n, self.pairs)
        return np.concatenate([c, omega], axis=1)

    def _spec_fields(self) -> dict[str, Any]:
        raise NotImplementedError  # to_spec is the law of omega's

    def to_spec(self) -> dict[str, Any]:
        return self.omega.to_spec()


class _IntervalFamily:
    """The interval family as the budget layer reads a family: parameters {"low": [l]}."""

    def __init__(self, width: float, pairs: int):
        self.width, self.pairs = width, pairs

    def measure(self, params) -> PairedConductivities:
        low = float(np.asarray(params["low"]).reshape(-1)[0])
        return PairedConductivities(UniformBox([low], [low + self.width]), self.pairs)


class BudgetedIntervalSearch(BudgetedDesign):
    """The budgeted interval search as a stepper (module docstring). One step = one round of solves."""

    selection_rule = ("successive halving of the interval laws of omega on two-fold validation of AMINO (relative "
                      "L1 error of the conductivity), with Q's law racing the selected candidate")

    def __init__(self, spec: JobSpec, q: MetaTestSamples, grid: int, model_factory):
        from lwl.design.interval_search import IntervalSearch

        a, fam = spec.algorithm, spec.family
        self.grid, self.model_factory, self.pairs = grid, model_factory, a.pairs
        self.theta = angles(a.pairs)
        self.width = 4 * grid - 4  # Neumann values per pair
        self.output_weights = np.ones(a.pairs * self.width)  # a label's width (the error is AMINO's: fold_sq_errors)
        family = _IntervalFamily(fam.width, a.pairs)
        search = IntervalSearch(fam.range[0], fam.range[1], fam.width, a.candidates, 0)
        candidates = [Candidate(f"interval_{low:.4g}", family.measure({"low": [low]}), {"low": np.array([low])})
                      for low in search.grid()]
        super().__init__(spec, q, family, candidates)

    @classmethod
    def from_spec(cls, spec: JobSpec, oracle=None, resolve: DatasetResolver = _no_datasets) -> "BudgetedIntervalSearch":
        from lwl.models.amino import amino_factory

        q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, resolve)
        grid = spec_grid(spec)
        if hasattr(oracle, "expect_fields"):  # an http lab's answers are checked as Neumann data of this width
            oracle.expect_fields(4 * grid - 4)
        return cls(spec, q, grid, amino_factory(spec.model, grid, spec.device))

    # -- what a point is ------------------------------------------------------------------------
    @property
    def point_dim(self) -> int:
        return MAX_TERMS + self.pairs

    def _member_points(self, omegas: list[np.ndarray], counts: list[int], stream: list[int]) -> list[np.ndarray]:
        """counts[k] points of member k: prior conductivities, L omegas drawn from omegas[k]."""
        out = []
        for k, (om, n) in enumerate(zip(omegas, counts)):
            rng = np.random.default_rng([*stream, k])
            c = draw_coefficients(n, rng)
            pick = rng.integers(0, len(om), (n, self.pairs))
            out.append(np.concatenate([c, np.asarray(om, dtype=np.float64)[:, 0][pick]], axis=1))
        return out

    def validation_points(self) -> np.ndarray:
        K = len(self.q.members)
        return np.concatenate(self._member_points(list(self.q.validation), [self.plan.per_member] * K,
                                                  [self.spec.seed, STREAM_VALIDATION_POINTS]))

    def solve_rows(self, points: np.ndarray) -> np.ndarray:
        """The ``eit`` rows [omega, theta, c] of each point's L pairs, point by point."""
        from lwl.design.interval_search import pair_rows

        P = np.asarray(points, dtype=np.float64).reshape(-1, self.point_dim)
        return pair_rows(P[:, :MAX_TERMS], P[:, MAX_TERMS:], self.theta)

    def point_labels(self, labels: np.ndarray, points: np.ndarray) -> np.ndarray:
        n = len(points)
        if labels.size != n * self.pairs * self.width:
            raise ValueError(f"labels: expected {n * self.pairs} Neumann data ({n} conductivities x {self.pairs} "
                             f"pairs) of {self.width} values, got shape {labels.shape}")
        return labels.reshape(n, self.pairs * self.width)

    def q_law(self) -> Measure:
        """Q's law of omega on the points: a member by its weight, then its validation samples."""
        q = self.q
        return Mixture([PairedConductivities(Empirical(v), self.pairs) for v in q.validation], q.weights)

    # -- AMINO: the score's model, its error, the served model -------------------------------------
    def _arrays(self, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(f, g, a) of the points: Dirichlet data, Neumann data (n, L, 4M - 4), conductivities (n, M, M)."""
        X = np.asarray(X, dtype=np.float64)
        f = dirichlet_data(X[:, MAX_TERMS:], self.theta, self.grid)
        g = np.asarray(y, dtype=np.float64).reshape(len(X), self.pairs, self.width)
        return f, g, conductivity(X[:, :MAX_TERMS], self.grid)

    def _fit(self, X: np.ndarray, y: np.ndarray, seed: int):
        return self.model_factory(seed).fit(*self._arrays(X, y))

    def scorer(self, state, ell: float):
        return lambda X, Y: self._fit(X, Y, self.spec.seed)

    def fold_sq_errors(self, model, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """AMINO's relative L^1 error of each point's conductivity, squared."""
        return np.asarray(model.errors(*self._arrays(X, y)), dtype=np.float64) ** 2

    def sq_norms(self, y: np.ndarray) -> np.ndarray:
        return np.ones(len(y))  # the error of a point is relative already

    def final_model(self, state):
        X, y = self.training_set(state)
        return self._fit(X, y, self.spec.seed)

    def model_document(self, state, served=None) -> dict | None:
        from lwl.models.amino import AMINOOperator

        return AMINOOperator(self.served_model(state) if served is None else served, self.pairs).to_spec()

    # -- the verdict at equal solves (lwl.evaluation.equal_solves) ---------------------------------
    def heldout_points(self) -> list[np.ndarray]:
        K = len(self.q.members)
        return self._member_points(list(self.q.heldout), [HELDOUT_POINTS] * K, [self.spec.seed, STREAM_EVAL])

    def train_draw(self, X: np.ndarray, y: np.ndarray, r: int):
        return self._fit(X, y, self.spec.seed + r)

    def initial_law(self) -> Measure:
        """The search's first candidate, U[range[0], range[0] + width] (the paper's lowest EIT training law)."""
        return self.candidates[0].measure


def spec_grid(spec: JobSpec) -> int:
    """M of the job's M x M grid: a lab's (``algorithm.grid``), else the eit oracle's."""
    return int(spec.algorithm.grid) if spec.oracle.is_lab else int(spec.oracle.build().grid)


def label_width(spec: JobSpec) -> int:
    """Values per label a lab returns: the Neumann data of one pair on the 4M - 4 boundary nodes
    (the ``label_width`` hook of the interval_search algorithm, read by the service's tell route)."""
    return 4 * spec_grid(spec) - 4


def build(spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BudgetedIntervalSearch:
    """The stepper of an ``interval_search`` job with a ``budget`` (the ``budgeted`` entry of the algorithm)."""
    return BudgetedIntervalSearch.from_spec(spec, oracle, resolve)
