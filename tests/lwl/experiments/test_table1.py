"""Table 1 with other design families, and the merged table (lwl.experiments.table1)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from lwl.experiments import table1
from lwl.measures import Mixture, WeightedPool, from_spec


@pytest.fixture(scope="module")
def docs():
    return {f: table1.run("smoke", columns=["g1"], family=f) for f in ("gaussian", "mixture", "pool")}


def test_each_family_designs_its_own_kind_of_distribution(docs):
    kinds = {"gaussian": "gaussian", "mixture": Mixture, "pool": WeightedPool}
    for family, doc in docs.items():
        run = doc["columns"]["g1"]["runs"][0]
        assert doc["family"] == family
        measure = from_spec(run["distribution"])
        if family == "gaussian":
            assert run["distribution"]["family"] == "gaussian"
        else:
            assert isinstance(measure, kinds[family])
            assert "initial" in run["err"]  # theta^0 is Q's fit, reported beside the design


def test_merge_puts_every_family_beside_the_gaussian_baselines(docs, tmp_path):
    paths = table1.write_merged(list(docs.values()), tmp_path)
    merged = table1.merge(list(docs.values()))
    s = merged["columns"]["g1"]["summary"]
    for family in docs:
        want = docs[family]["columns"]["g1"]["summary"]["optimized"]
        assert s[table1.design_key(family)] == want
    # the Normal row is the paper's N(m0 1, I), taken from the Gaussian document
    assert s["normal"] == docs["gaussian"]["columns"]["g1"]["summary"]["normal"]
    text = (tmp_path / "results.md").read_text()
    for label in ("| Ours (gaussian family) |", "| Ours (mixture family) |", "| Ours (pool family) |"):
        assert label in text
    assert "separated" in text and paths[1].name == "results.md"


def test_merge_refuses_documents_whose_baselines_disagree(docs):
    bad = copy.deepcopy(docs["pool"])
    bad["columns"]["g1"]["runs"][0]["err"]["mixture"] *= 1.5
    with pytest.raises(ValueError, match="column g1 seed 0: baseline mixture differs"):
        table1.merge([docs["gaussian"], bad])
    with pytest.raises(ValueError, match="Gaussian family's document"):
        table1.merge([docs["mixture"], docs["pool"]])


def test_separation_names_the_closest_baseline():
    summary = {"optimized": {"mean": 0.10, "two_sd": 0.01}, "optimized_pool": {"mean": 0.05, "two_sd": 0.01},
               **{b: {"mean": 0.5, "two_sd": 0.01} for b in table1.TABLE1_BASELINES}}
    summary["ncoreset"] = {"mean": 0.07, "two_sd": 0.005}
    assert table1.separation(summary, ["gaussian", "pool"]).endswith(": separated")
    assert "nCoreSet" in table1.separation(summary, ["gaussian", "pool"])
    summary["ncoreset"] = {"mean": 0.07, "two_sd": 0.02}
    assert table1.separation(summary, ["gaussian", "pool"]).endswith("NOT separated")


def test_figures_include_the_design_against_q(docs, tmp_path):
    paths = table1.write_outputs(docs["mixture"], tmp_path)
    assert (tmp_path / "design.png") in paths and (tmp_path / "design.png").stat().st_size > 0
    assert "| Ours (mixture family) |" in (tmp_path / "results.md").read_text()
    assert "| Normal (Q's moments) |" in (tmp_path / "results.md").read_text()


def test_paper_schedule_refuses_other_families():
    with pytest.raises(ValueError, match="family: 'pool'"):
        table1.column_spec(table1.COLUMNS[0], seed=0, family="pool", optimizer="paper")
    with pytest.raises(ValueError, match="family: unknown family 'kde'"):
        table1.run("smoke", columns=["g1"], family="kde")
    assert np.isfinite(table1.COLUMNS[0].lengthscale)


def test_join_puts_column_split_runs_into_one_table_in_column_order(docs, tmp_path):
    other = table1.run("smoke", columns=["g2_d5"], family="gaussian")
    joined = table1.join([other, docs["gaussian"]])
    assert list(joined["columns"]) == ["g1", "g2_d5"]  # the table's order, not the arguments'
    assert joined["columns"]["g2_d5"] == other["columns"]["g2_d5"]
    assert joined["parts"] == 2 and joined["wall_seconds"] == max(other["wall_seconds"],
                                                                  docs["gaussian"]["wall_seconds"])
    table1.write_outputs(joined, tmp_path)
    assert "2 processes side by side" in (tmp_path / "results.md").read_text()
    with pytest.raises(ValueError, match="column g1 is in documents 0 and 1"):
        table1.join([docs["gaussian"], docs["gaussian"]])
    with pytest.raises(ValueError, match="different families"):
        table1.join([other, docs["mixture"]])


def test_runs_record_the_checks_beside_the_inner_objective(docs):
    run = docs["gaussian"]["columns"]["g1"]["runs"][0]
    its = [it for it, _ in run["checks"]]
    assert its[0] == 0 and its == sorted(its) and its[-1] == len(run["validation_err"])
    assert all(np.isfinite(err) for _, err in run["checks"])


def test_authors_q_is_their_seed_42_draw_and_leaves_torch_as_it_was():
    """--q authors: the means are the first standard normals of torch's generator seeded 42 (as
    the authors' driver draws them, in float32), g4's come after their RKHS function's 11,000
    uniforms; the covariances are symmetric positive definite; torch's generator state and default
    dtype are untouched; the authors' m0 replaces lwl's."""
    import torch

    torch.manual_seed(7)
    before = torch.get_rng_state()
    g1 = next(c for c in table1.COLUMNS if c.key == "g1")
    g4 = next(c for c in table1.COLUMNS if c.key == "g4")
    members = table1.authors_q_members(g1)
    assert torch.equal(torch.get_rng_state(), before) and torch.get_default_dtype() == torch.float32
    gen = torch.Generator().manual_seed(42)
    np.testing.assert_allclose(members[0][0], torch.randn(10, 2, generator=gen)[0].double().numpy(), rtol=0)
    assert all(np.linalg.eigvalsh(C).min() > 0 and np.allclose(C, C.T) for _, C in members)
    gen = torch.Generator().manual_seed(42)
    torch.rand(1000, generator=gen), torch.rand(1000, 10, generator=gen)
    np.testing.assert_allclose(table1.authors_q_members(g4)[0][0], torch.randn(10, 10, generator=gen)[0].double().numpy())
    spec = table1.column_spec(g4, seed=0, q="authors", **{k: v for k, v in table1.PRESETS["smoke"].items() if k != "runs"})
    assert spec["family"]["mean"] == [0.0] * 10  # the authors' m0 for their RKHS function (lwl's table: 1/2)
    assert np.allclose(spec["test_distributions"]["members"][0]["gaussian"]["mean"], table1.authors_q_members(g4, 3)[0][0])
