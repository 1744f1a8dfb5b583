"""The ledger's archive of a budgeted job's labels (lwl.design.budget.ledger.training_arrays): the
served model's training set and the paid labels the left-out check kept out of it."""

import numpy as np
import pytest

from lwl.design.budget.ledger import LabelledPoints, checkpoint_arrays, training_arrays


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


def test_a_checkpoint_gives_every_label_its_rounds_took_in():
    """A job without a result (failed, cancelled, running: issue #83) serves the labels of its last
    checkpoint, read back from lwl's own pickle-free format: every row of the ledger, in order,
    field labels keeping their width; nothing left out (the check runs at the end)."""
    from lwl.design.state import pack, unpack

    rng = np.random.default_rng(0)
    points = LabelledPoints.empty(3, width=4).added(rng.normal(size=(5, 3)), rng.normal(size=(5, 4)),
                                                    np.full(5, -1), 0, np.zeros((1, 3)))
    flat = unpack(pack({**points.to_flat(), "iteration": 1, "phase": "round"}))
    a = checkpoint_arrays(flat)
    np.testing.assert_array_equal(a["inputs"], points.X)
    np.testing.assert_array_equal(a["labels"], points.y)
    assert a["left_out_inputs"].shape == (0, 3) and a["left_out_labels"].shape == (0, 4)
    assert checkpoint_arrays({"iteration": 3, "best_mean": np.zeros(3)}) is None  # not a budgeted job's
