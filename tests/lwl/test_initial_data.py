"""Initial data (issue #31): a lab's labelled points used by a budgeted design as free labels."""

import json

import numpy as np
import pytest

from lwl import run_job
from lwl.evaluation.metrics import krr_error
from lwl.oracles import make_oracle
from lwl.spec import SpecError, parse_job_spec
from tests.conftest import ROOT
from tests.lwl.test_budget import counting

N0 = 500


def q_mixture_draw(spec: dict, n: int, seed: int) -> np.ndarray:
    """n points of Q's equal-weight mixture of Gaussian members (independent of the job's streams)."""
    rng = np.random.default_rng(seed)
    members = spec["test_distributions"]["members"]
    k = rng.integers(len(members), size=n)
    out = np.empty((n, len(members[0]["gaussian"]["mean"])))
    for i, m in enumerate(members):
        g = m["gaussian"]
        out[k == i] = rng.multivariate_normal(g["mean"], g["cov"], size=int((k == i).sum()))
    return out


@pytest.fixture
def friedman_spec() -> dict:
    """examples/friedman1_budget.json with the built-in oracle, made small and fast."""
    s = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    s["oracle"] = {"name": "friedman1"}
    s["model"] = {"name": "krr", "kernel": "squared_exponential", "lengthscale": 3.0}  # judged with this KRR below
    s["budget"] = 1200
    for m in s["test_distributions"]["members"]:
        m["size"] = 1000
    s["test_distributions"]["validation_per_member"] = 200
    s["evaluation"] = {"enabled": False}
    s["device"] = "cpu"
    return s


def with_initial(spec: dict, n: int = N0, seed: int = 123) -> dict:
    x = q_mixture_draw(spec, n, seed)
    y = np.asarray(make_oracle({"name": spec["oracle"]["name"]}).label(x), dtype=np.float64).reshape(-1)
    return {**spec, "initial_data": {"inputs": x.tolist(), "labels": y.tolist()}}


def held_out_err(spec: dict, X: np.ndarray, y: np.ndarray) -> float:
    """Err of KRR trained on (X, y) on 2000 fresh draws of Q (equal weights within the mixture)."""
    xt = q_mixture_draw(spec, 2000, seed=999)
    yt = np.asarray(make_oracle({"name": spec["oracle"]["name"]}).label(xt), dtype=np.float64).reshape(-1)
    return krr_error(X, y, xt, yt, np.full(len(xt), 1 / len(xt)), kernel="squared_exponential",
                     lengthscale=spec["model"]["lengthscale"], ridge=1e-3)


def test_initial_data_saves_labels_is_kept_and_helps_no_less(friedman_spec):
    plain_oracle = counting(friedman_spec)
    plain = run_job(friedman_spec, oracle=plain_oracle, evaluate=False)
    spec = with_initial(friedman_spec)
    oracle = counting(spec)
    res = run_job(spec, oracle=oracle, evaluate=False)
    B = friedman_spec["budget"]
    assert plain_oracle.labels == plain["labels_used"] == B
    assert oracle.labels == res["labels_used"] <= B - N0
    assert res["labels_used"] >= B - N0 - 16  # about N0 fewer: the rest of the budget is spent
    assert res["initial_labels"] == N0 and plain["initial_labels"] == 0
    assert res["plan"]["initial_labels"] == N0 and res["labels_by_source"]["initial"] == N0
    X, y = np.asarray(res["training_set"]["inputs"]), np.asarray(res["training_set"]["labels"])
    x0, y0 = (np.asarray(spec["initial_data"][k]) for k in ("inputs", "labels"))
    assert len(y) == res["labels_used"] + N0
    rows = {tuple(r) for r in X.tolist()}
    assert all(tuple(r) in rows for r in x0.tolist())  # every initial point is in the training set
    at = {tuple(r): v for r, v in zip(X.tolist(), y.tolist())}
    assert all(at[tuple(r)] == v for r, v in zip(x0.tolist(), y0.tolist()))
    Xp, yp = np.asarray(plain["training_set"]["inputs"]), np.asarray(plain["training_set"]["labels"])
    err, err_plain = held_out_err(spec, X, y), held_out_err(spec, Xp, yp)
    print(f"held-out Err with initial data {err:.4f} ({res['labels_used']} oracle labels), "
          f"without {err_plain:.4f} ({plain['labels_used']})")
    # close to the plain job for N0 fewer oracle labels (this draw: 1.04; over seeds 0-4 with
    # docs/results/initial-data-seeds 0.95-1.13, geometric mean 1.05: Q-mixture points are worth
    # less than designed ones, docs/method/budgets.md "Initial data")
    assert err <= 1.2 * err_plain
    # and the initial points are worth something: better than the job with only the labels it asked for
    fewer = run_job({**friedman_spec, "budget": B - N0}, evaluate=False)
    err_fewer = held_out_err(spec, np.asarray(fewer["training_set"]["inputs"]),
                             np.asarray(fewer["training_set"]["labels"]))
    assert err < err_fewer


def test_initial_data_spec_errors(friedman_spec):
    good = with_initial(friedman_spec, n=20)
    assert len(parse_job_spec(good).initial_data.inputs) == 20

    def error(doc) -> tuple[str, str]:
        with pytest.raises(SpecError) as exc:
            parse_job_spec(doc)
        return exc.value.errors[0]

    narrow = {**good, "initial_data": {"inputs": [r[:4] for r in good["initial_data"]["inputs"]],
                                       "labels": good["initial_data"]["labels"]}}
    assert error(narrow)[0] == "initial_data.inputs"
    short = {**good, "initial_data": {"inputs": good["initial_data"]["inputs"],
                                      "labels": good["initial_data"]["labels"][:-1]}}
    assert error(short)[0] == "initial_data.labels"
    bad = {**good, "initial_data": {"inputs": good["initial_data"]["inputs"],
                                    "labels": [float("nan")] + good["initial_data"]["labels"][1:]}}
    assert error(bad)[0].startswith("initial_data.labels")
    wide = {**good, "initial_data": {"inputs": good["initial_data"]["inputs"],
                                     "labels": [[v, v] for v in good["initial_data"]["labels"]]}}
    assert error(wide)[0] == "initial_data.labels"
    column = {**good, "initial_data": {"inputs": good["initial_data"]["inputs"],
                                       "labels": [[v] for v in good["initial_data"]["labels"]]}}
    parse_job_spec(column)
    unbudgeted = {k: v for k, v in good.items() if k != "budget"}
    loc, msg = error(unbudgeted)
    assert loc == "initial_data" and "budget" in msg
    big = with_initial(friedman_spec, n=N0)
    big["budget"] = N0 + 2 * 8 + 16 - 1  # the initial points plus the fixed needs, one short
    loc, msg = error(big)
    assert loc == "budget" and f"smallest budget it runs with is {N0 + 2 * 8 + 16}" in msg
    big["budget"] += 1
    parse_job_spec(big)
