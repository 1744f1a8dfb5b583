"""initial_data over seeds (issue #31): the README budget problem (examples/friedman1_budget.json with
the built-in oracle, budget 1,200, Q of 1,000 samples per member) run plain, with 500 initial labelled
points drawn from Q's mixture (so the oracle is asked for at most 700), and plain with budget 700 (the
labels the lab pays either way). Each training set is judged by KRR (the job's kernel and lengthscale,
ridge 1e-3) on 4,000 fresh points of Q; initial against plain with lwl.evaluation.comparison (one training set
each: the interval covers the held-out points). One JSON row per seed, then a summary.
Output: docs/results/initial-data-seeds/output.txt (`python scripts/initial_data_seeds.py 0 1 2 3 4`).

``--from-design``: the 500 initial points are drawn instead from the distribution an earlier budget-1,200
job returned (another seed: a lab that ran lwl before), so they are worth what the job's own points are
worth; output docs/results/initial-data-seeds/output-from-design.txt. The summary also gives the
seed-level test: the mean log ratio against its standard error over the seeds (each job's own draw
varies from seed to seed; the per-seed interval covers only the held-out points)."""
import json
import sys

import numpy as np
import torch

torch.set_num_threads(1)
from lwl import run_job  # noqa: E402
from lwl.evaluation.comparison import compare  # noqa: E402
from lwl.models import KernelRidge  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402

N0, TEST = 500, 4000
F = make_oracle({"name": "friedman1"})
base = json.load(open("examples/friedman1_budget.json"))
base.update(oracle={"name": "friedman1"}, budget=1200, evaluation={"enabled": False}, device="cpu")
for m in base["test_distributions"]["members"]:
    m["size"] = 1000
base["test_distributions"]["validation_per_member"] = 200


def q_draw(n: int, rng) -> np.ndarray:
    members = base["test_distributions"]["members"]
    k = rng.integers(len(members), size=n)
    out = np.empty((n, len(members[0]["gaussian"]["mean"])))
    for i, m in enumerate(members):
        out[k == i] = rng.multivariate_normal(m["gaussian"]["mean"], m["gaussian"]["cov"], size=int((k == i).sum()))
    return out


def sq(res: dict, xt: np.ndarray, yt: np.ndarray) -> np.ndarray:
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    model = KernelRidge("squared_exponential", base["model"]["lengthscale"], 1e-3 / len(X), device="cpu").fit(X, y)
    return (model.predict(xt) - yt) ** 2


FROM_DESIGN = "--from-design" in sys.argv
rows = []
for seed in [int(s) for s in sys.argv[1:] if not s.startswith("--")] or [0, 1, 2, 3, 4]:
    rng = np.random.default_rng([seed, 31])
    if FROM_DESIGN:  # an earlier campaign: the distribution a plain job of another seed returned
        from lwl.measures import from_spec

        earlier = run_job({**base, "seed": 1000 + seed})
        x0 = from_spec(earlier["distribution"]).sample(N0, [seed, 31])
    else:
        x0 = q_draw(N0, rng)
    spec = {**base, "seed": seed}
    plain = run_job(spec)
    initial = run_job({**spec, "initial_data": {"inputs": x0.tolist(), "labels": np.asarray(F.label(x0)).tolist()}})
    fewer = run_job({**spec, "budget": 1200 - N0})
    xt = q_draw(TEST, np.random.default_rng([seed, 999]))
    yt = np.asarray(F.label(xt), dtype=float)
    s_plain, s_init, s_fewer = (sq(r, xt, yt) for r in (plain, initial, fewer))
    c = compare(s_init[None], s_plain[None], yt**2, [TEST], [1.0])
    row = {"seed": seed, "oracle_labels": {"plain": plain["labels_used"], "initial": initial["labels_used"],
                                           "fewer": fewer["labels_used"]},
           "err": {"plain": float(np.sqrt(s_plain.mean() / (yt**2).mean())), "initial": c.err,
                   "fewer": float(np.sqrt(s_fewer.mean() / (yt**2).mean()))},
           "initial_vs_plain": {"ratio": c.ratio, "ratio_interval": c.ratio_interval, "outcome": c.outcome.value},
           "selected": {"plain": plain["selected"]["candidate"], "initial": initial["selected"]["candidate"]}}
    rows.append(row)
    print(json.dumps(row), flush=True)
ratios = [r["initial_vs_plain"]["ratio"] for r in rows]
logs = np.log(ratios)
se = float(logs.std(ddof=1) / np.sqrt(len(logs))) if len(logs) > 1 else float("nan")
print(f"initial_data ({N0} points{', from an earlier design' if FROM_DESIGN else ''}) against the plain job: "
      f"ratios {', '.join(f'{x:.3f}' for x in ratios)} "
      f"(geometric mean {np.exp(logs.mean()):.3f}; over the seeds mean log ratio {logs.mean():.3f} +- {se:.3f} "
      f"standard error, t = {logs.mean() / se:.2f}); outcomes "
      f"{', '.join(r['initial_vs_plain']['outcome'] for r in rows)}; below the 700-label job on "
      f"{sum(r['err']['initial'] < r['err']['fewer'] for r in rows)}/{len(rows)}")
