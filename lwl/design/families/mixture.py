"""A Gaussian mixture sum_k w_k N(m_k, L_k L_k^T) moved by the bilevel method.

One Gaussian cannot cover a Q made of separated regimes; a mixture can put a component on
each. theta = (logits, m_1..m_C, L_1..L_C) with w = softmax(logits), and

    log p_theta(x) = logsumexp_k (log w_k + log N(x; m_k, L_k L_k^T)),

whose score is taken by autograd in Q's whitened coordinates (each component as in
:class:`lwl.design.adaptive.WhitenedGaussian`, the logits as they are). The initial components
are Q's members' moment-matched Gaussians (the ``mixture`` baseline, fitted on the validation
samples only) or the k-means clusters of Q's validation samples.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from lwl.design.adaptive import WhitenedGaussian
from lwl.design.families.base import Params, softmax
from lwl.measures import Gaussian, Mixture
from lwl.measures.gaussian import moment_matched, regularised_cholesky
from lwl.params import StrictModel, check_spd
from lwl.registry import FAMILIES
from lwl.streams import STREAM_KMEANS

MAX_LOGIT = 8.0  # |logit| box: weight ratios up to e^16 between components
VANISHED = 1e-3  # a component with less weight than this is reported as vanished
DEFAULT_MAX_COMPONENTS = 16


def _floored_cov(cov: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """cov + diag(floor), factorised and rebuilt so it is positive definite to the last bit.
    ``floor`` is per input (:func:`initial_components`: 1e-6 of each input's variance over Q's
    validation samples), so the fitted components follow a change of units, C -> S C S: an
    isotropic floor of 1e-6 of the average variance raised an input spread 1e-3 beside one
    spread 1e5 to a component sd of 76 (tests/lwl/design/families/test_mixture.py)."""
    L = regularised_cholesky(cov + np.diag(floor), rel=1e-6)
    return L @ L.T


def initial_components(q, components: int | None, init: str | None, seed) -> dict[str, list]:
    """Weights, means and covariances of the initial mixture from Q's validation samples.

    ``init="members"`` fits one Gaussian per member of Q (needs ``components`` = K);
    ``"kmeans"`` clusters the stacked validation samples, each input standardised, into
    ``components`` groups (k-means++, seeded) and fits each group, weighting points by w_k / M_k.
    ``None`` picks members when the count matches Q's members and k-means otherwise; the default
    count is min(K, 16)."""
    K = len(q.members)
    C = components or min(K, DEFAULT_MAX_COMPONENTS)
    init = init or ("members" if C == K else "kmeans")
    pts = np.concatenate(q.validation)
    a = q.point_weights(q.validation, q.weights)
    floor = 1e-6 * np.diag(moment_matched(pts, a)[1]) + 1e-300  # per input: in each input's own units
    if init == "members":
        if C != K:
            raise ValueError(f"family.components: init 'members' fits one component per member of Q ({K}), not {C}")
        fits = [moment_matched(x, np.full(len(x), 1.0 / len(x))) for x in q.validation]
        weights = np.asarray(q.weights, dtype=np.float64)
    else:
        if C > len(pts):
            raise ValueError(f"family.components: {C} components for {len(pts)} validation samples")
        from scipy.cluster.vq import (
            kmeans2,  # scipy.cluster loads lazily: importing lwl stays fast
        )

        # clustered on each input standardised: Euclidean k-means in a lab's units sees only the input
        # of largest spread (1e5 beside 1e-3), and the clusters would move with a change of units
        centre, spread = pts.mean(0), pts.std(0)
        spread[~(spread > 0)] = 1.0
        _, label = kmeans2((pts - centre) / spread, C, minit="++", seed=np.random.default_rng(seed))
        fits, weights = [], []
        for k in range(C):
            rows = label == k
            if not rows.any():  # an empty cluster: restart it on Q's moment-matched Gaussian
                rows = np.ones(len(pts), dtype=bool)
            fits.append(moment_matched(pts[rows], a[rows]))
            weights.append(max(float(a[rows].sum()), 1e-6))
        weights = np.asarray(weights) / np.sum(weights)
    return {"weights": weights.tolist(), "means": [m.tolist() for m, _ in fits],
            "covs": [_floored_cov(c, floor).tolist() for _, c in fits]}


class MixtureFamily:
    """sum_k softmax(logits)_k N(m_k, L_k L_k^T); phi = (logits, phi_1, ..., phi_C)."""

    name = "mixture"
    param_names = ("logits", "means", "chols")

    def __init__(self, spec, coords: WhitenedGaussian):
        self.spec = spec  # MixtureFamilySpec with weights, means and covs filled in
        self.coords = coords
        self.C = len(spec.means)
        self.P = coords.size

    def initial(self) -> Params:
        w = np.asarray(self.spec.weights, dtype=np.float64)
        chols = np.stack([Gaussian(m, cov=c).chol for m, c in zip(self.spec.means, self.spec.covs)])
        return {"logits": np.log(w / w.sum()), "means": np.asarray(self.spec.means, dtype=np.float64),
                "chols": chols}

    def start_points(self, moment_matched: bool = True) -> list[tuple[str, Params]]:
        return [("given", self.initial())]

    def broadened(self, params: Params, factor: float) -> Params | None:
        """Every component's covariance scaled by ``factor``, weights and means kept (None when the
        covariances are not free)."""
        if "covs" not in self.spec.free:
            return None
        return {**params, "chols": np.sqrt(factor) * params["chols"]}

    def weights(self, params: Params) -> np.ndarray:
        return softmax(params["logits"])

    def mixture(self, params: Params) -> Mixture:
        comps = [Gaussian.from_parameters(m, L) for m, L in zip(params["means"], params["chols"])]
        return Mixture(comps, self.weights(params))

    def measure(self, params: Params) -> Mixture:
        return self.mixture(params)

    def to_phi(self, params: Params) -> np.ndarray:
        blocks = [self.coords.to_phi(m, L) for m, L in zip(params["means"], params["chols"])]
        return np.concatenate([params["logits"] - params["logits"].mean(), *blocks])

    def from_phi(self, phi: np.ndarray) -> Params:
        parts = [self.coords.from_phi(b) for b in phi[self.C:].reshape(self.C, self.P)]
        return {"logits": phi[:self.C].copy(), "means": np.stack([m for m, _ in parts]),
                "chols": np.stack([L for _, L in parts])}

    def mask(self) -> np.ndarray:
        free = self.spec.free
        one = self.coords.mask([{"means": "mean", "covs": "cov"}[f] for f in free if f != "weights"])
        return np.concatenate([np.full(self.C, 1.0 if "weights" in free else 0.0), np.tile(one, self.C)])

    def bounds(self, phi0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = [np.full(self.C, -MAX_LOGIT)], [np.full(self.C, MAX_LOGIT)]
        for b in phi0[self.C:].reshape(self.C, self.P):
            l, h = self.coords.bounds(b)
            lo.append(l)
            hi.append(h)
        lo, hi = np.concatenate(lo), np.concatenate(hi)
        return np.minimum(lo, phi0), np.maximum(hi, phi0)

    def responsibilities(self, params: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(log p_theta(x), r) with r_ik = w_k N_k(x_i) / p_theta(x_i), shape (n,) and (n, C)."""
        from scipy.special import logsumexp

        w = self.weights(params)
        components = self.mixture(params).components
        with np.errstate(divide="ignore"):
            log_joint = np.stack([np.log(w[k]) + components[k].log_prob(x) for k in range(self.C)], axis=1)
        log_p = logsumexp(log_joint, axis=1)
        return log_p, np.exp(log_joint - log_p[:, None])

    def score(self, params: Params, x: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Closed form: d/dlogit_k = sum_i c_i (r_ik - w_k); (m_k, L_k) get the Gaussian score of
        component k with weights c_i r_ik (:meth:`lwl.measures.Gaussian.score`)."""
        _, r = self.responsibilities(params, x)
        g_logits = c @ r - c.sum() * self.weights(params)
        comps = self.mixture(params).components
        parts = [comps[k].score(x, weights=c * r[:, k]) for k in range(self.C)]
        return g_logits, np.stack([g for g, _ in parts]), np.stack([g for _, g in parts])

    def phi_gradient(self, phi: np.ndarray, grads: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        g_logits, g_means, g_chols = grads
        blocks = phi[self.C:].reshape(self.C, self.P)
        return np.concatenate([g_logits, *(self.coords.gradient(b, gm, gL)
                                           for b, gm, gL in zip(blocks, g_means, g_chols))])

    def plain_step(self, params: Params, grads, step: float) -> tuple[Params, float]:
        raise ValueError("algorithm.optimizer: the paper's plain step is defined for the gaussian family only")

    def diagnostics(self, params: Params) -> dict:
        """Per component: weight and W2 from its initial component; vanished components."""
        from lwl.transport import gaussian_w2_squared

        w = self.weights(params)
        start = self.initial()
        comps = []
        for k in range(self.C):
            L, L0 = params["chols"][k], start["chols"][k]
            w2 = gaussian_w2_squared(params["means"][k], L @ L.T, start["means"][k], L0 @ L0.T)
            comps.append({"weight": float(w[k]), "w2_from_initial": float(np.sqrt(max(w2, 0.0)))})
        vanished = [k for k in range(self.C) if w[k] < VANISHED]
        out = {"components": comps, "vanished": vanished}
        if vanished:
            out["warnings"] = [f"mixture components {vanished} have weight below {VANISHED:g}: they draw "
                               "almost no samples and could be dropped"]
        return out


def build(spec, coords: WhitenedGaussian, q) -> MixtureFamily:
    """The bilevel builder registered for ``mixture`` (the ``register`` call at the end of this module)."""
    return MixtureFamily(spec, coords)


def fill(family, q, seed: int):
    """A mixture family's missing components: fitted to Q's members or k-means clusters."""
    if family.means is not None:
        return family, []
    family = family.model_copy(update=initial_components(q, family.components, family.init, [seed, STREAM_KMEANS]))
    family.components = len(family.means)
    return family, ["weights", "means", "covs"]


# -- the job spec's block for this component, and its registration (lwl.registry) --


class MixtureFamilySpec(StrictModel):
    """nu_theta = sum_k w_k N(m_k, C_k), moved by the bilevel method (adaptive optimiser).

    Missing ``weights``/``means``/``covs`` are fitted to Q's validation samples when the job
    starts (:func:`lwl.design.families.mixture.initial_components`): one component per member
    of Q (``init: "members"``, the ``mixture`` baseline) or ``components`` k-means clusters
    (``"kmeans"``); by default members when ``components`` equals Q's member count (the default
    count is min(K, 16)), k-means otherwise. The result's ``spec`` holds the values used."""

    name: Literal["mixture"] = "mixture"
    dim_field: ClassVar[str] = "means"  # the field that fixes the dimension (for error messages)
    components: int | None = Field(default=None, ge=1, le=64, description="default: min(K, 16)")
    init: Literal["members", "kmeans"] | None = Field(
        default=None, description="default: members when components equals Q's member count, else kmeans")
    weights: list[float] | None = Field(default=None, min_length=1)
    means: list[list[float]] | None = Field(default=None, min_length=1)
    covs: list[list[list[float]]] | None = Field(default=None, min_length=1)
    free: list[Literal["weights", "means", "covs"]] = Field(
        default_factory=lambda: ["weights", "means", "covs"], min_length=1)

    @model_validator(mode="after")
    def _components(self):
        given = [k for k in ("weights", "means", "covs") if getattr(self, k) is not None]
        if given and len(given) != 3:
            missing = sorted({"weights", "means", "covs"} - set(given))
            raise ValueError(f"{missing[0]}: give weights, means and covs together (or none)")
        if given:
            C = len(self.means)
            if C == 0:
                raise ValueError("means: at least one component")
            for k in ("weights", "covs"):
                if len(getattr(self, k)) != C:
                    raise ValueError(f"{k}: {len(getattr(self, k))} entries for {C} means")
            if self.components is not None and self.components != C:
                raise ValueError(f"components: {self.components} does not match the {C} means")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights: must be non-negative with a positive sum")
            if any(w == 0 for w in self.weights):
                raise ValueError("weights: every component needs a positive weight (drop the others)")
            d = len(self.means[0])
            for k, (m, c) in enumerate(zip(self.means, self.covs)):
                if len(m) != d:
                    raise ValueError(f"means.{k}: dimension {len(m)}, expected {d}")
                try:
                    check_spd(m, c, blame_mean=False)
                except ValueError as exc:
                    raise ValueError(f"covs.{k}: {str(exc).partition(': ')[2]}") from None
        return self

    @property
    def dim(self) -> int | None:
        return len(self.means[0]) if self.means else None


FAMILIES.register("mixture", MixtureFamilySpec, bilevel=build, fill=fill)
