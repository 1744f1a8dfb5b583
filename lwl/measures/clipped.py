"""A measure put onto an input domain D the way ``domain.outside: "clip"`` puts Q's samples there.

With ``outside: "clip"`` Q's samples outside D are moved to the nearest point of D, so Q has mass
on D's faces: the law of pi_D(X), X ~ q, with pi_D(x) = argmin_{y in D} ||x - y|| (coordinate
clipping for a box; Dykstra's projection with linear constraints, :meth:`lwl.domain.Domain.clip`).
That push-forward, (pi_D)_# q, is this measure when ``face_share`` is None. It splits as

    (pi_D)_# q = Z * q|_D + (1 - Z) * (pi_D)_# q|_out,    Z = P_q(X in D),

q|_D the law of X conditioned on X in D (:class:`lwl.measures.Truncated`, no face point), and
q|_out conditioned on X outside D. A designed law broader than Q would put far more than Q's share
on the faces that way (a Gaussian broadened x3 in d = 20 puts 91% of its draws there), so with a
``face_share`` phi this measure is

    p = (1 - s) * q|_D + s * (pi_D)_# q|_out,    s = min(phi, 1 - Z),

the face mass capped at phi (the share Q's samples have on D's faces, for a budgeted design):
never more than the projection would give, and a law that fits in D (Z = 1) is q itself.

Sampling: when s = 1 - Z (no cap binds) it draws ``base.sample(n, seed)`` and projects it, the same
draws as the base law wherever they lie in D; else a Binomial(n, s) count of face points from q|_out
(rejection) and the rest from q|_D, shuffled. 1 - Z is estimated once, on SHARE_SAMPLES draws of
a fixed stream (standard error at most 0.002: the cap needs no more, and a Gaussian CDF in d = 20
costs seconds per component).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lwl.domain import Domain
from lwl.measures.base import Measure, SeedLike, as_generator, from_spec, register_family
from lwl.measures.truncated import MIN_INSIDE, Truncated

MOMENT_SAMPLES = 1 << 16  # draws behind mean_and_cov (a Monte Carlo estimate)
SHARE_SAMPLES = 1 << 16  # draws behind the estimate of 1 - Z
_SEED = 20_261_203  # the fixed stream of those estimates (never a job's)


@register_family("clipped")
class Clipped(Measure):
    """``base`` put onto ``domain`` by the projection, its face mass capped at ``face_share``
    (None: no cap, the push-forward itself; see the module docstring)."""

    def __init__(self, base: Measure, domain: Domain, face_share: float | None = None):
        if base.dim != domain.dim:
            raise ValueError(f"domain: dimension {domain.dim} does not match the distribution's {base.dim}")
        if face_share is not None and not 0.0 <= float(face_share) <= 1.0:
            raise ValueError(f"face_share: {face_share} is not a share in [0, 1]")
        self.base, self.domain = base, domain
        self.face_share = None if face_share is None else float(face_share)
        self._inside = Truncated(base, domain)
        self._outside: float | None = None

    @property
    def dim(self) -> int:
        return self.base.dim

    def share_outside(self) -> float:
        """1 - Z, the base law's mass outside D (module docstring), estimated once."""
        if self._outside is None:
            self._outside = float(1.0 - self.domain.contains(self.base.sample(SHARE_SAMPLES, [_SEED, 1])).mean())
        return self._outside

    def share_on_faces(self) -> float:
        """s, the share of this law's draws that lie on D's faces (moved there by the projection)."""
        out = self.share_outside()
        s = out if self.face_share is None else min(self.face_share, out)
        return 0.0 if s < MIN_INSIDE else s  # a face share rejection could not draw is none

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        """n draws (module docstring)."""
        if self.face_share is None or self.face_share >= self.share_outside():
            return self.domain.clip(self.base.sample(n, seed))
        rng = as_generator(seed)
        s = self.share_on_faces()
        k = int(rng.binomial(n, s)) if s > 0 else 0
        inside = self._inside.sample(n - k, rng)
        if k == 0:
            return inside
        kept, have = [], 0
        while have < k:  # draws of q outside D (their share is at least s >= MIN_INSIDE)
            x = self.base.sample(int(min(np.ceil(1.2 * (k - have) / s) + 64, 4_000_000)), rng)
            x = x[~self.domain.contains(x)]
            kept.append(x)
            have += len(x)
        faces = self.domain.clip(np.concatenate(kept)[:k])
        return np.concatenate([inside, faces])[rng.permutation(n)]

    def mean_and_cov(self) -> tuple[np.ndarray, np.ndarray]:
        """Monte Carlo moments from MOMENT_SAMPLES draws of a fixed stream (pictures and the bound
        use them; no closed form)."""
        x = self.sample(MOMENT_SAMPLES, [_SEED, 2])
        m = x.mean(0)
        c = (x - m).T @ (x - m) / len(x)
        return m, 0.5 * (c + c.T)

    def _spec_fields(self) -> dict[str, Any]:
        out = {"domain": self.domain.to_json(), "base": self.base.to_spec()}
        if self.face_share is not None:
            out["face_share"] = self.face_share
        return out

    @classmethod
    def from_fields(cls, doc: dict[str, Any]) -> "Clipped":
        if not isinstance(doc.get("domain"), dict) or not isinstance(doc.get("base"), dict):
            raise ValueError("clipped: needs a domain object and a base distribution spec")
        share = doc.get("face_share")
        if share is not None and not isinstance(share, (int, float)):
            raise ValueError("face_share: expected a number in [0, 1]")
        return cls(from_spec(doc["base"]), Domain.from_json(doc["domain"]), share)
