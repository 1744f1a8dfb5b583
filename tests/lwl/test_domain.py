"""Input domains (``domain`` in the job spec; lwl.domain, lwl.measures.truncated,
lwl.design.families.constrained): the spec's checks, the restricted measure's density and
sampling, the restricted family's score, and that a job never hands out an input outside."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import ndtr

from lwl import run_job
from lwl.design.families.constrained import ConstrainedFamily
from lwl.design.families.gaussian import GaussianFamily
from lwl.design.families.mixture import MixtureFamily
from lwl.domain import Domain
from lwl.measures import Gaussian, Mixture, Truncated, UniformBox, from_spec
from lwl.q_samples import MetaTestSamples
from lwl.spec import SpecError, parse_job_spec

D = 3


def _spec(**over) -> dict:
    """A small bilevel job on [0, 1]^3 whose Q hugs the faces x_0 = 0 and x_1 = 1: the family's
    Gaussians (and every baseline) put a good part of their mass outside the box."""
    rng = np.random.default_rng(5)
    edge = rng.uniform(0.0, 1.0, (300, D)) * [0.15, 1.0, 1.0]
    doc = {"oracle": {"name": "sobol_g"},
           "test_distributions": {"members": [
               {"gaussian": {"mean": [0.5, 0.85, 0.5], "cov": (0.002 * np.eye(D)).tolist()}, "size": 300},
               {"samples": edge.tolist()}], "validation_per_member": 100},
           "domain": {"low": [0.0] * D, "high": [1.0] * D},
           "family": {"name": "gaussian"},
           "algorithm": {"name": "bilevel", "iterations": 12, "samples_per_iteration": 50, "check_every": 4,
                         "broaden": [3.0, 9.0]},
           "evaluation": {"train_size": 80, "draws": 2, "baselines": ["normal", "barycenter", "mixture", "uniform"]},
           "seed": 3, "device": "cpu"}
    doc.update(over)
    return doc


def _errors(doc) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        parse_job_spec(doc)
    return dict(info.value.errors)


# -- the spec ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("domain, field", [
    ({"low": [0, 0, 1], "high": [1, 1, 1]}, "domain.high"),  # low < high per input
    ({"low": [0, 0, 0], "high": [1, 1]}, "domain.high"),  # as many upper bounds as lower ones
    ({"low": [0, 0], "high": [1, 1]}, "domain.low"),  # the inputs' dimension
    ({"low": [0] * 3, "high": [1] * 3, "A": [[1, 1]], "b": [1]}, "domain.A"),  # rows of length d
    ({"low": [0] * 3, "high": [1] * 3, "A": [[1, 1, 1]], "b": [1, 2]}, "domain.b"),  # one b per row
    ({"low": [0] * 3, "high": [1] * 3, "A": [[1, 1, 1]]}, "domain.b"),  # A with b
    ({"low": [0] * 3, "high": [1] * 3, "A": [[1, 1, 1]], "b": [-0.5]}, "domain.b"),  # an empty domain
    ({"low": [0] * 3, "high": [1] * 3, "outside": "drop"}, "domain.outside"),
])
def test_bad_domains_are_refused_with_the_field_named(domain, field):
    errors = _errors(_spec(domain=domain))
    assert field in errors, errors


def test_test_samples_outside_the_domain_are_refused_or_clipped():
    doc = _spec()
    doc["test_distributions"]["members"][1]["samples"][7][2] = 1.5  # one point past the upper bound
    errors = _errors(doc)
    assert "test_distributions.members.1.samples" in errors, errors
    assert "1 of 300 rows" in errors["test_distributions.members.1.samples"]
    doc["domain"]["outside"] = "clip"
    spec = parse_job_spec(doc)
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, domain=spec.domain)
    assert q.members[1][7, 2] == 1.0 and Domain([0] * D, [1] * D).contains(np.concatenate(q.members)).all()
    # with linear constraints a point is moved to the nearest point of D, not only into the box
    doc["domain"].update(A=[[1.0, 1.0, 1.0]], b=[2.5])
    doc["test_distributions"]["members"][0] = {"gaussian": {"mean": [0.5, 0.7, 0.5],
                                                            "cov": (0.002 * np.eye(D)).tolist()}, "size": 300}
    doc["test_distributions"]["members"][1]["samples"][3] = [0.9, 0.9, 0.9]  # 2.7 > 2.5
    spec = parse_job_spec(doc)
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, domain=spec.domain)
    np.testing.assert_allclose(q.members[1][3], [2.5 / 3] * 3, atol=1e-9)
    assert spec.domain.build().contains(np.concatenate(q.members)).all()
    doc["domain"]["outside"] = "refuse"
    assert "test_distributions.members.1.samples" in _errors(doc)


def _nearest_by_qp(domain: Domain, x: np.ndarray) -> np.ndarray:
    """The nearest point of D to x by a general-purpose solver (SLSQP), the independent reference."""
    from scipy.optimize import minimize

    cons = [{"type": "ineq", "fun": lambda y: domain.b - domain.A @ y, "jac": lambda y: -domain.A}]
    res = minimize(lambda y: 0.5 * np.sum((y - x) ** 2), np.clip(x, domain.low, domain.high),
                   jac=lambda y: y - x, bounds=list(zip(domain.low, domain.high)), constraints=cons,
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
    return res.x


def test_projection_onto_a_polytope_is_the_nearest_point():
    """Domain.clip with linear constraints gives the Euclidean projection onto box ∩ {A x <= b}:
    the same point as a QP solver, inside D exactly, and (x - y).(z - y) <= 0 for points z of D
    (the projection's characterisation); points inside stay put."""
    rng = np.random.default_rng(3)
    dom = Domain([0.0, 0.0, -1.0], [2.0, 1.0, 1.0], A=[[1.0, 1.0, 0.0], [-1.0, 2.0, 1.0], [0.5, -1.0, 2.0]],
                 b=[2.2, 1.5, 1.0])
    x = rng.uniform(-1.5, 3.0, size=(200, 3))
    y = dom.clip(x)
    assert dom.contains(y).all()
    inside = dom.contains(x)
    assert inside.any() and (~inside).any()
    np.testing.assert_array_equal(y[inside], x[inside])
    for i in np.flatnonzero(~inside)[:25]:
        np.testing.assert_allclose(y[i], _nearest_by_qp(dom, x[i]), atol=1e-6)
    z = rng.uniform(-1.0, 2.0, size=(20000, 3))
    z = z[dom.contains(z)]
    assert len(z) > 1000
    worst = max(float(np.max((z - y[i]) @ (x[i] - y[i]))) for i in np.flatnonzero(~inside))
    assert worst <= 1e-9


def test_drawn_members_are_drawn_inside_and_refused_when_much_of_them_lies_outside():
    doc = _spec()
    doc["test_distributions"]["members"][0]["gaussian"]["cov"] = (0.01 * np.eye(D)).tolist()  # ~16% outside
    errors = _errors(doc)
    assert "test_distributions.members.0.gaussian" in errors and "outside the domain" in str(errors)
    doc["domain"]["outside"] = "clip"  # explicitly: the member's draws outside moved onto the box
    spec = parse_job_spec(doc)
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, domain=spec.domain)
    assert q.members[0].shape == (300, D) and Domain([0] * D, [1] * D).contains(q.members[0]).all()
    # clipped, not restricted: the member's own draws with the ones outside moved to the nearest face
    free = MetaTestSamples.from_spec(parse_job_spec({k: v for k, v in doc.items() if k != "domain"}).test_distributions,
                                     spec.seed)
    np.testing.assert_array_equal(q.members[0], np.clip(free.members[0], 0.0, 1.0))
    on_face = np.any((q.members[0] == 0.0) | (q.members[0] == 1.0), axis=1)
    assert 0.05 < on_face.mean() < 0.4  # about 16% of the mass lies outside
    # a domain that holds every draw changes no bit of Q
    doc["domain"] = {"low": [-5.0] * D, "high": [5.0] * D}
    wide = parse_job_spec(doc)
    free = parse_job_spec({k: v for k, v in doc.items() if k != "domain"})
    a = MetaTestSamples.from_spec(wide.test_distributions, 3, domain=wide.domain)
    b = MetaTestSamples.from_spec(free.test_distributions, 3)
    assert all(np.array_equal(x, y) for x, y in zip(a.members, b.members))


def test_only_algorithms_that_restrict_their_draws_take_a_domain():
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[2] / "examples" / "darcy_ama.json").read_text())
    d = parse_job_spec(doc).family.dim
    doc["domain"] = {"low": [-10.0] * d, "high": [10.0] * d}
    errors = _errors(doc)
    assert "domain" in errors and "bilevel" in errors["domain"], errors


# -- the restricted measure ---------------------------------------------------------------------------
def _integral_1d(t: Truncated, lo, hi) -> float:
    return integrate.quad(lambda v: math.exp(t.log_prob(np.array([[v]]))[0]), lo, hi, limit=200,
                          epsabs=1e-12, epsrel=1e-10)[0]


def test_the_restricted_density_integrates_to_one():
    # 1-d: a Gaussian cut on both sides, most of its mass outside
    t = Truncated(Gaussian([0.3], cov=[[0.5]]), Domain([0.6], [2.0]))
    assert abs(_integral_1d(t, 0.6, 2.0) - 1.0) < 1e-6
    # 2-d: a correlated Gaussian on a box (Genz's CDF for Z), integrated by a 2-d quadrature
    g = Gaussian([0.2, 0.1], cov=[[1.0, 0.6], [0.6, 2.0]])
    box = Domain([-1.0, -0.5], [1.5, 2.0])
    t = Truncated(g, box)
    f = lambda y, x: math.exp(t.log_prob(np.array([[x, y]]))[0])
    total = integrate.dblquad(f, -1.0, 1.5, -0.5, 2.0, epsabs=1e-10, epsrel=1e-8)[0]
    assert abs(total - 1.0) < 1e-3, total
    assert 0.3 < t.normaliser()[0] < 0.6  # the box cuts a good part: the test can fail
    # 2-d: a mixture of two Gaussians on the same box, on a fine midpoint grid
    mix = Mixture([g, Gaussian([1.4, 1.8], cov=[[0.05, 0.0], [0.0, 0.3]])], [0.7, 0.3])
    t = Truncated(mix, box)
    n = 1200
    xs = -1.0 + (np.arange(n) + 0.5) * 2.5 / n
    ys = -0.5 + (np.arange(n) + 0.5) * 2.5 / n
    X, Y = np.meshgrid(xs, ys, indexing="ij")
    p = np.exp(t.log_prob(np.stack([X.ravel(), Y.ravel()], 1)))
    assert abs(p.sum() * (2.5 / n) ** 2 - 1.0) < 1e-3
    # outside the domain the density is 0
    assert t.log_prob(np.array([[1.6, 0.0], [0.0, -0.6]])).tolist() == [-np.inf, -np.inf]


def test_a_restricted_weighted_pool_has_a_density_too():
    from scipy.stats import multivariate_normal

    from lwl.measures import WeightedPool

    pts = np.array([[0.1, 0.2], [0.8, 0.5], [0.4, 0.9]])
    L = np.array([[0.2, 0.0], [0.05, 0.15]])
    pool = WeightedPool(pts, [0.2, 0.5, 0.3], L)
    x = np.array([[0.3, 0.3], [0.9, 0.1]])
    want = np.log(sum(w * multivariate_normal(p, L @ L.T).pdf(x) for w, p in zip(pool.weights, pts)))
    np.testing.assert_allclose(pool.log_prob(x), want, rtol=1e-10)
    t = Truncated(pool, Domain([0.0, 0.0], [1.0, 1.0]))
    z, se = t.normaliser()  # no closed form: Monte Carlo
    n = 800
    g = (np.arange(n) + 0.5) / n
    X, Y = np.meshgrid(g, g, indexing="ij")
    total = np.exp(t.log_prob(np.stack([X.ravel(), Y.ravel()], 1))).sum() / n**2
    assert abs(total - 1.0) < max(1e-3, 4 * se / z)


def test_the_density_under_linear_constraints_integrates_to_one():
    g = Gaussian([0.5, 0.5], cov=[[0.2, 0.05], [0.05, 0.3]])
    tri = Domain([0.0, 0.0], [1.0, 1.0], A=[[1.0, 1.0]], b=[1.0])  # the triangle x + y <= 1
    t = Truncated(g, tri)
    z, se = t.normaliser()
    assert 0 < se < 1e-4 * z  # no closed form: randomised QMC with its standard error
    total = integrate.dblquad(lambda y, x: math.exp(t.log_prob(np.array([[x, y]]))[0]), 0.0, 1.0, 0.0,
                              lambda x: 1.0 - x, epsabs=1e-10, epsrel=1e-8)[0]
    assert abs(total - 1.0) < 1e-3, total
    # a mixture of Gaussians too
    t = Truncated(Mixture([g, Gaussian([0.1, 0.3], cov=[[0.05, 0.0], [0.0, 0.1]])], [0.6, 0.4]), tri)
    total = integrate.dblquad(lambda y, x: math.exp(t.log_prob(np.array([[x, y]]))[0]), 0.0, 1.0, 0.0,
                              lambda x: 1.0 - x, epsabs=1e-10, epsrel=1e-8)[0]
    assert abs(total - 1.0) < 1e-3, total


def test_restricted_sampling_stays_inside_and_is_reproducible():
    g = Gaussian([0.2, 0.1], cov=[[1.0, 0.6], [0.6, 2.0]])
    box = Domain([-1.0, -0.5], [1.5, 2.0])
    t = Truncated(g, box)
    x = t.sample(100_000, 7)
    assert x.shape == (100_000, 2) and box.contains(x).all()
    # the spec says it is restricted, and from_spec draws the same bits
    doc = t.to_spec()
    assert doc["family"] == "truncated" and doc["domain"] == {"low": [-1.0, -0.5], "high": [1.5, 2.0]}
    assert np.array_equal(from_spec(doc).sample(5000, 11), t.sample(5000, 11))
    # the draws follow the restricted law: its first coordinate's mean, by quadrature
    m1 = integrate.dblquad(lambda y, x_: x_ * math.exp(t.log_prob(np.array([[x_, y]]))[0]), -1.0, 1.5, -0.5, 2.0,
                           epsabs=1e-9)[0]
    assert abs(x[:, 0].mean() - m1) < 5 * x[:, 0].std() / math.sqrt(len(x))
    # a domain that holds every draw changes nothing
    wide = Truncated(g, Domain([-50.0, -50.0], [50.0, 50.0]))
    assert np.array_equal(wide.sample(1000, 3), g.sample(1000, 3))
    # a law with (almost) nothing inside is refused, not sampled forever
    with pytest.raises(ValueError, match="domain"):
        Truncated(Gaussian([10.0], cov=[[0.01]]), Domain([0.0], [1.0])).sample(10, 0)
    # linear constraints are held too
    tri = Domain([0.0, 0.0], [1.0, 1.0], A=[[1.0, 1.0]], b=[1.0])
    y = Truncated(UniformBox([0.0, 0.0], [1.0, 1.0]), tri).sample(20_000, 1)
    assert (y.sum(1) <= 1.0).all() and abs(len(y) - 20_000) == 0


# -- the restricted family's score --------------------------------------------------------------------
def _exact_log_z_gaussian(mean, chol, box: Domain) -> float:
    """log P(X in box), X ~ N(mean, L L^T) in 1-d or 2-d, by erf / a 1-d quadrature of the
    conditional law (independent of lwl's normaliser)."""
    C = chol @ chol.T
    if len(mean) == 1:
        s = math.sqrt(C[0, 0])
        return math.log(ndtr((box.high[0] - mean[0]) / s) - ndtr((box.low[0] - mean[0]) / s))
    s1 = math.sqrt(C[0, 0])
    beta = C[1, 0] / C[0, 0]
    s2 = math.sqrt(C[1, 1] - beta * C[1, 0])

    def f(x1):
        mu2 = mean[1] + beta * (x1 - mean[0])
        p2 = ndtr((box.high[1] - mu2) / s2) - ndtr((box.low[1] - mu2) / s2)
        return math.exp(-0.5 * ((x1 - mean[0]) / s1) ** 2) / (s1 * math.sqrt(2 * math.pi)) * p2

    return math.log(integrate.quad(f, box.low[0], box.high[0], epsabs=1e-14, epsrel=1e-12)[0])


class _Coords:
    """Just enough of WhitenedGaussian for the families' measure/score (not used by them)."""
    size = 0


def _objective_gaussian(mean, chol, x, c, box) -> float:
    return float(c @ Gaussian.from_parameters(mean, chol).log_prob(x)) - c.sum() * _exact_log_z_gaussian(mean, chol, box)


@pytest.mark.parametrize("d", [1, 2])
def test_the_restricted_gaussian_score_matches_finite_differences(d):
    rng = np.random.default_rng(d)
    mean = np.array([0.3, -0.2][:d])
    chol = np.linalg.cholesky(np.array([[0.8, 0.3], [0.3, 0.6]])[:d, :d])
    box = Domain([0.5, -1.0][:d], [2.0, 0.4][:d])  # cuts the law on several sides, off centre
    fam = ConstrainedFamily(GaussianFamily(None, _Coords()), box, seed=0, normaliser_samples=1_000_000)
    params = {"mean": mean, "chol": chol}
    x = fam.measure(params).sample(40, 1)
    c = rng.uniform(0.2, 1.0, 40) / 40  # positive weights: the normaliser's term counts in full
    g_mean, g_chol = fam.score(params, x, c)
    h = 1e-5
    fd_mean = np.array([(_objective_gaussian(mean + h * e, chol, x, c, box)
                         - _objective_gaussian(mean - h * e, chol, x, c, box)) / (2 * h) for e in np.eye(d)])
    fd_chol = np.zeros((d, d))
    for i in range(d):
        for j in range(i + 1):
            E = np.zeros((d, d))
            E[i, j] = h
            fd_chol[i, j] = (_objective_gaussian(mean, chol + E, x, c, box)
                             - _objective_gaussian(mean, chol - E, x, c, box)) / (2 * h)
    # grad log Z is a Monte Carlo mean over M draws: allow 5 of its standard errors
    tol_mean, tol_chol = _normaliser_tolerance(fam, params, c.sum())
    np.testing.assert_allclose(g_mean, fd_mean, rtol=0, atol=tol_mean.max() + 1e-7)
    np.testing.assert_allclose(g_chol, fd_chol, rtol=0, atol=tol_chol.max() + 1e-7)
    # the unrestricted score misses grad log Z by far more than that tolerance
    raw_mean, _ = GaussianFamily(None, _Coords()).score(params, x, c)
    assert np.abs(raw_mean - fd_mean).max() > 20 * tol_mean.max()


def _normaliser_tolerance(fam, params, total, batches=50, size=2000):
    """5 standard errors of total * E_p[s] as fam estimates it (a mean over fam.normaliser_samples
    draws), per parameter; the score's spread from the means of independent batches."""
    y = fam.measure(params).sample(batches * size, 99)
    means = [fam.inner.score(params, y[b * size:(b + 1) * size], np.full(size, 1.0 / size)) for b in range(batches)]
    return tuple(5 * total * np.std(np.stack(parts), 0) * math.sqrt(size / fam.normaliser_samples)
                 for parts in zip(*means))


def test_the_restricted_mixture_score_matches_finite_differences():
    box = Domain([-0.5], [1.2])
    spec = type("S", (), {"means": [[0.0], [1.0]], "weights": [0.4, 0.6], "covs": [[[0.3]], [[0.5]]],
                          "free": ["weights", "means", "covs"]})()
    inner = MixtureFamily(spec, type("C", (), {"size": 0})())
    fam = ConstrainedFamily(inner, box, seed=0, normaliser_samples=1_000_000)
    params = {"logits": np.log([0.4, 0.6]), "means": np.array([[0.0], [1.0]]),
              "chols": np.array([[[math.sqrt(0.3)]], [[math.sqrt(0.5)]]])}
    x = fam.measure(params).sample(30, 2)
    c = np.linspace(0.2, 1.0, 30) / 18

    def objective(p) -> float:
        w = np.exp(p["logits"] - p["logits"].max())
        w /= w.sum()
        comps = [Gaussian.from_parameters(m, L) for m, L in zip(p["means"], p["chols"])]
        z = sum(wk * (ndtr((box.high[0] - g.mean[0]) / g.chol[0, 0]) - ndtr((box.low[0] - g.mean[0]) / g.chol[0, 0]))
                for wk, g in zip(w, comps))
        return float(c @ Mixture(comps, w).log_prob(x)) - c.sum() * math.log(z)

    grads = fam.score(params, x, c)
    tol = dict(zip(("logits", "means", "chols"), _normaliser_tolerance(fam, params, c.sum())))
    h = 1e-6
    fd_all = {}
    for name, g in zip(("logits", "means", "chols"), grads):
        fd = np.zeros_like(params[name])
        for idx in np.ndindex(fd.shape):
            up = {k: v.copy() for k, v in params.items()}
            dn = {k: v.copy() for k, v in params.items()}
            up[name][idx] += h
            dn[name][idx] -= h
            fd[idx] = (objective(up) - objective(dn)) / (2 * h)
        fd_all[name] = fd
        np.testing.assert_allclose(g, fd, rtol=0, atol=tol[name].max() + 1e-7, err_msg=name)
    raw = inner.score(params, x, c)
    assert np.abs(raw[1] - fd_all["means"]).max() > 20 * tol["means"].max()  # grad log Z matters


# -- jobs: every input handed out lies in the domain ---------------------------------------------------
class Recording:
    """An oracle that records every input it is asked to label."""

    def __init__(self, oracle):
        self.oracle, self.asked = oracle, []

    def __getattr__(self, name):
        return getattr(self.oracle, name)

    def label(self, x):
        self.asked.append(np.array(x, dtype=np.float64))
        return self.oracle.label(x)


def test_a_bilevel_job_asks_and_returns_inputs_inside_the_domain_only():
    spec = parse_job_spec(_spec())
    box = spec.domain.build()
    oracle = Recording(spec.oracle.build())
    result = run_job(spec, oracle=oracle)
    asked = np.concatenate(oracle.asked)
    # design batches, checks, the evaluation's training draws of the design and of every baseline,
    # the bound's Monte Carlo samples and Lipschitz pairs: all inside
    assert len(asked) > 2000 and box.contains(asked).all()
    # without the domain the same job asks outside the box: the test can fail
    free = Recording(spec.oracle.build())
    run_job({k: v for k, v in _spec().items() if k != "domain"}, oracle=free)
    assert not box.contains(np.concatenate(free.asked)).all()
    # the returned distribution says it is restricted, and samples from it stay inside
    dist = result["distribution"]
    assert dist["family"] == "truncated" and dist["domain"]["high"] == [1.0] * D
    x = from_spec(dist).sample(100_000, 0)
    assert box.contains(x).all()
    for key in ("best_distribution", "last_distribution"):
        assert result[key]["family"] == "truncated"
    # the verdict and the pictures still work
    assert result["verdict"]["outcome"] in ("better", "tie", "worse")
    assert result["views"]["kind"] == "projection"
    assert result["evaluation"]["bound"]["origin"] == [0.0] * D


def test_a_budgeted_job_asks_inside_the_domain_and_its_training_set_lies_there():
    doc = _spec(budget=600, algorithm={"name": "bilevel", "inner_steps": 4, "samples_per_iteration": 50,
                                       "broaden": [3.0, 9.0]})
    spec = parse_job_spec(doc)
    box = spec.domain.build()
    oracle = Recording(spec.oracle.build())
    result = run_job(spec, oracle=oracle)
    assert result["labels_used"] <= 600
    asked = np.concatenate(oracle.asked)  # the rounds and the audit's baselines and anchor
    assert box.contains(asked).all()
    assert box.contains(np.asarray(result["training_set"]["inputs"])).all()
    assert box.contains(from_spec(result["distribution"]).sample(20_000, 1)).all()


def test_initial_data_outside_the_domain_is_used_and_named_in_a_warning():
    rng = np.random.default_rng(0)
    x0 = rng.uniform(0.0, 1.0, (40, D))
    x0[:3, 0] = [1.5, -0.2, 2.0]  # three earlier measurements outside today's limits
    y0 = np.asarray(parse_job_spec(_spec()).oracle.build().label(x0), dtype=float).reshape(-1)
    doc = _spec(budget=300, algorithm={"name": "bilevel"}, evaluation={"enabled": False},
                initial_data={"inputs": x0.tolist(), "labels": y0.tolist()})
    result = run_job(doc)
    assert any("3 of the 40 initial_data inputs lie outside the job's domain" in w for w in result["warnings"])
    X = np.asarray(result["training_set"]["inputs"])
    assert {tuple(r) for r in x0.tolist()} <= {tuple(r) for r in X.tolist()}  # kept as training data
    box = parse_job_spec(doc).domain.build()
    assert int((~box.contains(X)).sum()) == 3  # and nothing the job asked for lies outside
    inside = _spec(budget=300, algorithm={"name": "bilevel"}, evaluation={"enabled": False},
                   initial_data={"inputs": x0[3:].tolist(), "labels": y0[3:].tolist()})
    assert not any("initial_data" in w for w in run_job(inside)["warnings"])


def test_the_design_steps_keep_mass_in_the_domain():
    """A restricted family refuses steps to laws with (almost) no mass inside the domain."""
    spec = parse_job_spec(_spec())
    from lwl.design import BilevelDesign

    design = BilevelDesign.from_spec(spec)
    fam = design.family
    params = fam.initial()
    assert fam.admissible(params)
    far = {**params, "mean": params["mean"] + 40.0}
    assert not fam.admissible(far)


def test_lwl_run_and_lwl_sample_stay_inside_the_domain(tmp_path):
    import json
    import subprocess
    import sys

    doc = _spec(evaluation={"enabled": False})
    (tmp_path / "spec.json").write_text(json.dumps(doc))
    run = subprocess.run([sys.executable, "-m", "lwl.cli", "run", str(tmp_path / "spec.json"), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "x.npy"
    sample = subprocess.run([sys.executable, "-m", "lwl.cli", "sample", str(tmp_path / "out" / "result.json"),
                             "-n", "100000", "--seed", "2", "--out", str(out)], capture_output=True, text=True,
                            timeout=600)
    assert sample.returncode == 0, sample.stderr
    x = np.load(out)
    assert x.shape == (100_000, D) and Domain([0] * D, [1] * D).contains(x).all()


def test_an_initial_distribution_outside_the_domain_is_refused():
    doc = _spec(family={"name": "gaussian", "mean": [3.0, 0.5, 0.5], "cov": (0.1 * np.eye(D)).tolist()})
    assert "family.mean" in _errors(doc)
    doc["family"]["mean"] = [1.3, 0.5, 0.5]  # about 17% inside: restricted, it is a start like any other
    assert parse_job_spec(doc).family.mean == [1.3, 0.5, 0.5]
    doc["family"] = {"name": "mixture", "weights": [0.5, 0.5], "means": [[5.0] * D, [-5.0] * D],
                     "covs": [np.eye(D).tolist()] * 2}
    assert "family.means" in _errors(doc)


def test_pool_and_auto_families_are_restricted_too():
    for family in ("pool", "auto"):
        spec = parse_job_spec(_spec(family={"name": family}, evaluation={"enabled": False},
                                    algorithm={"name": "bilevel", "iterations": 4, "samples_per_iteration": 50,
                                               "check_every": 2, "broaden": [3.0]}))
        oracle = Recording(spec.oracle.build())
        result = run_job(spec, oracle=oracle)
        box = spec.domain.build()
        assert box.contains(np.concatenate(oracle.asked)).all()
        assert result["distribution"]["family"] == "truncated"
        assert box.contains(from_spec(result["distribution"]).sample(10_000, 0)).all()


def test_a_domain_job_resumes_from_a_checkpoint_bit_for_bit():
    """The restricted score's normaliser draws are seeded by theta: a resumed run is the same run."""
    doc = _spec(evaluation={"enabled": False})
    blobs = []
    full = run_job(doc, checkpoint=blobs.append)
    resumed = run_job(doc, state=blobs[len(blobs) // 2])
    assert resumed["distribution"] == full["distribution"] and resumed["distribution"]["family"] == "truncated"
    assert [h["objective"] for h in resumed["history"]] == [h["objective"] for h in full["history"]]
    assert any(h["event"] is None for h in full["history"])  # the design moved


@pytest.mark.slow
def test_a_budgeted_job_with_outside_clip_draws_the_laws_q_has_there():
    """``outside: "clip"``: Q's samples outside D sit on D's faces, so Q's mixture as a candidate, its
    baselines at equal labels and the returned distribution are pushed onto D by the projection
    (lwl.measures.Clipped), and label face points as Q has them; with "refuse" none lies on a face."""
    doc = _spec(budget=600, algorithm={"name": "bilevel", "broaden": [3.0]})
    doc["test_distributions"]["members"][0]["gaussian"]["cov"] = (0.01 * np.eye(D)).tolist()  # ~16% outside
    doc["domain"]["outside"] = "clip"
    spec = parse_job_spec(doc)
    box = spec.domain.build()
    oracle = Recording(spec.oracle.build())
    result = run_job(spec, oracle=oracle)
    assert result["labels_used"] <= 600

    def on_faces(x):
        x = np.asarray(x)
        return np.any((x == 0.0) | (x == 1.0), axis=1)

    asked = np.concatenate(oracle.asked)
    assert box.contains(asked).all()
    X = np.asarray(result["training_set"]["inputs"])
    assert on_faces(X).sum() > 0.02 * len(X), on_faces(X).mean()
    dist = result["distribution"]
    assert dist["family"] == "clipped" and dist["domain"]["high"] == [1.0] * D
    # capped at Q's share on the faces
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, domain=spec.domain)
    assert dist["face_share"] == pytest.approx(q.share_on_boundary(box)) and 0.02 < dist["face_share"] < 0.3
    x = from_spec(dist).sample(20_000, 1)
    assert box.contains(x).all() and 0.01 < on_faces(x).mean() <= dist["face_share"] + 0.01
    # the audit's baselines drew Q's law as it is on D: face points among what it asked beyond the training set
    assert on_faces(asked[len(X):]).sum() > 0
    # with "refuse" (the default) nothing lwl draws itself lies on a face: the test can fail
    doc["domain"]["outside"] = "refuse"
    doc["test_distributions"]["members"][0]["gaussian"]["cov"] = (0.002 * np.eye(D)).tolist()  # refused at 0.01
    refuse = run_job({**doc, "evaluation": {"enabled": False}})
    assert refuse["distribution"]["family"] == "truncated"
    assert not on_faces(refuse["training_set"]["inputs"]).any()


def test_clipped_is_the_projection_of_its_base_and_round_trips():
    from lwl.measures import Clipped, Gaussian, Truncated, constrain

    dom = Domain([0.0, 0.0], [1.0, 1.0], A=[[1.0, 1.0]], b=[1.5])
    g = Gaussian([0.8, 0.8], cov=0.05 * np.eye(2))
    c = constrain(g, dom, "clip")
    assert isinstance(c, Clipped) and isinstance(constrain(g, dom), Truncated)
    x, base = c.sample(5000, 7), g.sample(5000, 7)
    np.testing.assert_array_equal(x, dom.clip(base))
    assert dom.contains(x).all()
    share = 1.0 - dom.contains(base).mean()
    assert abs(c.share_on_faces() - share) < 0.02 and share > 0.3
    again = from_spec(c.to_spec())
    np.testing.assert_array_equal(again.sample(100, 3), c.sample(100, 3))
    m, C = c.mean_and_cov()
    assert dom.contains(m[None]).all() and np.all(np.linalg.eigvalsh(C) > 0)
    with pytest.raises(ValueError, match="domain"):
        Clipped(g, Domain([0.0] * 3, [1.0] * 3))
    with pytest.raises(ValueError, match="face_share"):
        Clipped(g, dom, 1.5)


def test_clipped_caps_its_share_on_the_faces_and_keeps_the_restricted_law_inside():
    """face_share phi: p = (1 - s) q|_D + s (pi_D)_# q|_out with s = min(phi, 1 - Z)."""
    from lwl.measures import Clipped, Gaussian

    dom = Domain([0.0] * 3, [1.0] * 3)
    g = Gaussian([0.7, 0.5, 0.5], cov=0.09 * np.eye(3))
    out = 1.0 - Truncated(g, dom).normaliser()[0]
    assert 0.25 < out < 0.6
    n = 40_000
    capped = Clipped(g, dom, 0.1)
    assert capped.share_on_faces() == pytest.approx(0.1)
    x = capped.sample(n, 11)
    assert dom.contains(x).all()
    faces = dom.on_boundary(x)
    assert abs(faces.mean() - 0.1) < 4 * math.sqrt(0.1 * 0.9 / n)
    # the interior draws follow the restricted law: its mean within 5 standard errors
    ref = Truncated(g, dom).sample(n, 12)
    se = np.sqrt(ref.var(0) / n + x[~faces].var(0) / (~faces).sum())
    assert np.all(np.abs(x[~faces].mean(0) - ref.mean(0)) < 5 * se)
    # a cap above the law's own outside share changes nothing: the projection of the base's draws
    np.testing.assert_array_equal(Clipped(g, dom, 0.9).sample(500, 3), dom.clip(g.sample(500, 3)))
    # a cap of 0 is the restricted law (no face point)
    assert not dom.on_boundary(Clipped(g, dom, 0.0).sample(5000, 4)).any()
    # the cap travels with the document
    doc = capped.to_spec()
    assert doc["face_share"] == 0.1 and np.array_equal(from_spec(doc).sample(100, 5), capped.sample(100, 5))


@pytest.mark.parametrize("outside", ["refuse", "clip"])
def test_the_nipv_anchor_pool_draws_q_as_the_job_puts_it_on_the_domain(outside):
    """The anchor's top-up of Q's mixture is drawn by ``on_domain``: inside D always, with face points
    (at most Q's share on the faces) under "clip" and none under "refuse"."""
    from lwl.evaluation.equal_labels import anchor_pool

    doc = _spec()
    cov = 0.01 if outside == "clip" else 0.002  # "refuse" refuses a Q with much mass outside D
    doc["test_distributions"]["members"][0]["gaussian"]["cov"] = (cov * np.eye(D)).tolist()
    doc["domain"]["outside"] = outside
    spec = parse_job_spec(doc)
    box = spec.domain.build()
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed, domain=spec.domain)
    n_validation = sum(len(v) for v in q.validation)
    pool = anchor_pool(q, 5000, seed=3, spec=spec)
    top_up = pool[n_validation:]
    assert len(pool) == 10_000 and box.contains(pool).all()
    faces = np.any((top_up == 0.0) | (top_up == 1.0), axis=1).mean()
    if outside == "clip":
        assert 0.01 < faces <= q.share_on_boundary(box) + 0.01
    else:
        assert faces == 0.0
