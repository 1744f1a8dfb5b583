"""A plugin as a user would write one: a new family and a new algorithm, each one class plus
one registration, and nothing else in lwl edited. tests/lwl/test_registry.py loads it in this
process and, through LWL_PLUGINS, in the embedded service and its worker.

The algorithm shows a plugin's stepper state: a dataclass derived from ``StepperState`` (which
brings ``iteration``, ``history`` and ``elapsed_seconds``), named as the stepper's ``state_type``
so that ``StepperDefaults.restore`` rebuilds it from a checkpoint; a step returns a new state
(``state.replace``). Its checkpoint is its fields by name, so it needs no ``to_flat``/``from_flat``
of its own (docs/architecture.md "Stepper states")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from lwl.design.state import StepperState
from lwl.design.stepper import StepperDefaults
from lwl.measures import Gaussian
from lwl.q_samples import MetaTestSamples
from lwl.registry import ALGORITHMS, FAMILIES
from lwl.params import StrictModel


class IsotropicFamilySpec(StrictModel):
    """N(mu_Q + S m, e^{2s} S S^T): Q's moment-matched Gaussian, shifted and scaled as a whole."""
    name: Literal["toy_isotropic"] = "toy_isotropic"
    dim_field: ClassVar[str] = "name"
    log_scale: float = Field(default=0.0, ge=-5, le=5)


class IsotropicFamily:
    """phi = (m (d), s): mean mu_Q + S m, Cholesky factor e^s S."""

    name = "toy_isotropic"
    param_names = ("mean", "chol")

    def __init__(self, spec: IsotropicFamilySpec, coords, q):
        self.spec, self.coords = spec, coords

    def initial(self):
        return self.from_phi(np.concatenate([np.zeros(self.coords.d), [self.spec.log_scale]]))

    def start_points(self, moment_matched: bool = True):
        return [("given", self.initial())]

    def measure(self, params):
        return Gaussian.from_parameters(params["mean"], params["chol"])

    def to_phi(self, params):
        from scipy.linalg import solve_triangular

        m = solve_triangular(self.coords.S, params["mean"] - self.coords.centre, lower=True)
        return np.concatenate([m, [np.log(params["chol"][0, 0] / self.coords.S[0, 0])]])

    def from_phi(self, phi):
        return {"mean": self.coords.centre + self.coords.S @ phi[:-1], "chol": np.exp(phi[-1]) * self.coords.S}

    def mask(self):
        return np.ones(self.coords.d + 1)

    def bounds(self, phi0):
        lo = np.concatenate([np.full(self.coords.d, -10.0), [-5.0]])
        return np.minimum(lo, phi0), np.maximum(-lo, phi0)

    def score(self, params, x, c):
        return self.measure(params).score(x, weights=c)

    def phi_gradient(self, phi, grads):
        g_mean, g_chol = grads
        L = np.exp(phi[-1]) * self.coords.S
        return np.concatenate([self.coords.S.T @ g_mean, [float(np.sum(g_chol * L))]])

    def plain_step(self, params, grads, step):
        raise ValueError("algorithm.optimizer: use the adaptive optimiser")

    def diagnostics(self, params):
        return {}


class FixedSpec(StrictModel):
    """Label one batch from the family's initial Gaussian and return that Gaussian."""
    name: Literal["toy_fixed"] = "toy_fixed"
    iterations: int = Field(default=1, ge=1, le=10)
    samples: int = Field(default=16, ge=1, le=1000)


@dataclass(kw_only=True)
class FixedState(StepperState):
    """The toy's state: ``iteration`` batches labelled (StepperState), and the labels they cost."""

    labels_used: int = 0


class FixedDesign(StepperDefaults):
    state_type = FixedState  # StepperDefaults.restore(flat) -> FixedState.from_flat(flat)

    def __init__(self, spec):
        self.spec = spec
        fam = spec.family
        self.gaussian = Gaussian(fam.mean, cov=fam.cov)

    def init(self) -> FixedState:
        return FixedState()

    def done(self, state: FixedState) -> bool:
        return state.iteration >= self.spec.algorithm.iterations

    def queries(self, state: FixedState) -> np.ndarray:
        return self.gaussian.sample(self.spec.algorithm.samples, [self.spec.seed, 99, state.iteration])

    def step(self, state: FixedState, labels) -> FixedState:
        record = {"iteration": state.iteration, "label_mean": float(np.mean(labels))}
        return state.replace(iteration=state.iteration + 1, history=[*state.history, record],
                             labels_used=state.labels_used + len(labels))

    def result(self, state: FixedState) -> dict[str, Any]:
        return {"distribution": self.gaussian.to_spec(), "history": state.history, "labels_used": state.labels_used}


def _check_fixed(spec) -> None:
    if spec.family.name != "gaussian" or spec.family.mean is None or spec.family.cov is None:
        raise ValueError("family.name: toy_fixed needs a gaussian family with mean and cov")


def _build_fixed(spec, oracle, resolve) -> FixedDesign:
    return FixedDesign(spec)


def _build_isotropic(spec, coords, q: MetaTestSamples) -> IsotropicFamily:
    return IsotropicFamily(spec, coords, q)


def _example_isotropic() -> dict:
    """A small job with this family (the conformance suite's input: tests/conformance)."""
    from tests.conformance.examples import bilevel

    return {**bilevel(), "family": {"name": "toy_isotropic", "log_scale": 0.5}}


def _example_fixed() -> dict:
    from tests.conformance.examples import bilevel

    return {**bilevel(), "family": {"name": "gaussian", "mean": [0.5] * 5, "cov": (0.05 * np.eye(5)).tolist()},
            "algorithm": {"name": "toy_fixed", "iterations": 2, "samples": 8}, "evaluation": {"baselines": []}}


if "toy_isotropic" not in FAMILIES:  # importable twice (pytest and LWL_PLUGINS) without error
    FAMILIES.register("toy_isotropic", IsotropicFamilySpec, bilevel=_build_isotropic, example=_example_isotropic)
if "toy_fixed" not in ALGORITHMS:
    ALGORITHMS.register("toy_fixed", FixedSpec, _build_fixed, _check_fixed, example=_example_fixed)
