"""Checkpoints written before the steppers' states were typed (commit 821a526, when every
state was a flat dict), kept so that a service upgraded over running jobs is known to resume
them: tests/conformance/test_legacy_checkpoints.py resumes each and compares the end with an
uninterrupted run of the current code.

Regenerate only if the checkpoint format changes on purpose (then old jobs would not resume):
``python -m tests.conformance.legacy_cases`` writes tests/conformance/legacy/CASE-K.npz, the checkpoint after step K (the middle one
and the last before the end).
"""

from __future__ import annotations

from pathlib import Path

from tests.conformance import examples

HERE = Path(__file__).resolve().parent / "legacy"


def _selected(make, select: str):
    def spec():
        s = make()
        s["algorithm"]["select"] = select
        return s
    return spec


def _budgeted(family: str):
    def spec():
        s = examples.bilevel(family)
        s["budget"] = 500
        s["oracle"] = {"name": "friedman1"}
        s["algorithm"] = {"name": "bilevel"}
        return s
    return spec


CASES = {
    "bilevel-gaussian": lambda: examples.bilevel("gaussian"),
    "bilevel-mixture": lambda: examples.bilevel("mixture"),
    "bilevel-auto": lambda: examples.bilevel("auto"),
    "bilevel-pool": lambda: examples.bilevel("pool"),
    "ama-bound": _selected(examples.ama, "bound"),
    "ama-validation": _selected(examples.ama, "validation"),
    "particle_ama-bound": _selected(examples.particle_ama, "bound"),
    "particle_ama-validation": _selected(examples.particle_ama, "validation"),
    "interval_search": examples.interval_search,
    "budgeted-gaussian": _budgeted("gaussian"),
    "budgeted-auto": _budgeted("auto"),
}


def main() -> None:
    from lwl.runner import run_job

    HERE.mkdir(exist_ok=True)
    for name, make in CASES.items():
        blobs: list[bytes] = []
        run_job(make(), checkpoint=blobs.append, evaluate=False)
        for k in sorted({len(blobs) // 2, len(blobs) - 2}):
            (HERE / f"{name}-{k + 1}.npz").write_bytes(blobs[k])
        print(name, len(blobs))


if __name__ == "__main__":
    main()
