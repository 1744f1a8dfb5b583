"""Shared fixtures. Threads are pinned: the machine has 2 cores shared by tests and benches."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import copy  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def issue_spec() -> dict:
    """The job spec the library issue requires ``lwl run`` to accept."""
    return json.loads((ROOT / "examples" / "friedman1.json").read_text())


@pytest.fixture
def small_spec(issue_spec) -> dict:
    """The issue's spec made small enough to run in a second."""
    s = copy.deepcopy(issue_spec)
    for m in s["test_distributions"]["members"]:
        m["size"] = 300
    s["test_distributions"]["validation_per_member"] = 100
    s["algorithm"] = {"name": "bilevel", "iterations": 5, "samples_per_iteration": 60}
    s["evaluation"].update(train_size=80, baselines=["normal", "mixture"])
    s["device"] = "cpu"
    return s


def devices() -> list[str]:
    """CPU always; CUDA too when present (the GPU pass of the same tests)."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def ama_spec() -> dict:
    """examples/darcy_ama.json made small enough to run in seconds."""
    s = json.loads((ROOT / "examples" / "darcy_ama.json").read_text())
    s["model"].update(iterations=60)
    s["algorithm"].update(iterations=2, samples_per_iteration=30, steps=10, rounds=1, lipschitz_pairs=40)
    s["test_distributions"]["validation_per_member"] = 20
    return s


@pytest.fixture
def eit_spec() -> dict:
    """examples/eit_interval.json made small enough to run in seconds (grid 9, a tiny AMINO):
    the conformance suite's example with more samples, epochs and candidates."""
    from tests.conformance.examples import interval_search

    s = interval_search()
    s["test_distributions"]["members"][0]["size"] = 60
    s["test_distributions"]["validation_per_member"] = 30
    s["model"].update(epochs=2)
    s["algorithm"].update(candidates=3)
    return s


@pytest.fixture
def particle_spec() -> dict:
    """examples/rte_particles.json made small enough to run in seconds (grid 9): the
    conformance suite's example with 40 DeepONet steps instead of 20."""
    from tests.conformance.examples import particle_ama

    s = particle_ama()
    s["model"]["iterations"] = 40
    return s
