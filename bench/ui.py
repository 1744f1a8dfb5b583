"""Responsiveness of the dashboard's jobs page with thousands of jobs in the store, in headless
Chromium (Debian's ``chromium``) against ``lwl serve`` (no worker: the jobs stay as stored).

For each store size (baseline: 10 jobs; then --jobs, default 2,000) it measures, in the same run:

- first paint: navigation to ``/ui#/jobs`` until the first page (50 rows) is in the table;
- one poll: the page's refresh of its newest page (``GET /v1/jobs?limit=50``) timed in the
  browser (fetch and the row updates), over ``--polls`` ticks;
- paging: "Older jobs" clicks until every job is listed, per page;
- the status filter: choosing ``failed`` until its rows are shown.

The jobs are written straight into the store (a tenth of them marked failed), so the numbers
are the page's and the list endpoint's, not the design algorithms'.

Usage: python bench/ui.py [--jobs 2000] [--polls 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.processes import Server  # noqa: E402

KEY = "bench-key"


def small_spec(seed: int) -> dict:
    return {"oracle": {"name": "friedman1"},
            "test_distributions": {"members": [{"gaussian": {"mean": [0.0] * 5, "cov": [[float(i == j) for j in range(5)]
                                                                                           for i in range(5)]},
                                                "size": 300}], "validation_per_member": 100},
            "algorithm": {"name": "bilevel", "iterations": 100}, "seed": seed}


def fill(data_dir: Path, n: int) -> None:
    from sqlalchemy import update

    from service.core.settings import Settings
    from service.core.store import Store, jobs

    store = Store(Settings(data_dir=data_dir).resolved_database_url())
    for i in range(n):
        job, _ = store.create_job("bench", small_spec(i), 100)
        if i % 10 == 0:
            with store.engine.begin() as c:
                c.execute(update(jobs).where(jobs.c.id == job.id).values(status="failed"))
    store.engine.dispose()


def measure(browser, url: str, n: int, polls: int) -> dict:
    ctx = browser.new_context(viewport={"width": 1360, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{url}/ui")
    page.fill("#api-key", KEY)
    page.click("#key-form button")
    page.wait_for_selector("#key-state:text('key set')")
    first_rows = min(n, 50)
    t0 = time.perf_counter()
    page.goto(f"{url}/ui#/jobs")
    page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length >= {first_rows}")
    first_paint = time.perf_counter() - t0
    # one poll tick, as the page does it: fetch the newest page and update its rows
    tick = page.evaluate(f"""async () => {{
        const key = sessionStorage.getItem('lwl-key'), times = [];
        for (let i = 0; i < {polls}; i++) {{
            const t = performance.now();
            const r = await fetch('/v1/jobs?limit=50', {{headers: {{Authorization: 'Bearer ' + key}}}});
            const doc = await r.json();
            for (const j of doc.items) document.querySelector(`tr[data-id='${{j.id}}']`);
            times.push(performance.now() - t);
        }}
        times.sort((a, b) => a - b);
        return times[Math.floor(times.length / 2)];
    }}""")
    pages, t0 = 0, time.perf_counter()
    while page.is_visible("#more"):
        shown = page.locator("#jobs tbody tr").count()
        page.click("#more")
        page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length > {shown}")
        pages += 1
    paging = (time.perf_counter() - t0) / max(pages, 1)
    listed = page.locator("#jobs tbody tr").count()
    t0 = time.perf_counter()
    page.select_option("#status-filter", "failed")
    page.wait_for_function("document.querySelectorAll('#jobs tbody tr').length > 0 && "
                           "!document.querySelector(\"tr[data-status='queued']\")")
    filtered = time.perf_counter() - t0
    ctx.close()
    return {"jobs": n, "first_paint_s": first_paint, "poll_ms": tick, "page_s": paging, "pages": pages,
            "listed": listed, "filter_s": filtered, "console_errors": len(errors)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("Debian's chromium is not installed (scripts/setup.sh --system installs it)")
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        for n in (10, args.jobs):
            d = Path(tempfile.mkdtemp(prefix="lwl-bench-ui-"))
            fill(d, n)
            srv = Server(d, env={"LWL_API_KEYS": f"bench:{KEY}"}, no_worker=True).start()
            try:
                rows.append(measure(browser, srv.url, n, args.polls))
            finally:
                srv.stop()
                shutil.rmtree(d, ignore_errors=True)
        browser.close()
    base, big = rows
    print(f"{'jobs':>6} {'first paint s':>14} {'poll ms':>8} {'page s':>7} {'pages':>6} {'listed':>7} "
          f"{'filter s':>9} {'console errors':>15}")
    for r in rows:
        print(f"{r['jobs']:>6} {r['first_paint_s']:>14.3f} {r['poll_ms']:>8.1f} {r['page_s']:>7.3f} {r['pages']:>6} "
              f"{r['listed']:>7} {r['filter_s']:>9.3f} {r['console_errors']:>15}")
    print(f"ratio {big['jobs']} / {base['jobs']} jobs: first paint {big['first_paint_s'] / base['first_paint_s']:.2f}x, "
          f"poll {big['poll_ms'] / base['poll_ms']:.2f}x, filter {big['filter_s'] / base['filter_s']:.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
