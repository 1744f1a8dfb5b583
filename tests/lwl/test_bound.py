"""The OOD upper bound (Prop. 3.1 / Cor. 3.2) with exact constants, against measured errors."""

import json

import numpy as np
import pytest

from lwl import run_job
from lwl.bound import bound_constant_squared, krr_lipschitz, ood_upper_bound, second_moment
from lwl.measures import Gaussian
from lwl.models import KernelRidge
from lwl.oracles import make_oracle
from lwl.transport import gaussian_w2_squared


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bound_holds_for_a_linear_truth_with_exact_constants(seed):
    """G*(x) = a.x (Lip = |a|, G*(0) = 0), KRR trained on nu, Q = two Gaussians: every constant
    is exact (Bures W2, closed-form m2, sqrt(2)/l ||G||_H); E_nu and E_Q by large Monte Carlo."""
    rng = np.random.default_rng(seed)
    d = 2
    a = rng.standard_normal(d)
    nu = Gaussian(rng.standard_normal(d), cov=np.diag(rng.uniform(0.5, 2.0, d)))
    members = [Gaussian(rng.standard_normal(d) * 2, cov=np.diag(rng.uniform(0.2, 1.0, d))) for _ in range(2)]
    x = nu.sample(200, [seed, 1])
    model = KernelRidge("squared_exponential", 1.5, sigma2=1e-3 / 200).fit(x, x @ a)
    err = lambda u: (u @ a - model.predict(u)) ** 2  # noqa: E731
    train = float(err(nu.sample(200_000, [seed, 2])).mean())
    measured = float(np.mean([err(m.sample(200_000, [seed, 3, k])).mean() for k, m in enumerate(members)]))
    lip_model = krr_lipschitz(model)
    pts = nu.sample(2000, [seed, 4])  # the model's Lipschitz bound dominates its sampled ratios
    i, j = np.triu_indices(60, 1)
    f = model.predict(pts[:60])
    ratios = np.abs(f[i] - f[j]) / np.linalg.norm(pts[i] - pts[j], axis=1)
    assert ratios.max() <= lip_model
    zero_sq = float(model.predict(np.zeros((1, d)))[0] ** 2)
    w2 = [float(gaussian_w2_squared(nu.mean, nu.cov, m.mean, m.cov)) for m in members]
    out = ood_upper_bound(train, float(np.linalg.norm(a)), lip_model, second_moment(nu),
                          [second_moment(m) for m in members], w2, zero_sq, [1.0, 1.0])
    assert out["bound"] >= measured
    assert out["bound"] == pytest.approx(train + np.sqrt(out["c_sq_q"] * out["w2_sq_q"]))
    # the constant as written in the paper
    s = np.linalg.norm(a) + lip_model
    c2 = s**2 * (4 * s**2 * (second_moment(nu) + second_moment(members[0])) + 16 * zero_sq)
    assert bound_constant_squared(np.linalg.norm(a), lip_model, second_moment(nu), second_moment(members[0]),
                                  zero_sq) == pytest.approx(c2)


def test_kernel_expansion_lipschitz_bound_dominates_sampled_ratios():
    o = make_oracle({"name": "kernel_expansion", "params": {"dim": 3, "centres": 20, "lengthscale": 1.0}})
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-4, 4, (5000, 3)), None
    b = a + 0.01 * rng.standard_normal((5000, 3))
    ratios = np.abs(o.label(a) - o.label(b)) / np.linalg.norm(a - b, axis=1)
    assert ratios.max() <= o.lipschitz_bound() and ratios.max() > 0.05 * o.lipschitz_bound()


def test_bilevel_job_reports_the_bound_above_its_held_out_error():
    spec = {"oracle": {"name": "kernel_expansion", "params": {"dim": 2, "centres": 30, "lengthscale": 2.0}},
            "test_distributions": {"members": [
                {"gaussian": {"mean": [1.0, 0.0], "cov": [[0.5, 0.0], [0.0, 0.5]]}, "size": 400},
                {"gaussian": {"mean": [-1.0, 1.0], "cov": [[0.3, 0.1], [0.1, 0.4]]}, "size": 400}],
                "validation_per_member": 200},
            "model": {"name": "krr", "lengthscale": 1.0},
            "algorithm": {"name": "bilevel", "iterations": 20},
            "evaluation": {"train_size": 100}, "seed": 0}
    out = run_job(spec)
    json.dumps(out, allow_nan=False)  # the result travels as JSON
    b = out["evaluation"]["bound"]
    assert b["rigorous"] and all(b["exact"].values())
    # the bound is of the model trained on the first training draw
    assert b["err"] == pytest.approx(out["evaluation"]["err_draws"]["optimized"][0], rel=1e-9)
    assert b["bound"] >= b["heldout_error"] and b["err_bound"] >= b["err"]
    lo, hi = out["evaluation"]["err_interval"]["optimized"]
    err = out["evaluation"]["err"]["optimized"]
    assert lo < err < hi and out["verdict"]["err_interval_95"] == [lo, hi]
    off = run_job({**spec, "evaluation": {"train_size": 100, "bound": False}})
    assert off["evaluation"]["bound"] is None
