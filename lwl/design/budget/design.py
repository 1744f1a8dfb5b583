"""The budget loop, once for every algorithm (docs/method/budgets.md "Designs for a label budget").

Every oracle label is counted and the job never asks for more than ``budget`` of them. Labels
are bought in **rounds** (one round = one ``queries``/``step`` of the stepper: one ask/tell round
for a lab), and every label bought is kept: the **training set** the job returns is every
labelled point, Q's validation labels included (where the algorithm asks for the left-out check,
:meth:`BudgetedDesign.served_rows`, the dropped candidates' points can be moved to ``left_out``
when the served model validates better without them). The rounds, in order:

1. **Validation round.** Labels of ``per_member`` of Q's validation samples per member
   (:mod:`lwl.design.budget.plan`). They score the candidates (two-fold: train on one half plus
   the candidate's points, score on the other half) and are training data of the returned set.
   Q's samples' *inputs* cost nothing.
2. **Selection rounds** (successive halving; where the first of them would give a candidate
   fewer than ``algorithm.explore_min`` labels, an operator design's field, none but Q's mixture
   runs, and one round of it settles selection: :func:`~lwl.design.budget.candidates.explores`). The
   candidates are cheap distributions fixed in advance, supplied by the algorithm, and Q's own mixture, which every budgeted design adds. A
   round splits its labels equally among the live candidates; after it, each candidate is scored
   by two-fold validation of the job's model trained on half of the validation points plus *all*
   of the candidate's points so far, and the better half lives on. With ``algorithm.explore``
   (the ama default), Q's mixture is the **default** instead: it takes 1 - explore of every
   selection round and is never dropped, the others are halved among themselves, and the last of
   them replaces it only when it validates better at equal numbers of points beyond noise
   (:meth:`BudgetedDesign._select`): where Q's mixture is the answer, exploring costs ``explore``
   of the selection rounds' labels, not all but 1/K of the first round's (K candidates).
3. **The race against Q's mixture.** When selection picks another candidate, Q's mixture gets
   a ``hedge`` share of every later round, and after each round the two are compared at equal
   numbers of their own points (two-fold, paired); Q's mixture takes over when it validates
   better by RIVAL_Z standard errors (:meth:`BudgetedDesign._race`).
4. **Refinement rounds.** Where the algorithm can move a distribution on the labels already paid
   for (:meth:`BudgetedDesign.propose`: the bilevel gradient on a surrogate, ...), the moved
   distribution is the next round's challenger: the round buys three quarters of its labels from
   the incumbent and a quarter from the challenger, which replaces the incumbent when its points,
   added to everything bought before, validate better beyond noise (ACCEPT_Z standard errors).

**Initial data** (``initial_data``, :mod:`lwl.initial_data`) count toward the budget as paid and
join the pool after the validation round (source INITIAL).

**What an algorithm supplies** (a subclass of :class:`BudgetedDesign`): its family and candidate
distributions, the model a score trains (:meth:`~BudgetedDesign.scorer`), the model it serves
(:meth:`~BudgetedDesign.final_model`), and optionally a move (:meth:`~BudgetedDesign.propose`),
a lengthscale grid and a pool rule (:meth:`~BudgetedDesign.select_from_pool`: the served draws,
the incumbent's and the default's, chosen from one pool of their law's draws, :meth:`~BudgetedDesign.pool`).
Where a labelled point is more than one oracle row (an EIT point: a conductivity with its L
boundary-data pairs, L solves; ``plan.solves_per_label``), it also says what a point is: its
oracle rows (:meth:`~BudgetedDesign.solve_rows`), its labels folded back
(:meth:`~BudgetedDesign.point_labels`), the validation points, and the error of a point
(:meth:`~BudgetedDesign.fold_sq_errors`, :meth:`~BudgetedDesign.sq_norms`); the budget and every
count are then in solves (:mod:`lwl.design.budgeted_interval`).
The rounds are here; each concern is a module of this package, which the class's methods of the
same name call: the plan (:mod:`~lwl.design.budget.plan`), the ledger
(:mod:`~lwl.design.budget.ledger`), the candidates and each round's draws
(:mod:`~lwl.design.budget.candidates`), the scores (:mod:`~lwl.design.budget.scores`), selection
and the race (:mod:`~lwl.design.budget.selection`), refinement
(:mod:`~lwl.design.budget.refinement`), the validation verdict and its words
(:mod:`~lwl.design.budget.verdict`), the left-out check (:mod:`~lwl.design.budget.left_out`), the
served model (:mod:`~lwl.design.budget.serving`) and the result document
(:mod:`~lwl.design.budget.result`). The bilevel design's is :mod:`lwl.design.budgeted_bilevel`.

The returned distribution is the final incumbent (for drawing more inputs later); the product
is the training set. Every draw derives from (seed, stream, round, slot), so a state restored from
a checkpoint continues bit for bit.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from lwl.design.budget import candidates as draws
from lwl.design.budget import left_out, refinement, result, scores, selection, serving, verdict
from lwl.design.budget.candidates import Q_MIXTURE, Candidate, member_law
from lwl.design.budget.ledger import INITIAL, MOVED, SOURCE_NAMES, VALIDATION, LabelledPoints, LabelledValidation
from lwl.design.budget.plan import plan_budget
from lwl.design.budget.settings import BudgetAlgorithm, explore
from lwl.design.budget.state import BudgetedState, Phase
from lwl.design.families import Params
from lwl.design.stepper import StepperDefaults
from lwl.measures import Measure
from lwl.outcomes import failed_rows, scalar_labels
from lwl.q_samples import MetaTestSamples

# the names this module held before the layer was split by concern (issue 86), where they are now
from lwl.design.budget.left_out import LEAVE_OUT_RANK_P, LEAVE_OUT_Z, RANK_MIN_POINTS, rank_lower_p  # noqa: F401
from lwl.design.budget.refinement import SCORE_POOL_MAX  # noqa: F401
from lwl.design.budget.scores import ACCEPT_Z  # noqa: F401
from lwl.design.budget.selection import (  # noqa: F401
    RACE_MIN_POINTS, RACE_TREND_LEAD, RACE_TREND_MIN_LOOKS, RACE_TREND_MIN_POINTS, RACE_TREND_RATIO, RIVAL_Z, race_trend)
from lwl.design.budget.verdict import TREND_MIN_POINTS, extrapolated_ratio  # noqa: F401
from lwl.models.diagnosis import FIT_ERRORS  # noqa: F401

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec


class BudgetedDesign(StepperDefaults):
    """A design under a label budget as a stepper (module docstring); one step = one round.
    Subclasses supply the hooks below (each says what it is for)."""

    state_type = BudgetedState
    # labels of more than one value per input (an operator's output field): each row's squared error
    # and squared norm are sums over its values with these quadrature weights; None: one label per input
    output_weights: np.ndarray | None = None
    leave_out_z = LEAVE_OUT_Z  # standard errors by which the left-out check must favour leaving points out
    leave_out_rank_p: float | None = LEAVE_OUT_RANK_P  # the check's rank rule (None: the z rule alone)
    # the race's trend rule (selection.race; None: the z rule alone, the default of every design). Every race
    # look records its trend_ratio either way, so a study's rows can judge the rule without rerunning it
    race_trend_ratio: float | None = None
    # the served draws (candidates.served_draws) chosen by select_from_pool from one pool of this many draws
    # per design label of the plan (pool; 0: i.i.d.)
    pool_factor = 0
    selection_rule = "successive halving on two-fold validation, with Q's mixture racing the selected candidate"

    def __init__(self, spec: JobSpec, q: MetaTestSamples, family, candidates: list[Candidate]):
        self.spec, self.q = spec, q
        self.algo: BudgetAlgorithm = spec.algorithm
        self.plan = plan_budget(spec)
        # the labelled validation points: the first per_member of each member's validation samples
        self.qv = MetaTestSamples(q.members, q.weights, self.plan.per_member)
        self.family = family
        self.candidates: list[Candidate] = [*candidates, Candidate(Q_MIXTURE, self._in_domain(self.q_law()), None)]
        self.total_steps = self.plan.total_rounds
        # the candidates selection does not run (explore_min): the list stays whole, so a ledger's
        # and a checkpoint's candidate indices mean the same whatever the budget
        self.unexplored = [] if draws.explores(self) else [c.name for c in self.candidates if c.name != Q_MIXTURE]
        self._val_x = self.validation_points()
        self._member_all = np.repeat(np.arange(len(q.members)), self.plan.per_member)
        self._cache: tuple = (None, None)
        self._val_cache: tuple = (None, None)
        self._served_cache: tuple = (None, None)
        self._served_model: tuple = (None, None)  # (training set key, final_model): served_model
        self._pools: dict[int, np.ndarray] = {}  # each law's pool for the job (pool), drawn once
        # initial data (the lab's labelled points): joins the pool after the validation round
        if spec.initial_data is not None:
            self.X0, self.y0 = spec.initial_data.arrays()
            if self.X0.shape[1] != q.dim:
                raise ValueError(f"initial_data.inputs: rows of {self.X0.shape[1]} inputs, Q's samples have "
                                 f"dimension {q.dim}")
        else:
            self.X0, self.y0 = np.zeros((0, q.dim)), np.zeros(0)

    # -- the algorithm's hooks ----------------------------------------------------------------
    def scorer(self, state: BudgetedState, ell: float):
        """(X, y) -> the fitted model a score trains (with ``predict``), at lengthscale ``ell``
        where the model has one chosen on the folds (:meth:`lengthscale_grid`)."""
        raise NotImplementedError

    def final_model(self, state: BudgetedState):
        """The model the job serves (``GET /v1/jobs/{id}/model``), trained on the training set."""
        raise NotImplementedError

    @property
    def checks_left_out(self) -> bool:
        """The served model's training set is checked on Q's validation labels (:meth:`served_rows`)."""
        return False

    def rows_scorer(self, state: BudgetedState, rows: np.ndarray):
        """(X, y) -> the model a training set made of the points ``rows`` gets when it is served
        (a gp: hyperparameters fitted to those rows); for :meth:`served_rows`."""
        return self.scorer(state, float(state.lengthscale))

    def lengthscale_grid(self, around: float | None = None) -> list[float]:
        """Lengthscales a selection score tries (the lowest validation Err wins); one value
        (unused by :meth:`scorer`) when the model has none to choose."""
        return [0.0]

    @property
    def tunes_lengthscale(self) -> bool:
        """The model's one lengthscale is chosen by the design (reported in the result)."""
        return False

    def initial_lengthscale(self) -> float:
        """The state's lengthscale before any score (0 stands for none: a NaN would make equal
        histories compare unequal)."""
        return 0.0

    def final_lengthscale(self, state: BudgetedState) -> float:
        """The final model's lengthscale (when the design chooses one)."""
        return float(state.lengthscale)

    @property
    def moves(self) -> bool:
        """The design moves its incumbent between rounds (:meth:`propose`)."""
        return False

    def propose(self, state: BudgetedState, record: dict) -> Params | None:
        """Parameters of a family member moved from the incumbent's (``state.kept.params``) on
        the labels paid for so far, for the next round's challenger; None: no move this round.
        May add what it did to the round's ``record``."""
        return None

    def resolved_spec(self, state: BudgetedState) -> JobSpec:
        return self.spec

    def select_from_pool(self, state: BudgetedState, pool: np.ndarray, m: int, key: list[int]) -> np.ndarray:
        """Indices of the m points of ``pool`` to label (an algorithm with a pool rule supplies it)."""
        raise NotImplementedError(f"{type(self).__name__} has no pool rule")

    def q_law(self) -> Measure:
        """Q's own law as a candidate (it races the selected one): the mixture of Gaussians fitted
        to Q's members (:func:`lwl.evaluation.baselines.mixture`)."""
        from lwl.evaluation.baselines import mixture

        return mixture(self.q)

    def served_model(self, state: BudgetedState):
        """:meth:`final_model`, fitted once per training set (:func:`lwl.design.budget.serving.served_model`)."""
        return serving.served_model(self, state)

    def model_document(self, state: BudgetedState, served=None) -> dict | None:
        """The served model's document (``result["model"]``), without its training set; ``served``:
        :meth:`served_model`'s model when the caller holds it (a design that does not keep it
        would fit it again)."""
        return (self.served_model(state) if served is None else served).to_spec(training_set=False)

    # -- what a point is, where one point costs several oracle solves (plan.solves_per_label) --
    @property
    def point_dim(self) -> int:
        """Values of one point's row in the ledger (Q's dimension unless a point is more than an input)."""
        return self.q.dim

    def validation_points(self) -> np.ndarray:
        """The validation round's points, ``plan.per_member`` of each member in member order: the
        first of Q's validation samples."""
        return np.concatenate(self.qv.validation)

    def solve_rows(self, points: np.ndarray) -> np.ndarray:
        """The oracle's rows for ``points`` (``plan.solves_per_label`` rows each, in point order)."""
        return points

    def point_labels(self, labels: np.ndarray, points: np.ndarray) -> np.ndarray:
        """The labels of :meth:`solve_rows`'s rows folded back into one row per point."""
        return labels

    def fold_sq_errors(self, model, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Squared error of ``model`` at each point (X, y) of a scored fold (:meth:`two_fold`)."""
        return self._sq(np.asarray(model.predict(X)).reshape(y.shape) - y)

    # -- what the verdict at equal solves reads (lwl.evaluation.equal_solves) --
    def heldout_points(self) -> list[np.ndarray]:
        """Held-out points of each member of Q (the audit's test set): Q's held-out samples."""
        return list(self.q.heldout)

    def label_points(self, oracle, X: np.ndarray) -> np.ndarray:
        """The oracle's labels of the points X, one row (or value) per point."""
        from lwl.oracles import as_numpy

        y = self.point_labels(np.asarray(as_numpy(oracle.label(self.solve_rows(X))), dtype=np.float64), X)
        return y.reshape(len(X)) if self.output_weights is None else y.reshape(len(X), -1)

    def train_draw(self, X: np.ndarray, y: np.ndarray, r: int):
        """The job's model trained on (X, y), training draw r (initialised from seed + r; r = 0 the served model's)."""
        raise NotImplementedError(f"{type(self).__name__} has no verdict at equal solves")

    # -- squared errors and norms of a row of labels ------------------------------------------
    def _sq(self, residual: np.ndarray) -> np.ndarray:
        """Squared error of each row of ``residual`` (prediction - label)."""
        return residual**2 if self.output_weights is None else (residual**2) @ self.output_weights

    def sq_norms(self, y: np.ndarray) -> np.ndarray:
        """Squared norm of each row of labels ``y``."""
        return y**2 if self.output_weights is None else (y**2) @ self.output_weights

    # -- stepper protocol and the rounds --------------------------------------------------------
    def _in_domain(self, measure: Measure) -> Measure:
        """``measure`` on the job's input domain, if it has one, as Q's laws are there (restricted, or
        pushed onto it with ``outside: "clip"``; :func:`lwl.measures.on_domain`)."""
        from lwl.measures import on_domain

        return on_domain(measure, self.spec, self.q)

    def validation(self, state: BudgetedState) -> LabelledValidation:
        """The labelled validation points of ``state`` (the first rows of its points): those of
        the validation round whose labels came back (``val_ok``)."""
        ok = state.val_ok
        key = None if ok is None else np.asarray(ok, dtype=bool).tobytes()
        if self._val_cache[0] != key or self._val_cache[1] is None:
            self._val_cache = (key, LabelledValidation.of(self._member_all if ok is None else self._member_all[ok],
                                                          np.asarray(self.q.weights, dtype=np.float64)))
        return self._val_cache[1]

    def init(self) -> BudgetedState:
        ell = self.initial_lengthscale()
        width = None if self.output_weights is None else len(self.output_weights)
        alive = [self._q_mixture_index()] if self.unexplored else list(range(len(self.candidates)))
        return BudgetedState(points=LabelledPoints.empty(self.point_dim, width), alive=alive, lengthscale=ell)

    def done(self, state: BudgetedState) -> bool:
        return state.phase is Phase.DONE

    def queries(self, state: BudgetedState) -> np.ndarray:
        return self.solve_rows(self._round_points(state))

    def _round_points(self, state: BudgetedState) -> np.ndarray:
        """The points the current round labels (the validation points, then each round's draws)."""
        if state.phase is Phase.VALIDATION:
            return self._val_x.copy()
        if state.phase is Phase.DONE:
            return np.zeros((0, self.point_dim))
        return self._draws(state)[0].copy()

    def labels_spent(self, state: BudgetedState) -> int:
        """Oracle solves paid for so far (failed ones included; the initial data's not asked for)."""
        P = state.points
        return (int(len(P.y)) - len(self.y0) + state.labels_failed) * self.plan.solves_per_label

    def step(self, state: BudgetedState, labels) -> BudgetedState:
        t0 = time.perf_counter()
        if state.phase is Phase.DONE:
            raise ValueError("step: the design is finished")
        x = self._round_points(state)
        labels = self.point_labels(np.asarray(labels, dtype=np.float64), x)
        if self.output_weights is None:
            labels = scalar_labels(labels)
        elif labels.ndim == 0 or labels.reshape(len(labels), -1).shape[1] != len(self.output_weights):
            raise ValueError(f"labels: expected {len(x)} rows of {len(self.output_weights)} values (the output "
                             f"grid), got shape {labels.shape}")
        else:
            labels = labels.reshape(len(labels), -1)
        if labels.shape[0] != len(x):
            raise ValueError(f"labels: expected {len(x)} labels, got {labels.shape[0]}")
        r = state.iteration
        if state.phase is Phase.VALIDATION:
            src = np.full(len(x), VALIDATION)
        else:
            src = self._draws(state)[1]
        # a failed point (NaN label, lwl.outcomes) is paid for but never data: it goes to failed_X,
        # not into the training set, the scores or the surrogate
        failed = failed_rows(labels)
        ok = ~failed
        n_failed = state.labels_failed + int(failed.sum())
        x_new, y_new, src_new = x[ok], labels[ok], src[ok]
        if state.phase is Phase.VALIDATION and len(self.y0):  # the initial data follows the validation points
            x_new, y_new = np.concatenate([x_new, self.X0]), np.concatenate([y_new, self.y0])
            src_new = np.concatenate([src_new, np.full(len(self.y0), INITIAL)])
        new = state.replace(points=state.points.added(x_new, y_new, src_new, r, x[failed]), iteration=r + 1,
                            labels_failed=n_failed, pending_X=None, pending_source=None)
        s = self.plan.solves_per_label
        record: dict[str, Any] = {"iteration": r + 1, "round": r + 1, "labels": int(len(x)) * s,
                                  "labels_used": self.labels_spent(new), "labels_failed": n_failed * s}
        if failed.any():  # in solves, as "labels"; a point of several solves also says its points
            record["failed"] = int(failed.sum()) * s
            if s > 1:
                record["failed_points"] = int(failed.sum())
        if state.phase is Phase.VALIDATION:
            record["kind"] = "validation"
            new = new.replace(phase=Phase.ROUND, val_ok=ok if failed.any() else state.val_ok)
            self.validation(new)  # raises when a member of Q has fewer than two validation labels left
        elif state.incumbent is None:
            new = self._select(new, record)
        else:
            new = self._refine(state, new, record)
            if new.rival is not None:
                new = self._race(new, record)
        if new.iteration >= self.plan.total_rounds:
            ell = self.final_lengthscale(new)
            if self.tunes_lengthscale:
                record["final_lengthscale"] = ell
            new = new.replace(phase=Phase.DONE, has_challenger=False, lengthscale=ell)
        elif self.moves and self._movable(new):
            new = self._move(new, record)
        if self.pool_factor and new.phase is not Phase.DONE:  # the pool rule's choice, fixed now (pending_X)
            pending_X, pending_source = self._draws(new)
            new = new.replace(pending_X=pending_X, pending_source=pending_source)
        record["seconds"] = time.perf_counter() - t0
        return new.replace(history=[*state.history, record])

    def result(self, state: BudgetedState) -> dict[str, Any]:
        return result.result(self, state)

    # -- the concerns, each in its module (subclasses and tests override or patch these) ----------
    @property
    def explore(self) -> float | None:
        """``algorithm.explore``: the others' share of a selection round while Q's mixture is the
        default (None: the equal split; an algorithm whose spec lacks the field has none)."""
        return explore(self.algo)

    def _draws(self, state: BudgetedState) -> tuple[np.ndarray, np.ndarray]:
        """The current design round's inputs and their sources (:func:`~lwl.design.budget.candidates.round_draws`)."""
        return draws.round_draws(self, state)

    def _selection_counts(self, alive: list[int], n: int) -> list[int]:
        """Labels of a selection round for each live candidate (:func:`~lwl.design.budget.candidates.selection_counts`)."""
        return draws.selection_counts(self, alive, n)

    def pool_size(self) -> int:
        """Draws of a law's pool (:func:`~lwl.design.budget.candidates.pool_size`)."""
        return draws.pool_size(self)

    def pool(self, state: BudgetedState, c: int) -> np.ndarray:
        """The draws of law ``c`` a round's pooled points are chosen from (:func:`~lwl.design.budget.candidates.pool`)."""
        return draws.pool(self, state, c)

    def two_fold(self, state: BudgetedState, extra: np.ndarray, grid: list[float], residuals: bool = False, fit=None):
        """Two-fold validation Err of ``extra`` (:func:`~lwl.design.budget.scores.two_fold`)."""
        return scores.two_fold(self, state, extra, grid, residuals, fit)

    def improvement_z(self, sq_new: np.ndarray, sq_old: np.ndarray, y: np.ndarray, val: LabelledValidation) -> float:
        """Standard errors by which Err^2 fell (:func:`~lwl.design.budget.scores.improvement_z`)."""
        return scores.improvement_z(self, sq_new, sq_old, y, val)

    def versus(self, state: BudgetedState, other: int, n: int | None = None, mine: int | None = None) -> dict | None:
        """Two sets of points at equal numbers, paired (:func:`~lwl.design.budget.scores.versus`)."""
        return scores.versus(self, state, other, n, mine)

    def _select(self, new: BudgetedState, record: dict) -> BudgetedState:
        """A selection round's halving (:func:`~lwl.design.budget.selection.select`)."""
        return selection.select(self, new, record)

    def _race(self, new: BudgetedState, record: dict) -> BudgetedState:
        """A look of the race against Q's mixture (:func:`~lwl.design.budget.selection.race`)."""
        return selection.race(self, new, record)

    def _refine(self, old: BudgetedState, new: BudgetedState, record: dict) -> BudgetedState:
        """Incumbent against challenger (:func:`~lwl.design.budget.refinement.refine`)."""
        return refinement.refine(self, old, new, record)

    def _move(self, new: BudgetedState, record: dict) -> BudgetedState:
        """The next round's challenger (:func:`~lwl.design.budget.refinement.move`)."""
        return refinement.move(self, new, record)

    def validation_verdict(self, state: BudgetedState) -> dict:
        """The verdict from the job's own labels (:func:`~lwl.design.budget.verdict.validation_verdict`)."""
        return verdict.validation_verdict(self, state)

    def served_rows(self, state: BudgetedState) -> tuple[np.ndarray, dict | None]:
        """The served model's rows and the left-out check (:func:`~lwl.design.budget.left_out.served_rows`)."""
        return left_out.served_rows(self, state)

    def training_set(self, state: BudgetedState) -> tuple[np.ndarray, np.ndarray]:
        """The served model's training data (:func:`~lwl.design.budget.serving.training_set`)."""
        return serving.training_set(self, state)

    # -- names and laws of the candidates ---------------------------------------------------------
    def _q_mixture_index(self) -> int:
        return next(i for i, c in enumerate(self.candidates) if c.name == Q_MIXTURE)

    def _source_name(self, s: int) -> str:
        return SOURCE_NAMES.get(s) or self.candidates[s][0]

    def incumbent_name(self, state: BudgetedState) -> str | None:
        inc = state.incumbent
        if inc is None:
            return None
        return state.incumbent_name or self.candidates[inc][0]

    def incumbent_measure(self, state: BudgetedState) -> Measure:
        if self._movable(state):  # a member of the family: its parameters are kept
            return member_law(self.family, state.kept.params, self.spec, self.q)
        return self.candidates[state.incumbent][1]

    def _movable(self, state: BudgetedState) -> bool:
        """The incumbent is a member of the family (the bilevel steps can move it)."""
        inc = state.incumbent
        return inc is not None and (inc == MOVED or self.candidates[inc][2] is not None)
