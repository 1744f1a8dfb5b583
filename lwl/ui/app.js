// The lwl dashboard: jobs, one job, submit. Talks to the same /v1 API as every client, with
// the API key kept in sessionStorage (entered once per browser session). window.LWL_OFFLINE
// (set by `lwl report`) renders one finished job from its result document, with no server.
"use strict";

const STATUSES = ["queued", "running", "awaiting_labels", "succeeded", "failed", "cancelled"];
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const POLL_MS = 1500;
const PAGE = 50;
const OFFLINE = window.LWL_OFFLINE || null;

let poller = null;  // the current page's timer
let pageGen = 0;  // bumped by every route change: a page's late callbacks then do nothing

// -- helpers ---------------------------------------------------------------------------------
function $(sel) { return document.querySelector(sel); }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "html") node.innerHTML = v;  // only ever SVG built by Plots from numbers
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function apiKey() { return sessionStorage.getItem("lwl-key") || ""; }

function needsKey() {  // the server wants a bearer key and this browser session has none yet
  const meta = document.querySelector("meta[name=lwl-auth]");
  return meta && meta.content === "bearer" && !apiKey();
}

class ApiError extends Error {
  constructor(status, doc) {
    super(doc.detail || doc.title || `HTTP ${status}`);
    this.status = status;
    this.doc = doc;
  }
}

async function api(path, { method = "GET", json, body, headers = {}, raw = false } = {}) {
  const h = { Accept: "application/json", ...headers };
  if (apiKey()) h.Authorization = `Bearer ${apiKey()}`;
  if (json !== undefined) { h["Content-Type"] = "application/json"; body = JSON.stringify(json); }
  const r = await fetch(path, { method, headers: h, body });
  if (!r.ok) {
    let doc;
    try { doc = await r.json(); } catch (_) { doc = { title: r.statusText, status: r.status }; }
    throw new ApiError(r.status, doc);
  }
  return raw ? r : r.json();
}

function problemBox(err) {
  const doc = err instanceof ApiError ? err.doc : { title: "Error", detail: String(err) };
  const box = el("div", { class: "problem", role: "alert" },
    el("strong", {}, doc.title || "Error"), doc.status ? ` (${doc.status})` : "",
    doc.detail ? el("div", { class: "detail" }, doc.detail) : null);
  if (Array.isArray(doc.errors)) {
    box.append(el("ul", { class: "field-errors" }, doc.errors.map((e) => el("li", { "data-field": e.field },
      el("code", {}, e.field), ": ", e.message))));
  }
  return box;
}

function seconds(s) {
  if (s === null || s === undefined || !isFinite(s)) return "";
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${(s / 3600).toFixed(1)} h`;
}

function elapsed(job) {
  if (!job.started_at) return null;
  return (job.finished_at || Date.now() / 1000) - job.started_at;
}

function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : ""; }

function download(blob, name) {
  const a = el("a", { href: URL.createObjectURL(blob), download: name });
  document.body.append(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

function csv(rows) { return rows.map((r) => (Array.isArray(r) ? r : [r]).join(",")).join("\n") + "\n"; }

function schedule(gen, fn) {
  if (gen !== pageGen) return;
  clearTimeout(poller);
  poller = setTimeout(async () => {
    if (gen !== pageGen) return;
    try { await fn(); } catch (err) { console.warn("poll failed", err); schedule(gen, fn); }
  }, POLL_MS);
}

function badge(status) { return el("span", { class: `badge ${status}` }, status); }

function progressBar(p) {
  const it = (p && p.iteration) || 0, total = (p && p.total) || 0;
  // a budgeted job counts rounds
  const rounds = p && p.budget ? ` rounds` : "";
  return el("span", { class: "progress" },
    el("progress", { max: total || 1, value: Math.min(it, total || 1) }), ` ${it} / ${total}${rounds}`);
}

function count(n) { return Number(n).toLocaleString("en-US"); }

// The oracle labels a job asked for, of its budget where it has one ("" before anything is known).
function labelsText(p) {
  if (!p || typeof p.labels_used !== "number") return p && p.budget ? `– / ${count(p.budget)}` : "";
  return p.budget ? `${count(p.labels_used)} / ${count(p.budget)}` : count(p.labels_used);
}

// An id of a candidate or a baseline in words: the names the API sends beside it (lwl.names).
function said(names, id) { return (names && names[id]) || id; }

function verdictOutcome(v) {  // held-out, equal-labels or validation verdicts name it differently
  if (v.outcome) return v.outcome;
  if (v.outcomes && v.outcomes[v.best_baseline]) return v.outcomes[v.best_baseline];
  return v.beats_best_baseline === true ? "better" : v.beats_best_baseline === false ? "worse" : null;
}

function verdictText(v) {
  if (!v || !v.best_baseline) return "";
  const outcome = verdictOutcome(v);
  if (!outcome || !num(v.ratio)) return "no verdict";  // the job's warnings say why
  const mark = { better: "✓", tie: "=", worse: "✗" }[outcome];
  return `${mark} ${outcome} ${Plots.fmt(v.ratio)}× ${said(v.names, v.best_baseline)}`;
}

// -- the header: API key once per browser session --------------------------------------------
function renderKeyForm() {
  const form = $("#key-form");
  if (!form) return;
  // the server says in the page whether it has keys (service.routers.ui): without keys every
  // request is the one anonymous owner's, and a key box would only ask for what is not needed
  const meta = document.querySelector("meta[name=lwl-auth]");
  if (!meta || meta.content !== "bearer") { form.hidden = true; return; }
  const input = $("#api-key");
  const state = $("#key-state");
  state.textContent = apiKey() ? "key set" : "no key";
  form.onsubmit = (ev) => {
    ev.preventDefault();
    if (input.value) sessionStorage.setItem("lwl-key", input.value.trim());
    else sessionStorage.removeItem("lwl-key");
    input.value = "";
    state.textContent = apiKey() ? "key set" : "no key";
    route();
  };
}

// -- jobs page -------------------------------------------------------------------------------
function jobRow(job) {
  const k = job.kind || {};
  return el("tr", { "data-id": job.id, "data-status": job.status },
    el("td", {}, el("a", { href: `#/jobs/${job.id}`, class: "job-link" }, job.id.slice(0, 12))),
    el("td", {}, badge(job.status)),
    el("td", {}, progressBar(job.progress)),
    el("td", { class: "num labels" }, labelsText(job.progress)),
    el("td", { class: "num" }, seconds(elapsed(job))),
    el("td", {}, k.algorithm || ""), el("td", {}, k.family || ""), el("td", {}, k.oracle || ""),
    el("td", { class: "verdict" }, verdictText(job.verdict)),
    el("td", {}, when(job.created_at)));
}

async function jobsPage(params) {
  const main = $("#main");
  const status = params.get("status") || "";
  const filter = el("select", { id: "status-filter" }, el("option", { value: "" }, "all"),
    STATUSES.map((s) => el("option", { value: s }, s)));
  filter.value = status;
  filter.onchange = () => { location.hash = filter.value ? `#/jobs?status=${filter.value}` : "#/jobs"; };
  const tbody = el("tbody");
  const more = el("button", { id: "more", hidden: true }, "Older jobs");
  const empty = el("p", { id: "empty", hidden: true }, "No jobs here yet. ", el("a", { href: "#/submit" }, "Submit one"), ".");
  const count = el("span", { id: "job-count" });
  main.replaceChildren(el("h1", {}, "Jobs"),
    el("div", { class: "toolbar" }, el("label", {}, "Status ", filter), count),
    el("table", { id: "jobs" }, el("thead", {}, el("tr", {}, ["job", "status", "progress", "labels", "elapsed", "algorithm",
      "family", "oracle", "verdict", "created"].map((t) => el("th", {}, t)))), tbody),
    empty, more);
  const rows = new Map();
  let cursor = null;
  const query = (c) => `/v1/jobs?limit=${PAGE}` + (status ? `&status=${status}` : "") + (c ? `&cursor=${encodeURIComponent(c)}` : "");

  function put(job, top) {
    const row = jobRow(job);
    const old = rows.get(job.id);
    if (old) old.replaceWith(row);
    else if (top) tbody.prepend(row);
    else tbody.append(row);
    rows.set(job.id, row);
  }

  function show() {
    empty.hidden = rows.size > 0;
    more.hidden = !cursor;
    count.textContent = `${rows.size} shown`;
  }

  async function firstPage() {  // new jobs on top, and the progress of the newest page
    const page = await api(query(null));
    const fresh = page.items.filter((j) => !rows.has(j.id)).reverse();
    for (const j of page.items) if (rows.has(j.id)) put(j, false);
    for (const j of fresh) put(j, true);
    if (rows.size === page.items.length) cursor = page.next_cursor;
    show();
  }

  more.onclick = async () => {
    try {
      const page = await api(query(cursor));
      for (const j of page.items) put(j, false);
      cursor = page.next_cursor;
      show();
    } catch (err) { main.append(problemBox(err)); }
  };
  try { await firstPage(); } catch (err) { main.append(problemBox(err)); return; }
  const gen = pageGen;
  const tick = async () => { await firstPage(); schedule(gen, tick); };
  schedule(gen, tick);
}

// -- one job ---------------------------------------------------------------------------------
const SERIES = [  // what the convergence panel plots when a record has it
  ["objective", "objective", true],
  ["validation_err", "validation Err", false],
  ["validation_error", "validation error", false],
  ["step_size", "step size", true],
  ["training_error", "training error", true],
  ["w2_term", "W2 term", true],
  ["w2", "W2 to the previous iterate", true],
];
const KEPT = "#2ca02c";
const Q_COLOR = "#7f7f7f";  // Q's own mixture, the baseline a budgeted design races
const AVERAGE = 25;  // iterations in the moving average of a per-iteration validation Err

function rejected(rec) { return (rec.event !== undefined && rec.event !== null) || rec.accepted === false; }

function num(v) { return typeof v === "number" && isFinite(v); }

// A per-iteration validation Err is measured on one iteration's sample: its noise hides the
// trend, which a moving average over the last AVERAGE iterations shows.
function movingAverage(ys, w) {
  const out = [];
  let sum = 0, n = 0;
  const q = [];
  for (const y of ys) {
    q.push(y);
    if (num(y)) { sum += y; n += 1; }
    if (q.length > w) { const old = q.shift(); if (num(old)) { sum -= old; n -= 1; } }
    out.push(n ? sum / n : NaN);
  }
  return out;
}

function runningMin(ys) {
  let m = Infinity;
  return ys.map((y) => { if (num(y)) m = Math.min(m, y); return isFinite(m) ? m : NaN; });
}

// The validation checks of a bilevel design (each on the full validation set, the numbers
// the kept iterate is chosen by): each check, the best so far, the initial distribution's
// check as a reference line and the kept check circled.
function checksChart(checks, sel) {
  const x = checks.map((c) => c.iteration), y = checks.map((c) => (num(c.err) ? c.err : NaN));
  const given = checks.find((c) => c.start === "given");
  const initial = num(sel && sel.initial_check_err) ? sel.initial_check_err : given && given.err;
  const refs = num(initial) ? [{ y: initial, name: `initial distribution ${Plots.fmt(initial)}`, color: "#d62728",
    data: { ref: "initial", err: initial } }] : [];
  const rings = sel && num(sel.check_err) ? [{ x: sel.iteration, y: sel.check_err, color: KEPT,
    name: `kept: iteration ${sel.iteration} (${Plots.fmt(sel.check_err)})`, data: { iteration: sel.iteration, err: sel.check_err } }] : [];
  return el("div", { class: "chart-box", "data-series": "checks", html: Plots.lines({
    title: "validation checks (Err on the validation set)", xlabel: "iteration", ylabel: "Err",
    series: [{ name: "check", x, y, dots: true, color: "#1f77b4" },
      { name: "best so far", x, y: runningMin(y), step: true, color: "#111", width: 1.2 }],
    refs, rings }) });
}

// history: the records so far, or null while the first fetch is under way (a finished job's
// page must not say that nothing was recorded while it loads); result: the finished job's
// result, whose checks and selected iterate the charts then show; done: the job has ended.
function convergence(history, result = null, done = false) {
  const box = el("div", { class: "charts", id: "convergence" });
  if (history === null) {
    box.append(el("p", { class: "muted loading", id: "convergence-loading" }, "Loading the iterations…"));
    return box;
  }
  if (history.some((r) => "round" in r && num(r.labels_used))) {  // a budgeted job: rounds of labels
    box.append(...budgetCharts(history, result));
    return box;
  }
  const sel = result && result.selected && num(result.selected.iteration) ? result.selected : null;
  if (sel) box.append(keptLine(sel));
  const checks = result && Array.isArray(result.checks) ? result.checks.filter((c) => num(c.iteration)) : [];
  if (checks.length) box.append(checksChart(checks, sel));
  const x = history.map((r) => r.iteration);
  const ama = history.some((r) => "objective_after_model" in r);
  for (const [key, name, log] of SERIES) {
    if (!history.some((r) => num(r[key]))) continue;
    const title = key === "objective" && ama ? "objective (the AMA bound)" : name;
    const y = history.map((r) => (num(r[key]) ? r[key] : NaN));
    const series = [{ name: title, x, y }];
    const opts = { xlabel: "iteration", marks: key === "objective" ? history.filter(rejected).map((r) => r.iteration) : [] };
    if (key === "validation_err" || key === "validation_error") {
      if (history.length > AVERAGE) series.push({ name: `moving average (${AVERAGE} iterations)`, x, y: movingAverage(y, AVERAGE), color: "#111", width: 2 });
      if (sel && num(sel.initial_check_err)) {  // where the design started, for scale
        opts.refs = [{ y: sel.initial_check_err, name: "initial distribution's check", color: "#d62728", data: { ref: "initial" } }];
      }
    }
    if (sel) opts.vmarks = [{ x: sel.iteration, name: "kept iterate", color: KEPT, data: { kept: sel.iteration } }];
    if (sel && key === "validation_error" && num(sel.validation_error)) {  // validated AMA: the kept pair's error
      opts.rings = [{ x: sel.iteration, y: sel.validation_error, color: KEPT, name: `kept (${Plots.fmt(sel.validation_error)})`,
        data: { iteration: sel.iteration, err: sel.validation_error } }];
    }
    box.append(el("div", { class: "chart-box", "data-series": key, html: Plots.lines({
      title, series, logy: log && history.every((r) => !num(r[key]) || r[key] > 0), ...opts }) }));
  }
  if (!box.querySelector(".chart-box")) {
    box.append(el("p", { class: "muted", id: "no-iterations" }, done ? "No iterations were recorded." : "No iterations recorded yet."));
  }
  return box;
}

// A budgeted job buys its labels in rounds (lwl.design.budgeted_bilevel): its validation Err against the
// labels spent so far and the labels each round bought; once audited, the held-out Err of its
// training set and of the baselines at the same number of labels beside them.
function budgetCharts(history, result) {
  const rounds = history.filter((r) => num(r.labels_used));
  const err = (r) => (num(r.validation_err) ? r.validation_err : r.race && num(r.race.incumbent_score) ? r.race.incumbent_score : NaN);
  const scored = rounds.filter((r) => num(err(r)));
  const ev = (result && result.evaluation) || {};
  const audited = ev.kind === "equal_labels" && ev.err && num(ev.err.optimized);
  const rings = audited ? [{ x: ev.labels, y: ev.err.optimized, color: KEPT,
    name: `training set, held-out (${Plots.fmt(ev.err.optimized)})`, data: { heldout: ev.err.optimized } }] : [];
  const refs = audited ? Object.keys(ev.err).filter((k) => k !== "optimized" && num(ev.err[k])).map((k, i) => ({
    y: ev.err[k], name: `${said(result.names, k)}, held-out`, color: Plots.COLORS[(i + 1) % Plots.COLORS.length],
    data: { ref: k, err: ev.err[k] } })) : [];
  // validation_err: the leading candidate's two-fold Err on Q's validation labels (lwl.design.budget);
  // the audit's numbers are held-out Errs on labels the design never saw
  const errChart = el("div", { class: "chart-box", "data-series": "err-vs-labels", html: Plots.lines({
    title: "Err against labels spent (lower is better)", xlabel: "labels spent", ylabel: "relative Err on Q",
    series: [{ name: "leading candidate: two-fold Err on Q's validation labels", x: scored.map((r) => r.labels_used),
      y: scored.map(err), dots: true }],
    rings, refs, legend: true }) });
  const perRound = el("div", { class: "chart-box", "data-series": "labels-per-round", html: Plots.bars({
    title: "labels bought per round", labels: rounds.map((r) => `${r.round} · ${r.kind || "round"}`),
    values: rounds.map((r) => r.labels), xlabel: "labels (rows: round · what it was for)" }) });
  const race = raceChart(history, result);
  return race ? [errChart, race, perRound] : [errChart, perRound];
}

// The race against Q's mixture (lwl.design.budget BudgetedDesign._race): after each round the
// leading candidate and Q's own mixture are validated at equal numbers of their own points; Q's
// mixture takes over when it validates better by z >= 1. One curve per leading candidate (a
// challenger that replaced it starts its own; looks made before they named it share one), Q's
// mixture's beside them, and a line where it took over: rankings at a hundred points reverse at a
// thousand, which is what a person checks here. Null without a look.
function raceChart(history, result) {
  const looks = history.filter((r) => r.race && num(r.race.points_each) && num(r.race.incumbent_score) && num(r.race.rival_score));
  if (!looks.length) return null;
  const names = result && result.names;
  const curves = new Map();
  for (const r of looks) {
    const who = r.race.incumbent || "";
    if (!curves.has(who)) curves.set(who, { x: [], y: [] });
    curves.get(who).x.push(r.race.points_each);
    curves.get(who).y.push(r.race.incumbent_score);
  }
  // a running job's page has no names yet (they come with the result): no ids in the legend meanwhile
  const leader = (who, i) => (who && names && names[who]) || (curves.size > 1 && i >= 0 ? `the leading candidate (${i + 1})` : "the leading candidate");
  const q = (names && names.q_mixture) || "Q's own mixture";
  const series = [...curves].map(([who, c], i) => ({ name: leader(who, i), ...c,
    color: Plots.COLORS[(i + 1) % Plots.COLORS.length], data: { incumbent: who } }));
  series.push({ name: q, x: looks.map((r) => r.race.points_each), y: looks.map((r) => r.race.rival_score),
    color: Q_COLOR, dash: "5 3", data: { incumbent: "q_mixture" } });
  const won = looks.find((r) => r.race.outcome === "rival won");
  const how = won && (won.race.by === "trend" ? " (by the race's trend)" : num(won.race.z) ? ` (z ${Plots.fmt(won.race.z)})` : "");
  // whom it overtook is the curve that ends there; the legend stays one short line
  const vmarks = won ? [{ x: won.race.points_each, color: Q_COLOR, data: { overtaken: won.race.points_each, overtook: won.race.overtook },
    name: `${q} took over${how}` }] : [];
  const positive = looks.every((r) => r.race.incumbent_score > 0 && r.race.rival_score > 0);
  const last = looks[looks.length - 1].race;
  const ahead = last.incumbent_score < last.rival_score ? `the leader's points validate better (lower Err)`
    : last.incumbent_score > last.rival_score ? `Q's mixture's points validate better (lower Err)` : "the two are level";
  const z = num(last.z) ? `, z ${Plots.fmt(last.z)}` : "";
  // behind at a look is not losing: Q's mixture takes over only beyond noise (z > 0: Q's mixture better)
  const behind = looks.filter((r) => r.race.incumbent_score > r.race.rival_score);
  const zs = behind.map((r) => r.race.z).filter(num);
  const behindText = behind.length && !won ? `The leader was behind at ${behind.length} of ${looks.length} looks, ` +
    (zs.length ? `never by more than z ${Plots.fmt(Math.max(...zs))}: within noise. ` : "within noise. ") : "";
  return el("div", { class: "chart-box", "data-series": "race", html: Plots.lines({
    title: "the race against Q's mixture (lower is better)", xlabel: "points each (first n of both)",
    ylabel: "two-fold Err on Q's validation labels", logx: positive && looks.length > 1, logy: positive, series, vmarks,
    legend: true }) },
  el("p", { class: "chart-note muted", id: "race-note" }, `At the last look (${count(last.points_each)} points each) ${ahead}: `,
    `${Plots.fmt(last.incumbent_score)} against ${Plots.fmt(last.rival_score)} for Q's mixture${z}. `, behindText,
    "Q's mixture takes over only when it validates better beyond noise (z ≥ 1, with 128 points each or more) or by the race's trend."));
}

// -- a budgeted job's story: what was paid, what was chosen, what it won --------------------------
const WON = { better: "won", tie: "tied", worse: "lost" };
function fmt4(v) { return num(v) ? String(+v.toPrecision(4)) : ""; }  // the verdict's outcome as the headline says it
const AGAINST = { better: "against", tie: "with", worse: "to" };

// The headline of a finished budgeted job, in the words of lwl.evaluation.verdict_text's
// budget_sentence: labels paid of the budget and rounds; the distribution chosen; and how its
// training set did against Q's own mixture at equal labels with the same model (the audit, kind
// equal_labels) or, with no held-out label, on Q's validation labels (kind validation). A tie says
// what it means and what would change it. Null for a job without a budget.
function storyPanel(result) {
  if (!num(result.budget) || !num(result.labels_used)) return null;
  const v = result.verdict || {};
  const names = { ...(result.names || {}), ...(v.names || {}) };
  const model = ((result.spec || {}).model || {}).name || v.model || "the job's model";
  const rounds = num(result.rounds) ? result.rounds : (result.history || []).filter((r) => num(r.labels_used)).length;
  const chosenId = v.returned_initial ? "q_mixture" : (result.selected && result.selected.candidate) || v.selected;
  const chosen = chosenId ? said(names, chosenId) : "a distribution";
  const paid = el("p", { id: "story-paid" }, el("strong", {}, "Paid: "),
    `${count(result.labels_used)} of ${count(result.budget)} labels, in ${rounds} round${rounds === 1 ? "" : "s"}`,
    result.labels_failed ? ` (${count(result.labels_failed)} of them failed)` : "", ". ",
    el("strong", {}, "Chosen: "), `${chosen}`, v.returned_initial ? " (nothing validated better than Q's own mixture)" : "",
    "; its points and Q's validation points are the training set of the served ", el("code", {}, model), " model.");
  const box = el("div", { id: "story", class: "story" }, paid);
  let outcome = null, what = null;
  if (v.kind === "equal_labels" && v.outcomes) {
    const key = "mixture" in v.outcomes ? "mixture" : v.best_baseline;
    const cmp = (v.comparisons || {})[key] || {};
    outcome = v.outcomes[key];
    const iv = Array.isArray(cmp.ratio_interval) ? cmp.ratio_interval : null;
    // four digits: at a thousand labels the two Errs often differ in the third
    const ci = iv ? `, 95% ${fmt4(iv[0])}–${fmt4(iv[1])}` : "";
    const ratio = num(cmp.ratio) ? cmp.ratio : v.err / v.baselines[key];
    const by = num(ratio) && ratio !== 1 ? `; ${Plots.fmt(Math.abs(100 * (1 - ratio)))}% ${ratio < 1 ? "lower" : "higher"}` : "";
    const draws = cmp.draws ? ` over ${cmp.draws} training draw${cmp.draws === 1 ? "" : "s"}` : "";
    const others = Object.keys(v.outcomes).filter((k) => k !== key)
      .map((k) => `${WON[v.outcomes[k]] || v.outcomes[k]} ${AGAINST[v.outcomes[k]] || "against"} ${said(names, k)} (${Plots.fmt(v.baselines[k])})`);
    box.append(el("p", { id: "story-verdict" }, el("strong", {}, "Result: "),
      `at equal labels (${count(v.labels)}, each trained by the same ${model}), the design's training set `,
      el("strong", { class: `outcome ${outcome}`, id: "story-word", "data-outcome": outcome }, WON[outcome] || outcome),
      ` ${AGAINST[outcome] || "against"} ${said(names, key)}: held-out Err ${fmt4(v.err)} against ${fmt4(v.baselines[key])} `,
      `(ratio ${fmt4(ratio)}${ci}${draws}${by}; on held-out labels the design never saw).`,
      others.length ? ` It also ${others.join(", ")}.` : ""));
    what = iv ? `the 95% interval of the Err ratio, ${fmt4(iv[0])}–${fmt4(iv[1])}, contains 1` : "the difference is within the noise";
  } else if (v.kind === "validation" && v.outcome) {
    outcome = v.outcome;
    const text = v.returned_initial
      ? [`Q's own mixture was returned (validation Err ${Plots.fmt(v.err)}): nothing beat it beyond noise.`]
      : [`on Q's validation labels (no held-out label was paid for), ${said(names, v.selected)}'s points `,
        el("strong", { class: `outcome ${outcome}`, id: "story-word", "data-outcome": outcome }, WON[outcome]),
        ` ${AGAINST[outcome]} Q's own mixture's at ${count(v.points_each)} points each, with the same ${model}: `,
        `Err ${Plots.fmt(v.err)} against ${Plots.fmt(v.best_baseline_err)} (ratio ${Plots.fmt(v.ratio)}, z ${Plots.fmt(v.z)}). `,
        "Those labels also chose the distribution, so this leans its way."];
    box.append(el("p", { id: "story-verdict" }, el("strong", {}, "Result: "), ...text));
    what = "the difference is under 1.645 standard errors (z)";
  } else {
    const why = (v.warnings || result.warnings || []).find((w) => w.startsWith("no verdict"));
    box.append(el("p", { id: "story-verdict" }, el("strong", {}, "Result: "),
      el("strong", { class: "outcome", id: "story-word", "data-outcome": "none" }, "no verdict"),
      why ? ` (${why.slice("no verdict".length).replace(/^[:;,]\s*/, "")}).` : ": nothing was compared."));
  }
  if (outcome === "tie" && !v.returned_initial) {
    box.append(el("p", { id: "story-tie", class: "muted" }, `A tie means the two could not be told apart at this budget: ${what}. `,
      `Either training set serves about as well, and the design's extra work bought nothing measurable here. What would `,
      `change it: more labels (a real difference shows as the interval narrows), or another model (the spec's `,
      el("code", {}, "model"), `; which points help depends on the model that learns from them).`));
  }
  return box;
}

// -- the served model -------------------------------------------------------------------------
const LONG = 10;  // a lengthscale over LONG times its input's spread in the training set is marked long

function authHeader() {  // the curl lines' -H, as the server asks for it
  const meta = document.querySelector("meta[name=lwl-auth]");
  return meta && meta.content === "bearer" ? ` -H "Authorization: Bearer $LWL_API_KEY"` : "";
}

// The model a budgeted job serves (GET /v1/jobs/{id}/model, here from the result document): its
// kernel and hyperparameters in the user's units, each input's lengthscale beside the training
// set's spread of it, what it says about itself on Q's validation labels (model_diagnosis: loo_err,
// coverage, and the leave-one-out residuals against 2 sd), and how to fetch it and predict with it.
// id: the job's id, or null offline (lwl report: no server to ask).
function modelPanel(id, result) {
  const doc = result.model;
  if (!doc) return null;
  const box = section("Model", "model-section");
  const labels = ((doc.training_set || result.training_set || {}).labels) || [];  // the result's model omits its training set
  const nTrain = labels.length;
  const kernel = doc.kernel ? [" with a ", el("strong", {}, doc.kernel.replace(/_/g, " ")), " kernel"] : [];
  box.append(el("p", { id: "model-kind" }, `The served model: `, el("code", {}, doc.model), ...kernel,
    `, trained on the ${count(nTrain)} points of the training set.`,
    doc.model === "gp" ? " Every number below is in your units (lengthscales in each input's, scales and noise in the labels')." : ""));
  if (doc.model === "gp" && Array.isArray(doc.outputs)) {
    const spread = ((doc.standardisation || {}).input_scale) || [];
    const diag = ((result.model_diagnosis || {}).outputs) || [];
    doc.outputs.forEach((o, j) => {
      const where = doc.outputs.length > 1 ? ` (output ${j + 1})` : "";
      const rows = (o.lengthscale || []).map((ell, i) => {
        const ratio = num(spread[i]) && spread[i] > 0 ? ell / spread[i] : NaN;
        const long = num(ratio) && ratio > LONG;
        return el("tr", { "data-input": i + 1, "data-long": long ? "true" : "false" },
          el("th", {}, `x${i + 1}`), el("td", { class: "num" }, Plots.fmt(ell)), el("td", { class: "num" }, Plots.fmt(spread[i])),
          el("td", { class: "num" }, Plots.fmt(ratio)),
          el("td", { class: long ? "long" : "muted" }, long ? "long: the model is nearly flat in this input over the data (ignored, or linear)" : "used"));
      });
      box.append(el("table", { class: "err-summary lengthscales", id: `lengthscales-${j}` },
        el("caption", {}, `lengthscale of each input${where}`),
        el("thead", {}, el("tr", {}, ["input", "lengthscale", "spread (sd in the training set)", "lengthscale ÷ spread", ""].map((t) => el("th", {}, t)))),
        el("tbody", {}, rows)));
      const d = diag[j] || {};
      const sd = (v) => (num(v) && v >= 0 ? ` (sd ${Plots.fmt(Math.sqrt(v))})` : "");
      const pct = (v) => (num(v) ? `${(100 * v).toFixed(0)}%` : "–");
      const facts = [
        ["output scale", `${Plots.fmt(o.output_scale)}${sd(o.output_scale)}`, "the prior variance of the function, in the labels' units squared"],
        ["noise", `${Plots.fmt(o.noise)}${sd(o.noise)}`, num(d.noise_share)
          ? `the variance the model reads as measurement noise: ${(100 * d.noise_share).toFixed(2)}% of the labels' mean square on Q, so its relative Err will not go much below ${Plots.fmt(d.err_floor)}`
          : "the variance the model reads as measurement noise"],
        ["mean", Plots.fmt(o.mean), "the constant the model reverts to far from the data"],
        ["loo_err", Plots.fmt(d.loo_err), "its relative Err on Q estimated from its own labels: each of Q's validation labels predicted from all the others (0 is perfect, 1 is no better than predicting 0)"],
        ["LOO coverage", num(d.loo_coverage_2sd) ? `${pct(d.loo_coverage_1sd)} within 1 sd, ${pct(d.loo_coverage_2sd)} within 2 sd` : "–",
          "how many of those left-out labels fall within the model's error bar (honest: about 68% and 95%)"],
      ];
      box.append(el("table", { class: "err-summary model-facts", id: `model-facts-${j}` },
        el("caption", {}, `hyperparameters and what the model says about itself on Q${where}`),
        el("tbody", {}, facts.map(([k, v, what]) => el("tr", { "data-fact": k }, el("th", {}, k), el("td", { class: "num" }, v),
          el("td", { class: "muted" }, what))))));
      if (Array.isArray(d.loo_residuals) && Array.isArray(d.loo_sd) && d.loo_residuals.length) box.append(looChart(d, labels, j, where));
    });
    box.append(el("p", { class: "muted", id: "lengthscale-rule" }, `An input is marked long when its lengthscale is over ${LONG}× `,
      "its spread (its standard deviation in the training set): across the data the model then changes almost nothing along ",
      "it beyond a straight line. Such an input is either ignored by the model or enters it linearly; the lengthscale alone ",
      "does not tell which (docs/method/gp-diagnosis.md, \"What the served GP says about the problem\")."));
  } else if (doc.model === "krr") {
    box.append(el("table", { class: "err-summary model-facts", id: "model-facts-0" }, el("tbody", {},
      el("tr", { "data-fact": "lengthscale" }, el("th", {}, "lengthscale"), el("td", { class: "num" }, Plots.fmt(doc.lengthscale))),
      el("tr", { "data-fact": "sigma2" }, el("th", {}, "sigma2"), el("td", { class: "num" }, Plots.fmt(doc.sigma2))))));
  }
  box.append(id ? modelAccess(id, doc) : el("p", { class: "muted" }, "Load it anywhere: ",
    el("code", {}, "lwl.models.from_spec(result['model']).predict(x, return_std=True)"), "."));
  return box;
}

// The served GP's leave-one-out residuals at Q's validation labels (the training set's first rows,
// model_diagnosis.loo_residuals) against its left-out prediction, inside the band of 2 sd of that
// prediction (model_diagnosis.loo_sd): a point outside the band is a label the error bar missed.
function looChart(d, labels, j, where) {
  const n = d.loo_residuals.length;
  const label = (i) => { const y = labels[i]; return Array.isArray(y) ? y[j] : y; };
  const pred = d.loo_residuals.map((r, i) => (num(label(i)) ? label(i) - r : i));  // x: prediction (index if unknown)
  const byX = [...Array(n).keys()].sort((a, b) => pred[a] - pred[b]);
  const inside = d.loo_residuals.filter((r, i) => Math.abs(r) <= 2 * d.loo_sd[i]).length;
  const known = labels.length >= n;
  return el("div", { class: "chart-box", "data-series": `loo-${j}`, html: Plots.lines({
    title: `leave-one-out residuals at Q's validation labels${where}`, legend: true,
    xlabel: known ? "prediction made without the label" : "validation label (index)", ylabel: "label − that prediction",
    series: [{ name: `a label of Q: ${inside} of ${n} inside ±2 sd`, x: pred, y: d.loo_residuals, dots: true, color: "#1f77b4" },
      { name: "±2 sd of the prediction", x: byX.map((i) => pred[i]), y: byX.map((i) => 2 * d.loo_sd[i]), color: "#d62728", width: 1.2, plain: true },
      { name: "", x: byX.map((i) => pred[i]), y: byX.map((i) => -2 * d.loo_sd[i]), color: "#d62728", width: 1.2, plain: true },
      { name: "", x: [Math.min(...pred), Math.max(...pred)], y: [0, 0], color: "#999", width: 0.8, plain: true }] }) });
}

// Where to fetch the model and how to predict with it: the two routes, a curl line for each, and
// a prediction at a point typed here (POST /v1/jobs/{id}/predict).
function modelAccess(id, doc) {
  const origin = location.origin;
  const loc = ((doc.standardisation || {}).input_loc) || [];
  const d = doc.input_dim || loc.length || (((doc.training_set || {}).inputs || [])[0] || []).length;
  const point = loc.length === d ? loc.map((v) => +v.toPrecision(4)) : Array(d).fill(0);
  const body = JSON.stringify({ inputs: [point] });
  const input = el("input", { id: "predict-input", size: 40, value: point.join(", ") });
  const out = el("span", { id: "predict-out" });
  async function predict() {
    out.replaceChildren();
    const x = input.value.split(/[\s,;]+/).filter((t) => t.length).map(Number);
    try {
      const r = await api(`/v1/jobs/${id}/predict`, { method: "POST", json: { inputs: [x] } });
      const m = Array.isArray(r.mean[0]) ? r.mean[0] : r.mean[0];
      out.append(el("span", { class: "ok" }, Array.isArray(m) ? `a field of ${m.length} values` :
        `mean ${Plots.fmt(m)}` + (r.std ? ` ± ${Plots.fmt(r.std[0])} (1 sd of a new measurement)` : "")));
    } catch (err) { out.append(problemBox(err)); }
  }
  async function save() {
    try { download(new Blob([JSON.stringify(await api(`/v1/jobs/${id}/model`))], { type: "application/json" }), `${id}-model.json`); } catch (err) { out.replaceChildren(problemBox(err)); }
  }
  return el("div", { id: "model-access" },
    el("p", {}, "The model document: ", el("a", { href: `/v1/jobs/${id}/model`, id: "model-link" }, `GET /v1/jobs/${id}/model`), " ",
      el("button", { id: "model-download", onclick: save }, "Download model .json"), " — load it with ",
      el("code", {}, "lwl.models.from_spec(doc)"), "."),
    el("pre", { id: "curl-model" }, `curl${authHeader()} ${origin}/v1/jobs/${id}/model > model.json`),
    el("p", {}, "Predict (posterior mean and sd) at your own inputs, one row of ", d, " numbers each:"),
    el("pre", { id: "curl-predict" }, `curl -X POST${authHeader()} -H "Content-Type: application/json" \\\n  -d '${body}' \\\n  ${origin}/v1/jobs/${id}/predict`),
    el("p", {}, el("label", {}, "Try it at x = ", input), " ", el("button", { id: "predict", onclick: predict }, "Predict"), " ", out));
}

// Which iterate the design kept and how its validation check compares with the initial
// distribution's: the run's gain often comes at iteration 0 (a better start point), which
// the per-iteration charts cannot show.
function keptLine(sel) {
  const parts = [sel.summary || `kept iteration ${sel.iteration}`];
  if (num(sel.check_err)) {
    let cmp = `validation check Err ${Plots.fmt(sel.check_err)}`;
    if (num(sel.initial_check_err)) cmp += ` against ${Plots.fmt(sel.initial_check_err)} for the initial distribution`;
    parts.push(cmp);
  } else if (num(sel.validation_error)) {  // validated AMA
    parts.push(`validation error ${Plots.fmt(sel.validation_error)}`);
  }
  if (sel.stopped) parts.push(`stopped ${sel.stopped}`);
  return el("p", { class: "kept", id: "kept", "data-iteration": sel.iteration }, el("span", { class: "kept-key" }, "●"), " ", parts.join("; "), ".");
}

function distributionPanel(views) {
  const box = el("div", { class: "charts", id: "distribution" });
  if (!views || views.kind === "none") {
    box.append(el("p", { class: "muted" }, views ? views.why : "This result has no views (made by an older lwl)."));
    return box;
  }
  if (views.kind === "projection") {
    const groups = views.members.map((m, i) => ({ name: `Q ${m.name}`, pts: m.points, mean: m.mean, cov: m.cov,
      color: Plots.COLORS[(i + 2) % Plots.COLORS.length], opacity: 0.25, legend: i < 6 }));
    groups.push({ name: "design", pts: views.design.points, mean: views.design.mean, cov: views.design.cov,
      color: "#111", opacity: 0.35, bold: true });
    const ex = views.explained.map((v) => `${(100 * v).toFixed(0)}%`).join(", ");
    box.append(el("div", { class: "chart-box", "data-view": "projection", html: Plots.scatter({
      title: `design and Q in Q's leading principal plane (${ex})`, groups }) }));
    // one colour scale for both: the two matrices are compared cell by cell
    const range = Plots.extent(views.heatmaps.design.flat().concat(views.heatmaps.q.flat()));
    const axes = { range, xlabel: "coordinate j", ylabel: "coordinate i" };
    box.append(el("div", { class: "chart-box", "data-view": "cov-design", html: Plots.heatmap({ title: "design covariance", matrix: views.heatmaps.design, ...axes }) }));
    box.append(el("div", { class: "chart-box", "data-view": "cov-q", html: Plots.heatmap({ title: "Q covariance (moment-matched)", matrix: views.heatmaps.q, ...axes }) }));
  } else if (views.kind === "fields") {
    box.append(el("div", { class: "chart-box", "data-view": "mean", html: Plots.field({ title: "mean field", values: views.mean, shape: views.shape }) }));
    box.append(el("div", { class: "chart-box", "data-view": "variance", html: Plots.field({ title: "variance field", values: views.variance, shape: views.shape }) }));
    if (views.spectrum) {
      box.append(el("div", { class: "chart-box", "data-view": "spectrum", html: Plots.lines({
        title: "KLE spectrum", series: [{ name: "eigenvalue", x: views.spectrum.map((_, i) => i + 1), y: views.spectrum }],
        logx: true, logy: true, xlabel: "mode" }) }));
    }
    views.examples.forEach((f, i) => box.append(el("div", { class: "chart-box", "data-view": `sample-${i}`,
      html: Plots.field({ title: `sampled field ${i + 1}`, values: f, shape: views.shape }) })));
  }
  return box;
}

function evaluationPanel(result) {
  const ev = result.evaluation || {};
  const box = el("div", { class: "charts", id: "evaluation" });
  if (ev.err) {
    const summary = errSummary(result);
    if (summary) box.append(summary);
    const names = Object.keys(ev.err);
    const initialKey = "initial" in ev.err ? "initial" : "normal";
    const label = (n) => {
      const words = n === "optimized" ? "design" : said(result.names, n);
      return n === initialKey && !words.includes("initial") ? `${words} (initial)` : words;
    };
    box.append(el("div", { class: "chart-box", html: Plots.bars({ title: `held-out Err at N = ${ev.train_size}`,
      labels: names.map(label), values: names.map((n) => ev.err[n]), highlight: "design" }) }));
    if (ev.sizes && ev.sizes.length > 1) {
      box.append(el("div", { class: "chart-box", html: Plots.lines({ title: "Err against N", logx: true, logy: true,
        xlabel: "N", series: names.map((n) => ({ name: label(n), x: ev.sizes, y: ev.err_vs_n[n] })) }) }));
    }
    const v = result.verdict;
    if (v && v.best_baseline) {
      const outcome = verdictOutcome(v);
      const words = { better: "better than", tie: "within noise of", worse: "WORSE than" }[outcome];
      const ci = v.ratio_interval_95 ? `, 95% ${Plots.fmt(v.ratio_interval_95[0])}–${Plots.fmt(v.ratio_interval_95[1])}` : "";
      const head = v.returned_initial ? `Nothing beat ${v.initial_label} on validation, so it was returned; its` : "The design's";
      box.append(el("p", { class: { better: "verdict good", tie: "verdict tie", worse: "verdict bad" }[outcome], id: "verdict" },
        `${head} held-out Err ${Plots.fmt(v.err)} is ${words} the best baseline, `,
        `${said(v.names, v.best_baseline)} (${Plots.fmt(v.best_baseline_err ?? v.baselines[v.best_baseline])}; ratio ${Plots.fmt(v.ratio)}${ci}; `,
        `${v.draws || 1} training draw(s)).`));
      if (v.initial_err !== undefined && !v.returned_initial) {
        box.append(el("p", { class: "muted", id: "verdict-initial" },
          `Against ${v.initial_label || "the initial distribution"} (Err ${Plots.fmt(v.initial_err)}): ${v.initial_outcome}.`));
      }
    }
  } else if (result.verdict && result.verdict.kind === "validation" && result.verdict.outcome) {
    // a budgeted job with no audit (ask/tell): its verdict from its own validation labels
    const v = result.verdict;
    const text = v.returned_initial
      ? `${said(v.names, "q_mixture")} was returned (validation Err ${Plots.fmt(v.err)}).`
      : `${said(v.names, v.selected)}'s points validate ${{ better: "better than", tie: "within noise of", worse: "WORSE than" }[v.outcome]} ` +
        `${said(v.names, v.best_baseline)}'s at ${v.points_each} points each (Err ${Plots.fmt(v.err)} vs ${Plots.fmt(v.best_baseline_err)}; ` +
        `ratio ${Plots.fmt(v.ratio)}; z ${Plots.fmt(v.z)}).`;
    box.append(el("p", { class: { better: "verdict good", tie: "verdict tie", worse: "verdict bad" }[v.outcome], id: "verdict" },
      `Verdict on validation, no held-out labels: ${text}`));
    box.append(el("p", { class: "muted", id: "verdict-basis" }, `Basis: ${v.basis}.`));
  } else if (result.verdict && result.verdict.kind === "validation") {
    // a budgeted job that could not afford a verdict: why, in the words of its warning
    const why = (result.verdict.warnings || []).find((w) => w.startsWith("no verdict"));
    box.append(el("p", { class: "verdict none", id: "verdict" },
      why ? `No verdict${why.slice("no verdict".length)}.` : "No verdict: nothing was compared on validation."));
  } else if (typeof ev.relative_ood_error === "number") {
    box.append(el("p", { id: "verdict" }, `Relative OOD error of the final model: ${Plots.fmt(ev.relative_ood_error)}`));
  } else {
    box.append(el("p", { class: "muted" }, "No evaluation in this result."));
  }
  return box;
}

// Held-out Err of the design beside its initial distribution's and the best baseline's, with
// the ratio to each: the gain over where the design started is the first thing to read.
function errSummary(result) {
  const v = result.verdict, ev = result.evaluation || {};
  if (!v || !num(v.err)) return null;
  const interval = (iv) => (Array.isArray(iv) ? ` (95% ${Plots.fmt(iv[0])}–${Plots.fmt(iv[1])})` : "");
  const OUT = { better: "better", tie: "within noise", worse: "worse" };
  const rows = [el("tr", { "data-row": "design" }, el("th", {}, v.returned_initial ? "design (= the initial distribution)" : "design"),
    el("td", { class: "num" }, Plots.fmt(v.err)), el("td", { class: "muted" }, interval(v.err_interval_95)), el("td"), el("td"))];
  const initialName = (v.initial_label && v.initial_label !== "the initial distribution" ? v.initial_label : "initial distribution");
  if (num(v.initial_err)) {
    const key = ev.err && "initial" in ev.err ? "initial" : "normal";
    const iv = ((ev.err_interval || {})[key]);
    const cmp = (ev.comparisons || {})[key] || {};  // the ratio's interval over the training draws
    const ratio = num(cmp.ratio) ? cmp.ratio : v.err / v.initial_err;
    const rci = Array.isArray(cmp.ratio_interval) ? ` (95% ${Plots.fmt(cmp.ratio_interval[0])}–${Plots.fmt(cmp.ratio_interval[1])})` : "";
    rows.push(el("tr", { "data-row": "initial" }, el("th", {}, initialName),
      el("td", { class: "num" }, Plots.fmt(v.initial_err)), el("td", { class: "muted" }, interval(iv)),
      el("td", { class: "num" }, `design ÷ initial ${Plots.fmt(ratio)}${rci}`),
      el("td", { class: `outcome ${v.initial_outcome || ""}` }, v.returned_initial ? "" : OUT[v.initial_outcome] || "")));
  }
  if (v.best_baseline) {
    const be = v.best_baseline_err ?? v.baselines[v.best_baseline];
    const ci = Array.isArray(v.ratio_interval_95) ? ` (95% ${Plots.fmt(v.ratio_interval_95[0])}–${Plots.fmt(v.ratio_interval_95[1])})` : "";
    const outcome = verdictOutcome(v);
    rows.push(el("tr", { "data-row": "best-baseline" }, el("th", {}, `best baseline: ${said(v.names, v.best_baseline)}`),
      el("td", { class: "num" }, Plots.fmt(be)), el("td"),
      el("td", { class: "num" }, `design ÷ baseline ${Plots.fmt(v.ratio)}${ci}`),
      el("td", { class: `outcome ${outcome || ""}` }, OUT[outcome] || "")));
  }
  return el("div", { class: "row" }, el("table", { id: "err-summary", class: "err-summary" },
    el("caption", {}, `Held-out Err at N = ${ev.train_size} (${v.draws || 1} training draw${(v.draws || 1) === 1 ? "" : "s"})`),
    el("tbody", {}, rows)));
}

// A budgeted job's product: every labelled point it paid for (Q's validation points included),
// as the .npz archive GET /training-set serves or as CSV (inputs, the label, and served: 1 for the
// served model's training set, 0 for the points the left-out check kept out of it), and where the
// points came from, in words.
function trainingSetPanel(id, result) {
  const out = el("div", { id: "training-set-out" });
  const n = result.training_set.labels.length, d = n ? result.training_set.inputs[0].length : 0;
  const nLeft = ((result.left_out || {}).labels || []).length;
  async function fetchSet(asNpz) {
    out.replaceChildren();
    try {
      if (asNpz) {
        const r = await api(`/v1/jobs/${id}/training-set`, { raw: true, headers: { Accept: "application/x-npz" } });
        download(await r.blob(), `${id}-training-set.npz`);
      } else {
        const doc = await api(`/v1/jobs/${id}/training-set`);
        const left = doc.left_out_inputs || [];
        const first = doc.labels.length ? doc.labels[0] : (doc.left_out_labels || [])[0];
        // an operator job's label is a field of p values: columns label1..labelp
        const width = Array.isArray(first) ? first.length : 0;
        const labelHead = width ? Array.from({ length: width }, (_, j) => `label${j + 1}`) : ["label"];
        const flat = (v) => (Array.isArray(v) ? v : [v]);
        const head = [...Array.from({ length: doc.d }, (_, j) => `x${j + 1}`), ...labelHead, "served"];
        download(new Blob([csv([head, ...doc.inputs.map((x, i) => [...x, ...flat(doc.labels[i]), 1]),
          ...left.map((x, i) => [...x, ...flat(doc.left_out_labels[i]), 0])])], { type: "text/csv" }),
          `${id}-training-set.csv`);
      }
      out.append(el("span", { class: "ok" }, `downloaded ${count(n + nLeft)} labelled points`));
    } catch (err) { out.append(problemBox(err)); }
  }
  const sources = result.labels_by_source || {};
  const table = el("table", { id: "labels-by-source", class: "err-summary" },
    el("caption", {}, "where the points came from"),
    el("tbody", {}, Object.keys(sources).map((k) => el("tr", { "data-source": k },
      el("th", {}, said(result.names, k)), el("td", { class: "num" }, count(sources[k]))))));
  const failed = result.labels_failed ? ` (${result.labels_failed} more failed: paid for, not in the set)` : "";
  const leftOut = nLeft ? ` ${count(nLeft)} more paid labels are kept out of the served model's training set (left out: ` +
    `it validates better without them; in the archive as left_out_inputs, left_out_labels).` : "";
  return section("Training set", "training-set", el("p", { id: "training-set-summary" },
    `${count(n)} labelled points of dimension ${d}: ${count(result.labels_used)} labels of a budget of ${count(result.budget)}${failed}.${leftOut} `,
    "The same arrays as GET /v1/jobs/{id}/training-set (inputs, labels, left_out_inputs, left_out_labels)."),
  el("button", { id: "training-npz", onclick: () => fetchSet(true) }, "Download .npz"), " ",
  el("button", { id: "training-csv", onclick: () => fetchSet(false) }, "Download CSV"), out, table);
}

function section(title, id, ...content) {
  return el("section", { id }, el("h2", {}, title), ...content);
}

function samplesPanel(id) {
  const n = el("input", { type: "number", id: "samples-n", min: 1, value: 1000 });
  const seed = el("input", { type: "number", id: "samples-seed", min: 0, value: 0 });
  const out = el("div", { id: "samples-out" });
  async function fetchSamples(asNpy) {
    out.replaceChildren();
    const body = JSON.stringify({ n: Number(n.value), seed: Number(seed.value) });
    try {
      const r = await api(`/v1/jobs/${id}/samples`, { method: "POST", raw: true, body,
        headers: { "Content-Type": "application/json", Accept: asNpy ? "application/x-npy" : "application/json" } });
      if (asNpy) download(await r.blob(), `${id}-${seed.value}.npy`);
      else download(new Blob([csv((await r.json()).samples)], { type: "text/csv" }), `${id}-${seed.value}.csv`);
      out.append(el("span", { class: "ok" }, `downloaded ${n.value} samples (seed ${seed.value})`));
    } catch (err) { out.append(problemBox(err)); }
  }
  return section("Samples", "samples", el("p", { class: "muted" }, "Fresh training inputs from the designed distribution: ",
    "the same numbers as POST /v1/jobs/{id}/samples and lwl.measures.from_spec(distribution).sample(n, seed)."),
  el("label", {}, "n ", n), el("label", {}, " seed ", seed), " ",
  el("button", { id: "download-npy", onclick: () => fetchSamples(true) }, "Download .npy"), " ",
  el("button", { id: "download-csv", onclick: () => fetchSamples(false) }, "Download CSV"), out);
}

async function readLabels(file) {
  const name = file.name.toLowerCase();
  if (name.endsWith(".npy")) return { npy: await file.arrayBuffer() };
  const text = await file.text();
  if (name.endsWith(".json")) {
    const doc = JSON.parse(text);
    return { labels: Array.isArray(doc) ? doc : doc.labels };
  }
  return { labels: text.split(/[\s,;]+/).filter((t) => t.length).map(Number) };
}

async function askTellPanel(id, refresh, log) {
  const box = section("Labels needed", "asktell");
  let q;
  try { q = await api(`/v1/jobs/${id}/queries`); } catch (err) { box.append(problemBox(err)); return box; }
  const file = el("input", { type: "file", id: "labels-file", accept: ".npy,.csv,.txt,.json" });
  const out = el("div", { id: "labels-out" });
  const inputs = async (asNpy) => {
    try {
      if (asNpy) {
        const r = await api(`/v1/jobs/${id}/queries`, { raw: true, headers: { Accept: "application/x-npy" } });
        download(await r.blob(), `${id}-${q.batch_id}-inputs.npy`);
      } else download(new Blob([csv(q.inputs)], { type: "text/csv" }), `${id}-${q.batch_id}-inputs.csv`);
    } catch (err) { out.replaceChildren(problemBox(err)); }
  };
  const upload = async () => {
    out.replaceChildren();
    if (!file.files.length) { out.append(el("p", { class: "problem" }, "Choose a file of labels first.")); return; }
    try {
      const got = await readLabels(file.files[0]);
      const r = got.npy
        ? await api(`/v1/jobs/${id}/labels?batch_id=${encodeURIComponent(q.batch_id)}`, { method: "POST", body: got.npy,
          headers: { "Content-Type": "application/x-npy" } })
        : await api(`/v1/jobs/${id}/labels`, { method: "POST", json: { batch_id: q.batch_id, labels: got.labels } });
      // the log outlives this panel, which the refresh rebuilds for the next batch
      log.replaceChildren(el("p", { class: "ok", id: "labels-accepted" }, `batch ${r.batch_id}: ${r.outcome}; job ${r.status}`));
      refresh(true);
    } catch (err) { out.append(problemBox(err)); }
  };
  box.append(el("p", {}, `Batch `, el("code", { id: "batch-id" }, q.batch_id), ` needs ${q.n} labels for inputs of dimension ${q.d}`,
    ` (${q.pending_batches} batch${q.pending_batches === 1 ? "" : "es"} pending).`),
  el("button", { id: "inputs-npy", onclick: () => inputs(true) }, "Download inputs .npy"), " ",
  el("button", { id: "inputs-csv", onclick: () => inputs(false) }, "Download inputs CSV"),
  el("p", {}, "Labels, one per input in order (.npy, CSV or a JSON list): ", file, " ",
    el("button", { id: "upload-labels", onclick: upload }, "Upload labels")), out);
  return box;
}

function headerPanel(job, onCancel) {
  const k = job.kind || {};
  const box = el("div", { id: "job-header" },
    el("p", {}, badge(job.status), " ", progressBar(job.progress), " ",
      " · ", el("span", { id: "job-labels" }, `labels ${labelsText(job.progress) || "–"}`), " · ",
      el("span", { class: "muted" }, `elapsed ${seconds(elapsed(job)) || "–"}`),
      k.algorithm ? el("span", { class: "muted" }, ` · ${k.algorithm} · ${k.family || "–"} family · oracle ${k.oracle}`) : null,
      job.attempts > 1 ? el("span", { class: "muted" }, ` · attempt ${job.attempts}`) : null));
  if (onCancel && !TERMINAL.has(job.status)) box.append(el("button", { id: "cancel", onclick: onCancel }, "Cancel job"));
  if (job.error) box.append(problemBox(new ApiError(job.error.status || 500, job.error)));
  for (const w of job.warnings || []) box.append(el("p", { class: "warning" }, "warning: ", w));
  for (const c of job.conditions || []) box.append(el("p", { class: "warning condition", "data-type": c.type }, `${c.type}: `, c.message));
  return box;
}

function specPanel(spec) {
  return section("Spec", "spec", el("details", {}, el("summary", {}, "the job spec, with lwl's defaults written in"),
    el("pre", { id: "spec-json" }, JSON.stringify(spec, null, 2))));
}

function renderResult(main, result) {
  main.append(section("Distribution against Q", "distribution-section", distributionPanel(result.views)),
    section("Evaluation", "evaluation-section", evaluationPanel(result)));
}

async function jobPage(id) {
  const main = $("#main");
  main.replaceChildren(el("h1", {}, "Job ", el("code", {}, id)));
  let job;
  try { job = await api(`/v1/jobs/${encodeURIComponent(id)}`); } catch (err) {
    main.append(err.status === 404 ? el("p", { class: "notfound", id: "not-found" }, "Job not found: ",
      "no job with this id belongs to this API key.") : problemBox(err));
    return;
  }
  const gen = pageGen;
  const history = [];
  let last = -1;
  let loaded = false;  // the first history fetch has come back
  let shown = null;  // the status the page was last built for
  let header = headerPanel(job, cancel);
  const conv = section("Convergence", "convergence-section", convergence(null));
  let askBox = null;
  const labelsLog = el("div", { id: "labels-log" });
  main.append(header, labelsLog, conv);

  async function cancel() {
    try { job = await api(`/v1/jobs/${id}/cancel`, { method: "POST" }); } catch (err) { main.append(problemBox(err)); }
    await refresh();
  }

  async function refresh(force = false) {
    if (gen !== pageGen) return;
    job = await api(`/v1/jobs/${id}`);
    const h = await api(`/v1/jobs/${id}/history?after=${last}`);  // only what is new
    if (h.history.length || !loaded) {
      history.push(...h.history);
      if (history.length) last = history[history.length - 1].iteration;
      loaded = true;
      conv.replaceChild(convergence(history, null, TERMINAL.has(job.status)), $("#convergence"));
    }
    const fresh = headerPanel(job, cancel);
    header.replaceWith(fresh);
    header = fresh;
    if (job.status !== shown || force) {  // rebuilt on a change only: a chosen file stays chosen
      if (askBox) { askBox.remove(); askBox = null; }
      if (job.status === "awaiting_labels") {
        const box = await askTellPanel(id, refresh, labelsLog);
        document.querySelectorAll("#asktell").forEach((n) => n.remove());  // a concurrent refresh's
        askBox = box;
        conv.before(askBox);
      }
    }
    shown = job.status;
    if (TERMINAL.has(job.status)) {
      if (job.status === "succeeded") {
        const pending = el("p", { class: "muted loading", id: "result-loading" }, "Loading the result…");
        main.append(pending);
        const result = await api(`/v1/jobs/${id}/result`);
        pending.remove();
        conv.replaceChild(convergence(history, result, true), $("#convergence"));
        const story = storyPanel(result);
        if (story) conv.before(story);
        renderResult(main, result);
        const model = modelPanel(id, result);
        if (model) main.append(model);
        if (result.training_set) main.append(trainingSetPanel(id, result));
        main.append(samplesPanel(id), specPanel(result.spec));
      } else {
        main.append(specPanel(await api(`/v1/jobs/${id}/spec`)));
      }
      return;
    }
    schedule(gen, refresh);
  }
  await refresh();
}

function offlinePage() {  // lwl report: one finished job from its result document
  const { result, title } = OFFLINE;
  const main = $("#main");
  const job = { id: title, status: "succeeded", progress: { iteration: result.history.length, total: result.history.length,
    labels_used: result.labels_used, budget: result.budget },
    kind: { algorithm: result.spec.algorithm.name, family: (result.spec.family || {}).name, oracle: result.spec.oracle.name },
    warnings: result.warnings || [] };
  main.replaceChildren(el("h1", {}, "Job report ", el("code", {}, title)), headerPanel(job, null),
    storyPanel(result) || "", section("Convergence", "convergence-section", convergence(result.history, result, true)));
  renderResult(main, result);
  const model = modelPanel(null, result);
  if (model) main.append(model);
  main.append(section("Samples", "samples", el("p", {}, "Draw fresh training inputs with ",
    el("code", {}, "lwl.measures.from_spec(result['distribution']).sample(n, seed)"), ".")), specPanel(result.spec));
}

// -- submit ----------------------------------------------------------------------------------
async function submitPage() {
  const main = $("#main");
  const text = el("textarea", { id: "spec-text", rows: 22, spellcheck: "false" });
  const file = el("input", { type: "file", id: "spec-file", accept: ".json" });
  const out = el("div", { id: "submit-out" });
  const help = el("div", { id: "catalog-help" });
  file.onchange = async () => { if (file.files.length) text.value = await file.files[0].text(); };
  text.value = sessionStorage.getItem("lwl-draft") || "";
  text.oninput = () => sessionStorage.setItem("lwl-draft", text.value);

  function markFields(errors) {  // each field error beside the line of its key in the spec
    const lines = text.value.split("\n");
    return el("ol", { id: "annotated" }, lines.map((line, i) => {
      const hits = errors.filter((e) => {
        const key = String(e.field).split(".").filter((p) => isNaN(Number(p))).pop();
        return key && line.includes(`"${key}"`);
      });
      return hits.length ? el("li", { value: i + 1, class: "error-line" }, el("code", {}, line.trim()),
        hits.map((e) => el("span", { class: "field-error", "data-field": e.field }, ` ← ${e.field}: ${e.message}`))) : null;
    }));
  }

  async function submit() {
    out.replaceChildren();
    let doc;
    try { doc = JSON.parse(text.value); } catch (err) {
      out.append(el("div", { class: "problem" }, el("strong", {}, "Not JSON: "), String(err.message)));
      return;
    }
    try {
      const r = await api("/v1/jobs", { method: "POST", json: doc });
      sessionStorage.removeItem("lwl-draft");
      location.hash = `#/jobs/${r.id}`;
    } catch (err) {
      out.append(problemBox(err));
      if (err.doc && err.doc.errors) out.append(markFields(err.doc.errors));
    }
  }

  main.replaceChildren(el("h1", {}, "Submit a job"),
    el("p", {}, "Paste a job spec (the JSON ", el("code", {}, "lwl run"), " takes) or load a file: ", file),
    el("div", { class: "submit-grid" }, el("div", {}, text, el("p", {},
      el("button", { id: "submit", onclick: submit }, "Submit"), " ",
      el("button", { id: "example", onclick: () => { text.value = JSON.stringify(EXAMPLE, null, 2); } }, "Load the example")), out),
    help));
  try {
    const cat = await api("/v1/catalog");
    const part = (title, items, describe) => el("details", { open: title === "algorithms" }, el("summary", {}, title),
      el("ul", {}, items.map((it) => el("li", {}, el("code", {}, it.name), " ", describe(it)))));
    const props = (schema) => Object.keys(schema.properties || {}).filter((p) => p !== "name").join(", ");
    help.append(el("h2", {}, "What a spec can name"),
      part("oracles", cat.oracles, (o) => `${o.doc} (params: ${Object.keys(o.params).join(", ") || "none"})`),
      part("families", cat.families, (f) => `fields: ${props(f.schema)}`),
      part("models", cat.models, (m) => `fields: ${props(m.schema)}`),
      part("algorithms", cat.algorithms, (a) => `fields: ${props(a.schema)}`),
      el("p", { class: "muted" }, "Everything left out takes lwl's default; see GET /v1/catalog for the full schemas."));
  } catch (err) { help.append(problemBox(err)); }
}

const EXAMPLE = {
  oracle: { name: "friedman1" },
  test_distributions: { members: [
    { gaussian: { mean: [0, 0, 0, 0, 0], cov: [[2, 0, 0, 0, 0], [0, 2, 0, 0, 0], [0, 0, 2, 0, 0], [0, 0, 0, 2, 0], [0, 0, 0, 0, 2]] }, size: 600 },
    { gaussian: { mean: [1, 0, 1, 0, 1], cov: [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]] }, size: 600 }],
  validation_per_member: 200 },
  algorithm: { name: "bilevel", iterations: 200 },
  evaluation: { train_size: 256 },
  seed: 0,
};

// -- router ----------------------------------------------------------------------------------
function route() {
  pageGen += 1;
  clearTimeout(poller);
  if (OFFLINE) return offlinePage();
  const [path, query] = (location.hash || "#/jobs").slice(1).split("?");
  const params = new URLSearchParams(query || "");
  if (needsKey()) {
    $("#main").replaceChildren(el("p", { id: "key-needed" }, "Enter your API key above: this service knows its users by key, ",
      "and the page keeps it for this browser session only."));
    return;
  }
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", path.startsWith(a.getAttribute("href").slice(1))));
  const m = path.match(/^\/jobs\/([^/]+)$/);
  if (m) return jobPage(decodeURIComponent(m[1]));
  if (path === "/submit") return submitPage();
  return jobsPage(params);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => { renderKeyForm(); route(); });
