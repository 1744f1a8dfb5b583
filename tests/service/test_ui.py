"""The dashboard in real headless Chromium (Debian's ``chromium`` driven by Playwright) against a
real ``lwl serve``: every kind of job page renders with no console error, the live page moves,
labels uploaded through the page resume an ask/tell job, owners are kept apart, and a bad spec
shows its field error.

Screenshots go to $LWL_SCREENSHOTS when set (``LWL_SCREENSHOTS=docs/ui pytest
tests/service/test_ui.py`` writes the committed ones)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from lwl.oracles import make_oracle
from tests.service.conftest import (Server, client_fixture, http_job, server_fixture, small_job, unreachable_lab,
                                    wait_until)

ALICE, BOB, CAROL = "key-alice", "key-bob", "key-carol"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = os.environ.get("LWL_SCREENSHOTS")

pytestmark = [pytest.mark.server, pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                                          "(scripts/setup.sh --system installs it)")]


server = server_fixture("ui", {"LWL_API_KEYS": f"alice:{ALICE},bob:{BOB},carol:{CAROL}",
                              "LWL_ORACLE_ALLOWED_HOSTS": "127.0.0.1", "LWL_ORACLE_ALLOWED_NETWORKS": "127.0.0.1/32",
                              "LWL_ORACLE_BACKOFF_S": "0.05"})
alice = client_fixture(ALICE, scope="module")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Page:
    """A browser tab signed in with one API key, recording every console error."""

    def __init__(self, browser, server, key: str):
        self.ctx = browser.new_context(viewport={"width": 1360, "height": 900}, accept_downloads=True)
        self.page = self.ctx.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.url = server.url
        self.page.goto(f"{server.url}/ui")
        self.page.fill("#api-key", key)
        self.page.click("#key-form button")
        self.page.wait_for_selector("#key-state:text('key set')")

    def go(self, hash_: str):
        self.page.goto(f"{self.url}/ui{hash_}")
        return self.page

    def shot(self, name: str):
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)

    def close(self):
        self.ctx.close()


@pytest.fixture
def tab(browser, server):
    t = Page(browser, server, ALICE)
    yield t
    t.close()


def wait_status(client, job_id, status, timeout=120):
    wait_until(lambda: client.job(job_id)["status"] == status, timeout, 0.1, status)


def readme_job() -> dict:
    """The README's Friedman-1 job, sized to run in seconds (300 iterations, N = 256)."""
    spec = json.loads((Path(__file__).resolve().parents[2] / "examples" / "friedman1.json").read_text())
    spec["algorithm"] = {"name": "bilevel", "iterations": 300}
    spec["evaluation"] = {"train_size": 256, "sizes": [64, 128, 256], "baselines": ["normal", "barycenter", "mixture"]}
    return spec


def asktell_spec(iterations=3, batch_size=4096):
    spec = small_job(iterations=iterations)
    spec["oracle"] = {"name": "external", "batch_size": batch_size}  # one batch per round
    spec.pop("evaluation")
    return spec


@pytest.fixture(scope="module")
def finished(alice):
    """One succeeded job of each algorithm."""
    from tests.conftest import ama_spec, particle_spec

    ids = {"bilevel": alice.submit(readme_job()), "ama": alice.submit(ama_spec.__wrapped__()),
           "particle": alice.submit(particle_spec.__wrapped__())}
    for job_id in ids.values():
        wait_status(alice, job_id, "succeeded", 300)
    return ids


def test_served_with_its_assets_and_no_internet(server):
    import httpx

    html = httpx.get(f"{server.url}/ui").text
    assert "/ui/static/app.js" in html and "http" not in re.sub(r'href="#[^"]*"', "", html.split("<body>")[1])
    for name in ("app.js", "plots.js", "style.css"):
        assert httpx.get(f"{server.url}/ui/static/{name}").status_code == 200
    r = httpx.get(f"{server.url}/ui/static/..%2Fspec.py")
    assert r.status_code == 404 and r.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize("kind", ["bilevel", "ama", "particle"])
def test_finished_job_pages_render_without_console_errors(tab, finished, kind):
    page = tab.go(f"#/jobs/{finished[kind]}")
    page.wait_for_selector("#evaluation-section")
    assert page.inner_text("#job-header .badge") == "succeeded"
    assert page.locator("#convergence svg").count() >= 1
    if kind == "bilevel":
        page.wait_for_selector("[data-view=projection] svg")
        assert page.locator("[data-view=cov-design] svg rect").count() > 25  # a 5 x 5 heatmap
        text = page.inner_text("#verdict")  # three-valued over the evaluation's training draws
        assert re.search(r"is (better than|within noise of|WORSE than) the best baseline", text), text
        assert "training draw" in text
        assert page.locator("#evaluation svg").count() == 2  # Err at N and Err against N
    else:
        page.wait_for_selector("[data-view=mean] svg")
        assert page.locator("[data-view^=sample-]").count() == 4
        assert "Relative OOD error" in page.inner_text("#verdict")
    if kind == "ama":
        assert page.locator("[data-view=spectrum] svg").count() == 1
    assert json.loads(page.text_content("#spec-json"))["algorithm"]["name"] in ("bilevel", "ama", "particle_ama")
    tab.shot(f"job-{kind}")
    assert tab.errors == []


def test_a_budgeted_job_without_an_audit_shows_its_validation_verdict(tab, alice):
    spec = small_job()
    spec.update(budget=300, algorithm={"name": "bilevel"}, evaluation={"enabled": False})
    job = alice.submit(spec)
    wait_status(alice, job, "succeeded")
    v = alice.result(job)["verdict"]
    assert v["kind"] == "validation"
    page = tab.go(f"#/jobs/{job}")
    page.wait_for_selector("#evaluation-section #verdict")
    text = page.inner_text("#verdict")
    assert text.startswith("Verdict on validation, no held-out labels")
    if not v["returned_initial"]:  # the story at the top says it in a word
        assert page.inner_text("#story-word").lower() == {"better": "won", "tie": "tied", "worse": "lost"}[v["outcome"]]
    if v["returned_initial"]:
        assert "Q's own mixture was returned" in text
    else:  # the candidates in words, not by their ids
        words = {"better": "better than", "tie": "within noise of", "worse": "WORSE than"}[v["outcome"]]
        assert text.startswith(f"Verdict on validation, no held-out labels: {v['names'][v['selected']]}'s points")
        assert f"validate {words} Q's own mixture's at {v['points_each']} points each" in text
    assert "which also chose the distribution" in page.inner_text("#verdict-basis")
    assert tab.errors == []


def test_the_job_list_keeps_a_job_whose_verdict_has_no_ratio(tab, alice):
    """The smallest budget ends before any comparison: its verdict names a best baseline with
    ratio null. The list shows the job ("no verdict"; Plots.fmt(null) threw and dropped it) and
    the job's page says why it has no verdict."""
    spec = small_job()
    spec.update(budget=32, algorithm={"name": "bilevel"}, evaluation={"enabled": False})
    job = alice.submit(spec)
    wait_status(alice, job, "succeeded")
    view = alice.job(job)
    assert view["verdict"]["best_baseline"] == "mixture" and view["verdict"]["ratio"] is None  # the case
    (why,) = [w for w in view["warnings"] if w.startswith("no verdict")]
    page = tab.go("#/jobs")
    row = page.wait_for_selector(f"tr[data-id='{job}']", timeout=15_000)
    assert row.query_selector(".verdict").inner_text() == "no verdict"
    assert row.query_selector(".labels").inner_text() == "32 / 32"
    assert page.locator("#main .problem").count() == 0  # no "TypeError" box in the list
    tab.shot("jobs-no-verdict")
    page = tab.go(f"#/jobs/{job}")
    page.wait_for_selector("#evaluation-section #verdict")
    assert page.inner_text("#verdict") == f"No verdict{why.removeprefix('no verdict')}."
    assert "broadened_" not in page.inner_text("#verdict")  # the candidates still in the running, in words
    assert why in page.inner_text("#job-header")
    tab.shot("job-no-verdict")
    assert tab.errors == []


def test_a_budgeted_job_page_shows_its_labels_and_serves_its_training_set(tab, alice, browser, tmp_path):
    """What the lab paid for: labels of the budget in the header and the list, Err against labels
    spent, labels per round, where the points came from in words, and the training set as .npz
    and CSV, equal to the API's."""
    spec = small_job()
    spec.update(budget=300, algorithm={"name": "bilevel"})
    job = alice.submit(spec)
    wait_status(alice, job, "succeeded")
    result = alice.result(job)
    page = tab.go(f"#/jobs/{job}")
    page.wait_for_selector("#training-set")
    assert page.inner_text("#job-labels") == f"labels {result['labels_used']} / 300"
    outcome = result["verdict"]["outcomes"]["mixture"]  # the story at the top names the verdict in a word
    assert page.inner_text("#story-word").lower() == {"better": "won", "tie": "tied", "worse": "lost"}[outcome]
    rounds = result["history"]
    scored = [r for r in rounds if r.get("validation_err") is not None or "race" in r]
    chart = page.locator("[data-series=err-vs-labels] svg")
    assert chart.locator("circle").count() >= len(scored)  # one dot per scored round, and the held-out ring
    assert chart.locator("[data-heldout]").count() == 1  # the training set's held-out Err at equal labels
    assert chart.locator("line.ref").count() == len(result["evaluation"]["err"]) - 1  # each baseline's
    bars = page.locator("[data-series=labels-per-round] svg rect")
    assert bars.count() == len(rounds)
    labels_text = page.inner_text("[data-series=labels-per-round]")
    assert all(str(r["labels"]) in labels_text for r in rounds)
    looks = [r for r in rounds if r.get("race")]
    assert looks  # the job races Q's mixture from its refinement round on
    race = page.locator("[data-series=race] svg")
    assert race.locator("circle").count() == 2 * len(looks)  # the leading candidate's and Q's mixture's, per look
    assert race.locator("polyline[data-incumbent=q_mixture]").count() == 1
    assert race.locator("line.vmark").count() == 0  # nobody overtook
    legend = page.inner_text("[data-series=race]")
    assert "Q's own mixture" in legend and "broadened_" not in legend and "q_mixture" not in legend
    sources = page.inner_text("#labels-by-source")
    assert "Q's validation points" in sources and "q_mixture" not in sources and "broadened_" not in sources
    assert "broadened_" not in page.inner_text("#evaluation-section")
    X, y = alice.training_set(job)
    with page.expect_download() as d:
        page.click("#training-npz")
    with np.load(d.value.path(), allow_pickle=False) as z:
        assert np.array_equal(z["inputs"], X) and np.array_equal(z["labels"], y)
    with page.expect_download() as d:
        page.click("#training-csv")
    rows = Path(d.value.path()).read_text().splitlines()
    assert rows[0] == ",".join([f"x{j + 1}" for j in range(X.shape[1])] + ["label", "served"])
    got = np.loadtxt(d.value.path(), delimiter=",", skiprows=1)
    served = got[:, -1] == 1  # the rows after them (served 0): the points the left-out check kept out
    assert np.array_equal(got[served, :-2], X) and np.array_equal(got[served, -2], y)  # shortest round-trip decimals
    assert (~served).sum() == len(result["left_out"]["labels"])
    tab.shot("job-budgeted")
    page = tab.go("#/jobs")
    row = page.wait_for_selector(f"tr[data-id='{job}']")
    assert row.query_selector(".labels").inner_text() == f"{result['labels_used']} / 300"
    assert tab.errors == []
    _race_with_a_takeover_in_the_report(browser, result, tmp_path)


@pytest.fixture(scope="module")
def budgeted_gp(alice):
    """A finished budgeted job whose served model is a GP (the issue #85 page), audited at equal labels."""
    spec = small_job()
    # one baseline (Q's own mixture) over two training draws: the audit's GP fits are most of the job's time
    spec.update(budget=300, algorithm={"name": "bilevel"}, model={"name": "gp", "restarts": 0},
                evaluation={"baselines": ["mixture"], "draws": 2})
    job = alice.submit(spec)
    wait_status(alice, job, "succeeded", 300)
    return job


WON = {"better": "won", "tie": "tied", "worse": "lost"}


def test_a_budgeted_gp_job_page_tells_what_was_paid_chosen_and_won(tab, alice, budgeted_gp):
    """The sentence at the top: labels of the budget and rounds, the chosen distribution in words, and
    the verdict word against Q's own mixture at equal labels (issue #85); a tie says what it means."""
    result = alice.result(budgeted_gp)
    v = result["verdict"]
    assert v["kind"] == "equal_labels"
    page = tab.go(f"#/jobs/{budgeted_gp}")
    page.wait_for_selector("#story #story-word")
    paid = page.inner_text("#story-paid")
    assert f"{result['labels_used']} of 300 labels, in {result['rounds']} rounds" in paid
    assert f"Chosen: {result['names'][result['selected']['candidate']]}" in paid and "broadened_" not in paid
    outcome = v["outcomes"]["mixture"]
    assert page.inner_text("#story-word").lower() == WON[outcome]
    verdict = page.inner_text("#story-verdict")
    assert "at equal labels (300, each trained by the same gp)" in verdict and "Q's own mixture" in verdict
    assert shown_number(verdict.split("held-out Err")[1]) == pytest.approx(v["err"], rel=5e-3)
    if outcome == "tie":
        assert "more labels" in page.inner_text("#story-tie") and "another model" in page.inner_text("#story-tie")
    else:
        assert page.locator("#story-tie").count() == 0
    # the story sits above the charts
    assert page.evaluate("document.querySelector('#story').compareDocumentPosition("
                         "document.querySelector('#convergence-section')) & Node.DOCUMENT_POSITION_FOLLOWING")
    assert tab.errors == []


def test_a_budgeted_gp_job_page_shows_its_served_model(tab, alice, budgeted_gp):
    """The Model section: kernel, each input's lengthscale beside its spread with the long ones marked
    (over 10x the training set's sd of that input, said on the page), output scale, noise, loo_err,
    the LOO coverage and chart (one dot per validation label, from the result's model_diagnosis),
    the /model link, a curl line for /predict, and a prediction that equals the API's."""
    result = alice.result(budgeted_gp)
    doc = alice.model(budgeted_gp)
    (diag,) = result["model_diagnosis"]["outputs"]
    n_val = len(diag["loo_residuals"])
    assert n_val == len(diag["loo_sd"]) > 10 and all(sd > 0 for sd in diag["loo_sd"])
    y = np.asarray(result["training_set"]["labels"][:n_val])  # Q's validation labels head the training set
    r = np.asarray(diag["loo_residuals"])
    inside = int((np.abs(r) <= 2 * np.asarray(diag["loo_sd"])).sum())
    page = tab.go(f"#/jobs/{budgeted_gp}")
    page.wait_for_selector("#model-section #lengthscales-0")
    assert "squared exponential" in page.inner_text("#model-kind")
    (out,) = doc["outputs"]
    spread = doc["standardisation"]["input_scale"]
    rows = page.locator("#lengthscales-0 tbody tr")
    assert rows.count() == len(out["lengthscale"]) == 5
    for i, (ell, sd) in enumerate(zip(out["lengthscale"], spread)):
        row = rows.nth(i)
        assert float(row.locator("td").nth(0).inner_text()) == pytest.approx(ell, rel=0.03)  # "1.7e+4": 2 digits
        assert row.get_attribute("data-long") == ("true" if ell / sd > 10 else "false")
        assert ("long" in row.inner_text()) == (ell / sd > 10)
    assert "over 10× its spread" in page.inner_text("#lengthscale-rule")
    facts = {k: page.inner_text(f"#model-facts-0 tr[data-fact='{k}'] td.num")
             for k in ("output scale", "noise", "loo_err", "LOO coverage")}
    assert shown_number(facts["noise"]) == pytest.approx(out["noise"], rel=5e-3)
    assert shown_number(facts["loo_err"]) == pytest.approx(diag["loo_err"], rel=5e-3)
    assert f"{100 * diag['loo_coverage_2sd']:.0f}% within 2 sd" in facts["LOO coverage"]
    loo = page.locator("[data-series=loo-0] svg")
    assert loo.locator(":scope > circle").count() == n_val  # one dot per validation label (not the legend's)
    assert f"{inside} of {n_val} inside ±2 sd" in page.inner_text("[data-series=loo-0]")
    assert len(y) == n_val
    assert page.get_attribute("#model-link", "href") == f"/v1/jobs/{budgeted_gp}/model"
    curl = page.inner_text("#curl-predict")
    assert f"/v1/jobs/{budgeted_gp}/predict" in curl and """-d '{"inputs":[[""" in curl
    assert "Authorization: Bearer" in curl  # this server has keys
    x = [float(t) for t in page.input_value("#predict-input").split(",")]
    page.click("#predict")
    page.wait_for_selector("#predict-out .ok")
    mean, std = alice.predict(budgeted_gp, np.array([x]))
    shown = page.inner_text("#predict-out")
    assert shown_number(shown.split("mean")[1]) == pytest.approx(abs(mean[0]), rel=5e-3)
    assert shown_number(shown.split("±")[1]) == pytest.approx(std[0], rel=5e-3)
    tab.shot("job-budgeted-gp")
    assert tab.errors == []


def test_budgeted_charts_have_legends_ticks_and_nothing_on_the_edge(tab, budgeted_gp):
    """Every chart of the budgeted page says what it plots (a legend, labelled axes, more than two
    ticks on the race's narrow log axis) and pads its y range: no dot on the frame's edge."""
    page = tab.go(f"#/jobs/{budgeted_gp}")
    page.wait_for_selector("[data-series=loo-0] svg")
    for key in ("err-vs-labels", "race", "loo-0"):
        legend = page.locator(f"[data-series={key}] text.legend")
        assert legend.count() >= 2, key
        assert page.locator(f"[data-series={key}] text.label").count() == 2, key  # both axes named
    assert "two-fold Err on Q's validation labels" in page.inner_text("[data-series=err-vs-labels]")
    assert "lower is better" in page.inner_text("[data-series=race]")
    assert page.locator("[data-series=race] text.tick").count() >= 6  # x and y: more than their min and max
    on_edge = page.evaluate("""() => {
        const out = [];
        for (const key of ['err-vs-labels', 'race', 'loo-0']) {
            const box = document.querySelector(`[data-series=${key}]`);
            const frame = box.querySelector('rect.frame');
            const top = +frame.getAttribute('y'), bottom = top + +frame.getAttribute('height');
            for (const c of box.querySelectorAll('svg > circle')) {
                const cy = +c.getAttribute('cy');
                if (cy < top + 2 || cy > bottom - 2) out.push(key);
            }
        }
        return out;
    }""")
    assert on_edge == []


def _bars_cut_off(page) -> list:
    """The bars of the labels-per-round chart (and their labels) that fall outside its SVG."""
    return page.evaluate("""() => {
        const svg = document.querySelector('[data-series=labels-per-round] svg');
        const h = svg.viewBox.baseVal.height;
        return [...svg.querySelectorAll('rect, text.tick')].filter((n) => {
            const b = n.getBBox();
            return b.y < 0 || b.y + b.height > h;
        }).map((n) => n.textContent || n.getAttribute('y'));
    }""")


def test_labels_per_round_shows_every_round_at_13_rounds_and_more(browser, alice, budgeted_gp, tmp_path):
    """A budgeted report whose history has 13 and then 20 rounds (a synthetic document: the job's own,
    its last round repeated, the budget grown to what they spent): every round's bar and label inside
    the chart, none cut off; the story and the Model section render offline too."""
    result = alice.result(budgeted_gp)
    for rounds in (13, 20):
        doc = json.loads(json.dumps(result))
        history = doc["history"]
        while len(history) < rounds:
            last = dict(history[-1], round=history[-1]["round"] + 1, iteration=history[-1]["iteration"] + 1)
            last["labels_used"] = history[-1]["labels_used"] + last["labels"]
            if last.get("race"):  # each look at more points each, as the rounds buy them
                last["race"] = dict(last["race"], points_each=last["race"]["points_each"] + last["labels"] // 2)
            history.append(last)
        doc["rounds"] = rounds
        doc["budget"] = doc["labels_used"] = history[-1]["labels_used"]  # a budget the longer design spent
        path = tmp_path / f"rounds-{rounds}.json"
        path.write_text(json.dumps(doc))
        out = tmp_path / f"rounds-{rounds}.html"
        proc = subprocess.run(["lwl", "report", str(path), "--out", str(out)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        ctx = browser.new_context(offline=True, viewport={"width": 1360, "height": 900})
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(out.as_uri())
        page.wait_for_selector("[data-series=labels-per-round] svg")
        assert page.locator("[data-series=labels-per-round] svg rect").count() == rounds
        text = page.inner_text("[data-series=labels-per-round]")
        assert all(f"{k} · " in text for k in range(1, rounds + 1))
        assert _bars_cut_off(page) == []
        assert f"of {doc['budget']:,} labels, in {rounds} rounds" in page.inner_text("#story-paid")
        assert page.locator("#model-section #lengthscales-0 tbody tr").count() == 5
        assert page.locator("#curl-predict").count() == 0  # no server offline: the loader's line instead
        ctx.close()
        assert errors == []


def _race_with_a_takeover_in_the_report(browser, result, tmp_path):
    """Where Q's mixture overtook the leader, the race chart draws a line at that look, in words and
    by which rule (lwl report of the job's result with its last look turned into a takeover by z)."""
    doc = json.loads(json.dumps(result))
    last = [r for r in doc["history"] if r.get("race")][-1]["race"]
    last.update(z=1.3, outcome="rival won", overtook=last["incumbent"], by="z")
    path = tmp_path / "raced.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "raced.html"
    proc = subprocess.run(["lwl", "report", str(path), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ctx = browser.new_context(offline=True)
    page = ctx.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(out.as_uri())
    page.wait_for_selector("[data-series=race] svg")
    mark = page.locator(f"[data-series=race] line.vmark[data-overtaken='{last['points_each']}']")
    assert mark.count() == 1 and mark.get_attribute("data-overtook") == last["incumbent"]
    text = page.inner_text("[data-series=race]")
    assert "Q's own mixture took over (z 1.3" in text and doc["names"][last["incumbent"]] in text  # the leader's curve
    assert "broadened_" not in text and "q_mixture" not in text
    ctx.close()
    assert errors == []


def shown_number(text: str) -> float:
    """The first number in a cell's text (the page prints 3 significant digits)."""
    return float(re.search(r"[0-9.]+(?:e-?[0-9]+)?", text).group())


def test_bilevel_page_marks_the_kept_iterate_and_its_checks(tab, finished, alice):
    sel = alice.result(finished["bilevel"])["selected"]
    page = tab.go(f"#/jobs/{finished['bilevel']}")
    ring = page.wait_for_selector("[data-series=checks] circle.ring")
    assert int(ring.get_attribute("data-iteration")) == sel["iteration"]
    assert float(ring.get_attribute("data-err")) == pytest.approx(sel["check_err"])
    assert int(page.get_attribute("#kept", "data-iteration")) == sel["iteration"]
    assert f"{sel['initial_check_err']:.3g}" in page.inner_text("#kept")
    # the initial distribution's check as the reference the checks are read against
    ref = page.locator("[data-series=checks] line.ref[data-ref=initial]")
    assert float(ref.get_attribute("data-err")) == pytest.approx(sel["initial_check_err"])
    # the same iterate marked on the per-iteration charts
    for key in ("objective", "validation_err"):
        assert int(page.get_attribute(f"[data-series={key}] line.vmark", "data-kept")) == sel["iteration"]
    assert tab.errors == []


def test_bilevel_page_shows_the_initial_err_beside_the_designs(tab, finished, alice):
    result = alice.result(finished["bilevel"])
    v, comparison = result["verdict"], result["evaluation"]["comparisons"]["normal"]
    page = tab.go(f"#/jobs/{finished['bilevel']}")
    page.wait_for_selector("#err-summary")
    design = page.locator("#err-summary tr[data-row=design] td").first.inner_text()
    initial = page.locator("#err-summary tr[data-row=initial] td")
    assert shown_number(design) == pytest.approx(v["err"], rel=5e-3)
    assert shown_number(initial.nth(0).inner_text()) == pytest.approx(v["initial_err"], rel=5e-3)
    ratio = initial.nth(2).inner_text().split("initial")[1]
    assert shown_number(ratio) == pytest.approx(v["err"] / v["initial_err"], rel=5e-3)
    shown = [float(t) for t in re.findall(r"[0-9.]+", ratio.split("95%")[1])]
    assert shown == pytest.approx(comparison["ratio_interval"], rel=5e-3, abs=1e-3)  # over the training draws
    assert initial.nth(3).inner_text() == {"better": "better", "tie": "within noise", "worse": "worse"}[v["initial_outcome"]]
    # the best baseline in words (lwl.names), not by its id
    assert f"best baseline: {v['names'][v['best_baseline']]}" in page.inner_text("#err-summary tr[data-row=best-baseline]")


def test_covariance_heatmaps_share_one_scale_and_name_their_axes(tab, finished):
    page = tab.go(f"#/jobs/{finished['bilevel']}")
    page.wait_for_selector("[data-view=cov-q] .colorbar")
    bars = [page.locator(f"[data-view={v}] .colorbar") for v in ("cov-design", "cov-q")]
    assert [b.get_attribute("data-lo") for b in bars] == [bars[0].get_attribute("data-lo")] * 2
    assert [b.get_attribute("data-hi") for b in bars] == [bars[0].get_attribute("data-hi")] * 2
    for v in ("cov-design", "cov-q"):
        text = page.inner_text(f"[data-view={v}]")
        assert "coordinate i" in text and "coordinate j" in text


def test_legends_do_not_cover_the_plotted_points(tab, finished):
    page = tab.go(f"#/jobs/{finished['bilevel']}")
    page.wait_for_selector("[data-view=projection] svg")
    overlaps = page.evaluate("""() => {
        const out = [];
        for (const svg of document.querySelectorAll('svg.chart')) {
            const frame = svg.querySelector('rect.frame');
            if (!frame) continue;
            const a = frame.getBoundingClientRect();
            for (const t of svg.querySelectorAll('text.legend')) {
                const b = t.getBoundingClientRect();
                if (b.left < a.right && b.right > a.left && b.top < a.bottom && b.bottom > a.top) out.push(t.textContent);
            }
        }
        return out;
    }""")
    assert overlaps == []
    assert page.locator("#convergence text.legend").count() >= 3  # the check ran on legends
    assert page.locator("[data-view=projection] text.legend").count() >= 2


def test_a_finished_job_shows_loading_not_an_empty_history_while_it_loads(tab, finished):
    held = []

    def hold(route):  # the request waits until the test lets it go
        held.append(route)

    page = tab.page
    page.route(re.compile(r".*/v1/jobs/[0-9a-f]+/history.*"), hold)
    page.route(re.compile(r".*/v1/jobs/[0-9a-f]+/result$"), hold)
    page.set_default_timeout(15_000)
    tab.go(f"#/jobs/{finished['bilevel']}")
    page.wait_for_selector("#convergence-loading")
    while not held:
        page.wait_for_timeout(50)
    assert "No iterations" not in page.inner_text("#convergence-section")
    held.pop().continue_()  # the history; the result is held next
    page.wait_for_selector("#result-loading")
    assert page.locator("#convergence-loading").count() == 0
    assert "No iterations" not in page.inner_text("#convergence-section")
    while not held:
        page.wait_for_timeout(50)
    held.pop().continue_()
    page.wait_for_selector("[data-series=checks]")
    page.wait_for_selector("#evaluation-section")
    assert page.locator("#result-loading").count() == 0
    assert tab.errors == []


def test_no_key_box_when_the_server_has_no_keys(browser, tmp_path, server):
    keyless = Server(tmp_path / "keyless", env={"LWL_API_KEYS": ""}, no_worker=True).start()
    try:
        ctx = browser.new_context()
        page = ctx.new_page()
        page.goto(f"{keyless.url}/ui")
        page.wait_for_selector("#jobs")  # the page works without a key ...
        assert page.locator("#key-form").is_hidden()  # ... and does not ask for one
        page.goto(f"{server.url}/ui")  # a server with keys asks
        page.wait_for_selector("#key-needed")
        assert page.locator("#key-form").is_visible()
        ctx.close()
    finally:
        keyless.stop()


def test_samples_download_equals_the_api(tab, finished, alice):
    page = tab.go(f"#/jobs/{finished['bilevel']}")
    page.wait_for_selector("#download-npy")
    page.fill("#samples-n", "37")
    page.fill("#samples-seed", "5")
    with page.expect_download() as d:
        page.click("#download-npy")
    got = np.load(d.value.path())
    assert np.array_equal(got, alice.samples(finished["bilevel"], 37, seed=5))
    with page.expect_download() as d:
        page.click("#download-csv")
    assert np.allclose(np.loadtxt(d.value.path(), delimiter=","), got, rtol=1e-15, atol=0)
    assert tab.errors == []


def test_jobs_page_lists_and_filters_and_shows_new_jobs_live(tab, finished, alice):
    page = tab.go("#/jobs")
    page.wait_for_selector(f"tr[data-id='{finished['bilevel']}']")
    assert page.locator("tr[data-status=succeeded]").count() >= 3
    verdict = page.inner_text(f"tr[data-id='{finished['bilevel']}'] .verdict")
    assert "×" in verdict
    new = alice.submit(small_job(iterations=20, seed=7))  # appears without a reload
    page.wait_for_selector(f"tr[data-id='{new}']", timeout=15_000)
    tab.shot("jobs")
    page.select_option("#status-filter", "failed")
    page.wait_for_function("!document.querySelector(\"tr[data-status='succeeded']\")")
    assert tab.errors == []


def test_live_page_advances_while_the_job_runs(tab, alice):
    spec = small_job(iterations=3000)
    # the paper's plain schedule never stops early: the job is still running when it is cancelled
    spec["algorithm"].update(samples_per_iteration=200, optimizer="paper", learning_rate=1e-3)
    job_id = alice.submit(spec)
    page = tab.go(f"#/jobs/{job_id}")
    page.wait_for_selector("#job-header .badge:text('running')", timeout=60_000)

    def iteration():
        text = page.inner_text("#job-header .progress")
        return int(text.split("/")[0])

    page.wait_for_function("document.querySelector('#convergence svg polyline') !== null", timeout=30_000)
    first = iteration()
    wait_until(lambda: iteration() > first + 5, 30, 0.2, "the page to advance")
    points = page.eval_on_selector("[data-series=objective] polyline", "p => p.points.length")
    assert points > 1
    tab.shot("job-running")
    page.click("#cancel")
    page.wait_for_selector("#job-header .badge:text('cancelled')", timeout=30_000)
    page.wait_for_selector("#spec-json", state="attached")
    tab.shot("job-cancelled")
    assert tab.errors == []


def open_waiting_asktell_job(tab, alice):
    """An ask/tell job waiting for its first labels, open in the tab at its batch panel."""
    job_id = alice.submit(asktell_spec())
    wait_status(alice, job_id, "awaiting_labels", 60)
    page = tab.go(f"#/jobs/{job_id}")
    page.wait_for_selector("#asktell #batch-id")
    return job_id, page


def test_asktell_labels_uploaded_through_the_page_resume_the_job(tab, alice, tmp_path):
    job_id, page = open_waiting_asktell_job(tab, alice)
    tab.shot("job-asktell")
    oracle = make_oracle({"name": "friedman1"})
    for round_ in range(50):
        batch = page.inner_text("#batch-id")
        with page.expect_download() as d:
            page.click("#inputs-npy")
        x = np.load(d.value.path())
        labels = tmp_path / f"labels-{round_}.npy"
        np.save(labels, np.asarray(oracle.label(x), dtype=np.float64))
        page.set_input_files("#labels-file", str(labels))
        page.click("#upload-labels")
        page.wait_for_selector(f"#labels-accepted:has-text('batch {batch}')")
        page.wait_for_function(f"""() => {{
            const b = document.querySelector('#batch-id');
            const s = document.querySelector('#job-header .badge').textContent;
            return s === 'succeeded' || (b && b.textContent !== '{batch}');
        }}""", timeout=60_000)
        if page.inner_text("#job-header .badge") == "succeeded":
            break
    page.wait_for_selector("#distribution-section")
    assert alice.job(job_id)["status"] == "succeeded"
    assert tab.errors == []


def test_a_wrong_labels_file_shows_the_problem(tab, alice, tmp_path):
    job_id, page = open_waiting_asktell_job(tab, alice)
    bad = tmp_path / "short.csv"
    bad.write_text("1.0\n2.0\n")
    page.set_input_files("#labels-file", str(bad))
    page.click("#upload-labels")
    page.wait_for_selector("#labels-out .problem")
    assert "Wrong number of labels" in page.inner_text("#labels-out")
    assert alice.job(job_id)["status"] == "awaiting_labels"


def test_failed_job_shows_its_problem_document(tab, alice):
    job_id = alice.submit(http_job(unreachable_lab(), timeout_s=0.5, iterations=5))
    wait_status(alice, job_id, "failed", 60)
    page = tab.go(f"#/jobs/{job_id}")
    page.wait_for_selector("#job-header .problem")
    assert "Lab oracle failed" in page.inner_text("#job-header .problem")
    page.wait_for_selector("#spec-json", state="attached")
    tab.shot("job-failed")
    # the browser logs nothing: the page never asks for a result a failed job does not have
    assert tab.errors == []


def test_empty_account_and_other_owners_jobs(browser, server, finished):
    carol = Page(browser, server, CAROL)
    try:
        page = carol.go("#/jobs")
        page.wait_for_selector("#empty:not([hidden])")
        assert page.locator("#jobs tbody tr").count() == 0
        carol.shot("jobs-empty")
        assert carol.errors == []
        page = carol.go(f"#/jobs/{finished['bilevel']}")  # alice's job
        page.wait_for_selector("#not-found")
        assert "Job not found" in page.inner_text("#not-found")
        assert page.locator("#distribution-section").count() == 0
    finally:
        carol.close()


def test_malformed_spec_shows_the_field_error(tab, alice):
    before = len(alice.jobs(limit=500))
    page = tab.go("#/submit")
    page.wait_for_selector("#catalog-help li", state="attached")
    spec = small_job()
    spec["algorithm"]["iterations"] = "many"
    page.fill("#spec-text", json.dumps(spec, indent=2))
    page.click("#submit")
    page.wait_for_selector("#submit-out .problem")
    err = page.locator("#annotated .field-error[data-field='algorithm.iterations']")
    assert err.count() == 1 and "iterations" in err.inner_text()
    tab.shot("submit-error")
    page.fill("#spec-text", "{not json")
    page.click("#submit")
    page.wait_for_selector("#submit-out:has-text('Not JSON')")
    page.fill("#spec-text", json.dumps(small_job(iterations=5, seed=3)))
    page.click("#submit")
    page.wait_for_url(re.compile(r".*#/jobs/[0-9a-f]{32}$"))
    page.wait_for_selector("#job-header .badge")
    assert len(alice.jobs(limit=500)) == before + 1  # the refused spec stored nothing


def test_report_is_one_offline_file(browser, finished, alice, tmp_path):
    result = tmp_path / "result.json"
    doc = alice.result(finished["bilevel"])
    result.write_text(json.dumps(doc))
    out = tmp_path / "report.html"
    proc = subprocess.run(["lwl", "report", str(result), "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "<script src=" not in html and "<link rel=\"stylesheet\"" not in html
    ctx = browser.new_context(offline=True)
    page = ctx.new_page()
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(out.as_uri())
    page.wait_for_selector("[data-view=projection] svg")
    assert page.locator("#convergence svg").count() >= 1 and "best baseline" in page.inner_text("#verdict")
    assert page.inner_text("#job-labels") == f"labels {doc['labels_used']:,}"  # what the job paid for
    ctx.close()
    assert errors == []
