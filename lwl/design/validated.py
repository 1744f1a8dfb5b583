"""Validated AMA (beyond the paper): Q's validation samples accept distribution steps and select
the returned iterate, as the bilevel method's checks do.

The paper's AMA accepts a distribution step when the *bound* falls and returns the last iterate.
The bound is loose (often vacuous, docs/method.md) and its fall need not lower the OOD error: on
the RTE at eps = 1/8 the error rose after the first step while the bound fell. With
``select="validation"`` every model step is scored on Q's validation samples (labelled once;
the member-weighted relative error of SM eqn app_ntd_rel_ood_error):

- a model whose validation error beats the best so far makes (distribution, model) the kept pair;
- otherwise the last distribution step is taken back halfway towards the kept distribution and
  the kept model is restored (a backtracking line search driven by validation); after
  ``backtracks`` consecutive failures the design stops;
- the result is the kept pair (``selected`` says which iteration), the last one stays available
  as ``last_distribution``.

The two steppers (:mod:`lwl.design.ama`, :mod:`lwl.design.particles`) call :func:`judge` after
their model step and store the kept pair under ``best.`` keys of their state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SELECTIONS = ("bound", "validation")


def put_best(state: dict[str, Any], key: str, value: np.ndarray, model, err: float, iteration: int) -> dict:
    """The state with (``key`` = value, model weights) kept as the best validated pair."""
    out = {k: v for k, v in state.items() if not k.startswith("best.model.")}
    out.update({f"best.model.{n}": w for n, w in model.get_weights().items()})
    out.update({f"best.{key}": np.array(value, dtype=np.float64, copy=True), "best_validation": float(err),
                "best_iteration": int(iteration), "backtracks": 0})
    return out


def best_weights(state: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k[len("best.model."):]: v for k, v in state.items() if k.startswith("best.model.")}


def judge(state: dict[str, Any], key: str, model, err: float, max_backtracks: int) -> tuple[dict, str]:
    """After a model step with validation error ``err`` at ``state[key]``: keep it ("kept"), or
    move ``state[key]`` halfway back to the kept value ("backtracked"), or give up ("stop")."""
    k = state["iteration"]
    if state.get("best_validation") is None or err < state["best_validation"]:
        return put_best(state, key, state[key], model, err, k), "kept"
    if state.get("backtracks", 0) >= max_backtracks:
        return state, "stop"
    best = state[f"best.{key}"]
    return {**state, key: best + 0.5 * (np.asarray(state[key]) - best),
            "backtracks": state.get("backtracks", 0) + 1}, "backtracked"
