"""``family: auto``, the default: the Gaussian and the mixture family compete on validation.

One Gaussian cannot put its samples where Q's members are, and a mixture fitted to Q is Q's
own mixture, the baseline a design must beat. ``auto`` moves a mixture of C Gaussians
(C = min(K, 16), one per member of Q or k-means clusters) whose start points are both:

- ``given``: Q's mixture (theta^0, and the distribution returned when nothing beats it beyond
  noise on Q's validation samples: :attr:`AutoFamily.initial_is_q`);
- ``gaussian``: Q's moment-matched Gaussian, written as a mixture of C equal components;
- each broadened by ``algorithm.broaden`` (covariances scaled).

A mixture of equal components is that Gaussian, and stays one under the bilevel gradient (every
component gets the same responsibility, so the same step): a descent from a Gaussian start is
the Gaussian family's descent, one from a mixture start the mixture family's. The checks at
iteration 0 therefore choose the family and its start on validation, at the cost of the checks
alone (no second run), and the returned distribution is written as a Gaussian when its
components are equal.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from lwl.design.families import mixture
from lwl.design.families.base import Params
from lwl.design.families.mixture import MixtureFamily, MixtureFamilySpec
from lwl.measures import Gaussian, Measure
from lwl.registry import FAMILIES


class AutoFamily(MixtureFamily):
    """A mixture family whose start points include Q's moment-matched Gaussian (see module)."""

    name = "auto"
    initial_is_q = True  # theta^0 is Q's mixture: within noise of it, it is what is returned

    def start_points(self, moment_matched: bool = True) -> list[tuple[str, Params]]:
        given = self.initial()
        C = self.C
        gaussian = {"logits": np.zeros(C), "means": np.tile(self.coords.centre, (C, 1)),
                    "chols": np.tile(self.coords.S, (C, 1, 1))}
        return [("given", given), ("gaussian", gaussian)]

    def broaden_bases(self) -> list[str]:
        """The start points that are also checked broadened (``algorithm.broaden``)."""
        return ["given", "gaussian"]

    @staticmethod
    def collapsed(params: Params) -> bool:
        """True when every component equals the first: the mixture is one Gaussian."""
        return bool(np.allclose(params["means"], params["means"][:1], rtol=1e-12, atol=0)
                    and np.allclose(params["chols"], params["chols"][:1], rtol=1e-12, atol=0))

    def measure(self, params: Params) -> Measure:
        if self.collapsed(params):
            return Gaussian.from_parameters(params["means"][0], params["chols"][0])
        return self.mixture(params)

    def kind(self, params: Params) -> str:
        """Which candidate ``params`` is: ``q_mixture`` (theta^0), ``gaussian`` or ``mixture``."""
        given = self.initial()
        if all(np.array_equal(params[n], given[n]) for n in self.param_names):
            return "q_mixture"
        return "gaussian" if self.collapsed(params) else "mixture"

    def diagnostics(self, params: Params) -> dict:
        if self.collapsed(params):
            return {"family": "gaussian"}
        return {"family": "mixture", **super().diagnostics(params)}


def build(spec, coords, q) -> AutoFamily:
    """The bilevel builder registered for ``auto`` (the ``register`` call at the end of this module)."""
    return AutoFamily(spec, coords)


def fill(family, q, seed: int):
    """The auto family's theta^0: Q's mixture exactly as the ``mixture`` baseline builds it (one
    Gaussian fitted to all samples of each member, Q's weights), so that a job returning it
    ties with that baseline draw for draw; with more than 16 members, k-means components."""
    if family.means is not None:
        return family, []
    K = len(q.members)
    if (family.components or min(K, 16)) != K or family.init == "kmeans":
        return mixture.fill(family, q, seed)
    from lwl.evaluation.baselines import fitted_gaussians

    fits = fitted_gaussians(q)
    family = family.model_copy(update={"weights": [float(w) for w in q.weights],
                                       "means": [g.mean.tolist() for g in fits], "covs": [g.cov.tolist() for g in fits],
                                       "components": K})
    return family, ["weights", "means", "covs"]


# -- the job spec's block for this component, and its registration (lwl.registry) --


class AutoFamilySpec(MixtureFamilySpec):
    """The default when a spec names no family: the Gaussian family and the mixture family
    compete on Q's validation samples, with Q's own mixture as a candidate.

    theta^0 is Q's mixture (one Gaussian per member of Q, or ``components`` k-means clusters,
    as for ``mixture``); the start points checked at iteration 0 are Q's mixture, Q's
    moment-matched Gaussian and both broadened by ``algorithm.broaden``; the descent goes on
    from the best, and a result that does not beat Q's mixture beyond noise on validation is
    Q's mixture itself (lwl.design.families.auto). The result's ``selected.family`` says which
    won. Name ``gaussian`` or ``mixture`` to keep one family."""

    name: Literal["auto"] = "auto"


FAMILIES.register("auto", AutoFamilySpec, bilevel=build, fill=fill)
