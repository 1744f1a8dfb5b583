"""The EIT interval search under a solve budget (issue #47; docs/method/eit.md "The interval search
under a budget"): ``examples/eit_interval.json`` (grid 24, L = 16 pairs, seven intervals of width
pi/2, Q's law U[pi/2, 7 pi], the reduced AMINO) with ``budget`` solves, every solve counted by the
solver, judged at equal solves (AMINO on the job's training set against AMINO on as many
conductivities from Q's law and from the first interval, 3 training draws each, 64 held-out
conductivities) beside the job's own validation verdict.

``explore``: ``null`` (an equal split of the first round among the eight laws) or ``default``
(the spec's default 0.25, which at 4,096 solves explores nothing: every point is Q's law's).

Usage: OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python scripts/eit_budget.py SEED EXPLORE [BUDGET] > run.json
       python scripts/eit_budget.py summary DIR   (DIR/*.json -> DIR/results.md)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from lwl.oracles.counting import CountingOracle
from lwl.runner import run_job
from lwl.spec import parse_job_spec

ROOT = Path(__file__).resolve().parents[1]


def spec(seed: int, explore: str, budget: int) -> dict:
    s = json.loads((ROOT / "examples" / "eit_interval.json").read_text())
    s.update(budget=budget, seed=seed)
    if explore == "null":
        s["algorithm"]["explore"] = None
    elif explore != "default":
        raise SystemExit(f"explore: null or default, not {explore!r}")
    return s


def main(seed: int, explore: str, budget: int = 4096) -> dict:
    s = spec(seed, explore, budget)
    oracle = CountingOracle(parse_job_spec(s).oracle.build())
    t = time.time()
    res = run_job(s, oracle=oracle, evaluate=True)
    ev = res["evaluation"]
    keys = ("round", "kind", "scores", "alive", "incumbent", "race")
    return {"seed": seed, "explore": explore, "seconds": time.time() - t, "solves_counted": oracle.solves,
            "labels_used": res["labels_used"], "budget": res["budget"], "plan": res["plan"],
            "labels_by_source": res["labels_by_source"], "selected": res["selected"],
            "history": [{k: h.get(k) for k in keys} for h in res["history"]],
            "err": ev["err"], "served_err": ev["served_err"], "err_interval": ev["err_interval"],
            "comparisons": ev["comparisons"], "audit_labels": ev["audit_labels"],
            "validation_verdict": {k: res["validation_verdict"].get(k) for k in ("outcome", "ratio", "z", "selected")},
            "verdict": {k: res["verdict"].get(k) for k in ("outcomes", "outcome")}, "warnings": res["warnings"]}


def summary(folder: Path) -> str:
    """The table of every run in ``folder`` (its *.json)."""
    runs = sorted((json.loads(p.read_text()) for p in folder.glob("*.json")), key=lambda r: (r["explore"], r["seed"]))
    lines = ["# The EIT interval search under a solve budget", "",
             "Command: `python scripts/eit_budget.py SEED EXPLORE` (examples/eit_interval.json with `budget: 4096`: 256 "
             "conductivities of L = 16 pairs). Err: root mean square over 64 held-out conductivities of AMINO's relative "
             "L1 error of the conductivity; the job's training set over 3 network starts against AMINO on as many "
             "conductivities from Q's law and from the first interval U[pi/2, pi], 3 draws each; better / tie / worse "
             "beyond noise (95%). Solves counted by the solver.", "",
             "| explore | seed | solves (job) | selected | Err | served Err | Q's law Err | ratio (95%) | vs Q's law "
             "| U[pi/2, pi] Err | vs it | validation verdict | audit solves | s |",
             "|---|---:|---:|---|---:|---:|---:|---|---|---:|---|---|---:|---:|"]
    for r in runs:
        m, i = r["comparisons"]["mixture"], r["comparisons"]["initial"]
        lo, hi = m["ratio_interval"]
        lines.append(f"| {r['explore']} | {r['seed']} | {r['labels_used']} | {r['selected']['candidate']} | "
                     f"{r['err']['optimized']:.4g} | {r['served_err']:.4g} | {m['other_err']:.4g} | {m['ratio']:.3f} "
                     f"({lo:.2f}-{hi:.2f}) | {m['outcome']} | {i['other_err']:.4g} | {i['outcome']} | "
                     f"{r['validation_verdict']['outcome']} | {r['audit_labels']} | {r['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[0] == "summary":
        folder = Path(args[1])
        (folder / "results.md").write_text(summary(folder))
        raise SystemExit(0)
    print(json.dumps(main(int(args[0]), args[1], *(int(a) for a in args[2:3])), indent=1, default=str))
