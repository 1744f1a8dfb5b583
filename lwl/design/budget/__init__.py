"""One budget layer for every algorithm that takes a label budget: the plan
(:mod:`~lwl.design.budget.plan`), the ledger of paid labels (:mod:`~lwl.design.budget.ledger`),
the state (:mod:`~lwl.design.budget.state`), the spec fields and the contract an algorithm's spec
block meets (:mod:`~lwl.design.budget.settings`), and the rounds (:mod:`~lwl.design.budget.design`)
with each concern in a module of its own: the candidates and their draws
(:mod:`~lwl.design.budget.candidates`), the scores (:mod:`~lwl.design.budget.scores`), selection and
the race (:mod:`~lwl.design.budget.selection`), refinement (:mod:`~lwl.design.budget.refinement`),
the validation verdict (:mod:`~lwl.design.budget.verdict`), the left-out check
(:mod:`~lwl.design.budget.left_out`), the served model (:mod:`~lwl.design.budget.serving`) and the
result (:mod:`~lwl.design.budget.result`). An algorithm gets a budget by subclassing
:class:`BudgetedDesign` with its candidates and its scoring (the bilevel design's:
:mod:`lwl.design.budgeted_bilevel`)."""

from lwl.design.budget.design import BudgetedDesign, Candidate
from lwl.design.budget.plan import BudgetPlan, minimum_budget, plan_budget

__all__ = ["BudgetPlan", "BudgetedDesign", "Candidate", "minimum_budget", "plan_budget"]
