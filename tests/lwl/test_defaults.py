import numpy as np
import pytest
from scipy.spatial.distance import pdist

from lwl.defaults import fill_from_data, median_distance
from lwl.q_samples import MetaTestSamples
from lwl.spec import parse_job_spec


def test_median_distance_is_the_median_of_pairwise_distances():
    x = np.random.default_rng(0).standard_normal((300, 4)) * [1, 2, 3, 4]
    assert np.isclose(median_distance(x, 0), np.median(pdist(x)), rtol=1e-10)
    # identical points are ignored; a single distinct point gives 1
    assert np.isclose(median_distance(np.vstack([x[:1]] * 5 + [x[1:2]]), 0), np.linalg.norm(x[0] - x[1]))
    assert median_distance(np.zeros((4, 2)), 0) == 1.0


def test_fill_from_data_keeps_given_values_and_refuses_a_wrong_dimension(small_spec):
    spec = parse_job_spec(small_spec)
    q = MetaTestSamples.from_spec(spec.test_distributions, spec.seed)
    filled = fill_from_data(spec, q)
    assert filled == spec.model_copy(update={"derived": []}) and filled.derived == []
    small_spec["family"] = {"cov": np.eye(5).tolist()}  # mean from Q, cov as given
    filled = fill_from_data(parse_job_spec(small_spec), q)
    assert filled.derived == ["family.mean"] and filled.family.cov == np.eye(5).tolist()
    # datasets: their dimension is known only once resolved, so the filling checks it
    small_spec["test_distributions"]["members"] = [{"dataset": "a"}, {"dataset": "b"}]
    small_spec["family"] = {"mean": [0.0] * 5}
    spec = parse_job_spec(small_spec)
    rng = np.random.default_rng(0)
    q6 = MetaTestSamples.from_spec(spec.test_distributions, 0, lambda ref: rng.standard_normal((150, 6)))
    with pytest.raises(ValueError, match="family.mean: dimension 5 does not match"):
        fill_from_data(spec, q6)
