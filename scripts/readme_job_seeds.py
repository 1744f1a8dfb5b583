"""The README job (examples/friedman1.json) for one seed, as shipped or with its family block removed
(family auto); prints one JSON row. docs/results/friedman1-readme-5draws/rows.jsonl:
`for v in shipped auto; do for s in 0 1 2 3 4; do python scripts/readme_job_seeds.py $v $s; done; done`."""
import json, sys, copy, torch
torch.set_num_threads(1)
from lwl.runner import run_job
base = json.load(open("examples/friedman1.json"))
variant, seed = sys.argv[1], int(sys.argv[2])
spec = copy.deepcopy(base); spec["seed"] = seed
if variant == "auto":
    spec.pop("family")
out = run_job(spec)
v = out["verdict"]; e = out["evaluation"]
row = {"variant": variant, "seed": seed, "err": e["err"], "outcome": v.get("outcome"), "initial_outcome": v.get("initial_outcome"),
       "ratio": v.get("ratio"), "ratio_interval_95": v.get("ratio_interval_95"), "best_baseline": v.get("best_baseline"),
       "labels_used": out.get("labels_used"), "selected": (out.get("selected") or {}).get("summary"), "family": (out.get("selected") or {}).get("family"),
       "seconds": out["timings"]}
print(json.dumps(row, default=str))
