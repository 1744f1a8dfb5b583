"""The README's budgeted job on a machine that is not the worker's alone (issue 85).

Runs the README's budgeted ask/tell job (``examples/kernel10d_budget.json``, model gp, 2,000
labels; ``--example friedman1`` for ``examples/friedman1_budget.json``) through ``lwl serve`` with
its embedded worker, labelled as the README's shell loop does (``lwl ask``, the stand-in
instrument ``examples/measure.py``, ``lwl tell``, one process per call), twice: on a quiet
machine, and beside one other CPU-bound process (a busy loop that keeps one core). Prints each wall, the ratio (goal: beside
a busy process <= 2.5 times the quiet wall), the worker's threads (``GET /v1/workers``) and the
job's Err.

``--threads N`` starts the embedded worker with N threads instead of its share of the machine
(``service.core.threads``): ``--threads`` the number of cores is the old behaviour of torch's
pool of every core.

Usage: python bench/worker_threads.py [--threads N] [--seed 0] [--example kernel10d|friedman1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl.evaluation.verdict_text import verdict_sentence  # noqa: E402
from service.core.threads import THREAD_VARIABLES  # noqa: E402
from service.processes import ENV_BASE, Server  # noqa: E402

GOAL_RATIO = 2.5


EXAMPLES = {"kernel10d": "kernel10d_budget.json", "friedman1": "friedman1_budget.json"}


def busy(stop) -> None:
    """Keep one core busy until ``stop`` is set (the other CPU-bound process)."""
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def run_readme_job(url: str, tmp: Path, seed: int, example: str) -> tuple[float, dict]:
    """Submit the README's budgeted job and label it with the CLI until it ends: (wall, job doc)."""
    spec = json.loads((ROOT / "examples" / EXAMPLES[example]).read_text())
    spec["seed"] = seed
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, **ENV_BASE, "LWL_URL": url, "PYTHONPATH": str(ROOT)}
    lwl = [sys.executable, "-m", "lwl.cli"]
    t0 = time.perf_counter()
    job = subprocess.run(lwl + ["submit", str(tmp / "spec.json")], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    while True:
        status = httpx.get(f"{url}/v1/jobs/{job}").json()["status"]
        if status in ("succeeded", "failed", "cancelled"):
            break
        asked = subprocess.run(lwl + ["ask", job, "--out", str(tmp / "x.npy")], env=env, capture_output=True, text=True)
        if asked.returncode == 3:  # nothing to label yet: the job is between rounds
            time.sleep(1.0)
            continue
        asked.check_returncode()
        subprocess.run([sys.executable, str(ROOT / "examples" / "measure.py"), str(tmp / "x.npy"), str(tmp / "y.npy"),
                        "--oracle", example], env=env, capture_output=True, check=True)
        subprocess.run(lwl + ["tell", job, asked.stdout.strip(), str(tmp / "y.npy")], env=env, capture_output=True,
                       check=True)
    wall = time.perf_counter() - t0
    return wall, httpx.get(f"{url}/v1/jobs/{job}").json()


def one_run(label: str, threads: int | None, seed: int, beside_busy: bool, example: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = Server(tmp / "data", worker_threads=threads)
        for name in THREAD_VARIABLES:  # a user's shell sets none: the worker's own rule sizes its pools
            server.env.pop(name, None)
        server.start()
        stop = multiprocessing.Event()
        hog = multiprocessing.Process(target=busy, args=(stop,), daemon=True) if beside_busy else None
        try:
            if hog is not None:
                hog.start()
            wall, doc = run_readme_job(server.url, tmp, seed, example)
            workers = httpx.get(f"{server.url}/v1/workers").json()["items"]
            result = httpx.get(f"{server.url}/v1/jobs/{doc['id']}/result")
            verdict = result.json().get("verdict") if result.status_code == 200 else None
        finally:
            stop.set()
            if hog is not None:
                hog.join(5)
            server.stop()
    progress = doc.get("progress") or {}
    row = {"run": label, "wall": wall, "status": doc["status"], "threads": [w.get("threads") for w in workers],
           "verdict": verdict_sentence(verdict) if verdict else None}
    print(f"{label:<22} {wall:8.1f} s  {doc['status']:<10} worker threads {row['threads']}  "
          f"rounds {progress.get('iteration')}; {row['verdict']}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="the embedded worker's threads (default: its share)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--example", choices=sorted(EXAMPLES), default="kernel10d")
    args = ap.parse_args()
    print(f"the README's budgeted job (examples/{EXAMPLES[args.example]}, seed {args.seed}), labelled with lwl ask, "
          f"examples/measure.py, lwl tell; {len(os.sched_getaffinity(0))} cores", flush=True)
    quiet = one_run("quiet", args.threads, args.seed, beside_busy=False, example=args.example)
    loaded = one_run("beside a busy process", args.threads, args.seed, beside_busy=True, example=args.example)
    ratio = loaded["wall"] / quiet["wall"]
    print(f"beside a busy process / quiet: {ratio:.2f} (goal <= {GOAL_RATIO}: {'met' if ratio <= GOAL_RATIO else 'not met'})")


if __name__ == "__main__":
    main()
