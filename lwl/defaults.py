"""Defaults that come from the data: what a bilevel job uses where its spec is silent.

- ``family.mean`` / ``family.cov``: Q's moment-matched Gaussian, i.e. the weighted mean and
  covariance of Q's validation samples (each member weighted by w_k, its points equally);
- ``model.lengthscale``: the median distance between Q's validation samples (the median
  heuristic), computed on at most 2000 of them drawn with the job's seed; a bilevel job then
  selects the lengthscale with the design from this value times LENGTHSCALE_FACTORS
  (:meth:`lwl.design.bilevel.BilevelDesign.lengthscale_grid`);
- a mixture family's ``weights`` / ``means`` / ``covs``: one moment-matched Gaussian per member
  of Q or per k-means cluster of Q's validation samples
  (:func:`lwl.design.families.mixture.initial_components`).

:func:`fill_from_data` returns a copy of the spec with these values written in, so the result's
``spec`` states exactly what ran; ``derived`` lists the fields that were filled.
"""

from __future__ import annotations

import numpy as np

from lwl.q_samples import MetaTestSamples
from lwl.streams import STREAM_MEDIAN

MEDIAN_POINTS = 2000
# candidates of the lengthscale selection, times the median distance between Q's samples
LENGTHSCALE_FACTORS = (4.0, 2.0, 1.0, 0.5, 0.25, 0.125)
# when the best candidate sits at an edge of that grid, the grid is widened by doublings (or
# halvings) up to this many steps beyond it; a choice still at the edge then is warned about
LENGTHSCALE_WIDEN = 4
LENGTHSCALE_LIMITS = (min(LENGTHSCALE_FACTORS) / 2**LENGTHSCALE_WIDEN, max(LENGTHSCALE_FACTORS) * 2**LENGTHSCALE_WIDEN)


def select_widening(score, grid: list[float], low: float, high: float) -> tuple[float, dict[float, float]]:
    """The argmin of ``score(ell)`` over ``grid``, widened by factors of 2 while the best value
    sits at an edge of what was tried and the next value stays within [low, high] (an error
    still falling at the edge means the optimum lies beyond it). Returns (best, {ell: score})."""
    scores = {float(ell): score(float(ell)) for ell in grid}
    while True:
        best = min(scores, key=scores.get)
        lo, hi = min(scores), max(scores)
        if best == hi and hi * 2 <= high * (1 + 1e-9):
            scores[hi * 2] = score(hi * 2)
        elif best == lo and lo / 2 >= low * (1 - 1e-9):
            scores[lo / 2] = score(lo / 2)
        else:
            return best, scores


def edge_note(best: float, median: float) -> str | None:
    """A warning when a lengthscale chosen by :func:`select_widening` sits at the widened limit."""
    low, high = (f * median for f in LENGTHSCALE_LIMITS)
    if best >= high * (1 - 1e-9):
        return (f"the selected KRR lengthscale {best:.4g} is the largest lwl tries ({LENGTHSCALE_LIMITS[1]:g} x the "
                f"median distance between Q's samples) and the validation error was still falling there: give "
                f"model.lengthscale to try larger ones")
    if best <= low * (1 + 1e-9):
        return (f"the selected KRR lengthscale {best:.4g} is the smallest lwl tries ({LENGTHSCALE_LIMITS[0]:g} x the "
                f"median distance between Q's samples) and the validation error was still falling there: give "
                f"model.lengthscale to try smaller ones")
    return None


def median_distance(points: np.ndarray, seed) -> float:
    """Median Euclidean distance between distinct points of (a subsample of) ``points``."""
    rng = np.random.default_rng(seed)
    x = points if len(points) <= MEDIAN_POINTS else points[rng.choice(len(points), MEDIAN_POINTS, replace=False)]
    sq = (x * x).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * x @ x.T, 0.0)
    d = np.sqrt(d2[np.triu_indices(len(x), 1)])
    d = d[d > 0]
    return float(np.median(d)) if len(d) else 1.0


def median_lengthscale(q: MetaTestSamples, seed: int) -> float:
    """The median distance between Q's validation samples (the job's seed picks the subsample)."""
    return median_distance(np.concatenate(q.validation), [seed, STREAM_MEDIAN])


def fill_from_data(spec, q: MetaTestSamples):
    """The job spec (a ``lwl.spec.JobSpec``) with the family's missing parameters (its registry
    entry's ``fill`` hook, e.g. the Gaussian's mean/cov) and KRR's lengthscale filled from Q (see
    module docstring); ``spec.derived`` names what was filled. Refuses a family whose dimension
    differs from Q's."""
    from lwl.registry import FAMILIES

    family, model = spec.family.model_copy(), spec.model.model_copy()
    derived: list[str] = []
    dim = getattr(family, "dim", None)
    if dim is not None and dim != q.dim:
        raise ValueError(f"family.{type(family).dim_field}: dimension {dim} does not match the test "
                         f"distributions' dimension {q.dim}")
    fill = FAMILIES.get(family.name).resolve("fill")
    if fill is not None:
        family, filled = fill(family, q, spec.seed)
        derived += [f"family.{f}" for f in filled]
    if model.name == "krr" and model.lengthscale is None:
        model.lengthscale = median_lengthscale(q, spec.seed)
        derived.append("model.lengthscale")
    out = spec.model_copy(update={"family": family, "model": model})
    out.derived = [*spec.derived, *derived]
    return out
