"""The spec fields of a budgeted design, declared once for every algorithm that takes a budget
(each algorithm's spec block carries them: ``algorithm.round_size`` etc.; docs/job-spec.md)."""

from __future__ import annotations

from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

RoundSize = Annotated[int | None, Field(
    ge=1, le=1_000_000,
    description="budgeted jobs: labels bought per design round; default budget/16 within [64, 256], raised "
                "so that the rounds fit max_rounds")]
MaxRounds = Annotated[int, Field(ge=2, le=10_000,
                                 description="budgeted jobs: most labelling rounds, the validation round included")]
ValidationFraction = Annotated[float, Field(
    gt=0.0, lt=1.0,
    description="budgeted jobs: share of the budget spent on labels of Q's validation samples (at most "
                "validation_per_member per member; they are also training data)")]
Hedge = Annotated[float, Field(ge=0.0, lt=1.0,
                               description="budgeted jobs: share of each round after selection drawn from Q's mixture "
                                           "while it races the selected candidate at equal numbers of points (0: off; "
                                           "see docs/method/budgets.md)")]
Explore = Annotated[float | None, Field(
    gt=0.0, lt=1.0,
    description="budgeted jobs: share of each selection round spent on the candidates other than Q's mixture, "
                "which gets the rest, is never dropped, and stays the incumbent unless the last candidate left "
                "validates better beyond noise at equal numbers of points (null: every live candidate gets an "
                "equal share and Q's mixture is halved like the others; see docs/method/operators.md)")]
Pool = Annotated[Literal["iid", "qbc"], Field(
    description="budgeted operator jobs: how the served draws (the incumbent's, and Q's law's share while it is the "
                "default) are chosen: qbc (query by committee: of one pool of pool_factor draws per design solve, those not yet chosen where a "
                "committee of DeepONets trained on the fields paid so far disagree most), or iid (independent draws "
                "of the law)")]
ExploreMin = Annotated[int, Field(
    ge=1, le=1_000_000,
    description="budgeted operator jobs: solves of the first selection round each candidate besides Q's law must "
                "get for the design to explore the candidates at all; with fewer every design solve is Q's law's "
                "(chosen by the pool rule)")]
PoolFactor = Annotated[int, Field(ge=2, le=100, description="budgeted operator jobs with pool qbc: draws of the job's "
                                                            "pool per design solve of the plan (one pool for the job, "
                                                            "chosen from without replacement over the rounds)")]


class BudgetFields(BaseModel):
    """The budget fields every algorithm that takes a budget carries (bilevel: these alone, with
    ``explore`` off by default): read by its budgeted design only (docs/job-spec.md)."""

    round_size: RoundSize = None
    max_rounds: MaxRounds = 30
    validation_fraction: ValidationFraction = 0.25
    hedge: Hedge = 0.25
    explore: Explore = 0.25


class CandidateBudgetFields(BudgetFields):
    """The budget fields of an algorithm whose budgeted design selects among fixed candidate laws
    with Q's law the default (interval_search; the operator algorithms add a pool rule): read by
    its budgeted design only (docs/job-spec.md)."""

    explore_min: ExploreMin = 8


class OperatorBudgetFields(CandidateBudgetFields):
    """The budget fields of an operator algorithm's spec block (ama, particle_ama): read by its
    budgeted design only (docs/job-spec.md)."""

    pool: Pool = "qbc"
    pool_factor: PoolFactor = 4


@runtime_checkable
class BudgetAlgorithm(Protocol):
    """The contract of an algorithm spec block that takes a budget, as the budget layer reads it:
    the fields above that every such block carries (bilevel's declares its own, the others
    :class:`CandidateBudgetFields`). The fields only some blocks carry have their own protocols
    below, read through :func:`explore`, :func:`explore_min` and :func:`solves_per_label`."""

    round_size: int | None
    max_rounds: int
    validation_fraction: float
    hedge: float


@runtime_checkable
class ExploresCandidates(Protocol):
    """A block with ``explore``: Q's mixture the default of selection (None: the equal split)."""

    explore: float | None


@runtime_checkable
class ExploreFloor(Protocol):
    """A block with ``explore_min`` (the operator designs' and interval_search's)."""

    explore_min: int


@runtime_checkable
class SeveralSolvesPerLabel(Protocol):
    """A block whose labelled point costs several oracle solves (interval_search's ``pairs``)."""

    solves_per_label: int


def explore(algorithm: object) -> float | None:
    """``algorithm.explore`` (None where the block has no such field: the equal split)."""
    return algorithm.explore if isinstance(algorithm, ExploresCandidates) else None


def explore_min(algorithm: object) -> int | None:
    """``algorithm.explore_min`` (None where the block has no such field: always explore)."""
    return algorithm.explore_min if isinstance(algorithm, ExploreFloor) else None


def solves_per_label(algorithm: object) -> int:
    """Oracle solves of one labelled point (1 where the block does not say)."""
    return int(algorithm.solves_per_label) if isinstance(algorithm, SeveralSolvesPerLabel) else 1
