"""The numbers behind a job's pictures: the designed distribution against Q, ready to plot.

A result's ``views`` document is what the dashboard's job page and ``lwl report`` draw; it is
computed once, when the job ends, so that neither needs Q's samples or the measure code:

- ``{"kind": "projection", ...}`` for distributions on R^d (the bilevel families): Q's pooled
  validation samples define the plane of their two leading principal directions (PCA of the
  w_k-weighted samples); each member and the design are shown there by a few projected samples
  and the projected mean and 2x2 covariance (the 2-sd ellipse is mean + 2 chol(C) (cos, sin)),
  beside the full covariance matrices of the design and of Q (heatmaps);
- ``{"kind": "fields", ...}`` for distributions on grid functions (KLE and particle designs):
  pointwise mean and variance of the design's samples on the grid, a few sampled fields, and
  the KLE spectrum when the measure has one.

Every number is rounded to 4 significant digits: views are pictures, not data (the
distribution spec in the result is exact).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SAMPLES_PER_MEMBER = 150  # projected points per Q member
DESIGN_SAMPLES = 400
FIELD_SAMPLES = 200  # draws for the pointwise mean and variance of a field design
EXAMPLE_FIELDS = 4
MAX_HEATMAP = 40  # covariance heatmaps of larger d show the leading 40 x 40 block
VIEW_SEED = 20_260_611  # pictures draw from their own stream, never the job's


def _round(x) -> Any:
    a = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isfinite(a), np.vectorize(lambda v: float(f"{v:.4g}"), otypes=[float])(a), 0.0) \
            if a.size else a
    return out.tolist()


def _field_template(measure):
    """The field measure whose grid a field design has: itself, or the first component of a
    mixture of field measures (Q's law as a budgeted operator design returns it); else None."""
    if hasattr(measure, "grid"):
        return measure
    parts = getattr(measure, "components", None)
    return parts[0] if parts and all(hasattr(c, "grid") for c in parts) else None


def _field_shape(measure) -> list[int]:
    grid = int(getattr(_field_template(measure), "grid"))
    return [grid, grid] if measure.dim == grid * grid else [measure.dim]


def projection_view(measure, q) -> dict:
    """Design and Q's members in Q's leading principal plane (``q``: MetaTestSamples)."""
    pts = np.concatenate(q.validation)
    a = q.point_weights(q.validation, q.weights)
    centre = a @ pts
    cq = ((pts - centre) * a[:, None]).T @ (pts - centre)
    vals, vecs = np.linalg.eigh(cq)
    order = np.argsort(vals)[::-1]
    k = min(2, q.dim)
    basis = vecs[:, order[:k]]
    if k == 1:  # a line: the second axis carries nothing
        basis = np.concatenate([basis, np.zeros((q.dim, 1))], axis=1)
    rng = np.random.default_rng(VIEW_SEED)

    def place(x):
        return (np.asarray(x) - centre) @ basis

    def moments(x, w=None):
        x = np.asarray(x)
        w = np.full(len(x), 1.0 / len(x)) if w is None else w
        m = w @ x
        c = ((x - m) * w[:, None]).T @ (x - m)
        return place(m), basis.T @ c @ basis

    members = []
    for k_, (x, w) in enumerate(zip(q.validation, q.weights)):
        take = x[rng.choice(len(x), min(SAMPLES_PER_MEMBER, len(x)), replace=False)]
        m, c = moments(x)
        members.append({"name": f"member {k_}", "weight": float(w), "points": _round(place(take)),
                        "mean": _round(m), "cov": _round(c)})
    design_x = measure.sample(DESIGN_SAMPLES, [VIEW_SEED, 1])
    mean, cov = measure.mean_and_cov()
    d = min(q.dim, MAX_HEATMAP)
    return {"kind": "projection", "dim": int(q.dim),
            "explained": _round(vals[order[:k]] / max(vals.sum(), 1e-300)),
            "members": members,
            "design": {"points": _round(place(design_x)), "mean": _round(place(mean)),
                       "cov": _round(basis.T @ cov @ basis)},
            "heatmaps": {"design": _round(cov[:d, :d]), "q": _round(cq[:d, :d])}}


def fields_view(measure) -> dict:
    """Pointwise mean and variance of a field design, a few of its fields, its KLE spectrum."""
    x = measure.sample(FIELD_SAMPLES, [VIEW_SEED, 2])
    out = {"kind": "fields", "shape": _field_shape(measure), "mean": _round(x.mean(0)),
           "variance": _round(x.var(0)), "examples": _round(x[:EXAMPLE_FIELDS])}
    if hasattr(measure, "eigenvalues"):
        out["spectrum"] = _round(measure.eigenvalues()[:200])
    return out


def design_views(distribution: dict, q=None) -> dict:
    """The ``views`` document of a result (see the module docstring); ``q`` (Q's samples) is
    needed for distributions on R^d and ignored for field designs."""
    from lwl.measures import from_spec

    measure = from_spec(distribution)
    if _field_template(measure) is not None:
        return fields_view(measure)
    if q is None:
        return {"kind": "none", "why": "Q's samples are not available to this algorithm's result"}
    return projection_view(measure, q)
