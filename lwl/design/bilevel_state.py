"""The state of a bilevel run (paper Alg. 3 with lwl's validation checks) and its checkpoint layout.

The stepper (:mod:`lwl.design.bilevel`) moves a :class:`BilevelState` from phase to phase: Q's
validation labels, the checks of the start points at iteration 0, then gradient steps with a
check every ``check_every`` iterations. The checkpoint is the flat layout of the dict-state code
(:mod:`lwl.design.state`), so a checkpoint a running service already holds resumes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Self

import numpy as np

from lwl.design.families import Params
from lwl.design.state import Flat, Kept, KeptLayout, StepperState


class Phase(StrEnum):
    """Which labels a bilevel run waits for (the checkpoint stores the value)."""

    VALIDATION = "label_validation"  # those of Q's validation samples (the adjoint's data)
    CHECK = "check"                  # the fixed check batch of the current iterate or start point
    ITERATE = "iterate"              # the N_k training samples of iteration k
    DONE = "done"


# where the kept records sit in a checkpoint: the family's parameters under a prefix
# ("best_mean", "significant_logits", ...), the rest under the names of the dict-state code
BEST = KeptLayout(params="best_", err="best_err", iteration="best_iteration", sq="best_sq",
                  lengthscale="best_lengthscale")
SIGNIFICANT = KeptLayout(params="significant_", err="significant_err", iteration="significant_iteration",
                         lengthscale="significant_lengthscale")
# a pending record is a start point (iteration 0): its checkpoint has no iteration key
PENDING = KeptLayout(params="pending_", err="pending_err", sq="pending_sq", lengthscale="pending_lengthscale")

_RECORD_FIELDS = ("params", "best", "significant", "significant_z", "significant_start", "pending", "pending_start")


@dataclass(kw_only=True)
class BilevelState(StepperState):
    """The state of a bilevel run (paper Alg. 3 with lwl's validation checks).

    ``iteration`` is k, the gradient steps taken; at k = 0 the phase CHECK walks through the start
    points (``start_index``). The checkpoint is the flat layout of the dict-state code: the
    family's parameters at top level under their ``param_names``, the kept records under the
    prefixes of :data:`BEST`, :data:`SIGNIFICANT` and :data:`PENDING` (:meth:`to_flat`)."""

    UNTIL_SET = ("validation_labels", "validation_ok", "initial_sq")

    phase: Phase = Phase.VALIDATION
    params: Params
    """theta_k, the current iterate, in the family's parameters (for a Gaussian: mean, chol)."""
    phi: np.ndarray
    """theta_k in Q's whitened coordinates, where the adaptive optimiser moves (:mod:`lwl.design.adaptive`)."""
    phi0: np.ndarray
    """phi of the start the descent began from: the parameter box is built around it."""
    adam_m1: np.ndarray
    """Adam's first moment of the phi gradient."""
    adam_m2: np.ndarray
    """Adam's second moment."""
    adam_t: int = 0
    """Adam steps taken since the moments were last reset (a revert resets them)."""
    grad_ms: float = 0.0
    """Running mean square of the gradient norm, against which outliers are clipped (guard_gradient)."""
    step_scale: float = 1.0
    """Factor on the adaptive step: halved at each revert."""
    halvings: int = 0
    """Reverts so far; the run stops after ``max_halvings``."""
    stale_checks: int = 0
    """Checks since the last new best (a revert after ``patience``)."""
    lengthscale: float
    """The KRR lengthscale the gradient steps use (the best check's, when lwl selects it)."""
    checks: list[dict[str, Any]] = field(default_factory=list)
    """One record per validation check: iteration, err, best, action, start, z, lengthscale(s)."""
    start_index: int = 0
    """Which start point (:meth:`lwl.design.bilevel.BilevelDesign.start_points`) the iteration-0 check scores."""
    best: Kept
    """The best checked iterate (lowest check Err): returned with ``keep: "best"`` unless its
    improvement over theta^0 is within validation noise."""
    initial_sq: np.ndarray | None = None
    """theta^0's squared check residuals on Q's validation points (paired z-scores against it)."""
    significant: Kept | None = None
    """The surest check (largest z) that beats theta^0 by ``threshold`` standard errors (no sq kept)."""
    significant_z: float | None = None
    """Its improvement over theta^0 in standard errors (set with ``significant``)."""
    significant_start: str | None = None
    """Its start point's name when it was checked at iteration 0, else None."""
    pending: Kept | None = None
    """A start point checked before theta^0, judged once theta^0's residuals are known."""
    pending_start: str | None = None
    """Its start point's name (set with ``pending``)."""
    validation_labels: np.ndarray | None = None
    """G* at Q's validation points that came back (the adjoint's and the checks' data)."""
    validation_ok: np.ndarray | None = None
    """Which validation points came back; None when all did."""
    labels_failed: int = 0
    """Labels asked for that came back failed (NaN; counted as spent)."""

    def to_flat(self) -> Flat:
        flat = {k: v for k, v in super().to_flat().items() if k not in _RECORD_FIELDS}
        flat.update(self.params)
        flat.update(self.best.to_flat(BEST))
        if self.significant is not None:
            flat.update(self.significant.to_flat(SIGNIFICANT), significant_z=self.significant_z,
                        significant_start=self.significant_start)
        if self.pending is not None:
            flat.update(self.pending.to_flat(PENDING), pending_start=self.pending_start)
        return flat

    @classmethod
    def from_flat(cls, flat: Flat, *, param_names: Iterable[str], **fields: Any) -> Self:
        """The state of a checkpoint; ``param_names`` are the family's (the flat keys of theta)."""
        names = tuple(param_names)
        return super().from_flat(flat, params={n: flat[n] for n in names},
                                 best=Kept.from_flat(flat, BEST, names),
                                 significant=Kept.from_flat(flat, SIGNIFICANT, names),
                                 pending=Kept.from_flat(flat, PENDING, names), **fields)
