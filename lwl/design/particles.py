"""Particle AMA: the training distribution is N particles moved by the Wasserstein gradient of
the OOD upper bound (paper Alg. 2 in particle form, Cor. "Wasserstein gradient", SM RTE).

Particles live in coefficient space, a_q = exp(L c_q) with (L c)(x, y) = sum_ij c_ij 2 sin(i pi x)
sin(j pi y) on the oracle's grid nodes (eqn rte_particleform). The objective is the discrete bound

    F(c) = (1/N) sum_q ||G*(a_q) - G_hat(a_q)||^2 + sqrt(E_Q c_R^2) sqrt(E_Q W2^2(nu_N, nu'_k)),

nu_N = (1/N) sum_q delta_{a_q}, W2^2 by exact OT (``ot.emd2``, cost ||a - a'||^2_{L^2} with the
trapezoid rule) to N samples of each test member, m2(nu_N) = mean_q ||a_q||^2 (exact for an
empirical measure), c_R as in :mod:`lwl.design.ama`. The l2 gradient of the first variation at
particle q is N dF/dc_q: the OT part is the barycentric-projection map of the optimal plan
(POT differentiates emd2 through the plan, which gives 2 (a_q - T(a_q)) / N), the model part is
autograd, the oracle part the adjoint-state gradient of the PDE (``solver(a).gradient``), all
chained to c by autograd through a = exp(Lc). Step (eqn rte_coef_update):
c <- c - eta N grad_c F; a step that does not lower F halves eta and is recomputed, and the
reduced eta carries over; the design stops when ||step|| < tol or after ``iterations``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from lwl.bound import bound_constant_squared
from lwl.design.ama import operator_parts
from lwl.design.budget.settings import OperatorBudgetFields, Pool
from lwl.design.stepper import StepperDefaults
from lwl.design.validated import SELECTIONS, AMAStateBase, PairModels, Phase, judge
from lwl.lipschitz import lipschitz_ratio
from lwl.grids import trapezoid_weights
from lwl.measures.particles import LogSineParticles, sine_table
from lwl.memory import release_freed_memory
from lwl.params import StrictModel
from lwl.q_samples import kle_member_sizes
from lwl.registry import ALGORITHMS, FAMILIES

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

STREAM_INITIAL_PARTICLES = 21  # the initial coefficients c (init; the budgeted design's ``initial_particles``)


def initial_coefficients(seed: int, particles: int, modes: int, init_std: float) -> np.ndarray:
    """The initial particles' coefficients c ~ N(0, init_std^2), (particles, modes, modes): the
    start of the particle flow and the budgeted design's ``initial_particles`` candidate."""
    return np.random.default_rng([seed, STREAM_INITIAL_PARTICLES]).standard_normal(
        (particles, modes, modes)) * init_std


@dataclass(kw_only=True)
class ParticleAMAState(AMAStateBase):
    """Particle AMA's state: the particles' coefficients c, the step size eta and the fields of
    :class:`lwl.design.validated.AMAStateBase` (phase ``iterate`` or ``done``: L is estimated
    from the first particles and their labels, inside the first step)."""

    POINT = "c"
    UNTIL_SET = ("validation_labels", "oracle_zero_sq")  # ||G*(1)||^2: labelled in the first step

    c: np.ndarray  # (N, modes, modes) sine coefficients, particle q is a_q = exp(L c_q) (eqn rte_particleform)
    eta: float  # the step size of eqn rte_coef_update (halved on a failed step; the reduced one carries over)
    output_weights: np.ndarray | None = None  # quadrature weights of the labels' L^2 norm (set by the first step)


class ParticleAMADesign(PairModels, StepperDefaults):
    """Particle AMA as a stepper; its state is a :class:`ParticleAMAState`. ``oracle`` needs
    ``label`` and ``solver(a)`` with ``density()`` and ``gradient(d_rho)`` (the
    :class:`lwl.oracles.rte.RTE` oracle); ``q_samples`` are K arrays of test-member samples of a
    (rows on the grid, flattened)."""

    state_type = ParticleAMAState

    def __init__(self, oracle, q_samples: list[np.ndarray], model_factory: Callable[[int], Any], z: np.ndarray, *,
                 particles: int = 120, modes: int = 20, init_std: float = 1e-3, step_size: float = 0.01,
                 tol: float = 1e-6, iterations: int = 10, max_halvings: int = 30, max_field: float = 1e6,
                 lipschitz_oracle: float | None = None, lipschitz_model: float | None = None, seed: int = 0,
                 weights=None, select: str = "bound", backtracks: int = 2):
        if select not in SELECTIONS:
            raise ValueError(f"select: one of {SELECTIONS}, got {select!r}")
        self.select, self.backtracks = select, backtracks
        self.oracle, self.grid = oracle, oracle.grid
        self.q = [torch.as_tensor(np.asarray(x), dtype=torch.float64) for x in q_samples]
        w = np.ones(len(self.q)) if weights is None else np.asarray(weights, dtype=np.float64)
        self.weights = torch.as_tensor(w / w.sum())  # of the members of Q
        self.model_factory, self.z = model_factory, np.asarray(z)
        self.N, self.modes, self.init_std = particles, modes, init_std
        self.step_size, self.tol, self.iterations, self.max_halvings = step_size, tol, iterations, max_halvings
        self.max_field = max_field  # a step that takes a coefficient above this has failed (halve eta)
        self.lipschitz_oracle, self.lipschitz_model, self.seed = lipschitz_oracle, lipschitz_model, seed
        self._S = torch.as_tensor(sine_table(modes, self.grid))
        self._w = torch.as_tensor(trapezoid_weights(self.grid))
        self._m2_q = torch.stack([(x * x * self._w).sum(1).mean() for x in self.q])
        self._cache: tuple | None = None  # (key of c, labels, solvers or None)
        self.labels_used = 0
        self.heldout: list[np.ndarray] | None = None  # samples of Q for evaluate (set by from_spec)

    # -- particles ----------------------------------------------------------------------------
    def fields(self, c: torch.Tensor) -> torch.Tensor:
        """a = exp(L c): (N, modes, modes) coefficients -> (N, grid^2) fields."""
        return torch.exp(torch.einsum("ia,nij,jb->nab", self._S, c, self._S).reshape(c.shape[0], -1))

    def labels(self, c: np.ndarray) -> np.ndarray:
        """G*(a(c)); with a solver-backed oracle the factorised solvers are kept for the adjoint."""
        key = np.asarray(c).tobytes()
        if self._cache is None or self._cache[0] != key:
            a = self.fields(torch.as_tensor(c)).numpy()
            self.labels_used += len(a)
            if hasattr(self.oracle, "solver"):
                self.oracle.check_inputs(a)
                solvers = [self.oracle.solver(row) for row in a]
                self._cache = (key, np.stack([s.density() for s in solvers]), solvers)
                release_freed_memory()  # the replaced solvers' factorisations (lwl.memory)
            else:
                self._cache = (key, np.asarray(self.oracle.label(a)).reshape(len(a), -1), None)
        return self._cache[1]

    def _solvers(self, c: np.ndarray, a: np.ndarray) -> list:
        if self._cache is not None and self._cache[0] == np.asarray(c).tobytes() and self._cache[2] is not None:
            return self._cache[2]
        # the adjoint needs each particle's forward solution: a solve again wherever the labels came
        # without their solvers (the step's labels, computed outside), so it is counted as one
        self.labels_used += len(a)
        return [self.oracle.solver(row) for row in a]

    def cached_labels(self, state: ParticleAMAState) -> np.ndarray | None:
        """Labels of the current particles when the last step already computed them."""
        key = np.asarray(state.c).tobytes()
        return self._cache[1] if self._cache is not None and self._cache[0] == key else None

    def validation_error(self, state: ParticleAMAState, model) -> tuple[float, ParticleAMAState]:
        """The model's relative error on Q's validation samples (the OT targets; labelled once)."""
        from lwl.evaluation.metrics import member_relative_error

        if state.validation_labels is None:
            labels = [np.asarray(self.oracle.label(x.numpy())).reshape(len(x), -1) for x in self.q]
            self.labels_used += sum(len(x) for x in self.q)
            state = state.replace(validation_labels=np.concatenate(labels))
        Y = np.split(state.validation_labels, np.cumsum([len(x) for x in self.q])[:-1])
        err = member_relative_error(((y, model.predict(x.numpy())) for x, y in zip(self.q, Y)),
                                    self.weights.numpy(), trapezoid_weights(self.grid))
        return err, state

    # -- objective ------------------------------------------------------------------------------
    def objective(self, c: np.ndarray, state: ParticleAMAState, model, grad: bool = False):
        """F(c) and, with ``grad``, dF/dc (N, modes, modes)."""
        from ot import emd2  # POT loads lazily: importing lwl stays fast

        ct = torch.tensor(np.asarray(c), dtype=torch.float64, requires_grad=grad)
        a = self.fields(ct)
        y = torch.as_tensor(self.labels(c))
        w_out = torch.as_tensor(state.output_weights)
        r = y - model.forward(a if grad else a.detach())
        training = (r * r * w_out).sum(1).mean()
        m2 = (a * a * self._w).sum(1).mean()
        w2 = []
        uniform = torch.full((self.N,), 1.0 / self.N, dtype=torch.float64)
        for x in self.q:
            cost = ((a * a * self._w).sum(1)[:, None] + (x * x * self._w).sum(1)[None, :]
                    - 2 * (a * self._w) @ x.T).clamp_min(0)
            w2.append(emd2(uniform, torch.full((len(x),), 1.0 / len(x), dtype=torch.float64), cost))
        w2 = (torch.stack(w2) * self.weights).sum()
        c2 = (bound_constant_squared(state.lipschitz_oracle, state.lipschitz_model, m2, self._m2_q,
                                     state.zero_sq) * self.weights).sum()
        total = training + torch.sqrt(c2) * torch.sqrt(w2)
        if not grad:
            return float(total.detach())
        # the oracle's part, d/da_q of (1/N) ||G*(a_q) - G_hat(a_q)||^2, by the PDE's adjoint state
        rd = r.detach().numpy()
        a_np = a.detach().numpy()
        solvers = self._solvers(c, a_np)  # the factorisations of the labels serve the adjoint
        d_oracle = np.stack([solvers[q].gradient(2 * w_out.numpy() * rd[q] / self.N) for q in range(self.N)])
        (total + (a * torch.as_tensor(d_oracle)).sum()).backward()
        return float(total.detach()), ct.grad.numpy().copy(), {"training": float(training.detach()),
                                                             "w2": float(w2.detach()), "m2": float(m2.detach())}

    # -- stepper protocol ---------------------------------------------------------------------
    def init(self) -> ParticleAMAState:
        c = initial_coefficients(self.seed, self.N, self.modes, self.init_std)
        return ParticleAMAState(c=c, eta=self.step_size, lipschitz_oracle=self.lipschitz_oracle,
                                lipschitz_model=self.lipschitz_model)

    def done(self, state: ParticleAMAState) -> bool:
        return state.phase == Phase.DONE

    def queries(self, state: ParticleAMAState) -> np.ndarray:
        return self.fields(torch.as_tensor(state.c)).numpy()

    def step(self, state: ParticleAMAState, labels) -> ParticleAMAState:
        t0 = time.perf_counter()
        self.labels_used = 0
        a = self.queries(state)
        Y = np.asarray(labels, dtype=np.float64).reshape(len(a), -1)
        if not np.all(np.isfinite(Y)):
            raise ValueError("labels: values must be finite")
        if self._cache is None or self._cache[0] != np.asarray(state.c).tobytes():
            # labelled outside (the runner asked the oracle): N solves; labels the last step computed
            # (cached_labels, which the runner takes instead) were counted when they were solved
            self._cache = (np.asarray(state.c).tobytes(), Y, None)
            self.labels_used += len(a)
        if state.output_weights is None:
            state = state.replace(output_weights=trapezoid_weights(self.grid) if Y.shape[1] == self.grid**2
                                  else np.full(Y.shape[1], 1.0 / Y.shape[1]))
        model = self.model_factory(self.seed + 1000 * state.iteration).fit(a, Y, self.z)
        state = self._constants(state, model, a, Y)
        k = state.iteration
        value, g, parts = self.objective(state.c, state, model, grad=True)
        record = {"iteration": k, "objective_after_model": value, "model_accepted": True, **parts}
        previous = self.model(state)
        if state.objective is not None and value > state.objective and previous is not None:
            # the retrained model raised the bound on these particles: keep the previous one (the
            # pair (model, particles) of the last accepted step), as parametric AMA does
            state = self._constants(state, previous, a, Y)
            model = previous
            value, g, parts = self.objective(state.c, state, model, grad=True)
            record.update(model_accepted=False, **parts)
        if self.select == "validation":
            record["validation_error"], state = self.validation_error(state, model)
            state, action = judge(state, state.candidate(model, record["validation_error"]), self.backtracks)
            record["validation_action"] = action
            if action == "stop" or (action == "backtracked" and k >= self.iterations):
                return self._finish(state, self.selected_model(state), record, value, t0, final=True)
            if action == "backtracked":  # retrain at the particles halfway back, from the kept model
                return self._finish(state, self.selected_model(state), record, None, t0, final=False)
        if k >= self.iterations:
            return self._finish(state, model, record, value, t0, final=True)
        # Wasserstein step on the particles: l2 gradient of the first variation = N dF/dc_q
        direction = self.N * g
        eta, c = state.eta, state.c
        for halvings in range(self.max_halvings + 1):
            proposal = c - eta * direction
            new = self._safe_objective(proposal, state, model)
            if new < value:
                break
            eta /= 2
        accepted = new < value
        step_norm = float(eta * np.linalg.norm(direction)) if accepted else 0.0
        record.update(step_size=eta, step_norm=step_norm, accepted=bool(accepted), halvings=halvings,
                      proposal_objective=new)
        state = state.replace(c=proposal if accepted else c, eta=eta)
        stop = (not accepted) or step_norm < self.tol
        return self._finish(state, model, record, new if accepted else value, t0, final=False, stop=stop)

    def _safe_objective(self, c, state: ParticleAMAState, model) -> float:
        """F(c), or +inf where exp(Lc) exceeds ``max_field`` or the solver fails (a failed step)."""
        with np.errstate(over="ignore", invalid="ignore"):
            a = self.fields(torch.as_tensor(c))
        if not torch.isfinite(a).all() or float(a.max()) > self.max_field:
            return math.inf
        try:
            value = self.objective(c, state, model)
        except (ArithmeticError, RuntimeError, ValueError, np.linalg.LinAlgError):
            return math.inf
        return value if math.isfinite(value) else math.inf

    def _finish(self, state: ParticleAMAState, model, record, objective, t0, *, final: bool,
                stop: bool = False) -> ParticleAMAState:
        release_freed_memory()  # the step's dropped solvers, models and buffers (lwl.memory)
        record.update(objective=objective, seconds=time.perf_counter() - t0)
        used = state.labels_used + self.labels_used
        record["labels_used"] = used
        it = state.iteration + 1
        if stop and not final:
            it = self.iterations  # one more model step on the final particles, then done
        return state.replace(model=model.get_weights(), objective=objective, iteration=it,
                             phase=Phase.DONE if final else Phase.ITERATE, labels_used=used,
                             history=[*state.history, record])

    def _constants(self, state: ParticleAMAState, model, a, Y) -> ParticleAMAState:
        """Lipschitz constants (estimated once: oracle from particle/label pairs, model from pairs of
        test samples) and ||G*(0)||^2 + ||G_hat(0)||^2 (a = exp(L c) never vanishes: the constant 1
        field, c = 0, stands in for the origin of coefficient space)."""
        w_out = state.output_weights
        half = len(a) // 2
        if state.lipschitz_oracle is None:
            state = state.replace(lipschitz_oracle=lipschitz_ratio(Y[:half], Y[half:2 * half], a[:half],
                                                                   a[half:2 * half], self._w.numpy(), w_out))
        if state.lipschitz_model is None:
            x = torch.cat(self.q).numpy()
            h = len(x) // 2
            with torch.no_grad():
                gx = model.forward(torch.as_tensor(x)).numpy()
            state = state.replace(lipschitz_model=lipschitz_ratio(gx[:h], gx[h:2 * h], x[:h], x[h:2 * h],
                                                                  self._w.numpy(), w_out))
        if state.oracle_zero_sq is None:
            g1 = np.asarray(self.oracle.label(np.ones((1, self.grid**2)))).reshape(-1)
            self.labels_used += 1
            state = state.replace(oracle_zero_sq=float((g1 * g1 * w_out).sum()))
        with torch.no_grad():
            m1 = model.forward(torch.ones((1, self.grid**2), dtype=torch.float64)).numpy().reshape(-1)
        return state.replace(zero_sq=state.oracle_zero_sq + float((m1 * m1 * w_out).sum()))

    def result(self, state: ParticleAMAState) -> dict[str, Any]:
        out = {"distribution": LogSineParticles(state.c, self.grid).to_spec(), "history": list(state.history),
               "lipschitz": {"oracle": state.lipschitz_oracle, "model": state.lipschitz_model},
               "labels_used": state.labels_used}
        if self.select == "validation" and state.best is not None:
            out["last_distribution"] = out["distribution"]
            out["distribution"] = LogSineParticles(state.best.params["c"], self.grid).to_spec()
            out["selected"] = {"iteration": state.best.iteration, "validation_error": state.best.err,
                               "rule": "best validation error (validated particle AMA)"}
        return out

    def evaluate(self, state: ParticleAMAState, heldout: list[np.ndarray] | None = None) -> dict[str, Any]:
        """Relative OOD error (SM eqn app_ntd_rel_ood_error, trapezoid L^2 norms) of the final
        model on held-out samples of every member of Q (default: those of the job spec), labelled
        by the oracle."""
        heldout = self.heldout if heldout is None else heldout
        if heldout is None:
            raise ValueError("evaluate: no held-out samples of Q given")
        from lwl.evaluation.metrics import member_relative_error

        model = self.selected_model(state)
        pairs = ((self.oracle.label(U), model.predict(U)) for U in heldout)
        err = member_relative_error(pairs, self.weights.numpy(), trapezoid_weights(self.grid))
        return {"relative_ood_error": err, "samples_per_member": [len(U) for U in heldout]}

    @classmethod
    def from_spec(cls, spec, oracle, resolve=None) -> "ParticleAMADesign":
        """The stepper of an ``algorithm.name == "particle_ama"`` job spec (ParticleAMASpec below).
        The first ``validation_per_member`` samples of each member are the OT targets; the rest are
        held out for :meth:`evaluate`."""
        from lwl.models.deeponet import deeponet_factory
        from lwl.q_samples import MetaTestSamples, _no_datasets

        q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, resolve or _no_datasets)
        fam, a = spec.family, spec.algorithm
        z, _ = oracle.output_grid(fam.dim)
        factory = deeponet_factory(spec.model, fam.dim, z.shape[1], spec.device)

        design = cls(oracle, q.validation, factory, z, particles=fam.particles, modes=fam.modes, init_std=fam.init_std,
                   step_size=a.step_size, tol=a.tol, iterations=a.iterations, max_halvings=a.max_halvings,
                   max_field=a.max_field, lipschitz_oracle=a.lipschitz_oracle, lipschitz_model=a.lipschitz_model,
                   seed=spec.seed, weights=spec.test_distributions.weights, select=a.select,
                   backtracks=a.backtracks)
        design.heldout = q.heldout
        return design


def build(spec, oracle, resolve=None) -> ParticleAMADesign:
    """The stepper of a ``particle_ama`` job (registered at the end of this module)."""
    design = ParticleAMADesign.from_spec(spec, oracle, resolve)
    design.spec = spec
    return design


def evaluate(stepper: ParticleAMADesign, state: ParticleAMAState, spec, oracle, out: dict) -> dict:
    """Relative OOD error of the final model on Q's held-out samples."""
    return {"evaluation": stepper.evaluate(state)}


# -- the job spec's block for this component, and its registration (lwl.registry) --


class ParticlesFamilySpec(StrictModel):
    """N particles a_q = exp(L c_q) on the closed grid x grid nodes of [0, 1]^2, (L c)(x, y) =
    sum_ij c_ij 2 sin(i pi x) sin(j pi y) with ``modes`` x ``modes`` coefficients, initially
    c ~ N(0, init_std^2) (paper SM RTE: 20 x 20 coefficients, N = 120, c ~ N(0, 1e-6)). Moved by
    ``particle_ama``; the result is the particles' empirical measure (family "particles")."""
    name: Literal["particles"] = "particles"
    dim_field: ClassVar[str] = "grid"  # the field that fixes the dimension (for error messages)
    grid: int = Field(ge=3, le=1024, description="nodes per side, boundary included (the oracle's grid)")
    modes: int = Field(default=20, ge=1, le=256)
    particles: int = Field(default=120, ge=2, le=100_000)
    init_std: float = Field(default=1e-3, ge=0, le=10)

    @property
    def dim(self) -> int:
        return self.grid**2


class ParticleAMASpec(OperatorBudgetFields, StrictModel):
    """Particle AMA (paper Alg. 2 in particle form, Cor. "Wasserstein gradient", SM RTE): train
    the DeepONet on the particles, then move them by c <- c - step_size N grad_c F of the upper
    bound F (exact OT to the members' validation samples, the oracle's adjoint for the data
    term). A step that does not lower F halves step_size, which stays reduced; stop when the step
    norm falls below ``tol``. Needs an oracle with an adjoint solver (``rte``).
    lwl's default step_size is 0.01 (the paper's 1e-6 does not move the particles under lwl's
    L^2-normalised bound; docs/method/particles.md). With a ``budget`` the job runs the budgeted particle
    design (lwl.design.budgeted_particles), which reads the fields of
    :class:`~lwl.design.budget.settings.OperatorBudgetFields` and none of the particle flow's."""
    name: Literal["particle_ama"] = "particle_ama"
    iterations: int = Field(default=10, ge=1, le=10_000)
    step_size: float = Field(default=0.01, gt=0)
    tol: float = Field(default=1e-6, gt=0)
    max_halvings: int = Field(default=30, ge=0, le=200)
    max_field: float = Field(default=1e6, gt=0, description="a step taking a field above this has failed")
    lipschitz_oracle: float | None = Field(default=None, gt=0, description="Lip(G*); estimated when omitted")
    lipschitz_model: float | None = Field(default=None, gt=0, description="R; estimated when omitted")
    select: Literal["bound", "validation"] = Field(
        default="validation", description="validation (lwl's default): Q's validation samples accept steps and "
                                          "select the returned particles (lwl.design.validated); bound: the "
                                          "paper's (the last iterate)")
    backtracks: int = Field(default=2, ge=0, le=50)
    # budgeted jobs serve i.i.d. solves by default: on the RTE problem query by committee chose the
    # fields a DeepONet of a few hundred fields then fits worst (docs/method/particles.md "Particle AMA under a
    # budget": Err 0.031 against Q's law's 0.0236 at 1,000 solves, QbC itself behind Q's law)
    pool: Pool = "iid"


def check_particle_ama(spec: JobSpec) -> None:
    """Particle AMA: a particles family on the oracle's grid, a DeepONet, members whose grids
    include the boundary, and an oracle with an adjoint solver (rte); with a ``budget`` no adjoint
    (any oracle with the field on the input's grid, a lab's included) and lognormal or kle members."""
    budgeted = spec.budget is not None
    # with a budget every solve goes through the rounds' queries and no adjoint is taken: any oracle
    # that returns the density field on the input's grid, ask/tell included (lwl.design.budgeted_particles)
    operator_parts(spec, "particles", "particles", None if budgeted else "the oracle's adjoint: a built-in solver (rte)")
    if budgeted:
        for k, m in enumerate(spec.test_distributions.members):
            if m.lognormal is None and m.kle is None:
                raise ValueError(f"test_distributions.members.{k}: a budgeted particle_ama job needs lognormal or kle "
                                 "members (Q's law, a candidate and a comparator, is their exact mixture)")
    if not (budgeted and spec.oracle.is_lab):
        oracle = spec.oracle.build()
        if not budgeted and not hasattr(oracle, "solver"):
            raise ValueError(f"oracle.name: particle_ama needs an oracle with an adjoint solver (rte), "
                             f"not {spec.oracle.name}")
        if getattr(oracle, "grid", spec.family.grid) != spec.family.grid:
            raise ValueError(f"family.grid: {spec.family.grid} does not match the oracle's grid {oracle.grid}")
        if budgeted:
            try:
                oracle.output_grid(spec.family.dim)
            except (AttributeError, ValueError) as exc:
                raise ValueError(f"oracle.name: {exc}") from None
    if spec.family.modes > spec.family.grid - 2:
        raise ValueError(f"family.modes: at most grid - 2 = {spec.family.grid - 2} sine modes per axis "
                         "on this grid")
    if any(m.kle is not None and not m.kle.endpoints or m.lognormal is not None and not m.lognormal.endpoints
           for m in spec.test_distributions.members):
        raise ValueError("test_distributions.members: kle and lognormal members of a particles job need "
                         "endpoints: true (the oracle's nodes include the boundary)")
    kle_member_sizes(spec)


FAMILIES.register("particles", ParticlesFamilySpec, moved_by="particle_ama")
ALGORITHMS.register("particle_ama", ParticleAMASpec, build, check_particle_ama, evaluate=evaluate, final_steps=1,
                    prefers_gpu=True, budgeted="lwl.design.budgeted_particles:build",
                    budget_needs="lwl.design.budget.plan:check_budget",
                    budgeted_evaluate="lwl.evaluation.equal_solves:evaluate",
                    label_width="lwl.design.budgeted_particles:label_width")
