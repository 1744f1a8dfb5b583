"""lwl.q_samples: the dataset checks the service runs before it stores a job."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from lwl.q_samples import DatasetError, check_datasets
from lwl.spec import parse_job_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def dataset_spec():
    s = json.loads((ROOT / "examples" / "friedman1.json").read_text())
    s["test_distributions"]["members"][0] = {"dataset": "lab-points"}
    s["test_distributions"]["validation_per_member"] = 100
    return s


def _check(doc, rows):
    spec = parse_job_spec(doc)
    store = {"lab-points": rows}
    check_datasets(spec, lambda ref: store[ref].shape if ref in store else None, lambda ref: store[ref])


@pytest.mark.parametrize("rows, title", [
    (None, "Unknown dataset"),
    (np.random.default_rng(0).uniform(size=(300, 4)), "Dataset has the wrong shape"),
    (np.random.default_rng(0).uniform(size=(80, 5)), "Dataset too small"),
    (np.tile(np.random.default_rng(0).uniform(size=(1, 5)), (300, 1)), "Degenerate test member"),
])
def test_a_bad_dataset_is_refused_naming_the_member(dataset_spec, rows, title):
    doc = copy.deepcopy(dataset_spec)
    if rows is None:
        doc["test_distributions"]["members"][0]["dataset"] = "nobody-uploaded-this"
    with pytest.raises(DatasetError) as exc:
        _check(doc, rows)
    assert exc.value.title == title and exc.value.field == "test_distributions.members.0.dataset"


def test_a_usable_dataset_passes_and_the_rank_check_follows_the_algorithm(dataset_spec):
    _check(dataset_spec, np.random.default_rng(0).uniform(size=(300, 5)))
    from lwl.registry import ALGORITHMS

    assert ALGORITHMS.get("bilevel").extra["full_rank_members"] is True
    assert not ALGORITHMS.get("ama").extra.get("full_rank_members")
