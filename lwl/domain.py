"""The input domain of a lab: D = {x : low <= x <= high, A x <= b} (box bounds per input, and
optional linear constraints), the set every input lwl hands out must lie in.

An instrument cannot take a motor past its range, a furnace past its temperature or a pump past
its concentration, so a job with ``domain`` draws its design batches, its evaluation's training
sets and every ``/samples`` answer from distributions on D: restricted to it
(:class:`lwl.measures.Truncated`) by default, where test samples outside D are refused; with
``outside: "clip"``, where Q's samples outside D are moved to its nearest point, pushed onto it by
that projection (:class:`lwl.measures.Clipped`; :func:`lwl.measures.on_domain`), so that what lwl labels has the
law Q's samples have. docs/method/families.md ("Input domains") says why.

The job spec's ``domain`` block, :class:`DomainSpec` (pydantic), is at the end of this module.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from lwl.params import StrictModel, check_rectangular


class Domain:
    """D = {x in R^d : low <= x <= high, A x <= b} (closed; ``A``/``b`` optional)."""

    def __init__(self, low, high, A=None, b=None):
        self.low = np.asarray(low, dtype=np.float64).reshape(-1)
        self.high = np.asarray(high, dtype=np.float64).reshape(-1)
        if self.low.shape != self.high.shape or self.low.size == 0:
            raise ValueError(f"high: {self.high.size} upper bounds for {self.low.size} lower bounds")
        if not (np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high))):
            raise ValueError("low: bounds must be finite")
        bad = np.flatnonzero(~(self.high > self.low))
        if bad.size:
            raise ValueError(f"high: every upper bound must exceed its lower bound (input {int(bad[0])}: "
                             f"low {self.low[bad[0]]:g}, high {self.high[bad[0]]:g})")
        if (A is None) != (b is None):
            raise ValueError("b: give A and b together" if b is None else "A: give A and b together")
        self.A = None if A is None else np.asarray(A, dtype=np.float64)
        self.b = None if b is None else np.asarray(b, dtype=np.float64).reshape(-1)
        if self.A is not None:
            if self.A.ndim != 2 or self.A.shape[1] != self.dim or self.A.shape[0] == 0:
                raise ValueError(f"A: expected a (rows, {self.dim}) matrix, got shape {self.A.shape}")
            if self.b.shape != (self.A.shape[0],):
                raise ValueError(f"b: {self.b.size} entries for the {self.A.shape[0]} rows of A")
            if np.any(np.linalg.norm(self.A, axis=1) == 0):
                raise ValueError("A: a row of zeros constrains nothing")

    @property
    def dim(self) -> int:
        return self.low.shape[0]

    @property
    def is_box(self) -> bool:
        return self.A is None

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Domain":
        return cls(doc.get("low"), doc.get("high"), doc.get("A"), doc.get("b"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"low": self.low.tolist(), "high": self.high.tolist()}
        if self.A is not None:
            out.update(A=self.A.tolist(), b=self.b.tolist())
        return out

    def violation(self, x: np.ndarray) -> np.ndarray:
        """max over the constraints of how far each row of ``x`` lies outside (<= 0 inside), in
        units of the box's width per input and of |a_i| for a row of A."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        width = self.high - self.low
        v = np.maximum((self.low - x) / width, (x - self.high) / width).max(1)
        if self.A is not None:
            norms = np.linalg.norm(self.A, axis=1)
            v = np.maximum(v, ((x @ self.A.T - self.b) / norms).max(1))
        return v

    def on_boundary(self, x: np.ndarray, tol: float = 1e-9) -> np.ndarray:
        """Boolean mask of the rows of ``x`` that lie on D's boundary: within ``tol`` of a face, in
        the units of :meth:`violation` (a projected point sits on its face exactly for a box, and
        within a few ulps of a half-space)."""
        return np.abs(self.violation(x)) <= tol

    def contains(self, x: np.ndarray) -> np.ndarray:
        """Boolean mask of the rows of ``x`` (n, d) that lie in D (non-finite rows never do).

        Exact comparisons, no tolerance: what is handed out must pass the same test a lab's own
        limit check makes, and JSON round trips keep every bit."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if x.shape[1] != self.dim:
            raise ValueError(f"domain: inputs of dimension {x.shape[1]}, the domain has {self.dim}")
        inside = np.all((x >= self.low) & (x <= self.high), axis=1)
        if self.A is not None:
            inside &= np.all(x @ self.A.T <= self.b, axis=1)
        return inside

    def clip(self, x: np.ndarray) -> np.ndarray:
        """The nearest point of D to each row of ``x`` (the Euclidean projection; ``outside:
        "clip"``). For a box, coordinate-wise clipping; with linear constraints,
        :meth:`project` (Dykstra's algorithm)."""
        x = np.asarray(x, dtype=np.float64)
        boxed = np.clip(x, self.low, self.high)
        if self.A is None:
            return boxed
        inside = self.contains(boxed)
        out = boxed.copy()
        if not inside.all():
            out[~inside] = self.project(x[~inside])
        return out

    def project(self, x: np.ndarray, *, tol: float = 1e-12, max_cycles: int = 100_000) -> np.ndarray:
        """Euclidean projection of each row of ``x`` onto D = box ∩ {a_i x <= b_i}, by Dykstra's
        alternating projections (Boyle & Dykstra 1986): cycling through the box (clipping) and
        each half-space (closed form) with Dykstra's corrections converges to the nearest point of
        the intersection, not just to some point of it; all rows at once. Stops when a cycle moves
        no row by more than ``tol`` times D's size. The limit may sit a few ulps outside a
        half-space: the result is pulled towards D's Chebyshev centre just enough to satisfy
        :meth:`contains` exactly (what is handed out must pass a lab's own limit check)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if self.A is None or len(x) == 0:
            return np.clip(x, self.low, self.high)
        norms2 = np.einsum("ij,ij->i", self.A, self.A)
        scale = float(np.linalg.norm(self.high - self.low))
        y = x.copy()
        corrections = [np.zeros_like(x) for _ in range(len(self.b) + 1)]
        for _ in range(max_cycles):
            start = y.copy()
            z = y + corrections[0]  # the box
            y = np.clip(z, self.low, self.high)
            corrections[0] = z - y
            for i, (a, b) in enumerate(zip(self.A, self.b)):  # the half-spaces a x <= b
                z = y + corrections[i + 1]
                excess = np.maximum(z @ a - b, 0.0) / norms2[i]
                y = z - excess[:, None] * a[None, :]
                corrections[i + 1] = z - y
            if float(np.abs(y - start).max()) <= tol * scale:
                break
        return self._pull_inside(y)

    def _pull_inside(self, y: np.ndarray) -> np.ndarray:
        """Rows of ``y`` (at most round-off outside D) moved towards D's Chebyshev centre c by the
        least t in [0, 1], y <- y + t (c - y), that puts them inside exactly."""
        y = np.clip(y, self.low, self.high)
        bad = ~self.contains(y)
        if not bad.any():
            return y
        centre, radius = self.chebyshev()
        if radius <= 0:
            raise ValueError("domain: D has no interior to project into")
        for t in (1e-12, 1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0):
            moved = y[bad] + t * (centre - y[bad])
            ok = self.contains(moved)
            rows = np.flatnonzero(bad)
            y[rows[ok]] = moved[ok]
            bad[rows[ok]] = False
            if not bad.any():
                break
        return y

    def chebyshev(self) -> tuple[np.ndarray, float]:
        """(centre, radius) of the largest ball inside D (its Chebyshev ball), by a linear
        programme; radius <= 0 when D has no interior. For a box: its midpoint and half its
        narrowest width."""
        mid, half = (self.low + self.high) / 2, float(np.min(self.high - self.low)) / 2
        if self.A is None:
            return mid, half
        from scipy.optimize import linprog

        d = self.dim
        # max r subject to a_i x + |a_i| r <= b_i, low_j + r <= x_j <= high_j - r
        norms = np.linalg.norm(self.A, axis=1)
        rows = [np.hstack([self.A, norms[:, None]]),
                np.hstack([np.eye(d), np.ones((d, 1))]), np.hstack([-np.eye(d), np.ones((d, 1))])]
        rhs = np.concatenate([self.b, self.high, -self.low])
        res = linprog(np.r_[np.zeros(d), -1.0], A_ub=np.vstack(rows), b_ub=rhs,
                      bounds=[(None, None)] * d + [(None, half)], method="highs")
        if res.status != 0:
            return mid, -1.0
        return np.asarray(res.x[:d]), float(-res.fun)

    def interior_radius(self) -> float:
        """The radius of D's Chebyshev ball (:meth:`chebyshev`); <= 0: no interior."""
        return self.chebyshev()[1]

    def reference_point(self) -> np.ndarray:
        """A point of D to measure from: the origin when D holds it, else its Chebyshev centre."""
        zero = np.zeros((1, self.dim))
        return zero[0] if self.contains(zero)[0] else self.chebyshev()[0]

    def describe_outside(self, x: np.ndarray) -> str:
        """'N of M rows lie outside the domain (first: row i, ...)' for a refusal message."""
        out = np.flatnonzero(~self.contains(x))
        if not out.size:
            return "every row lies inside the domain"
        i = int(out[0])
        row = np.asarray(x[i], dtype=np.float64)
        where = [f"input {j}: {row[j]:g} not in [{self.low[j]:g}, {self.high[j]:g}]"
                 for j in range(self.dim) if not self.low[j] <= row[j] <= self.high[j]]
        if not where and self.A is not None:
            k = int(np.argmax(self.A @ row - self.b))
            where = [f"A[{k}] x = {float(self.A[k] @ row):g} > b[{k}] = {self.b[k]:g}"]
        return f"{out.size} of {len(x)} rows lie outside the domain (first: row {i}, {'; '.join(where[:3])})"


# -- the job spec's domain block -------------------------------------------------------------


class DomainSpec(StrictModel):
    """The instrument's input domain D = {x : low <= x <= high, A x <= b} (lwl.domain): every
    input the job hands out (design batches, ask/tell batches, training sets, the evaluation's
    training draws, ``/samples``) lies in D. The designed distribution is the family restricted
    to D (docs/method/families.md "Input domains"). Test samples the user gives (``samples``,
    ``dataset``) outside D are refused, or moved to the nearest point of D with ``outside: "clip"``;
    members lwl draws (``gaussian``, ``uniform``, ...) are drawn restricted to D, and refused
    when more than 1% of their mass lies outside, unless ``outside`` is ``"clip"``: then their
    draws are moved to the nearest point of D like the user's points, and the laws a budgeted job
    labels (its candidates, the returned distribution) and every verdict's baselines are put onto D
    by that projection, with at most Q's share on D's faces (:func:`lwl.measures.on_domain`)."""

    low: list[float] = Field(min_length=1, description="lower bound of each input")
    high: list[float] = Field(min_length=1, description="upper bound of each input (> low)")
    A: list[list[float]] | None = Field(default=None, min_length=1, max_length=10_000,
                                        description="linear constraints A x <= b (rows of length d), with b")
    b: list[float] | None = Field(default=None, min_length=1, max_length=10_000)
    outside: Literal["refuse", "clip"] = Field(
        default="refuse", description="test samples outside the domain: refused (422 naming the member) or "
                                      "clipped: moved to the nearest point of the domain (the user's points and "
                                      "the draws of the members lwl draws alike); with clip the laws a budgeted job "
                                      "labels (candidates, Q's mixture, the returned distribution) and the "
                                      "verdict's baselines are put onto the domain by the same projection, with "
                                      "at most Q's share on its faces, instead of restricted to it")

    @model_validator(mode="after")
    def _domain(self):
        from lwl.domain import Domain

        if self.A is not None:
            check_rectangular(self.A, "A")
        domain = Domain(self.low, self.high, self.A, self.b)  # raises "high: ..." / "A: ..." / "b: ..."
        if domain.interior_radius() <= 0:
            raise ValueError("b: the constraints A x <= b leave no interior point in the box [low, high]")
        return self

    @property
    def dim(self) -> int:
        return len(self.low)

    def build(self):
        from lwl.domain import Domain

        return Domain(self.low, self.high, self.A, self.b)
