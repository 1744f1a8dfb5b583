"""The left-out check's paired scores of one 8,000-label gp job: the z it uses and robust alternatives."""
import json, sys
import numpy as np
from scipy import stats
from lwl.experiments import budget
from lwl.experiments.budget import _with
from lwl.runner import run_job
from lwl.design.budget.design import BudgetedDesign

key = sys.argv[1]
cfg = dict(budget.PRESETS["full-8000"])
spec = dict(budget.problem_specs(cfg))[key]
inside, calls = [False], []
orig_z, orig_served = BudgetedDesign.improvement_z, BudgetedDesign.served_rows

def z(self, sq_new, sq_old, y, val):
    out = orig_z(self, sq_new, sq_old, y, val)
    if inside[0]:
        calls.append((np.array(sq_new), np.array(sq_old), np.array(val.member), out))
    return out

def served(self, state):
    inside[0] = True
    try:
        return orig_served(self, state)
    finally:
        inside[0] = False

BudgetedDesign.improvement_z, BudgetedDesign.served_rows = z, served
res = run_job(_with(spec, 0, algorithm={"name": "bilevel"}, budget=8000,
                    model={"name": "gp", "select": "loo", "fit_draws": 1}), evaluate=False)
for sq_new, sq_old, member, zz in calls:
    d = sq_new - sq_old  # < 0: better without
    w = stats.wilcoxon(sq_new, sq_old, alternative="less")
    ld = np.log(sq_new + 1e-300) - np.log(sq_old + 1e-300)
    print(json.dumps({"problem": key, "z": zz, "n": len(d), "share_better_without": float(np.mean(d < 0)),
                      "wilcoxon_p": float(w.pvalue), "sign_p": float(stats.binomtest(int((d < 0).sum()), int((d != 0).sum()), alternative="greater").pvalue),
                      "log_ratio_mean": float(ld.mean()), "log_ratio_z": float(-ld.mean() / (ld.std(ddof=1) / np.sqrt(len(ld)))),
                      "top5_share_of_sum_sq_old": float(np.sort(sq_old)[-5:].sum() / sq_old.sum())}), flush=True)
