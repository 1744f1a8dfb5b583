"""Samples of the meta test distribution Q = sum_k w_k delta_{nu'_k} (paper eqn app_rand_measure).

Each member nu'_k is known by M_k samples; the first ``validation_per_member`` drive the adjoint
state and the validation error during design (paper SM: 500 of 5000), the rest are held out for
the final evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from lwl.measures import Gaussian, UniformBox
from lwl.registry import Registry
from lwl.spec import TestDistributionsSpec
from lwl.streams import STREAM_Q

DatasetResolver = Callable[[str], np.ndarray]



def _no_datasets(ref: str) -> np.ndarray:
    raise ValueError(f"dataset: {ref!r} cannot be resolved here (no dataset store configured)")


# How each kind of test member (lwl.spec.MemberSpec: exactly one field is given) becomes
# samples: build(value of that field, size, seed, dataset resolver) -> (M, d) float64 array.
MEMBER_KINDS = Registry("member kind")
MEMBER_KINDS.register("gaussian", None, lambda g, size, seed, _: Gaussian(g.mean, cov=g.cov).sample(size, seed))
MEMBER_KINDS.register("uniform", None, lambda u, size, seed, _: UniformBox(u.low, u.high).sample(size, seed))
MEMBER_KINDS.register("kle", None, lambda p, size, seed, _: p.measure().sample(size, seed))
MEMBER_KINDS.register("lognormal", None, lambda p, size, seed, _: np.exp(p.measure().sample(size, seed)))
MEMBER_KINDS.register("samples", None, lambda rows, size, seed, _: np.asarray(rows, dtype=np.float64))
MEMBER_KINDS.register("dataset", None, lambda ref, size, seed, resolve: np.asarray(resolve(ref), dtype=np.float64))


def degenerate_member(x: np.ndarray, rel: float = 1e-10) -> str | None:
    """Why a member's samples cannot stand for a distribution on R^d for the bilevel method
    (its moment-matched Gaussian, the barycenter and mixture baselines need a full-rank
    covariance), or None: fewer than d + 1 samples, or a covariance of rank < d (identical
    rows, samples on a subspace)."""
    n, d = x.shape
    if n < d + 1:
        return f"{n} samples cannot span {d} dimensions (need at least {d + 1})"
    centred = x - x.mean(0)
    s = np.linalg.svd(centred, compute_uv=False)
    rank = int(np.sum(s > rel * max(float(s[0]) if s.size else 0.0, 1e-300)))
    if rank < d:
        return (f"the samples' covariance has rank {rank} < d = {d} (identical rows or samples on a "
                "subspace): the bilevel method and its baselines need a full-rank member")
    return None


@dataclass
class MetaTestSamples:
    members: list[np.ndarray]  # full (M_k, d) samples of each member
    weights: np.ndarray  # (K,), sums to 1
    n_validation: int

    @classmethod
    def from_spec(cls, spec: TestDistributionsSpec, seed: int,
                  resolve: DatasetResolver = _no_datasets) -> "MetaTestSamples":
        members = []
        for k, m in enumerate(spec.members):
            kind = next(name for name in MEMBER_KINDS.names() if getattr(m, name) is not None)
            x = MEMBER_KINDS.get(kind).build(getattr(m, kind), m.size, [seed, STREAM_Q, k], resolve)
            if kind == "dataset" and (x.ndim != 2 or not np.all(np.isfinite(x))):
                raise ValueError(f"test_distributions.members.{k}.dataset: expected a finite (M, d) array")
            if x.shape[0] <= spec.validation_per_member:
                raise ValueError(f"test_distributions.members.{k}: {x.shape[0]} samples leave none held out")
            members.append(x)
        dims = {x.shape[1] for x in members}
        if len(dims) != 1:
            raise ValueError(f"test_distributions.members: dimensions differ: {sorted(dims)}")
        w = np.ones(len(members)) if spec.weights is None else np.asarray(spec.weights, dtype=np.float64)
        return cls(members, w / w.sum(), spec.validation_per_member)

    @property
    def dim(self) -> int:
        return self.members[0].shape[1]

    @property
    def validation(self) -> list[np.ndarray]:
        return [x[: self.n_validation] for x in self.members]

    @property
    def heldout(self) -> list[np.ndarray]:
        return [x[self.n_validation:] for x in self.members]

    @staticmethod
    def point_weights(parts: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
        """Weights w_k / M_k of the stacked points, so sum_points a f = E_{Q} E_{nu'} f."""
        return np.concatenate([np.full(len(x), w / len(x)) for x, w in zip(parts, weights)])
