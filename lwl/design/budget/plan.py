"""How a label budget is spent (docs/method/budgets.md "Designs for a label budget"): Q's validation
labels first, then the design rounds. The same plan for every algorithm that takes a budget
(:mod:`lwl.design.budget`); the algorithm's spec supplies ``validation_fraction``,
``round_size`` and ``max_rounds``, and, where one labelled point costs several oracle solves (an
EIT point: one conductivity with its L boundary-data pairs), ``solves_per_label``: the budget is
in solves, the plan's rounds in points."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lwl.design.budget.settings import solves_per_label as algorithm_solves_per_label

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import this module
    from lwl.spec import JobSpec

MIN_VALIDATION = 8  # labelled validation points per member of Q, at least
MIN_DESIGN = 16  # labels of the design rounds, at least


@dataclass(frozen=True)
class BudgetPlan:
    """How a budget is spent: ``per_member`` validation labels per member of Q, then the design
    rounds (labels per round)."""

    budget: int
    members: int
    per_member: int
    rounds: tuple[int, ...]
    initial: int = 0  # labels the lab already has (initial_data): part of the budget, paid before the job
    solves_per_label: int = 1  # oracle solves one labelled point costs (``budget`` is in solves)

    @property
    def validation(self) -> int:
        return self.members * self.per_member

    @property
    def total_rounds(self) -> int:
        return 1 + len(self.rounds)

    @property
    def askable(self) -> int:
        """Solves the plan asks the oracle for: every validation and design point's."""
        return (self.validation + sum(self.rounds)) * self.solves_per_label

    def to_json(self) -> dict:
        out = {"budget": self.budget, "initial_labels": self.initial, "validation_labels": self.validation,
               "per_member": self.per_member, "rounds": list(self.rounds), "total_rounds": self.total_rounds}
        if self.solves_per_label > 1:  # the labels above are points of this many solves each
            out["solves_per_label"] = self.solves_per_label
        return out


def solves_per_label(spec: JobSpec) -> int:
    """Oracle solves of one labelled point of the job (its algorithm's ``solves_per_label``; 1 for most)."""
    return algorithm_solves_per_label(spec.algorithm)


def initial_count(spec: JobSpec) -> int:
    """Labelled points of the job's ``initial_data`` (0 without)."""
    return 0 if spec.initial_data is None else len(spec.initial_data.inputs)


def minimum_budget(spec: JobSpec) -> int:
    """The fixed needs of a budgeted job: its initial data (already paid), MIN_VALIDATION
    validation labels per member of Q (or all of ``validation_per_member`` when fewer) and
    MIN_DESIGN design labels, in solves (``solves_per_label`` each)."""
    tests = spec.test_distributions
    points = len(tests.members) * min(MIN_VALIDATION, tests.validation_per_member) + MIN_DESIGN
    return initial_count(spec) + points * solves_per_label(spec)


def plan_budget(spec: JobSpec) -> BudgetPlan:
    """Split ``spec.budget`` into validation labels and design rounds; raises
    ``ValueError("budget: ...")`` naming the smallest budget when it is too small."""
    B = spec.budget
    if B is None:
        raise ValueError("budget: the job has no label budget")
    tests, algo = spec.test_distributions, spec.algorithm
    K = len(tests.members)
    need = minimum_budget(spec)
    n0 = initial_count(spec)
    s = solves_per_label(spec)
    if B < need:
        m = min(MIN_VALIDATION, tests.validation_per_member)
        given = f"the {n0} initial labelled points, " if n0 else ""
        each = f", each of {s} solves" if s > 1 else ""
        raise ValueError(f"budget: {B} {'solves' if s > 1 else 'labels'} cannot cover this job's fixed needs "
                         f"({given}{m} validation labels for each of the {K} members of Q and at least {MIN_DESIGN} "
                         f"design labels{each}); the smallest budget it runs with is {need}")
    # the initial points are paid for: the oracle is asked for the rest, in points of s solves
    B_total, B = B, (B - n0) // s
    m_min = min(MIN_VALIDATION, tests.validation_per_member)
    per = min(tests.validation_per_member, max(m_min, int(algo.validation_fraction * B) // K))
    per = min(per, (B - MIN_DESIGN) // K)
    design = B - K * per
    if algo.round_size is not None:
        size = algo.round_size
        if math.ceil(design / size) + 1 > algo.max_rounds:
            raise ValueError(f"algorithm.round_size: {design} design labels in rounds of {size} take "
                             f"{math.ceil(design / size)} rounds, more than max_rounds - 1 = {algo.max_rounds - 1} "
                             f"(one round labels Q's validation samples); raise round_size or max_rounds")
    else:
        size = min(256, max(64, B // 16))
        size = max(size, math.ceil(design / (algo.max_rounds - 1)))
    rounds = [size] * (design // size) + ([design % size] if design % size else [])
    return BudgetPlan(budget=B_total, members=K, per_member=per, rounds=tuple(rounds), initial=n0, solves_per_label=s)


def check_budget(spec: JobSpec) -> None:
    """The registry's ``budget_needs`` hook of an algorithm with a budgeted design
    (:func:`lwl.spec._check_budget`)."""
    plan_budget(spec)
