"""The validation check of a bilevel run: where it looks and how it scores.

Every ``check_every`` iterations (and at iteration 0, for each start point) the iterate's law
gives a check batch drawn with one fixed seed (common random numbers, so two checks differ by
theta, not by sampling noise). A KRR model trained on that batch with the evaluation's ridge is
scored by Err = sqrt(sum_i a_i e_i / sum_i a_i G*_i^2) on Q's validation points, e_i its squared
residuals and a_i = w_k / M'_k (:class:`ValidationCheck`). When the spec leaves the lengthscale
to lwl, each check tries a grid and keeps the pair (theta, lengthscale) with the lowest Err
(docs/method/bilevel.md, "Lengthscale chosen with the design").

The points are those whose labels came back (:class:`ValidationPoints`): the adjoint of the
gradient, the checks and the paired noise estimates of the keep-which check
(:mod:`lwl.design.bilevel_keep`) all look there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from lwl.defaults import LENGTHSCALE_FACTORS, LENGTHSCALE_LIMITS, select_widening
from lwl.device import DTYPE
from lwl.models import KernelRidge
from lwl.q_samples import MetaTestSamples

if TYPE_CHECKING:  # annotations only: lwl.spec's unions are the built-ins', which import the stepper
    from lwl.spec import JobSpec


class ValidationPoints:
    """Q's validation points whose labels came back, on the stepper's device: ``v`` (the points),
    ``a`` (weights w_k / M'_k over the M'_k usable points of member k) and ``parts`` (the usable
    points of each member). Every point until :meth:`bind` says which came back."""

    def __init__(self, q: MetaTestSamples, device: torch.device):
        self.q = q
        self.device = device
        self._bound: bytes | None = b"unbound"
        self.bind(None)

    def bind(self, ok: np.ndarray | None) -> None:
        """Look at the validation points whose labels came back (``ok``, a state's
        ``validation_ok``; None: all of them, before the validation round or when none failed).
        A failed validation point is left out, not given a label."""
        key = None if ok is None or ok.all() else np.asarray(ok, dtype=bool).tobytes()
        if key == self._bound:
            return
        parts, start = [], 0
        for k, x in enumerate(self.q.validation):
            part = x if key is None else x[np.asarray(ok[start:start + len(x)], dtype=bool)]
            start += len(x)
            if len(part) == 0:
                raise ValueError(f"labels: every validation label of test_distributions.members.{k} failed; "
                                 "the design cannot score anything on that member")
            parts.append(part)
        self.v = torch.as_tensor(np.concatenate(parts), dtype=DTYPE, device=self.device)
        self.a = torch.as_tensor(MetaTestSamples.point_weights(parts, self.q.weights), dtype=DTYPE,
                                 device=self.device)
        self.parts = parts
        self._bound = key


class ValidationCheck:
    """Scores a check batch on the bound :class:`ValidationPoints` with the spec's kernel and the
    evaluation's ridge (read from ``spec`` at each use)."""

    def __init__(self, spec: JobSpec, points: ValidationPoints, device: torch.device):
        self.spec = spec
        self.points = points
        self.device = device

    def residuals(self, U: np.ndarray, y: np.ndarray, validation_labels: np.ndarray,
                  lengthscale: float) -> np.ndarray:
        """|G_hat(v) - G*(v)|^2 on Q's validation samples for KRR trained on (U, y) with the
        evaluation's ridge; Err = sqrt(sum a e / sum a G*^2)."""
        ridge = self.spec.evaluation.ridge
        model = KernelRidge(self.spec.model.kernel, lengthscale, ridge / len(U), device=str(self.device)).fit(U, y)
        pred = model.predict(self.points.v)
        return (pred - validation_labels) ** 2

    def score(self, U, y, validation_labels, lengthscale) -> tuple[float, np.ndarray | None]:
        """(Err, squared residuals) of a check; (inf, None) when the model cannot be trained."""
        try:
            sq = self.residuals(U, y, validation_labels, lengthscale)
        except np.linalg.LinAlgError:
            return float("inf"), None
        a = self.points.a.cpu().numpy()
        err = float(np.sqrt((a @ sq) / (a @ validation_labels**2)))
        return (err, sq) if np.isfinite(err) else (float("inf"), None)

    def lengthscale_grid(self, current: float, iteration: int) -> list[float]:
        """Lengthscales a check tries when the spec left it to lwl: the median distance times
        every factor of LENGTHSCALE_FACTORS for a start point, the ``current`` one (the state's)
        and its two grid neighbours for an iterate. The lengthscale is chosen with the design, not
        once for Q: a design broader than Q wants a shorter one (docs/method/bilevel.md, "Lengthscale
        chosen with the design")."""
        grid = [f * self.spec.model.lengthscale for f in LENGTHSCALE_FACTORS]
        if iteration == 0:
            return grid
        # the current lengthscale may lie beyond the grid after a widening
        return [current * 2, current, current / 2]

    def select_lengthscale(self, U: np.ndarray, y: np.ndarray, validation_labels: np.ndarray,
                           grid: list[float]) -> dict[float, tuple[float, np.ndarray | None]]:
        """(check Err, squared residuals) of the batch (U, y) for each lengthscale of ``grid``,
        widened while the best sits at its edge (:func:`lwl.defaults.select_widening`, within
        LENGTHSCALE_LIMITS times the median distance); the labels are the check's, so trying
        several costs no oracle call."""
        tried: dict[float, tuple[float, np.ndarray | None]] = {}

        def score(ell: float) -> float:
            tried[ell] = self.score(U, y, validation_labels, ell)
            return tried[ell][0]

        median = self.spec.model.lengthscale
        select_widening(score, grid, *(f * median for f in LENGTHSCALE_LIMITS))
        return tried
