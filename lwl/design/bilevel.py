"""Bilevel gradient descent on a parametrised training distribution (paper Alg. 1 / Alg. 3).

One iteration k, with nu_k = N(m, LL^T) and Q's validation samples V_j (weights w_j, sizes M_j):

1. draw U = (u_1..u_N) ~ nu_k and label them, y = G*(U);
2. model update (Lem. "model update"): beta = (K(U,U) + N sigma_k^2 I)^{-1} y by Cholesky;
3. adjoint (Lem. "adjoint state update"), reusing the factor:
   lambda = (K(U,U) + N sigma_k^2 I)^{-1} N sum_j (w_j / M_j) K(U, V_j)(y_j - G_hat(V_j));
4. gradient (eqn derivative_bilevel_parametric_approx):
   grad = (1/N) sum_i (G_hat(u_i) - y_i) lambda_i grad_theta log p_theta(u_i);
5. a step on theta. ``optimizer: "paper"`` is the paper's theta <- theta - t_k grad with t_k and
   sigma_k^2 cosine-annealed and diag(L) kept >= 1e-7. ``optimizer: "adaptive"`` (lwl's
   default) is Adam in Q's whitened coordinates with a guarded gradient
   (:mod:`lwl.design.adaptive`), so no step size depends on the problem.

Both optimisers are watched by **validation checks** every ``check_every`` iterations: a KRR
model trained on ``check_samples`` points m + L z_c with *fixed* z_c (common random numbers, so
two checks differ by theta, not by sampling noise) is scored by Err on Q's validation samples.
The returned distribution is the best checked iterate (``keep: "best"``); the adaptive optimiser
also returns to the best iterate and halves its step after ``patience`` checks without
progress, and stops once the step has been halved ``max_halvings`` times.

This module holds the iteration itself (steps 1-5), the spec block and its registration; the
other pieces have a module each: the state and its checkpoint (:mod:`lwl.design.bilevel_state`),
the validation check, where it looks and how it scores (:mod:`lwl.design.bilevel_check`), the
keep-which check with its bars and spread rule (:mod:`lwl.design.bilevel_keep`) and its words
(:mod:`lwl.design.bilevel_report`), the step and nugget schedules
(:func:`lwl.design.schedules.bilevel_schedules`).

This is the exact derivative of 1/2 E_Q|G_hat - G*|^2 with respect to theta when the empirical
training measure is importance-reweighted, nu_theta^N = sum_i (p_theta(u_i) / (N p_k(u_i)))
delta_{u_i}; tests check it against finite differences of that objective.

The training residual uses the identity G_hat(U) - y = -N sigma^2 beta, residuals are formed
out of place (the authors' code overwrote its held-out labels with an in-place ``-=``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field

from lwl.defaults import LENGTHSCALE_FACTORS, edge_note
from lwl.design.adaptive import WhitenedGaussian, adam_step, guard_gradient
from lwl.design import bilevel_keep, bilevel_report
from lwl.design.bilevel_check import ValidationCheck, ValidationPoints
from lwl.design.bilevel_keep import TOP_POINTS, Bars, Improvement, Selection
from lwl.design.bilevel_report import (
    no_iterate_improved_warning,
    within_noise_warning,
    worse_than_initial_warning,
)
from lwl.design.bilevel_state import BEST, PENDING, SIGNIFICANT, BilevelState, Phase
from lwl.design.budget.settings import BudgetFields, Explore
from lwl.design.families import BilevelFamily, Params, build_bilevel_family
from lwl.design.schedules import bilevel_schedules
from lwl.design.state import Flat, Kept
from lwl.design.stepper import StepperDefaults
from lwl.device import DTYPE, resolve_device
from lwl.measures import Measure
from lwl.measures.gaussian import moment_matched, regularised_cholesky
from lwl.models import KernelRidge
from lwl.outcomes import failed_rows, scalar_labels, usable
from lwl.params import StrictModel
from lwl.q_samples import DatasetResolver, MetaTestSamples, _no_datasets, kle_member_sizes
from lwl.registry import ALGORITHMS
from lwl.streams import STREAM_CHECK, STREAM_DESIGN

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

# the names this module has always offered, whose homes are now the state, keep-which and report modules
__all__ = ["BEST", "DEFAULT_BASELINES", "LENGTHSCALE_FACTORS", "PENDING", "SIGNIFICANT", "TOP_POINTS",
           "BilevelDesign", "BilevelSpec", "BilevelState", "Improvement", "Phase", "Selection",
           "bilevel_gradient_weights", "build", "check_bilevel", "evaluate", "no_iterate_improved_warning",
           "within_noise_warning", "worse_than_initial_warning"]


def bilevel_gradient_weights(model: KernelRidge, V: torch.Tensor, yV: torch.Tensor,
                             a: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Objective E_Q|G_hat - G*|^2 on V and the per-sample weights c_i of the gradient.

    Returns ``(objective, c)`` with c_i = (G_hat(u_i) - y_i) lambda_i / N, so that
    grad_theta J = sum_i c_i grad_theta log p_theta(u_i). ``a`` holds w_j / M_j per point of V.
    """
    n = model.X_.shape[0]
    # G*(V) - G_hat(V) (out of place) and K(U, V)(a * residual), K(U, V) formed block by block
    residual_v, rhs = model.adjoint_pass(V, yV, a)
    lam = model.solve(rhs * n)
    train_residual = -n * model.sigma2 * model.coef_  # G_hat(U) - y
    return float(a @ residual_v.square()), train_residual * lam / n


class BilevelDesign(StepperDefaults):
    """The bilevel method as a stepper (docs/architecture.md "The pieces of a job").

    ``init() -> state``; while not ``done(state)``: label ``queries(state)`` and call
    ``step(state, labels) -> state``; ``result(state)`` gives the distribution and history.
    The state is a :class:`BilevelState` (its checkpoint a flat dict, :mod:`lwl.design.state`);
    every random draw derives from (seed, stream, iteration), so a state restored from a
    checkpoint continues exactly as the uninterrupted run would.

    Query batches, in order: Q's validation samples (their labels drive the adjoint), then
    a validation check of theta^0, then the N_k training samples of each iteration with a
    check batch after every ``check_every`` iterations and after the last one.

    ``spec`` must have its data-derived defaults filled (:func:`lwl.defaults.fill_from_data`);
    :meth:`from_spec` does that.
    """

    def __init__(self, spec: JobSpec, q: MetaTestSamples):
        self.spec = spec
        self.q = q
        self.algo = spec.algorithm
        self.device = resolve_device(spec.device)
        self.points = ValidationPoints(q, self.device)  # every one until a state says which came back
        self.checker = ValidationCheck(spec, self.points, self.device)
        a = MetaTestSamples.point_weights(q.validation, q.weights)
        centre, cov = moment_matched(np.concatenate(q.validation), a)
        self.coords = WhitenedGaussian(centre, regularised_cholesky(cov))
        self.family: BilevelFamily = build_bilevel_family(spec.family, self.coords, q)
        if spec.domain is not None:  # every draw restricted to the input domain (lwl.design.families.constrained)
            from lwl.design.families.constrained import constrain_family

            self.family = constrain_family(self.family, spec.domain.build(), spec.seed)
        self.check_samples = self.algo.check_samples or min(spec.evaluation.train_size, 2048)
        self._queries_cache: tuple = (None, None)
        self._start_points: list[tuple[str, Params]] | None = None
        self._member_moments: list[tuple[np.ndarray, np.ndarray]] | None = None

    @classmethod
    def from_spec(cls, spec: JobSpec, resolve: DatasetResolver = _no_datasets) -> "BilevelDesign":
        from lwl.defaults import fill_from_data
        from lwl.q_samples import degenerate_member

        q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, resolve, domain=spec.domain)
        for k, x in enumerate(q.members):  # datasets are known only now (the API checks them earlier)
            why = degenerate_member(x)
            if why:
                raise ValueError(f"test_distributions.members.{k}: {why}")
        return cls(fill_from_data(spec, q), q)

    # -- stepper protocol -------------------------------------------------------------------
    def init(self) -> BilevelState:
        """The first start point to check, theta^0 as the best so far (not yet checked: Err inf)."""
        first = self.start_points()[0][1]
        given = self.family.initial()
        phi = self.family.to_phi(given)
        ell = self.spec.model.lengthscale
        return BilevelState(params=first, phi=phi, phi0=phi.copy(), adam_m1=np.zeros_like(phi),
                            adam_m2=np.zeros_like(phi), lengthscale=ell, best=Kept(params=given, lengthscale=ell))

    def restore(self, flat: Flat) -> BilevelState:
        """The state of a checkpoint's flat dict, theta read under the family's ``param_names``."""
        return BilevelState.from_flat(flat, param_names=self.family.param_names)

    @property
    def selects_lengthscale(self) -> bool:
        """True when the spec left the KRR lengthscale to lwl (:mod:`lwl.defaults`)."""
        return "model.lengthscale" in self.spec.derived

    def start_points(self) -> list[tuple[str, Params]]:
        """The parameters checked at iteration 0, in order; the run starts from the best.

        ``("given", theta^0)`` always; before it, with ``starts: "moment_matched"`` (adaptive) or
        when the lengthscale is to be selected, the family's fit to Q (for a Gaussian, Q's
        moment-matched Gaussian in the free parameters): a poor initial distribution then costs
        one check, not the run, and the lengthscale is chosen on samples that look like Q.

        Built once per stepper (a family's fit to Q can cost a k-means); callers get copies."""
        if self._start_points is None:
            self._start_points = self._build_start_points()
        return [(name, {n: v.copy() if isinstance(v, np.ndarray) else v for n, v in params.items()})
                for name, params in self._start_points]

    def _build_start_points(self) -> list[tuple[str, Params]]:
        adaptive = self.algo.optimizer == "adaptive" and self.algo.starts == "moment_matched"
        starts = self.family.start_points(adaptive or self.selects_lengthscale)
        broaden = getattr(self.family, "broadened", None)
        if adaptive and broaden is not None:
            # by default Q's fit (the first start: the moment-matched Gaussian, or the family's
            # theta^0 fitted to Q); a family may name several (auto: Q's mixture and Gaussian)
            bases = getattr(self.family, "broaden_bases", lambda: [starts[0][0]])()
            named = dict(starts)
            for i, base in enumerate(bases):
                for factor in self.algo.broaden:
                    params = broaden(named[base], factor)
                    if params is not None:
                        starts.append((f"broadened_{factor:g}" if i == 0 else f"{base}_broadened_{factor:g}", params))
        return starts

    def start_label(self, name: str | None) -> str:
        """A start point's name as a person reads it ("Q's fit broadened ×1.5"): a plugin family's
        own ``start_label``, else :func:`lwl.names.words`."""
        from lwl.names import words

        label = getattr(self.family, "start_label", None)
        if label is not None and name is not None:
            return label(name)
        return words(name, self.spec.family.name)

    def done(self, state: BilevelState) -> bool:
        return state.phase == Phase.DONE

    def queries(self, state: BilevelState) -> np.ndarray:
        phase = state.phase
        if phase == Phase.VALIDATION:
            return np.concatenate(self.q.validation)  # every validation point, whatever came back
        if phase == Phase.DONE:
            return np.zeros((0, self.q.dim))
        # the loop asks for a batch and step() needs it again: draw once
        key = (phase, state.iteration, *(state.params[n].tobytes() for n in self.family.param_names))
        if self._queries_cache[0] != key:
            dist = self.distribution(state)
            if phase == Phase.CHECK:  # fixed z for every check: common random numbers
                x = dist.sample(self.check_samples, [self.spec.seed, STREAM_CHECK])
            else:
                x = dist.sample(self.algo.samples_per_iteration, [self.spec.seed, STREAM_DESIGN, state.iteration])
            self._queries_cache = (key, x)
        return self._queries_cache[1].copy()

    def step(self, state: BilevelState, labels) -> BilevelState:
        """The next state; a NaN label marks a point whose measurement failed (:mod:`lwl.outcomes`):
        it counts as a label spent and is used nowhere."""
        labels = scalar_labels(labels)
        if state.phase == Phase.DONE:
            raise ValueError("step: the design is finished")
        expected = len(self.queries(state))
        if labels.shape[0] != expected:
            raise ValueError(f"labels: expected {expected} labels, got {labels.shape[0]}")
        failed = failed_rows(labels)
        state = state.replace(labels_failed=int(state.labels_failed) + int(failed.sum()))
        if state.phase == Phase.VALIDATION:
            # the adjoint and the checks use the points that came back
            new = state.replace(phase=Phase.CHECK, validation_labels=labels[~failed],
                                validation_ok=~failed if failed.any() else state.validation_ok)
            self.points.bind(new.validation_ok)  # raises when a member of Q has no validation label left
            return new
        self.points.bind(state.validation_ok)
        if state.phase == Phase.CHECK:
            return self._check(state, labels)
        return self._iterate(state, labels)

    def labels_spent(self, state: BilevelState) -> int:
        """Oracle labels asked for up to ``state``: Q's validation points, every iteration's
        samples and every check's."""
        # failed ones included: a failed measurement costs the lab as much
        return (sum(len(x) for x in self.q.validation) + len(state.history) * self.algo.samples_per_iteration
                + len(state.checks) * self.check_samples)

    def result(self, state: BilevelState) -> dict[str, Any]:
        """The kept distribution (best checked iterate, or the last with ``keep: "last"``), the
        last iterate, the history, the checks and which iterate was selected and why
        (:mod:`lwl.design.bilevel_keep`, in words by :mod:`lwl.design.bilevel_report`)."""
        self.points.bind(state.validation_ok)
        last = self.distribution(state)
        checks = state.checks
        sel = self._selection(state)
        kept = sel.kept
        history = [dict(h) for h in state.history]
        for h in history:
            h["selected"] = h["iteration"] == sel.iteration
        keep, bars = self.algo.keep, self.bars
        selected = bilevel_report.selected_block(state, sel, keep, bars)
        warnings = bilevel_report.selection_warnings(state, sel, selected, keep, bars)
        selected.update(bilevel_report.headline(state, selected, kept, iterations=self.algo.iterations,
                                                max_halvings=self.algo.max_halvings, label=self.start_label,
                                                kind=getattr(self.family, "kind", None)))
        if self.selects_lengthscale:
            note = edge_note(selected["lengthscale"], self.spec.model.lengthscale)
            if note:
                warnings.append(note)
        events = [h.get("event") for h in history] + [c.get("action") for c in checks]
        labels_used = self.labels_spent(state)
        best = self.family.measure(state.best.params)
        out = {"distribution": self.family.measure(kept).to_spec(), "last_distribution": last.to_spec(),
               "best_distribution": best.to_spec(), "history": history,
               "checks": list(checks), "selected": selected, "warnings": warnings, "labels_used": labels_used,
               "labels_failed": int(state.labels_failed),
               "events": {e: events.count(e) for e in ("clipped", "rejected", "bounded", "reverted", "failed_round")
                          if e in events}}
        facts = self.family.diagnostics(kept)
        if facts:
            warnings.extend(facts.pop("warnings", []))
            out["family_diagnostics"] = facts
        return out

    # -- pieces of Alg. 3 ----------------------------------------------------------------------
    def distribution(self, state: BilevelState) -> Measure:
        """nu_theta_k, the law of the current iterate."""
        return self.family.measure(state.params)

    def schedules(self, k: int) -> tuple[float, float]:
        """(step size, nugget sigma_k^2) at iteration k (:func:`lwl.design.schedules.bilevel_schedules`)."""
        return bilevel_schedules(self.algo, k)

    def gradient(self, state: BilevelState, U: np.ndarray, y: np.ndarray, sigma2: float):
        """(objective, validation Err, *gradient) at the state's theta for data (U, y), the
        gradient in the family's natural parameters (for a Gaussian: grad_mean, grad_chol)."""
        objective, err, c = self.gradient_weights(state, U, y, sigma2)
        return (objective, err, *self.family.score(state.params, U, c))

    def gradient_weights(self, state: BilevelState, U: np.ndarray, y: np.ndarray, sigma2: float):
        """(objective, validation Err, c) for data (U, y) with the state's lengthscale and
        validation labels (:meth:`adjoint_weights`)."""
        return self.adjoint_weights(U, y, sigma2, state.lengthscale, state.validation_labels, state.validation_ok)

    def adjoint_weights(self, U: np.ndarray, y: np.ndarray, sigma2: float, lengthscale: float,
                        validation_labels: np.ndarray, validation_ok: np.ndarray | None = None, *,
                        kernel: str | None = None, input_scale: np.ndarray | None = None,
                        input_loc: np.ndarray | None = None):
        """(objective, validation Err, c) for KRR with nugget ``sigma2`` trained on (U, y), scored
        on the validation points that came back (``validation_ok``; None: all): the gradient is
        sum_i c_i grad log p_theta(u_i) (:func:`bilevel_gradient_weights`). ``kernel`` and
        ``input_scale`` (inputs less ``input_loc``, divided by it, training and validation alike) give the KRR form of
        a fitted GP (:func:`lwl.models.gp.as_kernel_ridge`); the weights c stay those of the
        points U, whose density the score differentiates."""
        self.points.bind(validation_ok)
        model = KernelRidge(kernel or self.spec.model.kernel, lengthscale, sigma2, device=str(self.device))
        divisor = None if input_scale is None else torch.as_tensor(input_scale, dtype=DTYPE, device=self.device)
        loc = np.zeros(np.shape(U)[1]) if input_loc is None else np.asarray(input_loc, dtype=np.float64)
        centre = torch.as_tensor(loc, dtype=DTYPE, device=self.device)  # (a fitted GP's: its inputs' mean)
        model.fit(U if divisor is None else (np.asarray(U) - loc) / input_scale, y)
        yv = torch.as_tensor(validation_labels, dtype=DTYPE, device=self.device)
        v = self.points.v if divisor is None else (self.points.v - centre) / divisor
        objective, c = bilevel_gradient_weights(model, v, yv, self.points.a)
        scale = float(self.points.a @ yv.square())  # E_Q(0) on the validation samples
        if self.algo.gradient_scale == "relative" or self.algo.optimizer == "adaptive":
            c = c / scale
        return objective, float(np.sqrt(objective / scale)), c.cpu().numpy()

    def lengthscale_grid(self, current: float, iteration: int) -> list[float]:
        """Lengthscales a check tries when the spec left it to lwl
        (:meth:`lwl.design.bilevel_check.ValidationCheck.lengthscale_grid`)."""
        return self.checker.lengthscale_grid(current, iteration)

    @property
    def bars(self) -> Bars:
        """The bars of ``keep: "best"`` (read from the spec block at each use)."""
        return Bars.of(self.algo)

    def threshold(self, iteration: int, top_share: float | None = None) -> float:
        """Standard errors a check at ``iteration`` must beat theta0 by (:meth:`Bars.threshold`)."""
        return self.bars.threshold(iteration, top_share)

    def improvement(self, sq_new: np.ndarray, sq_old: np.ndarray, validation_labels: np.ndarray) -> Improvement:
        """How many standard errors the check's Err^2 improved from ``sq_old`` to ``sq_new``, and
        how concentrated that difference is, paired on the validation points whose labels came
        back (:func:`lwl.design.bilevel_keep.improvement`)."""
        a = self.points.a.cpu().numpy()
        return bilevel_keep.improvement(sq_new, sq_old, validation_labels, a, self.points.parts, self.q.weights)

    def improvement_z(self, sq_new: np.ndarray, sq_old: np.ndarray, validation_labels: np.ndarray) -> float:
        """:meth:`improvement`'s z alone."""
        return self.improvement(sq_new, sq_old, validation_labels).z

    def resolved_spec(self, state: BilevelState) -> JobSpec:
        """The spec with the lengthscale the run selected (the one its evaluation must use)."""
        lengthscale = self.returned_lengthscale(state)
        if lengthscale == self.spec.model.lengthscale:
            return self.spec
        return self.spec.model_copy(update={"model": self.spec.model.model_copy(
            update={"lengthscale": lengthscale})})

    def returned_lengthscale(self, state: BilevelState) -> float:
        """The lengthscale that goes with the returned distribution: the one its check selected
        (:meth:`lengthscale_grid`), the spec's when the spec gave one."""
        return self._selection(state).lengthscale

    def _selection(self, state: BilevelState) -> Selection:
        """Which check is returned and why (:func:`lwl.design.bilevel_keep.select`)."""
        self.points.bind(state.validation_ok)
        return bilevel_keep.select(state, self.algo.keep, self.bars, self)

    def transport_to_q(self, params: Params) -> float:
        """sum_k w_k W2^2(N(m, C), N(m_k, C_k)): the transport term of the paper's bound
        (Cor. 3.2, E_Q W2^2(nu, nu')) between Gaussians with the moments of nu_theta and of each
        member's validation samples (Gelbrich's lower bound of W2 for other laws)."""
        from lwl.transport import gaussian_w2_squared

        if self._member_moments is None:
            self._member_moments = [moment_matched(x, np.full(len(x), 1.0 / len(x))) for x in self.q.validation]
        m, C = self.family.measure(params).mean_and_cov()
        return float(sum(w * gaussian_w2_squared(m, C, mk, Ck)
                         for w, (mk, Ck) in zip(self.q.weights, self._member_moments)))

    def nearest_start(self, checks: list[dict]) -> str | None:
        """When no check beats theta0 beyond noise: of the start points that validate below it,
        the one nearest Q in :meth:`transport_to_q`, if nearer than theta0
        (:func:`lwl.design.bilevel_keep.nearest_start`); else None."""
        return bilevel_keep.nearest_start(checks, lambda: dict(self.start_points()), self.transport_to_q)

    def _start_name(self, index: int) -> str:
        """The name of start point ``index`` (without copying every start's parameters)."""
        if self._start_points is None:
            self._start_points = self._build_start_points()
        return self._start_points[index][0]

    def _check(self, state: BilevelState, y: np.ndarray) -> BilevelState:
        """Score theta_k on the fixed check batch; keep the best; revert and halve on stalls."""
        k = state.iteration
        failed = failed_rows(y)
        U, y = usable(self.queries(state), y)  # the check trains on the points that came back
        record = {"iteration": k}
        if failed.any():
            record["failed"] = int(failed.sum())
        lengthscale = state.lengthscale
        if len(y) == 0:  # the whole check batch failed: nothing to score, the check counts as lost
            err, sq = float("inf"), None
        elif self.selects_lengthscale:  # the pair (theta_k, lengthscale) with the lowest check Err
            grid = self.lengthscale_grid(state.lengthscale, k)
            tried = self.checker.select_lengthscale(U, y, state.validation_labels, grid)
            lengthscale = float(min(tried, key=lambda ell: tried[ell][0]))
            err, sq = tried[lengthscale]
            record["lengthscale_edge"] = edge_note(lengthscale, self.spec.model.lengthscale) is not None
            record.update(lengthscales={repr(ell): e for ell, (e, _) in tried.items()}, lengthscale=lengthscale)
        else:
            err, sq = self.checker.score(U, y, state.validation_labels, lengthscale)
        record.update(err=err, best=err < state.best.err, action=None)
        new = state
        if record["best"]:
            # the gradient steps go on with the lengthscale of the best pair
            best = Kept(params=dict(state.params), iteration=k, err=err, sq=sq, lengthscale=lengthscale)
            new = new.replace(best=best, stale_checks=0, lengthscale=lengthscale)
        elif self.algo.optimizer == "adaptive" and 0 < k < self.algo.iterations:
            new = new.replace(stale_checks=state.stale_checks + 1)
            if new.stale_checks >= self.algo.patience:
                new = revert(new, self.family)
                record["action"] = "reverted"
        if sq is not None:
            start = self._start_name(state.start_index) if k == 0 else None  # None for an iterate
            new = bilevel_keep.track_significant(state, new, record, err, sq, start, self.bars, self)
        new = new.replace(checks=[*new.checks, record])
        if k == 0:  # starting points: check each, then start from the best
            starts = self.start_points()
            i = state.start_index
            record["start"] = starts[i][0]
            if i + 1 < len(starts):
                return new.replace(params=starts[i + 1][1], start_index=i + 1)
            phi = self.family.to_phi(new.best.params)
            new = new.replace(params=dict(new.best.params), phi=phi, phi0=phi.copy(), stale_checks=0)
        stop = k >= self.algo.iterations or new.halvings > self.algo.max_halvings
        if stop and k < self.algo.iterations:
            record["action"] = "stopped"  # the step has shrunk to nothing: converged
        return new.replace(phase=Phase.DONE if stop else Phase.ITERATE)

    def _iterate(self, state: BilevelState, y: np.ndarray) -> BilevelState:
        """One gradient step (steps 1-5 of the module docstring) on the labelled batch ``y``."""
        t0 = time.perf_counter()
        k = state.iteration
        step, sigma2 = self.schedules(k)
        failed = failed_rows(y)
        # the gradient is the one of the points that came back (N_k = how many did)
        U, y = usable(self.queries(state), y)
        try:
            if len(y) == 0:
                raise np.linalg.LinAlgError("every point of the round failed")
            objective, err, *grads = self.gradient(state, U, y, sigma2)
        except np.linalg.LinAlgError:  # a degenerate sample (or no label came back): no step this iteration
            objective, err, grads = float("nan"), float("nan"), None
        update = adaptive_step if self.algo.optimizer == "adaptive" else plain_step
        new, event, grad_norm = update(state, self.family, grads, step)
        if len(y) == 0:
            event = "failed_round"
        record = {"iteration": k, "objective": objective, "validation_err": err,
                  "step_size": step * new.step_scale, "nugget": sigma2, "grad_norm": grad_norm,
                  "event": event, "seconds": time.perf_counter() - t0}
        if failed.any():
            record["failed"] = int(failed.sum())
        k += 1
        check = k >= self.algo.iterations or k % self.algo.check_every == 0
        return new.replace(iteration=k, history=[*state.history, record], phase=Phase.CHECK if check else new.phase)

# -- step 5: the step on theta (pure functions of the state and the family) --

def revert(state: BilevelState, family: BilevelFamily) -> BilevelState:
    """Back to the best iterate with half the step and fresh Adam moments."""
    phi = family.to_phi(state.best.params)
    return state.replace(params=dict(state.best.params), phi=phi, adam_m1=np.zeros_like(phi),
                         adam_m2=np.zeros_like(phi), adam_t=0, step_scale=0.5 * state.step_scale,
                         halvings=state.halvings + 1, stale_checks=0)


def admissible(family: BilevelFamily, params: Params) -> bool:
    """A family restricted to an input domain refuses laws with (almost) no mass inside it."""
    check = getattr(family, "admissible", None)
    return check is None or check(params)


def plain_step(state: BilevelState, family: BilevelFamily, grads,
               step: float) -> tuple[BilevelState, str | None, float]:
    """The paper's step theta <- theta - t_k grad (diag(L) clamped), refusing non-finite results."""
    if grads is None:
        return state, "rejected", float("nan")
    params, norm = family.plain_step(state.params, tuple(grads), step)
    if not all(np.all(np.isfinite(v)) for v in params.values()) or not admissible(family, params):
        return state, "rejected", norm
    return state.replace(params=params), None, norm


def adaptive_step(state: BilevelState, family: BilevelFamily, grads,
                  step: float) -> tuple[BilevelState, str | None, float]:
    """Guarded Adam in whitened coordinates, projected on the parameter box."""
    if grads is None:
        return state, "rejected", float("nan")
    phi = state.phi
    grad = family.phi_gradient(phi, tuple(grads)) * family.mask()
    norm = float(np.sqrt(np.sum(grad**2))) if np.all(np.isfinite(grad)) else float("inf")
    grad, grad_ms, event = guard_gradient(grad, state.grad_ms, state.adam_t)
    if grad is None:
        return state, event, norm
    t = state.adam_t + 1
    new_phi, m1, m2 = adam_step(phi, grad, state.adam_m1, state.adam_m2, t, step * state.step_scale)
    lo, hi = family.bounds(state.phi0)
    bounded = np.clip(new_phi, lo, hi)
    if not np.array_equal(bounded, new_phi):
        event = event or "bounded"
    params = family.from_phi(bounded)
    if not all(np.all(np.isfinite(v)) for v in params.values()) or not admissible(family, params):
        return state.replace(grad_ms=grad_ms), "rejected", norm
    return state.replace(phi=bounded, params=params, adam_m1=m1, adam_m2=m2, adam_t=t, grad_ms=grad_ms), event, norm


def build(spec: JobSpec, oracle, resolve: DatasetResolver = _no_datasets) -> BilevelDesign:
    """The stepper of a ``bilevel`` job (registered at the end of this module)."""
    return BilevelDesign.from_spec(spec, resolve)


def evaluate(stepper: BilevelDesign, state: BilevelState, spec: JobSpec, oracle, out: dict) -> dict:
    """Held-out Err of the design and its baselines (:func:`lwl.evaluation.heldout.evaluate_design`)
    and the verdict; ``spec`` is the resolved one (its lengthscale is what the run selected)."""
    from lwl.evaluation.heldout import evaluate_design, verdict
    from lwl.measures import from_spec

    family = stepper.family
    # theta^0 is a candidate of its own unless a baseline already is it (the Gaussian family's is "normal")
    initial = None if getattr(family, "initial_is_baseline", None) else family.measure(family.initial())
    # validation labels line up with Q's validation points only when none failed
    labels = None if state.validation_ok is not None else np.asarray(state.validation_labels)
    evaluation = evaluate_design(spec, stepper.q, from_spec(out["distribution"]), oracle, labels, initial=initial)
    sel = out.get("selected", {})
    returned_initial = sel.get("iteration") == 0 and sel.get("start", "given") == "given"
    v = verdict(evaluation, out.get("warnings", []), returned_initial=returned_initial,
                initial_label=stepper.start_label("given"))
    return {"evaluation": evaluation, "verdict": v, "warnings": v["warnings"]}


# -- the job spec's block for this component, and its registration (lwl.registry) --

DEFAULT_BASELINES = ("normal", "barycenter", "mixture")  # a bilevel job's verdict compares with these


def _bar(default: float, description: str):
    """A bar of the kept check's improvement over theta0, in standard errors (keep=best)."""
    return Field(default=default, ge=0.0, le=100.0, description="keep=best: " + description)


class BilevelSettings(StrictModel):
    """The fields of the bilevel stepper and its keep-which check: the first of a bilevel spec
    block (:class:`BilevelSpec`, which adds the budget fields)."""

    name: Literal["bilevel"] = "bilevel"
    iterations: int = Field(default=1000, ge=1, le=1_000_000)
    samples_per_iteration: int | None = Field(
        default=None, ge=2, le=100_000,
        description="N_k; default: the evaluation's train_size (design for the N you will train with)")
    optimizer: Literal["adaptive", "paper"] = "adaptive"
    step: float = Field(default=0.05, gt=0, le=10, description="adaptive: Adam step in standard deviations of Q")
    final_step: float = Field(default=0.0, ge=0, le=10, description="adaptive: step at the last iteration")
    learning_rate: float = Field(default=1e-2, gt=0, description="paper: t_0")
    final_learning_rate: float = Field(default=0.0, ge=0, description="paper: t at the last iteration")
    nugget: float = Field(default=1e-3, gt=0, description="sigma^2 at the first iteration")
    final_nugget: float = Field(default=1e-7, gt=0, description="sigma^2 at the last iteration")
    gradient_scale: Literal["absolute", "relative"] = Field(
        default="absolute", description="paper: raw gradient of 1/2 E_Q or of 1/2 Err^2 (adaptive is scale-free)")
    check_every: int = Field(default=25, ge=1, le=1_000_000)
    check_samples: int | None = Field(default=None, ge=2, le=100_000)
    keep: Literal["best", "last"] = "best"
    starts: Literal["given", "moment_matched"] = Field(
        default="moment_matched",
        description="adaptive: also check Q's moment-matched Gaussian at iteration 0 and start from the better")
    broaden: list[Annotated[float, Field(gt=1.0, le=100.0)]] = Field(
        default_factory=lambda: [1.5, 2.0, 3.0, 4.0], max_length=8,
        description="adaptive with starts=moment_matched: also check the first start point (Q's fit) with its "
                    "covariance scaled by each factor at iteration 0 (regression learns Q best from a broader "
                    "design); [] for none")
    significance: float = _bar(
        2.0, "the kept iterate must beat the given initial distribution by this many standard errors of the paired "
             "validation difference, else the best check that does (or the initial one) is returned (0: off)")
    start_significance: float = _bar(
        1.645, "the same for the start points checked at iteration 0 (a few candidates fixed in advance, so a "
               "one-sided 5% test; never above significance)")
    spread_significance: float = _bar(
        0.8, "when no check clears significance / start_significance, the best check is still returned if it "
             "beats the initial distribution by this many standard errors and its improvement is spread over the "
             "validation points (see spread_share); never above the two bars")
    spread_share: float = Field(
        default=2 / 3, ge=0.0, le=1.0,
        description="keep=best: the largest share of the improvement's weighted paired differences that its 5 "
                    "largest may carry for spread_significance to apply (0: off, the earlier gate; see "
                    "docs/method/bilevel.md, 'A lower bar where the improvement is spread')")
    patience: int = Field(default=2, ge=1, le=1000)
    max_halvings: int = Field(default=6, ge=0, le=60)


class BilevelSpec(BudgetFields, BilevelSettings):
    """Bilevel gradient descent (paper Alg. 3) with a cosine-annealed nugget.

    ``optimizer="adaptive"`` (the default) needs no step size: Adam in Q's whitened coordinates,
    ``step`` being the step length in standard deviations of Q (cosine-annealed to
    ``final_step``), with a guarded gradient and a parameter box (docs/method/bilevel.md).
    ``optimizer="paper"`` is the paper's plain step theta <- theta - t_k grad with t_k cosine
    from ``learning_rate`` to ``final_learning_rate``; ``gradient_scale="relative"`` divides that
    gradient by E_Q(0) (descends 1/2 Err^2); the paper's setting is "absolute".

    Every ``check_every`` iterations (and after the last) the iterate is scored on Q's validation
    samples by KRR trained on ``check_samples`` points drawn with one fixed seed (default: the
    evaluation's train_size, at most 2048), with the evaluation's ridge. ``keep="best"`` returns
    the best checked iterate; the adaptive optimiser also returns to it and halves its step after
    ``patience`` checks without progress and stops after ``max_halvings`` halvings.
    """

    # a job with a ``budget`` runs the budgeted design (lwl.design.budgeted_bilevel, docs/method/budgets.md
    # "Designs for a label budget"); the budget fields (lwl.design.budget.settings, declared once
    # for every algorithm) come after the stepper's and are read by it only; the one default of
    # bilevel's own is explore's: null (every live candidate an equal share, Q's mixture halved too)
    explore: Explore = None
    inner_steps: int = Field(default=0, ge=0, le=100_000,
                             description="budgeted jobs: bilevel steps on a surrogate of G* between two rounds, "
                                         "whose result competes for the next round's labels (0: off; see "
                                         "docs/method/budgets.md)")


def check_bilevel(spec: JobSpec) -> None:
    """Bilevel: a family with a bilevel builder (``bilevel`` in its registry entry), a krr
    model; N_k defaults to the evaluation's train_size."""
    from lwl.registry import FAMILIES

    if spec.algorithm.samples_per_iteration is None:
        spec.algorithm.samples_per_iteration = spec.evaluation.train_size
    movable = [e.name for e in FAMILIES.entries() if "bilevel" in e.extra]
    if spec.family.name not in movable:
        moved_by = FAMILIES.get(spec.family.name).extra.get("moved_by")
        raise ValueError(f"algorithm.name: a {spec.family.name} family is moved by {moved_by}" if moved_by else
                         f"algorithm.name: bilevel needs a family among {movable} and a krr model")
    if spec.model.name == "gp" and spec.budget is None:
        raise ValueError("model.name: the unbudgeted bilevel design trains the paper's krr; a gp model is "
                         "designed for by a job with a budget")
    if spec.model.name not in ("krr", "gp"):
        raise ValueError(f"algorithm.name: bilevel needs a family among {movable} and a krr model "
                         f"(or gp with a budget)")
    if spec.algorithm.optimizer == "paper" and not FAMILIES.get(spec.family.name).extra.get("paper_optimizer"):
        plain = [e.name for e in FAMILIES.entries() if e.extra.get("paper_optimizer")]
        raise ValueError(f"algorithm.optimizer: the paper's plain step is defined for the {', '.join(plain)} "
                         f"family; use the adaptive optimiser")
    kle_member_sizes(spec)
    from lwl.q_samples import degenerate_member

    for k, m in enumerate(spec.test_distributions.members):
        if m.samples is not None:
            why = degenerate_member(np.asarray(m.samples, dtype=np.float64))
            if why:
                raise ValueError(f"test_distributions.members.{k}.samples: {why}")


ALGORITHMS.register("bilevel", BilevelSpec, build, check_bilevel, evaluate=evaluate, final_steps=0,
                    baselines=DEFAULT_BASELINES, domain=True, full_rank_members=True,
                    budgeted="lwl.design.budgeted_bilevel:build",
                    budget_needs="lwl.design.budget.plan:check_budget",
                    budgeted_evaluate="lwl.evaluation.equal_labels:evaluate")
