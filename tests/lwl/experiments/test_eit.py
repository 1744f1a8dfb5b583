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


def test_paper_models_only_with_checkpoints_resume_to_the_same_numbers(tmp_path):
    """--models paper trains the paper's four models and nothing else; with a checkpoint folder
    every model's state is kept, and a rerun resumes them (no epoch retrained) to the same errors."""
    cache, ckpt = tmp_path / "cache", tmp_path / "checkpoints"
    doc = eit.run("smoke", cache=cache, models="paper", checkpoints=ckpt)
    assert [r["paper_model"] for r in doc["candidates"]] == ["Model 1", "Model 2", "Model 3", "Model 4"]
    assert doc["reference"] is None and doc["models"] == "paper"
    assert sorted(p.name for p in ckpt.glob("*.pt")) == ["Model_1.pt", "Model_2.pt", "Model_3.pt", "Model_4.pt"]
    again = eit.run("smoke", cache=cache, models="paper", checkpoints=ckpt)
    assert [r["ood"] for r in again["candidates"]] == [r["ood"] for r in doc["candidates"]]
    assert "best of the four on validation" in eit.markdown(doc) and "--models paper" in eit.markdown(doc)
    with pytest.raises(ValueError, match="models"):
        eit.run("smoke", cache=cache, models="four")


def test_gpu_check_script_runs_its_smoke_size_on_a_cpu(tmp_path):
    """bench/eit_gpu.py (the device check of the paper-size run) at smoke size: both
    precisions train, the loss is reported, the extrapolation is written."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "bench" / "eit_gpu.py"
    spec = importlib.util.spec_from_file_location("eit_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "check.json"
    assert module.main(["--smoke", "--conductivities", "16", "--epochs", "3", "--out", str(out)]) in (0, 1)
    report = json.loads(out.read_text())
    assert set(report["precisions"]) == {"float32", "tf32"} and report["device"] == "cpu"
    row = report["precisions"]["float32"]
    assert row["seconds_per_step"] > 0 and set(row["preset_hours"]) == {"all", "paper"}
