"""Requests per second and p50/p99 latency of the embedded server, driven from a separate
process (this one) over loopback.

Starts ``lwl serve`` (embedded: SQLite store, local broker, one worker) on a free port, runs
one small bilevel job to completion, then measures with a pool of client threads:

- ``GET /v1/jobs/{id}`` (status),
- ``POST /v1/jobs/{id}/samples`` with n = 10,000, d = 10, as JSON and as ``.npy``.

Baseline in the same run: ``GET /healthz`` (no store access) — the floor of the HTTP stack.

The load comes from ``wrk`` (Debian package ``wrk``, a C client in its own process) when it is
installed, else from a pool of Python client threads (which then share the 2 cores and
understate the server).

Usage: python bench/api.py [--seconds 5] [--threads 8] [--python-client]

``--contended`` (issue 84) measures instead the p50/p99 of ``GET /v1/jobs/{id}`` from one
client polling in a loop against ``lwl serve --no-worker`` (SQLite), first alone (the
baseline, same run), then while four clients ``POST /v1/jobs/{id}/predict`` (100 points each)
on a Gaussian process of 2,000 labels, a fifth client tells an ask/tell job's batch of
20,000 points, 50 points a tell, and a writer standing in for a worker's checkpoint holds
SQLite's write lock for 300 ms of every 600 ms (a tell waits for it; ``--lock-ms`` sets the
hold, the pause after it equal). Target: p99 <= 0.5 s on two cores.

Usage: python bench/api.py --contended [--seconds 20] [--lock-ms 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.processes import Server  # noqa: E402

NPY = "application/x-npy"


def job_d10() -> dict:
    d = 10
    eye = np.eye(d).tolist()
    return {
        "oracle": {"name": "kernel_expansion", "params": {"dim": d, "centres": 100}},
        "test_distributions": {"members": [{"gaussian": {"mean": [0.0] * d, "cov": eye}, "size": 300}],
                               "validation_per_member": 100},
        "family": {"name": "gaussian", "mean": [0.5] * d},
        "model": {"name": "krr", "lengthscale": 5.0},
        "algorithm": {"name": "bilevel", "iterations": 5, "samples_per_iteration": 50},
        "evaluation": {"enabled": False},
        "seed": 0, "device": "cpu",
    }


def hammer(fn, seconds: float, threads: int) -> dict:
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    errors = [0]

    def run():
        with httpx.Client(timeout=30) as client:
            mine = []
            while time.monotonic() < stop:
                t = time.perf_counter()
                ok = fn(client)
                mine.append(time.perf_counter() - t)
                if not ok:
                    errors[0] += 1
            with lock:
                lat.extend(mine)

    t0 = time.monotonic()
    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    lat.sort()
    return {"rps": len(lat) / wall, "p50": 1e3 * statistics.median(lat),
            "p99": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "n": len(lat), "errors": errors[0]}


WRK_LUA = """
wrk.method = "{method}"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
{accept}
"""


def _ms(text: str) -> float:
    value = float(text.rstrip("usm"))
    return value / 1e3 if text.endswith("us") else value * 1e3 if text.endswith("s") and not text.endswith("ms") else value


def wrk(url: str, seconds: float, conns: int, method: str = "GET", body: str = "", accept: str = "") -> dict:
    """Run wrk against one URL and parse requests/s and the 50th/99th latency percentiles."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(WRK_LUA.format(method=method, body=body,
                                accept=f'wrk.headers["Accept"] = "{accept}"' if accept else ""))
    out = subprocess.run(["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(seconds))}s", "--latency", "-s", fh.name, url],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(fh.name)
    stats = {"errors": 0}
    for line in out.splitlines():
        parts = line.split()
        if line.startswith("Requests/sec:"):
            stats["rps"] = float(parts[1])
        elif parts[:1] == ["50.000%"] or parts[:1] == ["50%"]:
            stats["p50"] = _ms(parts[1])
        elif parts[:1] == ["99.000%"] or parts[:1] == ["99%"]:
            stats["p99"] = _ms(parts[1])
        elif "Non-2xx" in line or "Socket errors" in line:
            stats["errors"] += sum(int(p.strip(",")) for p in parts if p.strip(",").isdigit())
    return stats


def _gp_job(url: str, store, d: int = 5, n: int = 2_000) -> str:
    """A succeeded budgeted job (written into the store as a worker would) whose served model is
    a GP with fixed hyperparameters on ``n`` labels in ``d`` dimensions."""
    from lwl.measures.gaussian import Gaussian
    from lwl.models.gp import GaussianProcess

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    y = np.sin(x).sum(1) + 0.05 * rng.normal(size=n)
    gp = GaussianProcess(kernel="squared_exponential", lengthscale=[1.0] * d, output_scale=1.0, noise=1e-2,
                         optimize=False).fit(x, y)
    job = httpx.post(f"{url}/v1/jobs", json=_asktell_spec(d)).json()["id"]
    assert store.acquire(job, 0, "bench", "bench") is not None
    store.succeed(job, "bench", {"distribution": Gaussian(np.zeros(d), cov=np.eye(d)).to_spec(),
                                 "model": gp.to_spec(training_set=False),
                                 "training_set": {"inputs": x.tolist(), "labels": y.tolist()}})
    return job


def _asktell_spec(d: int = 5) -> dict:
    eye = np.eye(d).tolist()
    return {"oracle": {"name": "external"},
            "test_distributions": {"members": [{"gaussian": {"mean": [0.0] * d, "cov": eye}, "size": 300}],
                                   "validation_per_member": 100},
            "family": {"name": "gaussian", "mean": [0.5] * d},
            "model": {"name": "krr", "lengthscale": 3.0},
            "algorithm": {"name": "bilevel", "iterations": 5, "samples_per_iteration": 50},
            "seed": 0, "device": "cpu"}


def contended(seconds: float, lock_ms: float = 300.0) -> None:
    """Issue 84: the status poll's latency alone, then under /predict and tells (see the module doc)."""
    from service.core.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="lwl-bench-"))
    srv = Server(tmp, no_worker=True).start()
    try:
        url = srv.url
        store = Store(f"sqlite:///{(tmp / 'lwl.db').resolve()}")
        gp_job = _gp_job(url, store)
        tell_job = httpx.post(f"{url}/v1/jobs", json=_asktell_spec()).json()["id"]
        rounds = [0]

        def open_round():
            rounds[0] += 1
            lease = f"bench-{rounds[0]}"
            gen = store.get_job(tell_job).generation
            assert store.acquire(tell_job, gen, lease, "bench") is not None
            points = np.random.default_rng(rounds[0]).normal(size=(20_000, 5))
            (bid,) = store.open_round(tell_job, lease, f"round-{rounds[0]}", points, None)
            return bid

        batch = [open_round()]
        stop = threading.Event()
        x = np.random.default_rng(1).normal(size=(100, 5)).tolist()
        counts = {"predict": 0, "tell": 0, "errors": 0}

        def predictor():
            with httpx.Client(timeout=120) as c:
                while not stop.is_set():
                    r = c.post(f"{url}/v1/jobs/{gp_job}/predict", json={"inputs": x})
                    counts["predict" if r.status_code == 200 else "errors"] += 1

        def teller():
            with httpx.Client(timeout=120) as c:
                start = 0
                while not stop.is_set():
                    if start >= 20_000:
                        batch[0], start = open_round(), 0
                    idx = list(range(start, start + 50))
                    r = c.post(f"{url}/v1/jobs/{tell_job}/labels",
                               json={"batch_id": batch[0], "labels": [1.0] * 50, "indices": idx})
                    counts["tell" if r.status_code == 200 else "errors"] += 1
                    start += 50

        def checkpointer():  # a worker writing a large checkpoint: the write lock held a while
            from sqlalchemy import text

            while not stop.is_set():
                with store.engine.begin() as c:
                    c.execute(text("UPDATE jobs SET heartbeat_at = heartbeat_at WHERE id = :id"), {"id": gp_job})
                    time.sleep(lock_ms / 1e3)
                time.sleep(lock_ms / 1e3)

        def poll(for_seconds: float) -> dict:
            lat = []
            with httpx.Client(timeout=120) as c:
                end = time.monotonic() + for_seconds
                while time.monotonic() < end:
                    t = time.perf_counter()
                    assert c.get(f"{url}/v1/jobs/{gp_job}").status_code == 200
                    lat.append(time.perf_counter() - t)
            lat.sort()
            return {"n": len(lat), "p50": 1e3 * statistics.median(lat),
                    "p99": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "max": 1e3 * lat[-1]}

        httpx.post(f"{url}/v1/jobs/{gp_job}/predict", json={"inputs": x}, timeout=120)  # factor the GP once
        print(f"lwl serve --no-worker (SQLite); {os.cpu_count()} cores shared by clients and server; "
              f"{seconds:.0f} s per row")
        quiet = poll(seconds)
        load = [threading.Thread(target=predictor) for _ in range(4)] + [threading.Thread(target=teller),
                                                                    threading.Thread(target=checkpointer)]
        for t in load:
            t.start()
        time.sleep(1.0)
        t0 = time.monotonic()
        busy = poll(seconds)
        wall = time.monotonic() - t0
        stop.set()
        for t in load:
            t.join()
        for name, s in (("GET /v1/jobs/{id} alone (baseline)", quiet),
                        ("GET /v1/jobs/{id} under load", busy)):
            print(f"  {name:36s} p50 {s['p50']:7.1f} ms  p99 {s['p99']:7.1f} ms  max {s['max']:7.1f} ms  "
                  f"({s['n']} polls, p99 {s['p99'] / quiet['p99']:6.1f}x baseline)")
        print(f"  load: {counts['predict'] / wall:.1f} predicts/s (100 points, 2,000-label GP, 4 clients), "
              f"{counts['tell'] / wall:.1f} tells/s (50 of 20,000 points), {counts['errors']} errors; "
              f"write lock held {lock_ms:.0f} ms of every {2 * lock_ms:.0f} ms")
        print("target: p99 under load <= 500 ms")
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--python-client", action="store_true", help="do not use wrk")
    ap.add_argument("--contended", action="store_true", help="issue 84: status polls under /predict and tells")
    ap.add_argument("--lock-ms", type=float, default=300.0, help="--contended: how long the writer holds the lock")
    args = ap.parse_args()
    if args.contended:
        return contended(args.seconds, args.lock_ms)
    use_wrk = shutil.which("wrk") is not None and not args.python_client
    tmp = Path(tempfile.mkdtemp(prefix="lwl-bench-"))
    srv = Server(tmp).start()
    try:
        url = srv.url
        r = httpx.post(f"{url}/v1/jobs", json=job_d10())
        job = r.json()["id"]
        deadline = time.monotonic() + 120
        while httpx.get(f"{url}/v1/jobs/{job}").json()["status"] != "succeeded":
            if time.monotonic() > deadline:
                raise SystemExit("bench job did not finish")
            time.sleep(0.2)
        body = {"n": 10_000, "seed": 1}
        samples = f"{url}/v1/jobs/{job}/samples"
        rows = [
            ("GET /healthz (baseline)", f"{url}/healthz", "GET", "", "", None),
            ("GET /v1/jobs/{id}", f"{url}/v1/jobs/{job}", "GET", "", "", None),
            ("POST samples JSON n=1e4 d=10", samples, "POST", json.dumps(body), "", 1e5),
            ("POST samples npy  n=1e4 d=10", samples, "POST", json.dumps(body), NPY, 1e5),
        ]
        client = "wrk (1 thread)" if use_wrk else "Python threads"
        print(f"embedded lwl serve; load from {client}, {args.threads} connections, {args.seconds:.0f} s each, "
              f"{os.cpu_count()} cores shared by client and server")
        base = None
        for name, target, method, payload, accept, floats in rows:
            if use_wrk:
                s = wrk(target, args.seconds, args.threads, method, payload, accept)
            else:
                hdrs = {"Accept": accept} if accept else {}

                def fn(c, target=target, method=method, hdrs=hdrs):
                    r = c.request(method, target, content=payload or None, headers=hdrs) if payload else c.get(target)
                    return r.status_code == 200

                s = hammer(fn, args.seconds, args.threads)
            base = base or s["rps"]
            extra = f"  {floats * s['rps'] / 1e6:6.1f} M floats/s" if floats else ""
            print(f"  {name:32s} {s['rps']:8.1f} req/s  p50 {s['p50']:6.1f} ms  p99 {s['p99']:6.1f} ms"
                  f"  ({s['rps'] / base:4.2f}x baseline, {s['errors']} errors){extra}")
        print("targets: status >= 500 req/s with p99 <= 50 ms; npy sampling >= 20 M floats/s")
    finally:
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
