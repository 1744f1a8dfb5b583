"""lwl.grids: the closed unit grids and their trapezoid rule."""

import numpy as np
import pytest

from lwl.grids import square_nodes, trapezoid_weights, trapezoid_weights_1d, unit_nodes


@pytest.mark.parametrize("M", [2, 9, 33])
def test_the_trapezoid_rule_integrates_linear_functions_exactly_and_quadratics_to_h2(M):
    x, w = unit_nodes(M), trapezoid_weights_1d(M)
    assert x[0] == 0.0 and x[-1] == 1.0 and np.allclose(np.diff(x), 1 / (M - 1))
    assert np.isclose(w.sum(), 1.0) and np.isclose(w @ (3 * x + 2), 3.5)
    h = 1 / (M - 1)
    assert np.isclose(w @ x**2, 1 / 3 + h**2 / 6)  # the trapezoid rule's error term for x^2


@pytest.mark.parametrize("M", [2, 9])
def test_the_square_grid_is_flattened_as_the_fields_are(M):
    nodes, w = square_nodes(M), trapezoid_weights(M)
    assert nodes.shape == (M * M, 2) and w.shape == (M * M,)
    i, j = 1 % M, (M - 1)
    np.testing.assert_array_equal(nodes[i * M + j], [unit_nodes(M)[i], unit_nodes(M)[j]])
    assert np.isclose(w.sum(), 1.0)
    assert np.isclose(w @ (nodes[:, 0] * nodes[:, 1]), 0.25)  # bilinear: exact
