"""One budget layer for every algorithm that takes a label budget: the plan
(:mod:`~lwl.design.budget.plan`), the ledger of paid labels (:mod:`~lwl.design.budget.ledger`),
the state (:mod:`~lwl.design.budget.state`) and the rounds, selection, race and validation verdict
(:mod:`~lwl.design.budget.design`). An algorithm gets a budget by subclassing
:class:`BudgetedDesign` with its candidates and its scoring (the bilevel design's:
:mod:`lwl.design.budgeted_bilevel`)."""

from lwl.design.budget.design import BudgetedDesign, Candidate
from lwl.design.budget.plan import BudgetPlan, minimum_budget, plan_budget

__all__ = ["BudgetPlan", "BudgetedDesign", "Candidate", "minimum_budget", "plan_budget"]
