"""The bilevel design under a label budget (a bilevel job with ``budget``; docs/method/budgets.md
"Designs for a label budget"): the bilevel method's plug into the budget layer
(:mod:`lwl.design.budget`), which holds the plan, the ledger, the rounds, selection, the race
against Q's mixture and the validation verdict.

What the bilevel design supplies:

- **Candidates**: the family's start points (Q's fit, the given theta^0, Q's fit broadened by each
  ``broaden`` factor); the layer adds Q's own mixture. Q's samples' *inputs* cost nothing: moment
  matching and the candidates use all of them.
- **The model a score trains**: the paper's KRR when the spec names ``krr`` (with the lengthscale
  chosen on the same folds when lwl chooses it), else (a budgeted job's default) a Gaussian process
  whose hyperparameters are refitted by maximum marginal likelihood after every round on every
  label so far and fixed within the round (:meth:`BudgetedBilevel._hyperparameters`).
- **The move** (``inner_steps`` > 0): between two rounds the bilevel gradient
  (:mod:`lwl.design.bilevel`: adjoint on the labelled validation points, score-function
  gradient, the adaptive optimiser) takes ``inner_steps`` steps from the incumbent, with the
  training labels of each step given by a *surrogate* of G* fitted to every design label paid for
  so far (KRR for a krr job, the gp at the round's hyperparameters for a gp job): many gradient
  steps for no label. A gp job's inner problem is its posterior mean at the round's
  hyperparameters, KRR on inputs rescaled by its ARD lengthscales
  (:func:`lwl.models.gp.as_kernel_ridge`). The moved distribution is the next round's challenger.
- **The served model**: the job's model trained on the whole training set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lwl.design.adaptive import adam_step, guard_gradient
from lwl.design.budget.design import BudgetedDesign, Candidate, member_law
from lwl.design.budget.state import BudgetedState
from lwl.design.families import Params
from lwl.models import KernelRidge
from lwl.q_samples import DatasetResolver, MetaTestSamples, _no_datasets
from lwl.streams import STREAM_SURROGATE

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

SURROGATE_MAX = 4000  # the surrogate of G* is fitted to at most this many labelled points
INNER_SAMPLES_MAX = 1024  # N of one bilevel step on the surrogate


class BudgetedBilevel(BudgetedDesign):
    """The budgeted bilevel design as a stepper (module docstring). One step = one round."""

    selection_rule = "successive halving on two-fold validation, then bilevel steps on a surrogate with a challenger round"

    def __init__(self, spec: JobSpec, q: MetaTestSamples):
        from lwl.design.bilevel import BilevelDesign

        design = BilevelDesign(spec, q)  # the family, its coordinates and start points (inputs are free)
        super().__init__(spec, q, design.family,
                         [Candidate(name, member_law(design.family, p, spec, q), p) for name, p in design.start_points()])
        self.design = design
        self.labelled = BilevelDesign(spec, self.qv)  # the bilevel gradient on the labelled validation points
        self._hyper_cache: tuple = (None, None)
        self._fit_all: tuple = (None, None)  # the job's model fitted to every point (_fitted_on)

    @classmethod
    def from_spec(cls, spec: JobSpec, resolve: DatasetResolver = _no_datasets) -> "BudgetedBilevel":
        from lwl.design.bilevel import BilevelDesign

        filled = BilevelDesign.from_spec(spec, resolve)  # Q's samples, degenerate members refused, defaults filled
        return cls(filled.spec, filled.q)

    @property
    def is_krr(self) -> bool:
        """The job designs for the paper's fixed-hyperparameter KRR (else a gp, fitted to its labels)."""
        return self.spec.model.name == "krr"

    @property
    def tunes_lengthscale(self) -> bool:
        return self.is_krr

    @property
    def moves(self) -> bool:
        return self.algo.inner_steps > 0

    def initial_lengthscale(self) -> float:
        # a gp has no single lengthscale (its hyperparameters are fitted each round: _hyperparameters)
        return self.spec.model.lengthscale if self.is_krr else 0.0

    def _hyperparameters(self, state: BudgetedState):
        """The gp's hyperparameters for the scores after a round: maximum marginal likelihood on
        every point labelled so far (validation, initial data, the rounds'), refitted once per
        round because the labels grow, and fixed within a round so every candidate, the rival
        and the challenger are scored by one model (the comparisons are paired). A function of
        the points and the seed: a resumed job refits the same values."""
        key = (int(state.iteration), len(state.points.y))
        if self._hyper_cache[0] != key:
            from lwl.models import fit_hyperparameters

            self._hyper_cache = (key, fit_hyperparameters(self.spec.model, state.points.X, state.points.y,
                                                          seed=self.spec.seed))
        return self._hyper_cache[1]

    def scorer(self, state: BudgetedState, ell: float):
        """(X, y) -> the model a score trains: KRR at lengthscale ``ell``, or the gp at this
        round's hyperparameters."""
        from lwl.models import train

        if self.is_krr:
            return lambda X, Y: KernelRidge(self.spec.model.kernel, ell, self.spec.evaluation.ridge / len(X),
                                            device="cpu").fit(X, Y)
        hyper = self._hyperparameters(state)
        return lambda X, Y: train(self.spec.model, X, Y, ridge=self.spec.evaluation.ridge, seed=self.spec.seed,
                                  hyperparameters=hyper)

    @property
    def checks_left_out(self) -> bool:
        """A gp job's served training set is checked (:meth:`BudgetedDesign.served_rows`): a few
        heavy-tailed labels can wreck its fitted hyperparameters; KRR's are fixed."""
        return not self.is_krr

    def rows_scorer(self, state: BudgetedState, rows: np.ndarray):
        """The model the rows ``rows`` would be served with: KRR at the final lengthscale, or the gp
        at the hyperparameters :meth:`final_model` would fit to those rows (``train``: the subset
        fit and its evidence-check refit), conditioned on each fold's training points."""
        from lwl.models import train

        if self.is_krr:
            return self.scorer(state, float(state.lengthscale))
        ridge, seed = self.spec.evaluation.ridge, self.spec.seed
        hyper = self._fitted_on(state, rows)
        return lambda X, Y: train(self.spec.model, X, Y, ridge=ridge, seed=seed, hyperparameters=hyper)

    def _fitted_on(self, state: BudgetedState, rows: np.ndarray):
        """The job's model fitted to the points ``rows`` (``train``). The fit to every point is kept
        for :meth:`final_model`: where the left-out check keeps every point, its arm is the served
        model (one fit, not two; only that one is kept: a GP on 8,000 points holds 0.5 GB)."""
        from lwl.models import train

        P = state.points
        every = len(rows) == len(P.y)
        key = (len(P.y), hash(P.y.tobytes()), hash(P.X.tobytes()))
        if every and self._fit_all[0] == key:
            return self._fit_all[1]
        model = train(self.spec.model, P.X[rows], P.y[rows], ridge=self.spec.evaluation.ridge, seed=self.spec.seed)
        if every:
            self._fit_all = (key, model)
        return model

    def served_model(self, state: BudgetedState):
        """Not kept (:meth:`BudgetedDesign.served_model`): this design's audit
        (:mod:`lwl.evaluation.equal_labels`) trains from the spec, and a GP on 8,000 points holds 0.5 GB."""
        return self.final_model(state)

    def final_model(self, state: BudgetedState):
        """The model the job serves (``GET /v1/jobs/{id}/model``): the job's model trained on its
        whole training set; a gp's hyperparameters fitted to all of it."""
        from lwl.models import train

        if self.is_krr:
            X, y = self.training_set(state)
            spec_model = self.spec.model.model_copy(update={"lengthscale": float(state.lengthscale)})
            return train(spec_model, X, y, ridge=self.spec.evaluation.ridge, seed=self.spec.seed)
        model = self._fitted_on(state, self.served_rows(state)[0])
        self._fit_all = (None, None)  # served: not kept beside the audit's own fits (0.5 GB at 8,000 points)
        return model

    def lengthscale_grid(self, around: float | None = None) -> list[float]:
        """Lengthscales a score tries: the spec's, or (lwl chooses it) the median distance times
        LENGTHSCALE_FACTORS, only ``around``'s neighbours on that grid when given."""
        if not self.is_krr:  # the gp's hyperparameters are fitted, not chosen from a grid
            return [0.0]
        if "model.lengthscale" not in self.spec.derived:
            return [float(self.spec.model.lengthscale)]
        from lwl.defaults import LENGTHSCALE_FACTORS

        grid = [f * self.spec.model.lengthscale for f in LENGTHSCALE_FACTORS]
        if around is None:
            return grid
        i = int(np.argmin([abs(np.log(g / around)) for g in grid]))
        return grid[max(i - 1, 0):i + 2]

    def final_lengthscale(self, state: BudgetedState) -> float:
        """The final model's lengthscale: two-fold validation on the whole training set (when lwl
        chooses it), among the incumbent's and its grid neighbours."""
        ell = float(state.lengthscale)
        if not self.is_krr:
            return ell
        grid = self.lengthscale_grid(around=ell)
        if len(grid) == 1:
            return ell
        rest = np.arange(self.validation(state).n, len(state.points.y))
        return float(self.two_fold(state, rest, grid)[1])


    def resolved_spec(self, state: BudgetedState) -> JobSpec:
        ell = float(state.lengthscale)
        if not self.is_krr or ell == self.spec.model.lengthscale:
            return self.spec
        return self.spec.model_copy(update={"model": self.spec.model.model_copy(update={"lengthscale": ell})})

    def propose(self, new: BudgetedState, record: dict) -> Params | None:
        """``inner_steps`` bilevel steps from the incumbent with labels from a surrogate of G*
        fitted to every design label bought so far: the next round's challenger (None: no move).
        A krr job's surrogate is KRR at its lengthscale and the inner problem its KRR; a gp job's
        surrogate is the gp at this round's hyperparameters, and the inner problem the gp's
        posterior mean at them, which is KRR on rescaled inputs (:func:`lwl.models.gp.as_kernel_ridge`)."""
        # the surrogate is fitted to the design points only: fitted to the validation points too,
        # it would reproduce their labels exactly, and the inner objective would reward designs
        # that put their samples on the validation points
        nv = self.validation(new).n
        X, y = new.points.X[nv:], new.points.y[nv:]
        r = new.iteration
        if len(X) == 0:  # every design label so far failed: no surrogate to move on
            return None
        if len(X) > SURROGATE_MAX:
            rng = np.random.default_rng([self.spec.seed, STREAM_SURROGATE, r, 10_000])
            keep = np.sort(rng.choice(len(X), SURROGATE_MAX, replace=False))
            X, y = X[keep], y[keep]
        ell, ridge = float(new.lengthscale), self.spec.evaluation.ridge
        try:
            if self.is_krr:
                surrogate = KernelRidge(self.spec.model.kernel, ell, ridge / len(X), device="cpu").fit(X, y)
                inner = dict(kernel=None, input_scale=None, input_loc=None)
                nugget, shift = ridge, 0.0
            else:
                from lwl.models import train
                from lwl.models.gp import as_kernel_ridge

                hyper = self._hyperparameters(new)
                surrogate = train(self.spec.model, X, y, ridge=ridge, seed=self.spec.seed, hyperparameters=hyper)
                form = as_kernel_ridge(surrogate)  # its hyperparameters, its mean (profiled on X)
                inner = dict(kernel=form.kernel, input_scale=form.input_scale, input_loc=form.input_loc)
                ell, nugget, shift = 1.0, form.nugget, form.mean
        except np.linalg.LinAlgError:
            return None
        fam = self.family
        phi = fam.to_phi(new.kept.params)
        lo, hi = fam.bounds(phi)
        m1, m2, t, grad_ms = np.zeros_like(phi), np.zeros_like(phi), 0, 0.0
        n = min(self.algo.samples_per_iteration or INNER_SAMPLES_MAX, INNER_SAMPLES_MAX)
        validation_labels = new.points.y[:nv]
        objectives = []
        for s in range(self.algo.inner_steps):
            params = fam.from_phi(phi)
            U = fam.measure(params).sample(n, [self.spec.seed, STREAM_SURROGATE, r, s])
            try:
                # the adjoint on the validation points that came back (val_ok; None: all)
                objective, err, c = self.labelled.adjoint_weights(U, surrogate.predict(U) - shift, nugget / n, ell,
                                                                  validation_labels - shift, new.val_ok, **inner)
            except np.linalg.LinAlgError:
                continue
            objectives.append(err)
            grad = fam.phi_gradient(phi, tuple(fam.score(params, U, c))) * fam.mask()
            grad, grad_ms, _ = guard_gradient(grad, grad_ms, t)
            if grad is None:
                continue
            t += 1
            phi_new, m1, m2 = adam_step(phi, grad, m1, m2, t, self.algo.step)
            phi_new = np.clip(phi_new, lo, hi)
            if getattr(fam, "admissible", lambda p: True)(fam.from_phi(phi_new)):  # mass left in the input domain
                phi = phi_new
        moved = fam.from_phi(phi)
        if not all(np.all(np.isfinite(v)) for v in moved.values()) or t == 0:
            return None
        # a gp job's surrogate Err is relative to the validation labels' spread about the gp's mean
        # (its labels are centred), a krr job's to their mean square
        record.update(surrogate_err_first=objectives[0] if objectives else None,
                      surrogate_err_last=objectives[-1] if objectives else None, objective=objectives[-1]
                      if objectives else None, inner_steps=t)
        return moved


def build(spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BudgetedBilevel:
    """The stepper of a bilevel job with a ``budget`` (the ``budgeted`` entry of the algorithm)."""
    return BudgetedBilevel.from_spec(spec, resolve)
