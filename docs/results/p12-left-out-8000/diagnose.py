"""p12 at 8,000: the served GP with and without the explored candidates' points (left-out check forced)."""
import hashlib, json, sys, time
import numpy as np
from lwl.experiments import budget
from lwl.experiments.budget import _with, heldout_population, paid_labels
from lwl.evaluation.metrics import relative_ood_error
from lwl.models import train
from lwl.oracles import as_numpy
from lwl.q_samples import MetaTestSamples
from lwl.runner import run_job
from lwl.spec import parse_job_spec
from lwl.design.budget.design import BudgetedDesign

cfg = dict(budget.PRESETS["full-8000"]); cfg["heldout_per_member"] = 20000
key = "p12-sobol_g-d8-K9"
spec = dict(budget.problem_specs(cfg))[key]
gp_block = {"name": "gp", "select": "loo", "fit_draws": 1}
out = {}
for arm, z in (("forced_out", -1e9), ("default", None)):
    if z is not None:
        BudgetedDesign.leave_out_z = z
    else:
        from lwl.design.budget.design import LEAVE_OUT_Z
        BudgetedDesign.leave_out_z = LEAVE_OUT_Z
    t = time.time()
    res = run_job(_with(spec, 0, algorithm={"name": "bilevel"}, budget=8000, model=gp_block), evaluate=False)
    rspec = parse_job_spec(res["spec"])
    if "q" not in out:
        oracle = rspec.oracle.build()
        q = MetaTestSamples.from_spec(heldout_population(rspec.test_distributions, cfg), 0)
        tx = np.concatenate(q.heldout); ty = as_numpy(oracle.label(tx)); a = q.point_weights(q.heldout, q.weights)
        out["q"] = True
    X = np.asarray(res["training_set"]["inputs"]); y = np.asarray(res["training_set"]["labels"])
    chk = (res.get("left_out") or {}).get("check")
    errs = {}
    for s in (0, 1, 2):
        g = train(rspec.model, X, y, ridge=1e-3, seed=s)
        errs[s] = float(relative_ood_error(g.predict(tx), ty, a))
    out[arm] = {"n": len(y), "paid": paid_labels(res), "check": chk, "err_by_fit_seed": errs,
                "ymax": float(np.abs(y).max()), "sha": hashlib.sha256(X.tobytes() + y.tobytes()).hexdigest()[:16],
                "seconds": time.time() - t}
    print(arm, json.dumps(out[arm], default=str), flush=True)
