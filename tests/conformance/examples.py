"""A small example for every registry entry, the input of the conformance suite
(tests/conformance/test_entries.py).

An entry may carry its own example: ``register(..., example=fn)`` where ``fn()`` returns a job
spec (families, models, algorithms) or ``(oracle block, inputs)`` (oracles). Built-in entries
have theirs here. The suite fails for an entry that has neither, naming it, so a new entry is
covered as soon as it is registered with an example."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _example(name: str) -> dict:
    return json.loads((ROOT / "examples" / name).read_text())


def bilevel(family: str = "gaussian") -> dict:
    """examples/friedman1.json at a size that runs in about a second."""
    s = _example("friedman1.json")
    for m in s["test_distributions"]["members"]:
        m["size"] = 200
    s["test_distributions"]["validation_per_member"] = 60
    s["algorithm"] = {"name": "bilevel", "iterations": 3, "samples_per_iteration": 40}
    s["evaluation"] = {"train_size": 60, "baselines": ["mixture"], "draws": 1, "bound": False}
    s["model"] = {"name": "krr", "lengthscale": 1.0}
    s["device"] = "cpu"
    s["family"] = {"name": family}
    return s


def budgeted_gp() -> dict:
    """A budgeted design for the fitted Gaussian process (a budgeted job's default model), tiny."""
    s = bilevel("gaussian")
    s["budget"] = 200
    s["algorithm"] = {"name": "bilevel"}
    s["model"] = {"name": "gp", "restarts": 0, "max_fit_points": 100}
    return s


def ama() -> dict:
    """examples/darcy_ama.json: a KLE family, DeepONet, the Darcy oracle, tiny."""
    s = _example("darcy_ama.json")
    s["model"].update(iterations=30)
    s["algorithm"].update(iterations=2, samples_per_iteration=20, steps=5, rounds=1, lipschitz_pairs=20)
    s["test_distributions"]["validation_per_member"] = 10
    s["device"] = "cpu"
    return s


def particle_ama() -> dict:
    """examples/rte_particles.json on a 9 x 9 grid."""
    s = _example("rte_particles.json")
    s["oracle"]["params"].update(grid=9, directions=8)
    for m in s["test_distributions"]["members"]:
        m["lognormal"]["grid"] = 9
        m["size"] = 16
    s["test_distributions"]["validation_per_member"] = 8
    s["family"].update(grid=9, modes=4, particles=8)
    s["model"].update(branch=[32], trunk=[32], latent=16, iterations=20)
    s["algorithm"].update(iterations=2, step_size=0.05)
    s["device"] = "cpu"
    return s


def interval_search() -> dict:
    """examples/eit_interval.json with a 9 x 9 grid and a tiny AMINO."""
    s = _example("eit_interval.json")
    s["oracle"]["params"]["grid"] = 9
    s["test_distributions"]["members"][0]["size"] = 40
    s["test_distributions"]["validation_per_member"] = 20
    s["model"].update(channels=[4, 8, 8, 8, 8, 8, 8, 8], trunk_layers=2, trunk_width=16, latent=8, fno_channels=4,
                      fno_modes=3, epochs=1, batch_size=8)
    s["algorithm"].update(candidates=2, refine=1, pairs=4, samples_per_candidate=16, validation_samples=8)
    s["device"] = "cpu"
    return s


JOBS = {
    ("algorithm", "bilevel"): bilevel,
    ("algorithm", "ama"): ama,
    ("algorithm", "particle_ama"): particle_ama,
    ("algorithm", "interval_search"): interval_search,
    ("family", "gaussian"): lambda: bilevel("gaussian"),
    ("family", "mixture"): lambda: bilevel("mixture"),
    ("family", "auto"): lambda: bilevel("auto"),
    ("family", "pool"): lambda: bilevel("pool"),
    ("family", "kle"): ama,
    ("family", "particles"): particle_ama,
    ("family", "interval"): interval_search,
    ("model", "krr"): bilevel,
    ("model", "gp"): budgeted_gp,
    ("model", "deeponet"): ama,
    ("model", "amino"): interval_search,
}


def _uniform(n, d, seed=0, low=0.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, (n, d))


def _eit_rows():
    """Two (omega, theta, coefficients) rows of one conductivity (lwl.oracles.eit)."""
    from lwl.oracles.eit import angles, draw_coefficients

    rng = np.random.default_rng(0)
    c = draw_coefficients(1, rng)
    omega = rng.uniform(np.pi / 2, 7 * np.pi, 2)
    return np.concatenate([omega[:, None], angles(2)[:, None], np.repeat(c, 2, axis=0)], 1)


# oracles: (oracle block, inputs to label) or None where the labels come from outside the
# process (the suite then checks the spec side only, and says why)
ORACLES = {
    "sobol_g": lambda: ({"name": "sobol_g"}, _uniform(3, 4)),
    "friedman1": lambda: ({"name": "friedman1"}, _uniform(3, 5)),
    "friedman2": lambda: ({"name": "friedman2"}, _uniform(3, 4) * [100, 520 * np.pi, 1, 10] + [0, 40 * np.pi, 0, 1]),
    "kernel_expansion": lambda: ({"name": "kernel_expansion", "params": {"dim": 3, "centres": 20, "seed": 1}},
                                 _uniform(3, 3)),
    "burgers": lambda: ({"name": "burgers", "params": {"viscosity": 0.1}},
                        2.0 + np.sin(np.linspace(0, 2 * np.pi, 32, endpoint=False))[None, :] * [[1.0], [0.5]]),
    "darcy": lambda: ({"name": "darcy"}, np.random.default_rng(0).standard_normal((2, 9 * 9))),
    "ntd": lambda: ({"name": "ntd", "params": {"grid": 9, "conductivity": 1.0}},
                    np.random.default_rng(0).standard_normal((2, 4 * 9 - 4))),
    "rte": lambda: ({"name": "rte", "params": {"knudsen": 2.0, "grid": 9, "directions": 8}},
                    np.exp(0.3 * np.random.default_rng(0).standard_normal((2, 81)))),
    "eit": lambda: ({"name": "eit", "params": {"grid": 9}}, _eit_rows()),
    "external": None,  # ask/tell: the labels come from the lab (tests/service/test_asktell*.py)
    "http": None,  # a lab's callback URL (tests/lwl/oracles/test_http.py serves one)
}


def job_example(kind: str, name: str) -> dict | None:
    """A job spec that uses the entry, the entry's own first."""
    from lwl.registry import ALGORITHMS, FAMILIES, MODELS

    entry = {"algorithm": ALGORITHMS, "family": FAMILIES, "model": MODELS}[kind].get(name)
    own = entry.extra.get("example")
    if own is not None:
        return copy.deepcopy(own())
    make = JOBS.get((kind, name))
    return None if make is None else make()
