"""Checkpoints written before the steppers' states were typed (commit 821a526, when every
state was a flat dict), kept so that a service upgraded over running jobs is known to resume
them: tests/conformance/test_legacy_checkpoints.py resumes each and compares the end with an
uninterrupted run of the current code.

The cases cover every key the typed states write specially: bilevel's kept, pending and
significant records (``best_*``, ``pending_*``, ``significant_*``) and ``validation_ok`` (a lab
whose measurements fail now and then), the budgeted design's incumbent, challenger and failed
points (``inc_*``, ``chal_*``, ``val_ok``, ``failed_X``), AMA's kept (distribution, model) pair.

Regenerate only if the checkpoint format changes on purpose (then old jobs would not resume),
with the code of that older commit on the path: ``python -m tests.conformance.legacy_cases
[OUT]`` writes OUT/CASE-K.npz (default tests/conformance/legacy), the checkpoint after step K
for the first step of each new set of keys, the middle step and the last before the end.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lwl.oracles import Oracle, make_oracle
from tests.conformance import examples

HERE = Path(__file__).resolve().parent / "legacy"
MAX_FILES = 3  # per case: the checkpoints of the operator learners are ~300 kB each


class FlakyFriedman(Oracle):
    """Friedman-1 with about one point in ten failed (NaN), as a lab's failed measurements."""

    name = "flaky_friedman1"
    reports_failures = True

    def __init__(self):
        super().__init__(None)
        self.inner = make_oracle({"name": "friedman1"})

    def _label(self, inputs):
        y = np.asarray(self.inner.label(inputs), dtype=np.float64)
        y[np.floor(np.abs(inputs[:, 0]) * 1e4) % 10 == 0] = np.nan
        return y


def _selected(make, select: str):
    def spec():
        s = make()
        s["algorithm"]["select"] = select
        return s
    return spec


def _budgeted(family: str, budget: int = 500, **algorithm):
    def spec():
        s = examples.bilevel(family)
        s["budget"] = budget
        s["oracle"] = {"name": "friedman1"}
        s["algorithm"] = {"name": "bilevel", **algorithm}
        return s
    return spec


def _selecting(**algorithm):
    """The README problem (its family's given start), small, with its lengthscale left to lwl
    (Q's moment-matched Gaussian is checked before the given start: a pending record) and checks
    every 2 iterations."""
    def spec():
        s = examples.bilevel("gaussian")
        s["family"] = examples._example("friedman1.json")["family"]
        for m in s["test_distributions"]["members"]:
            m["size"] = 300
        s["test_distributions"]["validation_per_member"] = 100
        del s["model"]
        s["algorithm"] = {"name": "bilevel", "iterations": 8, "samples_per_iteration": 60,
                          "optimizer": "adaptive", "check_every": 2, **algorithm}
        return s
    return spec


# name -> (spec, oracle or None for the spec's own)
CASES: dict[str, tuple[Callable[[], dict], Callable[[], Any] | None]] = {
    "bilevel-gaussian": (lambda: examples.bilevel("gaussian"), None),
    "bilevel-mixture": (lambda: examples.bilevel("mixture"), None),
    "bilevel-auto": (lambda: examples.bilevel("auto"), None),
    "bilevel-pool": (lambda: examples.bilevel("pool"), None),
    "bilevel-significance": (_selecting(significance=0), None),
    "bilevel-fallback": (_selecting(significance=1.0, start_significance=1.0), None),
    "bilevel-flaky": (_selecting(significance=0), FlakyFriedman),
    "ama-bound": (_selected(examples.ama, "bound"), None),
    "ama-validation": (_selected(examples.ama, "validation"), None),
    "particle_ama-bound": (_selected(examples.particle_ama, "bound"), None),
    "particle_ama-validation": (_selected(examples.particle_ama, "validation"), None),
    "interval_search": (examples.interval_search, None),
    "budgeted-gaussian": (_budgeted("gaussian"), None),
    "budgeted-auto": (_budgeted("auto"), None),
    "budgeted-challenger": (_budgeted("auto", 900, inner_steps=5), None),
    "budgeted-flaky": (_budgeted("gaussian", 600, inner_steps=5), FlakyFriedman),
}


def _kept_steps(blobs: list[bytes]) -> list[int]:
    from lwl.design.state import unpack

    firsts, seen = [], set()
    for k, blob in enumerate(blobs[:-1]):
        keys = frozenset(unpack(blob)) - {"history"}
        if keys not in seen:
            seen.add(keys)
            firsts.append(k)
    chosen = sorted({*firsts[1:], len(blobs) // 2, len(blobs) - 2})  # the first step's keys recur later
    return chosen[-MAX_FILES:]


def main(out: Path = HERE) -> None:
    import torch

    from lwl.runner import run_job

    torch.set_num_threads(2)  # as tests/conftest.py: reductions round alike only at the same thread count
    out.mkdir(parents=True, exist_ok=True)
    for name, (spec, oracle) in CASES.items():
        blobs: list[bytes] = []
        run_job(spec(), oracle=oracle() if oracle else None, checkpoint=blobs.append, evaluate=False)
        for k in _kept_steps(blobs):
            (out / f"{name}-{k + 1}.npz").write_bytes(blobs[k])
        print(name, len(blobs), [k + 1 for k in _kept_steps(blobs)])


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
