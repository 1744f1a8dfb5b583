"""Worker deaths in distributed mode: ``--kills`` SIGKILLs of random busy workers while
``--jobs`` jobs run, then every result is compared with an uninterrupted ``run_job`` of its spec.

Starts redis-server, PostgreSQL, ``lwl serve --no-worker`` and ``--workers`` ``lwl worker``
processes (a killed worker is started again at once, as an orchestrator would). Each kill
picks a random worker that reports a current job; its recovery time is from the kill until
that job's iteration count moves again on another slice (the stale timeout, 10 s by default,
plus the re-enqueue and the checkpoint restore).

The guard that fails a job whose slices keep dying (LWL_MAX_ATTEMPTS, 3 in a row) is raised
for the run: random kills may hit one job again and again.

Usage: python bench/chaos.py [--jobs 10] [--kills 20] [--workers 3] [--iterations 1500]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl import run_job  # noqa: E402
from service.processes import wait_until  # noqa: E402
from service.stack import LoopbackStack, small_job  # noqa: E402


def spec(seed: int, iterations: int) -> dict:
    job = small_job(iterations, seed, samples=100)
    job["algorithm"]["check_every"] = 10_000  # no early stop: every job runs all its iterations
    job["evaluation"] = {"enabled": False}
    return job


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    d = Path(tempfile.mkdtemp(prefix="lwl-chaos-"))
    # random kills can hit one job several times before any of its slices finishes: the guard
    # that fails a job which keeps killing its workers (LWL_MAX_ATTEMPTS, 3) would end it
    env = {"LWL_SLICE_SECONDS": "5", "LWL_MAX_ATTEMPTS": str(args.kills + 5)}
    st = LoopbackStack(d, workers=args.workers, env=env, poll_s=None)  # no poller: the loop reads the views
    workers, url = st.workers, st.url
    try:
        specs = [spec(s, args.iterations) for s in range(args.jobs)]
        ids = [httpx.post(f"{url}/v1/jobs", json=s).json()["id"] for s in specs]
        t_start = time.monotonic()
        recoveries = []
        k = 0
        while k < args.kills:  # a round that finds no busy worker does not count as a kill
            time.sleep(rng.uniform(1.0, 3.0))
            busy = [w for w in httpx.get(f"{url}/v1/workers").json()["items"] if w["alive"] and w["busy"]]
            states = {j: httpx.get(f"{url}/v1/jobs/{j}").json() for j in ids}
            if all(s["status"] == "succeeded" for s in states.values()):
                print(f"all jobs done after {k} kills")
                break
            if not busy:
                continue
            victim = rng.choice(busy)
            job_id = victim["current_job"]
            idx = next(i for i, w in enumerate(workers) if w.pid == victim["pid"])
            at_kill = httpx.get(f"{url}/v1/jobs/{job_id}").json()
            os.kill(victim["pid"], signal.SIGKILL)
            t_kill = time.monotonic()
            workers[idx].p.wait()
            st.replace_worker(idx, f"worker{idx}-{k}")  # the orchestrator's restart

            before = (at_kill["progress"] or {}).get("iteration", 0)

            def moved(job_id=job_id, before=before, slices=at_kill["attempts"]):
                # a new slice (on another worker) has taken the job and stepped it
                j = httpx.get(f"{url}/v1/jobs/{job_id}").json()
                return j["status"] in ("succeeded", "failed") or (j["attempts"] > slices and j["status"] == "running"
                                                       and (j["progress"] or {}).get("iteration", 0) > before)
            wait_until(moved, 120, 0.1, f"job {job_id} to move after kill {k}")
            recoveries.append(time.monotonic() - t_kill)
            print(f"kill {k + 1:>2}: worker pid {victim['pid']} running {job_id[:8]} at iteration {before}: "
                  f"moving again after {recoveries[-1]:.1f} s")
            k += 1
        st.wait_all(ids)
        wall = time.monotonic() - t_start
        equal = 0
        for s, j in zip(specs, ids):
            got = httpx.get(f"{url}/v1/jobs/{j}/result").json()
            want = run_job(s)
            same = got["distribution"] == want["distribution"] and got["last_distribution"] == want["last_distribution"]
            equal += same
            view = httpx.get(f"{url}/v1/jobs/{j}").json()
            print(f"job {j[:8]} seed {s['seed']}: {view['status']}, {view['attempts']} slices, "
                  f"result {'equal to' if same else 'DIFFERENT from'} the uninterrupted run")
        print(f"\n{equal}/{len(ids)} jobs equal to uninterrupted runs after {len(recoveries)} kills; "
              f"{wall:.0f} s wall")
        if recoveries:
            print(f"recovery (kill -> the job moving again): median {statistics.median(recoveries):.1f} s, "
                  f"max {max(recoveries):.1f} s, min {min(recoveries):.1f} s")
    finally:
        st.stop()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    main()
