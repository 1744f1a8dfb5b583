"""What choosing the KRR lengthscale with the design costs, against the same job with the
lengthscale given, run in the same process.

Job: the README's (``examples/friedman1.json``, d = 5, K = 2, 500 validation points per
member), ``--iterations`` bilevel iterations. Two variants:

- ``given`` (the baseline): the spec's lengthscale 3.0; every validation check fits one KRR;
- ``selected``: the model block without a lengthscale; a start-point check fits one KRR per
  factor of LENGTHSCALE_FACTORS (6), an iterate check three (the current factor and its
  neighbours), on the check's labels, and the verdict also fits each baseline at the
  lengthscale that validates best for it (docs/method/bilevel.md, "Lengthscale chosen with the design").

Prints, per variant: seconds in the design loop and in the evaluation, checks, oracle labels,
and the ratios selected / given. The label count is the point: selection costs KRR fits, never
oracle calls.

Usage: python bench/lengthscale_selection.py [--iterations 150] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("LWL_BENCH_THREADS", "2")))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl.runner import run_job  # noqa: E402


def run(iterations: int, lengthscale: bool) -> dict:
    spec = json.loads((ROOT / "examples" / "friedman1.json").read_text())
    spec["algorithm"] = {"name": "bilevel", "iterations": iterations}
    if not lengthscale:
        spec["model"] = {"name": "krr", "kernel": spec["model"]["kernel"]}
    result = run_job(spec)
    return {"design_s": result["timings"]["design_seconds"],
            "evaluation_s": result["timings"]["evaluation_seconds"],
            "checks": len(result["checks"]), "labels": result["labels_used"],
            "err": result["verdict"]["err"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    run(5, True)  # warm-up: imports, torch and BLAS initialisation, first oracle calls
    variants = (("given", True), ("selected", False))
    runs = {name: [] for name, _ in variants}
    for _ in range(args.repeats):  # alternate the variants; keep each one's fastest run
        for name, given in variants:
            runs[name].append(run(args.iterations, given))
    rows = {name: min(rs, key=lambda r: r["design_s"] + r["evaluation_s"]) for name, rs in runs.items()}
    print(f"README job, {args.iterations} iterations, torch threads {torch.get_num_threads()}")
    print(f"{'variant':<10}{'design s':>10}{'eval s':>9}{'checks':>8}{'labels':>10}{'held-out Err':>14}")
    for name, r in rows.items():
        print(f"{name:<10}{r['design_s']:>10.2f}{r['evaluation_s']:>9.2f}{r['checks']:>8}{r['labels']:>10}"
              f"{r['err']:>14.4f}")
    g, s = rows["given"], rows["selected"]
    print(f"ratio selected/given: design {s['design_s'] / g['design_s']:.2f}x, "
          f"evaluation {s['evaluation_s'] / g['evaluation_s']:.2f}x, labels {s['labels'] / g['labels']:.2f}x")


if __name__ == "__main__":
    main()
