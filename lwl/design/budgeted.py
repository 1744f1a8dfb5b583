"""The old path of :mod:`lwl.design.budgeted_bilevel` (the bilevel design under a label budget).

Kept only for the ``budgeted`` entry of the bilevel algorithm's registration in
:mod:`lwl.design.bilevel` (``"lwl.design.budgeted:build"``), which names a module by path; once
that entry names ``lwl.design.budgeted_bilevel:build`` this module goes."""

from lwl.design.budgeted_bilevel import BudgetedBilevel, build

__all__ = ["BudgetedBilevel", "build"]
