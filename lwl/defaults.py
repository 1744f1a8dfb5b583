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

from lwl.streams import STREAM_KMEANS, STREAM_MEDIAN
from lwl.spec import JobSpec

MEDIAN_POINTS = 2000
# candidates of the lengthscale selection, times the median distance between Q's samples
LENGTHSCALE_FACTORS = (4.0, 2.0, 1.0, 0.5, 0.25, 0.125)


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


def fill_from_data(spec: JobSpec, q: MetaTestSamples) -> JobSpec:
    """The spec with the family's missing parameters (its registry entry's ``fill`` hook, e.g.
    the Gaussian's mean/cov) and KRR's lengthscale filled from Q (see module docstring);
    ``spec.derived`` names what was filled. Refuses a family whose dimension differs from Q's."""
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


def fill_gaussian(family, q: MetaTestSamples, seed: int):
    """A Gaussian family's missing mean / cov: Q's moment-matched Gaussian."""
    from lwl.design.adaptive import moment_matched, regularised_cholesky

    filled = []
    if family.mean is None or family.cov is None:
        mean, cov = moment_matched(np.concatenate(q.validation), q.point_weights(q.validation, q.weights))
        if family.mean is None:
            family.mean = mean.tolist()
            filled.append("mean")
        if family.cov is None:
            L = regularised_cholesky(cov, rel=1e-6)  # positive definite even for degenerate Q samples
            family.cov = (L @ L.T).tolist()
            filled.append("cov")
    return family, filled


def fill_mixture(family, q: MetaTestSamples, seed: int):
    """A mixture family's missing components: fitted to Q's members or k-means clusters."""
    if family.means is not None:
        return family, []
    from lwl.design.families.mixture import initial_components

    family = family.model_copy(update=initial_components(q, family.components, family.init, [seed, STREAM_KMEANS]))
    family.components = len(family.means)
    return family, ["weights", "means", "covs"]


def fill_pool(family, q: MetaTestSamples, seed: int):
    """A pool family's missing seed (the job's) and bandwidth (Scott's rule on the pool)."""
    from lwl.design.families.pool import scott_bandwidth

    filled = []
    if family.pool_seed is None:
        family.pool_seed = seed
        filled.append("pool_seed")
    if family.bandwidth is None:
        size = min(family.pool_size, sum(len(x) for x in q.validation))
        family.bandwidth = scott_bandwidth(size, q.dim)
        filled.append("bandwidth")
    return family, filled
