"""examples/friedman1_budget.json run as a lab would run it (issues #30 and #46, docs/method/budgets.md
"Designs for a label budget" and "The model a lab deploys"): an ask/tell job on the embedded
service (``lwl serve`` in a subprocess) whose labels a client computes with the Friedman-1
function, one batch at a time, for 5 seeds.

The example designs for and serves the fitted GP (``model: gp``). For each seed, held-out Err on
4,000 fresh samples per member of Q (Q's two Gaussians, drawn exactly) of:

- **served**: the job's own trained model, its predictions fetched with ``Client.predict``
  (``POST /v1/jobs/{id}/predict``): what the lab deploys;
- **Q's mixture + fitted GP**: as many fresh samples of Q's mixture as the job used labels, over
  5 draws, with the job's own GP block fitted to them (the same model and fitting: the
  comparison at equal labels isolates the data), and with what a lab already has:
  scikit-learn's ``GaussianProcessRegressor`` (ARD RBF x constant + white noise at scikit-learn's
  default bounds, ``normalize_y``, its marginal likelihood maximised with 2 restarts on 600 of
  the points, then conditioned on all of them; not lwl's model code);
- **the training set + fitted GP**: the same scikit-learn GP on the job's training set (the
  data's share of the gain, apart from lwl's model);
- **lwl's KRR pipeline**: the same spec with the paper's KRR (``model: krr``, l = 3), run
  through ask/tell the same way, its served KRR's predictions.

served against each Q's mixture + GP: better / tie / worse from
:func:`lwl.evaluation.comparison.compare` over the mixture's draws and the test points; against
the KRR pipeline on the same test points (one draw each). The labels the client computed are its
own count, and the job's own validation verdict (no held-out label) is reported beside.

Usage: OPENBLAS_NUM_THREADS=1 python scripts/friedman1_budget_asktell.py [SEEDS]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from lwl.client import Client
from lwl.evaluation.comparison import compare
from lwl.models import train
from lwl.oracles import make_oracle
from lwl.spec import parse_job_spec
from service.processes import Server

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling script below
from independent_gp_check import left_out_check  # the check record both scripts write

ROOT = Path(__file__).resolve().parents[1]
FRIEDMAN = make_oracle({"name": "friedman1"})
MEANS = [np.zeros(5), np.array([1.0, 0, 1, 0, 1])]
COVS = [2.0 * np.eye(5), np.eye(5)]
DRAWS, TEST, FIT_POINTS = 5, 4000, 600
KRR = {"name": "krr", "kernel": "squared_exponential", "lengthscale": 3.0}


def q_mixture(n: int, rng) -> np.ndarray:
    """n samples of Q's mixture (equal weights), drawn from the members themselves."""
    k = rng.integers(0, 2, n)
    return np.stack([rng.multivariate_normal(MEANS[j], COVS[j]) for j in k])


def sklearn_gp_predict(x, y, test_x, seed: int) -> np.ndarray:
    """scikit-learn's fitted ARD GP (module docstring): hyperparameters on FIT_POINTS of the
    points, conditioned on all of them."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = ConstantKernel() * RBF(np.ones(x.shape[1])) + WhiteKernel()  # scikit-learn's default bounds
    rows = np.random.default_rng(seed).choice(len(x), min(FIT_POINTS, len(x)), replace=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bound warnings of the optimiser: the fitted values are what count
        fitted = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2,
                                          random_state=seed).fit(x[rows], y[rows]).kernel_
        return GaussianProcessRegressor(fitted, normalize_y=True, optimizer=None).fit(x, y).predict(test_x)


def ask_tell(c: Client, spec: dict) -> tuple[str, int, int]:
    """The lab's loop: ask, measure, tell, until the job ends: (job id, labels computed, rounds)."""
    job = c.submit(spec)
    labelled, rounds = 0, set()
    while True:
        batch = c.ask(job)
        if batch is not None:
            rounds.add(batch[0].split(".")[0])
            labelled += len(batch[1])
            c.tell(job, batch[0], FRIEDMAN.label(batch[1]))
            continue
        doc = c.job(job)
        if doc["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.05)
    assert doc["status"] == "succeeded", doc
    return job, labelled, len(rounds)


def main() -> None:
    seeds = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [0, 1, 2, 3, 4]
    base = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(Path(tmp) / "data").start()
        try:
            with Client(srv.url) as c:
                for seed in seeds:
                    spec = {**base, "seed": seed}
                    t0 = time.perf_counter()
                    job, labelled, rounds = ask_tell(c, spec)
                    seconds = time.perf_counter() - t0
                    X, y = c.training_set(job)
                    result = c.result(job)
                    krr_job, krr_labelled, _ = ask_tell(c, {**spec, "model": KRR})
                    rng = np.random.default_rng([seed, 4242])
                    test_x = np.concatenate([rng.multivariate_normal(m, C, TEST) for m, C in zip(MEANS, COVS)])
                    test_y = FRIEDMAN.label(test_x)
                    served = (c.predict(job, test_x)[0] - test_y) ** 2
                    krr = (c.predict(krr_job, test_x)[0] - test_y) ** 2
                    data_gp = (sklearn_gp_predict(X, y, test_x, seed) - test_y) ** 2
                    model = parse_job_spec(spec).model  # the job's own GP block: the same fitting on Q's mixture
                    mix, mix_sk = [], []
                    for i in range(DRAWS):
                        x = q_mixture(len(y), rng)
                        yx = FRIEDMAN.label(x)
                        mix.append((train(model, x, yx, ridge=1e-3, seed=seed).predict(test_x) - test_y) ** 2)
                        mix_sk.append((sklearn_gp_predict(x, yx, test_x, seed * 100 + i) - test_y) ** 2)
                    a, w = test_y**2, [0.5, 0.5]
                    vs_mix = compare(np.repeat(served[None], DRAWS, 0), np.stack(mix), a, [TEST, TEST], w)
                    vs_sk = compare(np.repeat(served[None], DRAWS, 0), np.stack(mix_sk), a, [TEST, TEST], w)
                    vs_krr = compare(served[None], krr[None], a, [TEST, TEST], w)
                    # Err^2 = sum_k w_k mean_k(e^2) / sum_k w_k mean_k(y^2), as compare's
                    def err(sq):
                        return float(np.sqrt((sq[:TEST].mean() + sq[TEST:].mean()) / (a[:TEST].mean() + a[TEST:].mean())))

                    row = {"seed": seed, "model": result["model"]["model"], "labels_client": labelled,
                           "labels_used": result["labels_used"], "budget": spec["budget"], "rounds": rounds,
                           "selected": result["selected"]["candidate"],
                           "err_served": vs_mix.err, "err_q_mixture_gp": vs_mix.other_err,
                           "ratio_vs_mixture_gp": vs_mix.ratio, "ratio_interval": vs_mix.ratio_interval,
                           "outcome_vs_mixture_gp": vs_mix.outcome.value,
                           "err_q_mixture_sklearn_gp": vs_sk.other_err, "outcome_vs_mixture_sklearn_gp": vs_sk.outcome.value,
                           "err_q_mixture_sklearn_gp_draws": [err(m) for m in mix_sk],
                           "err_training_set_sklearn_gp": err(data_gp),
                           "err_krr_pipeline": vs_krr.other_err, "krr_labels_client": krr_labelled,
                           "outcome_vs_krr_pipeline": vs_krr.outcome.value,
                           # the job's own verdict, from the labels it paid for (no held-out label)
                           "job_verdict": result["verdict"]["outcome"], "job_verdict_z": result["verdict"]["z"],
                           # the left-out check: the dropped candidates' points kept in or left out
                           "left_out": left_out_check(result.get("left_out")), "seconds": round(seconds, 1)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            srv.stop()
    below = sum(r["err_served"] < min(r["err_q_mixture_gp"], r["err_q_mixture_sklearn_gp"], r["err_krr_pipeline"])
                for r in rows)
    outcomes = lambda key: "/".join(str(sum(r[key] == o for r in rows)) for o in ("better", "tie", "worse"))
    print(f"served {rows[0]['model']} below Q's mixture + lwl's fitted GP, Q's mixture + scikit-learn's fitted GP and "
          f"lwl's KRR pipeline on {below}/{len(rows)} seeds; better/tie/worse beyond noise against Q's mixture + lwl's GP "
          f"{outcomes('outcome_vs_mixture_gp')}, + scikit-learn's GP {outcomes('outcome_vs_mixture_sklearn_gp')}, "
          f"against the KRR pipeline {outcomes('outcome_vs_krr_pipeline')}; labels <= budget on all: "
          f"{all(r['labels_client'] == r['labels_used'] <= r['budget'] for r in rows)}; the job's own validation "
          f"verdict: {', '.join(str(r['job_verdict']) for r in rows)}")


if __name__ == "__main__":
    main()
