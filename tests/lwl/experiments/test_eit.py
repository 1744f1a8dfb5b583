"""`lwl experiment eit` at its smoke size: the table, the figures, the cached data."""

import json

import numpy as np
import pytest

from lwl.experiments import eit
from lwl.oracles import make_oracle
from lwl.design.interval_search import pair_rows


@pytest.mark.slow
def test_smoke_study_writes_table_and_figures_and_reuses_its_data(tmp_path):
    cache = tmp_path / "cache"
    doc = eit.run("smoke", cache=cache)
    assert doc["data"]["generated"] and len(list(cache.glob("eit-*.npz"))) == 1
    lows = [r["low"] for r in doc["candidates"]]
    assert len(lows) == 4 and lows == sorted(lows)
    named = {r["paper_model"] for r in doc["candidates"] if r["paper_model"]}
    assert named == {"Model 1", "Model 4"}  # the smoke grid has 4 points: both ends are paper intervals
    kept = min(doc["candidates"], key=lambda r: r["validation"]["mean"])
    assert kept["selected"] and doc["designed"]["low"] == kept["low"]
    assert set(doc["checks"]) == {"model1_ood_worst_by_wide_margin", "id_below_ood_for_every_model",
                                  "designed_ood_at_most_best_paper_model"}
    paths = eit.write_outputs(doc, tmp_path / "out")
    assert {p.name for p in paths} == {"results.json", "results.md", "positions.png", "reconstructions.png"}
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "Model 1" in (tmp_path / "out" / "results.md").read_text() and saved["preset"] == "smoke"
    again = eit.run("smoke", cache=cache)  # read from the cache: the same numbers
    assert not again["data"]["generated"]
    assert [r["ood"] for r in again["candidates"]] == [r["ood"] for r in doc["candidates"]]


def test_cached_dtn_data_agree_with_the_oracle(tmp_path):
    cfg = eit.PRESETS["smoke"]
    data, _ = eit.load_data(cfg, 0, tmp_path)
    M = cfg["grid"]
    omega = 3.0 + 10.0 * data["u_train"][:2]
    f, g = eit.pairs(data["dtn_train"][:2], omega, M)
    rows = pair_rows(data["c_train"][:2], omega, eit.angles(cfg["pairs"]))
    direct = make_oracle({"name": "eit", "params": {"grid": M}}).label(rows).reshape(g.shape)
    np.testing.assert_allclose(g, direct, rtol=0, atol=1e-5 * np.abs(direct).max())
    assert np.abs(f).max() <= 1.0
