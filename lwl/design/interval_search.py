"""Validation-driven design of a scalar training law: where to put a fixed-width interval.

Beyond the paper. SM "AMINO for EIT" compares four hand-picked training laws omega ~ U[l, l + pi/2]
for the Dirichlet data's frequency and shows that the choice decides the OOD error (Table 2).
Here the position l is designed: the family is U[l, l + w] with l in [lo, hi - w]; the objective
is the OOD error of the model trained on the law, measured as the paper measures it (mean
relative L^1 error of the reconstructed conductivity) on Q's *validation* samples of omega, each
with its own conductivity from the prior; Q's held-out samples are kept for the evaluation.

The objective is a trained network's error: not differentiable in l at any useful cost and
noisy, so the search is global and derivative-free: a grid of ``candidates`` positions over the
whole range (it contains the paper's four intervals for the default grid of 13 over [pi/2, 7 pi]),
then ``refine`` rounds that evaluate the midpoints between the best position and its evaluated
neighbours. Every candidate trains on the same conductivities and the same uniform draws
u ~ U[0, 1]^(n x L), omega = l + w u (common random numbers), so candidates differ only in l.
The returned law is the candidate with the smallest validation error; the history lists every
candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from lwl.design.budget.settings import CandidateBudgetFields
from lwl.design.state import StepperState
from lwl.design.stepper import StepperDefaults
from lwl.measures import UniformBox
from lwl.oracles.eit import angles, conductivity, dirichlet_data, draw_coefficients
from lwl.params import StrictModel
from lwl.q_samples import MetaTestSamples
from lwl.registry import ALGORITHMS, FAMILIES
from lwl.streams import STREAM_EVAL, STREAM_TRAIN

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

STREAM_VALIDATION_PAIRS = 21  # which of Q's validation omegas each validation pair takes
STREAM_PRIOR = 22  # the conductivities of training / validation / evaluation sets


class IntervalSearch:
    """Grid, then midpoint refinement around the best, over the lower end l of [l, l + width]."""

    def __init__(self, lo: float, hi: float, width: float, candidates: int = 13, refine: int = 1):
        if not hi - lo >= width > 0:
            raise ValueError(f"family.width: {width} does not fit in the range [{lo}, {hi}]")
        self.lo, self.hi, self.width, self.candidates, self.refine = lo, hi, width, candidates, refine

    def grid(self) -> list[float]:
        return np.linspace(self.lo, self.hi - self.width, self.candidates).tolist()

    def refinement(self, scores: dict[float, float]) -> list[float]:
        """The midpoints between the best evaluated position and its evaluated neighbours."""
        lows = sorted(scores)
        k = int(np.argmin([scores[x] for x in lows]))
        out = [0.5 * (lows[j] + lows[k]) for j in (k - 1, k + 1) if 0 <= j < len(lows)]
        return [x for x in out if all(abs(x - y) > 1e-12 for y in lows)]

    @property
    def evaluations(self) -> int:
        """At most this many candidates are trained."""
        return self.candidates + 2 * self.refine


def pair_rows(coefficients: np.ndarray, omega: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The ``eit`` oracle's rows [omega, theta, c] of n conductivities with L pairs each (n*L rows)."""
    n, L = omega.shape
    th = np.broadcast_to(theta, (n, L))
    return np.concatenate([omega.reshape(-1, 1), th.reshape(-1, 1), np.repeat(coefficients, L, axis=0)], 1)


class Phase(StrEnum):
    """Where an interval search is: labelling the validation pairs, training the candidates, finished."""

    VALIDATION = "validation"
    SEARCH = "search"
    DONE = "done"


@dataclass(kw_only=True)
class IntervalSearchState(StepperState):
    """The state of an interval search; ``iteration`` counts the candidates trained. Its flat
    checkpoint layout is its fields by name (the dict state's keys)."""

    UNTIL_SET = ("validation_neumann",)

    phase: Phase = Phase.VALIDATION
    queue: list[float] = field(default_factory=list)  # lower ends l still to train, in order
    round: int = 0  # refinement rounds started (at most the spec's ``refine``)
    scores: dict[str, float] = field(default_factory=dict)  # validation error by repr(l) (JSON keys)
    # the labels of the validation pairs, (validation_size, pairs, 4 grid - 4): set by the first step
    validation_neumann: np.ndarray | None = None


class IntervalSearchDesign(StepperDefaults):
    """The ``interval_search`` algorithm as a stepper (module docstring). Queries: first the
    validation pairs (Q's validation omegas with prior conductivities), then one training set per
    candidate; ``step`` trains the model on it and records its validation error."""

    state_type = IntervalSearchState

    def __init__(self, search: IntervalSearch, q: MetaTestSamples, grid: int, model_factory, *,
                 pairs: int = 16, train_size: int = 256, validation_size: int = 64, seed: int = 0):
        self.search, self.q, self.grid, self.model_factory = search, q, grid, model_factory
        self.pairs, self.train_size, self.validation_size, self.seed = pairs, train_size, validation_size, seed
        self.theta = angles(pairs)
        rng = np.random.default_rng([seed, STREAM_PRIOR, 0])
        self.c_train = draw_coefficients(train_size, rng)
        self.u_train = np.random.default_rng([seed, STREAM_TRAIN]).random((train_size, pairs))
        rng = np.random.default_rng([seed, STREAM_PRIOR, 1])
        self.c_val = draw_coefficients(validation_size, rng)
        omegas = np.concatenate(q.validation)[:, 0]
        pick = np.random.default_rng([seed, STREAM_VALIDATION_PAIRS]).integers(0, len(omegas), (validation_size, pairs))
        self.omega_val = omegas[pick]

    @classmethod
    def from_spec(cls, spec, resolve) -> "IntervalSearchDesign":
        from lwl.models.amino import amino_factory

        fam, a = spec.family, spec.algorithm
        q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, resolve)
        grid = spec.oracle.build().grid
        search = IntervalSearch(fam.range[0], fam.range[1], fam.width, a.candidates, a.refine)
        return cls(search, q, grid, amino_factory(spec.model, grid, spec.device), pairs=a.pairs,
                   train_size=a.samples_per_candidate, validation_size=a.validation_samples, seed=spec.seed)

    # -- the stepper contract -----------------------------------------------------------------------
    def init(self) -> IntervalSearchState:
        return IntervalSearchState(queue=self.search.grid())

    def done(self, state: IntervalSearchState) -> bool:
        return state.phase is Phase.DONE

    def queries(self, state: IntervalSearchState) -> np.ndarray:
        if state.phase is Phase.VALIDATION:
            return pair_rows(self.c_val, self.omega_val, self.theta)
        return pair_rows(self.c_train, self.training_omega(state.queue[0]), self.theta)

    def step(self, state: IntervalSearchState, labels) -> IntervalSearchState:
        g = np.asarray(labels, dtype=np.float64).reshape(-1, self.pairs, 4 * self.grid - 4)
        if state.phase is Phase.VALIDATION:
            return state.replace(validation_neumann=g, phase=Phase.SEARCH)
        low, queue = state.queue[0], list(state.queue[1:])
        model = self.train(low, g)
        err = model.errors(dirichlet_data(self.omega_val, self.theta, self.grid), state.validation_neumann,
                           conductivity(self.c_val, self.grid))
        scores = {**state.scores, repr(float(low)): float(err.mean())}
        record = {"iteration": state.iteration, "low": float(low), "high": float(low + self.search.width),
                  "validation_error": float(err.mean()), "validation_sd": float(err.std()),
                  "final_train_loss": float(model.loss_history_[-1])}
        rounds = state.round
        if not queue and rounds < self.search.refine:  # the midpoints around the best so far
            queue = self.search.refinement({float(k): v for k, v in scores.items()})
            rounds += 1
        return state.replace(iteration=state.iteration + 1, scores=scores, history=[*state.history, record],
                             round=rounds, queue=queue, phase=Phase.SEARCH if queue else Phase.DONE)

    def result(self, state: IntervalSearchState) -> dict[str, Any]:
        best = self.best(state)
        history = [{**r, "selected": r["low"] == best} for r in state.history]
        kept = next(r for r in history if r["selected"])
        return {"distribution": self.law(best).to_spec(), "history": history,
                "selected": {"iteration": kept["iteration"], "low": best, "validation_error": kept["validation_error"]}}

    # -- helpers --------------------------------------------------------------------------------------
    def best(self, state: IntervalSearchState) -> float:
        scores = {float(k): v for k, v in state.scores.items()}
        return min(scores, key=lambda k: (scores[k], k))

    def law(self, low: float) -> UniformBox:
        return UniformBox([low], [low + self.search.width])

    def training_omega(self, low: float) -> np.ndarray:
        return low + self.search.width * self.u_train

    def train(self, low: float, neumann: np.ndarray):
        """The model trained on the candidate's training set (deterministic given the seed)."""
        f = dirichlet_data(self.training_omega(low), self.theta, self.grid)
        return self.model_factory(self.seed).fit(f, neumann, conductivity(self.c_train, self.grid))

    def evaluate(self, state: IntervalSearchState, oracle, n: int) -> dict[str, Any]:
        """Held-out OOD error of the kept law's model: n conductivities from the prior, each with
        L omegas drawn from Q's held-out samples; the model is retrained on the kept law (same
        seed and data, so the same network)."""
        low = self.best(state)
        model = self.train(low, oracle.label(pair_rows(self.c_train, self.training_omega(low), self.theta))
                           .reshape(-1, self.pairs, 4 * self.grid - 4))
        omegas = np.concatenate(self.q.heldout)[:, 0]
        rng = np.random.default_rng([self.seed, STREAM_EVAL])
        c = draw_coefficients(n, rng)
        omega = omegas[rng.integers(0, len(omegas), (n, self.pairs))]
        g = oracle.label(pair_rows(c, omega, self.theta)).reshape(n, self.pairs, -1)
        err = model.errors(dirichlet_data(omega, self.theta, self.grid), g, conductivity(c, self.grid))
        return {"relative_l1_error": float(err.mean()), "relative_l1_sd": float(err.std()), "samples": n,
                "law": {"low": low, "high": low + self.search.width}}


def build(spec, oracle, resolve=None) -> IntervalSearchDesign:
    """The stepper of an ``interval_search`` job (registered at the end of this module)."""
    from lwl.q_samples import _no_datasets

    design = IntervalSearchDesign.from_spec(spec, resolve or _no_datasets)
    design.spec = spec
    return design


def evaluate(stepper: IntervalSearchDesign, state: IntervalSearchState, spec, oracle, out: dict) -> dict:
    return {"evaluation": stepper.evaluate(state, oracle, spec.algorithm.validation_samples)}


# -- the job spec's block for this component, and its registration (lwl.registry) --


class IntervalFamilySpec(StrictModel):
    """U[l, l + width] for a scalar design variable (EIT: the Dirichlet data's frequency omega),
    the position l free in [range[0], range[1] - width]. Moved by ``interval_search``."""
    name: Literal["interval"] = "interval"
    dim_field: ClassVar[str] = "name"
    width: float = Field(gt=0, description="the interval's fixed width (the paper's EIT laws: pi / 2)")
    range: Annotated[list[float], Field(min_length=2, max_length=2)] = Field(
        description="[lower, upper]: where the interval may lie (the paper's EIT: [pi / 2, 7 pi])")

    @model_validator(mode="after")
    def _fits(self):
        lo, hi = self.range
        if not hi > lo:
            raise ValueError("range: the upper end must exceed the lower end")
        if self.width > hi - lo:
            raise ValueError(f"width: {self.width} is wider than the range [{lo}, {hi}]")
        return self

    @property
    def dim(self) -> int:
        return 1


class IntervalSearchSpec(CandidateBudgetFields, StrictModel):
    """Validation-driven search for the position of an interval family (lwl.design.interval_search):
    a grid of ``candidates`` positions, then ``refine`` rounds of midpoints around the best; each
    candidate trains the model on ``samples_per_candidate`` conductivities with ``pairs`` boundary
    data each and is scored by its relative L^1 error on ``validation_samples`` conductivities
    whose frequencies come from Q's validation samples. Needs the ``eit`` oracle and ``amino``.
    With a ``budget`` (in solves) the job runs the budgeted search (lwl.design.budgeted_interval),
    which reads ``candidates``, ``pairs`` and the fields of
    :class:`~lwl.design.budget.settings.CandidateBudgetFields`, and none of the others."""
    name: Literal["interval_search"] = "interval_search"
    candidates: int = Field(default=13, ge=2, le=1000)
    refine: int = Field(default=1, ge=0, le=20)
    pairs: int = Field(default=16, ge=1, le=10_000, description="L: boundary data pairs per conductivity")
    samples_per_candidate: int = Field(default=256, ge=2, le=1_000_000)
    validation_samples: int = Field(default=64, ge=1, le=1_000_000)
    grid: int | None = Field(
        default=None, ge=4, le=512,
        description="budgeted jobs whose solves a lab computes (external, http): M of the lab's M x M grid, whose "
                    "4M - 4 boundary nodes (counter-clockwise from (0, 0), as the eit oracle's) its Neumann data "
                    "are on; with the built-in eit oracle its own grid (null, or equal to it)")

    @property
    def iterations(self) -> int:
        """At most this many candidates are trained (the progress total; the validation labels
        before them are no iteration)."""
        return self.candidates + 2 * self.refine

    @property
    def solves_per_label(self) -> int:
        """A budgeted search's point is a conductivity with its L pairs: L solves (lwl.design.budget.plan)."""
        return self.pairs


def check_interval_search(spec: JobSpec) -> None:
    """Interval search: an interval family, AMINO, the eit oracle, scalar members of Q."""
    if spec.family.name != "interval":
        raise ValueError("family.name: interval_search moves an interval family ('interval')")
    if spec.model.name != "amino":
        raise ValueError("model.name: interval_search trains AMINO ('amino')")
    a = spec.algorithm
    if spec.oracle.is_lab and spec.budget is not None:  # every solve goes through the rounds' queries
        if a.grid is None:
            raise ValueError("algorithm.grid: a lab's solves (external, http) need the M of its M x M grid")
    elif spec.oracle.name != "eit":
        raise ValueError("oracle.name: interval_search designs the Dirichlet data of the eit oracle"
                         + ("" if spec.budget is not None else " (a lab's solver: with a budget)"))
    elif a.grid is not None and a.grid != spec.oracle.build().grid:
        raise ValueError(f"algorithm.grid: {a.grid}, but the eit oracle's grid is {spec.oracle.build().grid}")
    if spec.evaluation.baselines:
        raise ValueError("evaluation.baselines: interval_search has no baselines (set [])")
    if spec.initial_data is not None:
        raise ValueError("initial_data: interval_search takes no initial data (its points are conductivities with "
                         "their boundary-data pairs)")
    if spec.algorithm.samples_per_candidate < spec.model.batch_size:
        raise ValueError("algorithm.samples_per_candidate: fewer samples than one batch of the model")


FAMILIES.register("interval", IntervalFamilySpec, moved_by="interval_search")
ALGORITHMS.register("interval_search", IntervalSearchSpec, build, check_interval_search, evaluate=evaluate,
                    final_steps=0, prefers_gpu=True,
                    budgeted="lwl.design.budgeted_interval:build", budget_needs="lwl.design.budget.plan:check_budget",
                    budgeted_evaluate="lwl.evaluation.equal_solves:evaluate",
                    label_width="lwl.design.budgeted_interval:label_width")
