"""The ledger's archive of a budgeted job's labels (lwl.design.budget.ledger.training_arrays): the
served model's training set and the paid labels the left-out check kept out of it."""

import numpy as np
import pytest

from lwl.design.budget.ledger import training_arrays


def _result(inputs, labels, left_inputs=None, left_labels=None):
    left = None if left_inputs is None else {"check": {"left_out": True}, "inputs": left_inputs, "labels": left_labels}
    return {"training_set": {"inputs": inputs, "labels": labels}, "left_out": left}


def test_scalar_labels_with_points_left_out():
    a = training_arrays(_result([[0.0, 1.0], [2.0, 3.0]], [1.0, 2.0], [[4.0, 5.0]], [9.0]))
    assert a["inputs"].shape == (2, 2) and a["labels"].shape == (2,)
    np.testing.assert_array_equal(a["left_out_inputs"], [[4.0, 5.0]])
    np.testing.assert_array_equal(a["left_out_labels"], [9.0])


@pytest.mark.parametrize("left", [None, {"check": None, "inputs": [], "labels": []}])
def test_field_labels_with_nothing_left_out_keep_their_width(left):
    """An operator job's labels are (n, p) fields: an empty left-out set is (0, d) and (0, p), so
    the two concatenate to every paid label."""
    res = {"training_set": {"inputs": [[0.0] * 3] * 4, "labels": [[1.0] * 5] * 4}, "left_out": left}
    a = training_arrays(res)
    assert a["left_out_inputs"].shape == (0, 3) and a["left_out_labels"].shape == (0, 5)
    assert np.concatenate([a["labels"], a["left_out_labels"]]).shape == (4, 5)
    assert np.concatenate([a["inputs"], a["left_out_inputs"]]).shape == (4, 3)


def test_field_labels_left_out():
    a = training_arrays(_result([[0.0, 0.0]], [[1.0, 2.0, 3.0]], [[1.0, 1.0], [2.0, 2.0]], [[4.0, 5.0, 6.0]] * 2))
    assert a["left_out_inputs"].shape == (2, 2) and a["left_out_labels"].shape == (2, 3)


def test_an_empty_training_set_is_an_empty_archive():
    a = training_arrays({"training_set": {"inputs": [], "labels": []}})
    assert a["inputs"].shape == (0, 0) and a["labels"].shape == (0,)
    assert a["left_out_inputs"].shape == (0, 0) and a["left_out_labels"].shape == (0,)


def test_an_empty_served_set_keeps_the_left_out_points_shapes():
    a = training_arrays(_result([], [], np.array([[1.0, 2.0, 3.0]]), np.array([4.0])))  # numpy arrays too
    assert a["inputs"].shape == (0, 3) and a["labels"].shape == (0,)
    assert a["left_out_inputs"].shape == (1, 3) and a["left_out_labels"].shape == (1,)
