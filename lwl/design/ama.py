"""Alternating minimisation of the OOD upper bound (paper Alg. 2, "AMA"), parametric form.

Objective (eqn AMAobjective), for nu = nu_theta and Q = sum_k w_k delta_{nu'_k}:

    J(theta) = E_{u~nu_theta} ||G*(u) - G_hat(u)||^2
               + sqrt(E_Q c_R^2(nu_theta, nu')) * sqrt(E_Q W2^2(nu_theta, nu')),
    c_R = (L + R) sqrt(4 (L + R)^2 (m2(nu) + m2(nu')) + 16 (||G*(0)||^2 + ||G_hat(0)||^2))

(Prop. 3.1 / Cor. 3.2 with Lip(G_hat) replaced by R). One iteration k:

1. model step: train the model on n_train samples u(theta_k, xi_train) and their labels; if J
   did not fall, train on for up to ``model_rounds`` rounds (the paper's "continue training
   while the AMA loss has not improved"), and keep the previous model if it never does;
2. distribution step: minimise J over theta with the model fixed, by
   ``differential_evolution`` (global, gradient-free; the paper's NtD omega), ``adam`` (the
   paper's Darcy mean shift) or ``lbfgsb`` (Burgers alpha, tau, sigma); the step is accepted
   only if J falls (the authors' code accepts the last one), so the history never rises.

The training error at a new theta is evaluated on reparametrised samples u(theta, xi_opt) with
fixed noise (the paper's fixed coefficient sets), labelled by the oracle: the distribution step
spends labels, and ``history`` counts them. Its gradient is autograd through the model and the
closed-form W2/m2 terms, plus the oracle's directional derivatives d G*(u(theta))/d theta_j by
central finite differences in theta (2 extra batches per free parameter). Lipschitz constants
L = Lip(G*) and R = Lip(G_hat) are given or estimated once (SM eqn app_lip_estimate) from pairs
drawn from candidate distributions spread over the parameter bounds: L from oracle labels
before the first iteration, R from the first trained model; both then stay fixed.

The stepper's queries are: the Lipschitz pairs and the zero input (when L is estimated), then
each iteration's training inputs; after the last distribution step one more model step trains
the model that ``result`` reports on the final distribution.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal

import numpy as np
import torch
from pydantic import Field

from lwl.bound import bound_constant_squared
from lwl.design.budget.settings import OperatorBudgetFields
from lwl.measures.kle_family import KLEFamily
from lwl.design.stepper import StepperDefaults
from lwl.design.validated import SELECTIONS, AMAStateBase, PairModels, Phase, judge
from lwl.lipschitz import lipschitz_pairs, lipschitz_ratio
from lwl.measures import KLEGaussian
from lwl.oracles import Oracle, as_numpy
from lwl.params import StrictModel
from lwl.registry import ALGORITHMS
from lwl.streams import STREAM_LIP, STREAM_OPT, STREAM_TRAIN

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

OPTIMIZERS = ("differential_evolution", "adam", "lbfgsb")


@dataclass(kw_only=True)
class AMAState(AMAStateBase):
    """Parametric AMA's state: the family's free parameters theta_k and the fields of
    :class:`lwl.design.validated.AMAStateBase` (the bound's constants, J, the current model, the
    kept pair of validated AMA). Phase ``lipschitz`` while L = Lip(G*) is to be estimated."""

    POINT = "theta"

    theta: np.ndarray  # the free parameters of nu_theta (KLEFamily.free)


class AMADesign(PairModels, StepperDefaults):
    """AMA as a stepper over a :class:`KLEFamily` (see the module docstring); its state is an
    :class:`AMAState`.

    ``model_factory(seed)`` returns an unfitted regressor with ``fit(U, Y, z)`` (warm start
    supported), ``forward(u)`` (differentiable) and ``get_weights``/``set_weights``, e.g.
    :class:`lwl.models.DeepONetRegressor`. ``z`` are the model's output query points and
    ``output_weights`` the quadrature weights of the output grid (L^2 norms of labels).
    """

    state_type = AMAState

    def __init__(self, family: KLEFamily, members: list[KLEGaussian], oracle: Oracle,
                 model_factory: Callable[[int], Any], z: np.ndarray, *, weights: list[float] | None = None,
                 output_weights: np.ndarray | float = 1.0, iterations: int = 10, n_train: int = 500,
                 n_opt: int = 500, optimizer: str = "differential_evolution", learning_rate: float = 1e-3,
                 steps: int = 500, rounds: int = 3, tol: float = 1e-7, maxiter: int = 1000,
                 model_rounds: int = 1, lipschitz_oracle: float | None = None,
                 lipschitz_model: float | None = None, lipschitz_pairs: int = 250,
                 lipschitz_candidates: int = 11, seed: int = 0, select: str = "bound",
                 validation_size: int = 100, backtracks: int = 2):
        if select not in SELECTIONS:
            raise ValueError(f"select: one of {SELECTIONS}, got {select!r}")
        self.select, self.validation_size, self.backtracks = select, validation_size, backtracks
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: one of {OPTIMIZERS}, got {optimizer!r}")
        if optimizer == "differential_evolution" and not all(np.isfinite(family.bounds[p]).all()
                                                             for p in family.free):
            raise ValueError("bounds: differential evolution needs finite bounds for every free parameter")
        self.family, self.members, self.oracle = family, list(members), oracle
        w = np.ones(len(members)) if weights is None else np.asarray(weights, dtype=np.float64)
        self.weights = torch.as_tensor(w / w.sum(), dtype=torch.float64)
        self.model_factory, self.z = model_factory, np.asarray(z)
        self.output_weights = output_weights
        self.iterations, self.n_train, self.n_opt = iterations, n_train, n_opt
        self.optimizer, self.learning_rate, self.steps, self.rounds = optimizer, learning_rate, steps, rounds
        self.tol, self.maxiter, self.model_rounds = tol, maxiter, model_rounds
        self.lipschitz_oracle, self.lipschitz_model = lipschitz_oracle, lipschitz_model
        self.n_pairs, self.n_candidates, self.seed = lipschitz_pairs, lipschitz_candidates, seed
        self._m2_q = torch.as_tensor([m.second_moment() for m in members], dtype=torch.float64)
        self._xi_train = family.noise(n_train, [seed, STREAM_TRAIN])
        self._xi_opt = family.noise(n_opt, [seed, STREAM_OPT])
        self._label_cache: dict[bytes, np.ndarray] = {}
        self.labels_used = 0

    @classmethod
    def from_spec(cls, spec, oracle: Oracle) -> "AMADesign":
        """The stepper of an ``algorithm.name == "ama"`` job spec (see AMASpec below)."""
        from lwl.models.deeponet import deeponet_factory

        fam = spec.family
        family = KLEFamily(fam.kle_parameters().measure(), list(fam.free), dict(fam.bounds))
        z, out_w = oracle.output_grid(family.template.dim)
        a = spec.algorithm
        factory = deeponet_factory(spec.model, family.template.dim, z.shape[1], spec.device, warm_start=True)

        return cls(family, [k.kle.measure() for k in spec.test_distributions.members], oracle, factory, z,
                   weights=spec.test_distributions.weights, output_weights=out_w, iterations=a.iterations,
                   n_train=a.samples_per_iteration, n_opt=a.optimization_samples, optimizer=a.optimizer,
                   learning_rate=a.learning_rate, steps=a.steps, rounds=a.rounds, tol=a.tol, maxiter=a.maxiter,
                   model_rounds=a.model_rounds, lipschitz_oracle=a.lipschitz_oracle,
                   lipschitz_model=a.lipschitz_model, lipschitz_pairs=a.lipschitz_pairs,
                   lipschitz_candidates=a.lipschitz_candidates, seed=spec.seed, select=a.select,
                   validation_size=spec.test_distributions.validation_per_member, backtracks=a.backtracks)

    def evaluate(self, state: AMAState, n: int, seed) -> dict[str, Any]:
        """Relative OOD error (SM eqn app_ntd_rel_ood_error) of the final model on ``n`` fresh
        samples of every member of Q, labelled by the oracle."""
        from lwl.evaluation.metrics import member_relative_error

        model = self.selected_model(state)
        samples = [m.sample(n, [*np.atleast_1d(seed).tolist(), k]) for k, m in enumerate(self.members)]
        pairs = ((self._label(U), model.predict(U)) for U in samples)
        return {"relative_ood_error": member_relative_error(pairs, self.weights.numpy(), self.output_weights),
                "samples_per_member": n}

    # -- helpers ----------------------------------------------------------------------------
    def _label(self, u: np.ndarray) -> np.ndarray:
        self.labels_used += len(u)
        return as_numpy(self.oracle.label(u)).reshape(len(u), -1)

    def _opt_labels(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(theta, dtype=np.float64).tobytes()
        u = self.family.sample(torch.as_tensor(theta, dtype=torch.float64), self._xi_opt).numpy()
        if key not in self._label_cache:
            if len(self._label_cache) > 64:
                self._label_cache.clear()
            self._label_cache[key] = self._label(u)
        return u, self._label_cache[key]

    def _sq_norm(self, r: torch.Tensor) -> torch.Tensor:
        return self._sq_inner(r, r)

    def candidates(self) -> list[KLEGaussian]:
        """Candidate distributions for the Lipschitz pairs: theta spread over the finite bounds."""
        t0 = self.family.theta0()
        lo, hi = (np.array(b) for b in zip(*(self.family.bounds[p] for p in self.family.free)))
        ok = np.isfinite(lo) & np.isfinite(hi)
        out = []
        for s in np.linspace(0, 1, self.n_candidates):
            out.append(self.family.measure(np.where(ok, lo + s * (np.where(ok, hi, 0) - np.where(ok, lo, 0)), t0)))
        return out

    def validation_error(self, state: AMAState, model) -> tuple[float, AMAState]:
        """The model's member-weighted relative error on Q's validation samples (labelled once)."""
        from lwl.evaluation.metrics import member_relative_error
        from lwl.streams import STREAM_VALIDATION

        U = [m.sample(self.validation_size, [self.seed, STREAM_VALIDATION, k]) for k, m in enumerate(self.members)]
        if state.validation_labels is None:
            state = state.replace(validation_labels=np.concatenate([self._label(u) for u in U]))
        Y = np.split(state.validation_labels, len(U))
        err = member_relative_error(((y, model.predict(u)) for u, y in zip(U, Y)), self.weights.numpy(),
                                    self.output_weights)
        return err, state

    # -- the bound ----------------------------------------------------------------------------
    def bound_terms(self, theta: torch.Tensor, state: AMAState) -> tuple[torch.Tensor, torch.Tensor]:
        """(sqrt(E_Q c_R^2), sqrt(E_Q W2^2)) at theta, differentiable."""
        w2 = torch.stack([self.family.w2_squared(theta, m) for m in self.members])
        c2 = bound_constant_squared(state.lipschitz_oracle, state.lipschitz_model,
                                    self.family.second_moment(theta), self._m2_q, state.zero_sq)
        return torch.sqrt(self.weights @ c2), torch.sqrt(self.weights @ w2)

    def objective(self, theta: np.ndarray, state: AMAState, model=None, grad: bool = False):
        """J(theta) with the model fixed; with ``grad``, also dJ/dtheta (see the module docstring)."""
        model = model or self.model(state)
        theta = np.asarray(theta, dtype=np.float64)
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=grad)
        u = self.family.sample(th, self._xi_opt)
        _, y = self._opt_labels(theta)
        y_t = torch.as_tensor(y, dtype=torch.float64)
        residual = y_t - model.forward(u) if grad else y_t - model.forward(u.detach()).detach()
        training = self._sq_norm(residual).mean()
        c, w = self.bound_terms(th, state)
        total = training + c * w
        if not grad:
            return float(total)
        total.backward()
        g = th.grad.numpy().copy()
        # the oracle's part of d/dtheta_j mean ||G*(u) - G_hat(u)||^2, by central differences
        r = residual.detach()
        for j in range(theta.size):
            h = 1e-5 * max(1.0, abs(theta[j]))
            e = np.zeros_like(theta)
            e[j] = h
            dy = (self._opt_labels(theta + e)[1] - self._opt_labels(theta - e)[1]) / (2 * h)
            g[j] += float((2 * self._sq_inner(r, torch.as_tensor(dy))).mean())
        return float(total.detach()), g

    def _sq_inner(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        w = torch.as_tensor(self.output_weights, dtype=torch.float64)
        return (a * b * w).sum(dim=1)

    # -- stepper protocol ---------------------------------------------------------------------
    def init(self) -> AMAState:
        need = self.lipschitz_oracle is None
        return AMAState(phase=Phase.LIPSCHITZ if need else Phase.ITERATE, theta=self.family.theta0(),
                        lipschitz_oracle=self.lipschitz_oracle, lipschitz_model=self.lipschitz_model)

    def done(self, state: AMAState) -> bool:
        return state.phase == Phase.DONE

    def _pairs(self):
        return lipschitz_pairs(self.candidates(), self.n_pairs, [self.seed, STREAM_LIP])

    def queries(self, state: AMAState) -> np.ndarray:
        if state.phase == Phase.LIPSCHITZ:
            a, b = self._pairs()
            return np.concatenate([a, b, np.zeros((1, a.shape[1]))])
        if state.phase == Phase.DONE:
            return np.zeros((0, self.family.template.dim))
        th = torch.as_tensor(state.theta, dtype=torch.float64)
        return self.family.sample(th, self._xi_train).numpy()

    def step(self, state: AMAState, labels) -> AMAState:
        labels = np.asarray(labels, dtype=np.float64)
        expected = len(self.queries(state))
        labels = labels.reshape(expected, -1) if labels.size % max(expected, 1) == 0 else labels
        if labels.shape[0] != expected:
            raise ValueError(f"labels: expected {expected} rows, got {labels.shape[0]}")
        if not np.all(np.isfinite(labels)):
            raise ValueError("labels: values must be finite")
        used = state.labels_used + expected
        if state.phase == Phase.LIPSCHITZ:
            a, b = self._pairs()
            n = len(a)
            iw = self.family.template.quadrature_weights()
            L = lipschitz_ratio(labels[:n], labels[n:2 * n], a, b, iw, self.output_weights)
            zero = float(self._sq_norm(torch.as_tensor(labels[2 * n:]))[0])
            return state.replace(phase=Phase.ITERATE, lipschitz_oracle=L, oracle_zero_sq=zero, labels_used=used)
        if state.phase == Phase.DONE:
            raise ValueError("step: the design is finished")
        return self._iterate(state, labels, used)

    def result(self, state: AMAState) -> dict[str, Any]:
        out = {"distribution": self.family.measure(state.theta).to_spec(), "history": list(state.history),
               "lipschitz": {"oracle": state.lipschitz_oracle, "model": state.lipschitz_model},
               "labels_used": state.labels_used}
        if self.select == "validation" and state.best is not None:
            out["last_distribution"] = out["distribution"]
            out["distribution"] = self.family.measure(state.best.params["theta"]).to_spec()
            out["selected"] = {"iteration": state.best.iteration, "validation_error": state.best.err,
                               "rule": "best validation error (validated AMA)"}
        return out

    # -- one iteration ------------------------------------------------------------------------
    def _zero_sq(self, state: AMAState, model) -> tuple[float, AMAState]:
        """||G*(0)||^2 + ||G_hat(0)||^2 for ``model`` (labelling G*(0) once if L was given)."""
        if state.oracle_zero_sq is None:
            g0 = self._label(np.zeros((1, self.family.template.dim)))
            state = state.replace(oracle_zero_sq=float(self._sq_norm(torch.as_tensor(g0))[0]))
        m0 = model.forward(torch.zeros((1, self.family.template.dim), dtype=torch.float64)).detach()
        return state.oracle_zero_sq + float(self._sq_norm(m0)[0]), state

    def _model_step(self, state: AMAState, U, Y):
        """Train on (U, Y); keep training while J at theta_k has not fallen below the last J."""
        k = state.iteration
        previous = self.model(state)
        model = self.model_factory(self.seed + 1000 * k)
        if previous is not None:  # continue from the current weights (warm start)
            model.set_weights(previous.get_weights(), self.z)
        rounds = 0
        while True:
            model.fit(U, Y, self.z)
            rounds += 1
            if state.lipschitz_model is None:
                state = state.replace(lipschitz_model=self._estimate_model_lipschitz(model))
            zero_sq, state = self._zero_sq(state, model)
            trial = state.replace(zero_sq=zero_sq)
            value = self.objective(state.theta, trial, model)
            if state.objective is None or value <= state.objective or rounds >= self.model_rounds:
                break
            model.seed += 1
        if state.objective is not None and value > state.objective and previous is not None:
            # the model step never lowered J: keep the previous model (monotone objective)
            zero_sq, state = self._zero_sq(state, previous)
            return previous, state.replace(zero_sq=zero_sq), state.objective, rounds, False
        return model, trial, value, rounds, True

    def _estimate_model_lipschitz(self, model) -> float:
        a, b = self._pairs()
        with torch.no_grad():
            ga = model.forward(torch.as_tensor(a)).numpy()
            gb = model.forward(torch.as_tensor(b)).numpy()
        return lipschitz_ratio(ga, gb, a, b, self.family.template.quadrature_weights(), self.output_weights)

    def _iterate(self, state: AMAState, Y, used) -> AMAState:
        t0 = time.perf_counter()
        self.labels_used = 0
        k = state.iteration
        U = self.queries(state)
        model, state, after_model, rounds, model_accepted = self._model_step(state, U, Y)
        record = {"iteration": k, "theta": state.theta.tolist(), "objective_after_model": after_model,
                  "model_rounds": rounds, "model_accepted": model_accepted,
                  "training_error": self._training_error(state.theta, model)}
        final = k >= self.iterations
        if self.select == "validation":
            record["validation_error"], state = self.validation_error(state, model)
            state, action = judge(state, state.candidate(model, record["validation_error"]), self.backtracks)
            record["validation_action"] = action
            if action != "kept":  # the last distribution step validated worse than the kept pair
                model = self.selected_model(state)
                if action == "stop":
                    final = True
                else:  # retrain at the point halfway back, from the kept model; no bound step now
                    return self._advance(state, model, record, state.objective, used, t0, final,
                                         reset_objective=True)
        theta = state.theta
        if not final:
            proposal = self.family.clip(self._optimise(theta, state, model))
            value = self.objective(proposal, state, model)
            accepted = value < after_model
            theta, objective = (proposal, value) if accepted else (theta, after_model)
            record.update(proposal=proposal.tolist(), proposal_objective=value, accepted=bool(accepted))
        else:
            objective = after_model
        return self._advance(state.replace(theta=np.asarray(theta, dtype=np.float64)), model, record, objective,
                             used, t0, final)

    def _advance(self, state: AMAState, model, record, objective, used, t0, final,
                 reset_objective=False) -> AMAState:
        """The state after iteration k: the record, the model's weights, the next phase (after a
        validated backtrack the bound at the new point is unknown: ``reset_objective``)."""
        c, w = self.bound_terms(torch.as_tensor(state.theta, dtype=torch.float64), state)
        record.update(objective=objective, c_term=float(c), w2_term=float(w),
                      labels_used=used + self.labels_used, seconds=time.perf_counter() - t0)
        return state.replace(model=model.get_weights(), objective=None if reset_objective else objective,
                             iteration=state.iteration + 1, phase=Phase.DONE if final else Phase.ITERATE,
                             labels_used=used + self.labels_used, history=[*state.history, record])

    def _training_error(self, theta, model) -> float:
        u, y = self._opt_labels(np.asarray(theta))
        with torch.no_grad():
            r = torch.as_tensor(y) - model.forward(torch.as_tensor(u))
        return float(self._sq_norm(r).mean())

    # -- distribution step optimisers ----------------------------------------------------------
    def _optimise(self, theta: np.ndarray, state: AMAState, model) -> np.ndarray:
        fam = self.family
        bounds = [fam.bounds[p] for p in fam.free]
        from scipy.optimize import (  # loaded lazily: importing lwl stays fast
            differential_evolution,
            minimize,
        )

        if self.optimizer == "differential_evolution":
            res = differential_evolution(lambda x: self.objective(x, state, model), bounds, tol=self.tol,
                                         maxiter=self.maxiter, seed=self.seed + state.iteration,
                                         x0=np.clip(theta, *zip(*bounds)), polish=True)
            return res.x
        if self.optimizer == "lbfgsb":
            res = minimize(lambda x: self.objective(x, state, model, grad=True), theta, jac=True,
                           method="L-BFGS-B", bounds=[(None if not math.isfinite(lo) else lo,
                                                       None if not math.isfinite(hi) else hi) for lo, hi in bounds],
                           options={"maxiter": self.maxiter, "ftol": self.tol})
            return res.x
        return self._adam(theta, state, model)

    def _adam(self, theta: np.ndarray, state: AMAState, model) -> np.ndarray:
        """Rounds of ``steps`` Adam steps; stop after the first round that lowers J (paper SM Darcy)."""
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([th], lr=self.learning_rate)
        best, best_value = theta, self.objective(theta, state, model)
        for _ in range(self.rounds):
            for _ in range(self.steps):
                _, g = self.objective(self.family.clip(th.detach().numpy()), state, model, grad=True)
                opt.zero_grad()
                th.grad = torch.as_tensor(g)
                opt.step()
            x = self.family.clip(th.detach().numpy())
            value = self.objective(x, state, model)
            if value < best_value:
                return x
        return best


def build(spec, oracle: Oracle, resolve=None) -> AMADesign:
    """The stepper of an ``ama`` job (registered at the end of this module)."""
    design = AMADesign.from_spec(spec, oracle)
    design.spec = spec
    return design


def evaluate(stepper: AMADesign, state: AMAState, spec, oracle, out: dict) -> dict:
    """Relative OOD error of the final model on fresh samples of Q's members."""
    from lwl.streams import STREAM_EVAL

    return {"evaluation": stepper.evaluate(state, spec.test_distributions.validation_per_member,
                                           [spec.seed, STREAM_EVAL])}


# -- the job spec's block for this component, and its registration (lwl.registry) --


class AMASpec(OperatorBudgetFields, StrictModel):
    """Alternating minimisation of the OOD upper bound (paper Alg. 2; see lwl.design.ama). With a
    ``budget`` the job runs the budgeted AMA design (lwl.design.budgeted_ama), which reads the
    fields of :class:`~lwl.design.budget.settings.OperatorBudgetFields` and none of the others."""
    name: Literal["ama"] = "ama"
    iterations: int = Field(default=10, ge=1, le=10_000)
    samples_per_iteration: int = Field(default=500, ge=2, le=1_000_000, description="training samples per model step")
    optimization_samples: int = Field(default=500, ge=1, le=1_000_000,
                                      description="fixed samples for the training-error term of the distribution step")
    optimizer: Literal["differential_evolution", "adam", "lbfgsb"] = "differential_evolution"
    learning_rate: float = Field(default=1e-3, gt=0, description="adam")
    steps: int = Field(default=500, ge=1, le=1_000_000, description="adam steps per round")
    rounds: int = Field(default=3, ge=1, le=1000, description="adam rounds until the bound falls")
    tol: float = Field(default=1e-7, gt=0)
    maxiter: int = Field(default=1000, ge=1, le=1_000_000, description="differential evolution / L-BFGS-B")
    model_rounds: int = Field(default=1, ge=1, le=1000, description="training rounds until the bound falls")
    lipschitz_oracle: float | None = Field(default=None, gt=0, description="Lip(G*); estimated when omitted")
    lipschitz_model: float | None = Field(default=None, gt=0, description="R; estimated when omitted")
    lipschitz_pairs: int = Field(default=250, ge=1, le=100_000)
    lipschitz_candidates: int = Field(default=11, ge=1, le=1000)
    select: Literal["bound", "validation"] = Field(
        default="validation", description="validation (lwl's default): Q's validation samples accept steps and "
                                          "select the returned iterate (lwl.design.validated); bound: the paper's "
                                          "AMA (steps accepted when the bound falls, the last iterate returned)")
    backtracks: int = Field(default=2, ge=0, le=50, description="validation: halvings back towards the kept "
                                                                "distribution before the design stops")


def operator_parts(spec: JobSpec, family: str, family_what: str, oracle_need: str | None) -> None:
    """An AMA-type job (ama, particle_ama): the family it moves, a DeepONet, and an oracle it can
    call inside a step (``oracle_need`` None: any oracle, ask/tell included)."""
    name = spec.algorithm.name
    if spec.family.name != family:
        raise ValueError(f"family.name: {name} moves a {family_what} family ({family!r})")
    if spec.model.name != "deeponet":
        raise ValueError(f"model.name: {name} trains a DeepONet ('deeponet')")
    if spec.oracle.is_external and oracle_need is not None:
        raise ValueError(f"oracle.name: {name} labels inside its steps and needs {oracle_need}, not ask/tell")


def check_ama(spec: JobSpec) -> None:
    """AMA: a KLE family, a DeepONet, KLE members matching the family's basis, a synchronous
    oracle with an output grid, bounds for differential evolution."""
    if spec.family.name == "particles":
        raise ValueError("algorithm.name: a particles family is moved by particle_ama")
    # with a budget every solve goes through the rounds' queries: ask/tell works (lwl.design.budgeted_ama)
    operator_parts(spec, "kle", "KLE", None if spec.budget is not None else "a synchronous oracle (built-in or http)")
    fam = spec.family.kle_parameters().model_dump(include={"basis", "grid", "modes", "endpoints"})
    for k, m in enumerate(spec.test_distributions.members):
        if m.kle is None:
            raise ValueError(f"test_distributions.members.{k}: ama needs KLE members ('kle') for the "
                             "closed-form W2")
        if m.kle.model_dump(include=set(fam)) != fam:
            raise ValueError(f"test_distributions.members.{k}.kle: basis, grid, modes and endpoints must "
                             "match the family's")
    if spec.algorithm.optimizer == "differential_evolution" and set(spec.family.bounds) != set(spec.family.free):
        raise ValueError("family.bounds: differential evolution needs bounds for every free parameter")
    if spec.oracle.is_lab and spec.budget is not None:  # a lab's solver returns fields on the input's grid
        return  # (BudgetedAMA.from_spec)
    try:
        spec.oracle.build().output_grid(spec.family.dim)
    except ValueError as exc:
        hint = ("; with a budget, a lab's solver returns each field on its input's grid" if spec.oracle.is_lab
                else "")
        raise ValueError(f"{exc}{hint}") from None


ALGORITHMS.register("ama", AMASpec, build, check_ama, evaluate=evaluate, final_steps=1, prefers_gpu=True,
                    budgeted="lwl.design.budgeted_ama:build", budget_needs="lwl.design.budget.plan:check_budget",
                    budgeted_evaluate="lwl.evaluation.equal_solves:evaluate",
                    label_width="lwl.design.budgeted_ama:label_width")
