"""Issue #48's fault table, rerun: faults injected into the distributed stack while jobs run.

Each row starts its own stack on loopback (redis-server without persistence unless the row
says AOF, a throwaway PostgreSQL, ``lwl serve --no-worker``, two ``lwl worker --device cpu``),
submits its jobs (three design jobs, one of them waiting in the queue, or ask/tell jobs), injects
its fault, and waits for every job to end. A poller reads every job's view every 0.25 s and
counts the answers by HTTP status. A job counts as good when it succeeded with the result of
its undisturbed run: the distribution and the verdict equal (to 1e-9; in practice bit for bit)
and the history rows identical, none duplicated; an ask/tell job's distribution equals the
builtin oracle's run.

Recovery, per row. Redis and PostgreSQL rows: from the service's restart until every job that
was unfinished then has been seen moving again (an iteration after the restart, or ended) and
the job that was waiting in the queue has been taken by a worker (it may also wait for a free
one). Worker rows: from the SIGKILL or SIGSTOP until the job runs on another worker. Ask/tell
rows: from the API's (or Redis's) restart until the told job has left ``queued``; with several
kills, the longest.

The jobs are smaller than the issue's README job (300 iterations of examples/friedman1.json):
``--iterations`` (default 60) of the small bilevel job of the service tests, so that the whole
table runs in minutes on two shared cores. Writes docs/results/faults/table.md and .json.

Usage: python scripts/fault_table.py [--iterations 60] [--out docs/results/faults] [--rows a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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

from lwl import run_job  # noqa: E402
from lwl.oracles import make_oracle  # noqa: E402
from service.processes import Postgres, Server, start_redis, start_worker, wait_until  # noqa: E402

FRIEDMAN = make_oracle({"name": "friedman1"})
# the defaults of the service except the ones a table of minutes needs: a dead worker's job is
# resumed after 10 s as by default; lost messages are sent again after 20 s as by default
ENV = {"LWL_SLICE_SECONDS": "60"}
TERMINAL = ("succeeded", "failed", "cancelled")


def design_spec(seed: int, iterations: int) -> dict:
    eye = np.eye(5)
    return {"oracle": {"name": "friedman1"},
            "test_distributions": {"members": [{"gaussian": {"mean": [0.0] * 5, "cov": (2 * eye).tolist()}, "size": 300},
                                               {"gaussian": {"mean": [1, 0, 1, 0, 1], "cov": eye.tolist()}, "size": 300}],
                                   "validation_per_member": 100},
            "family": {"name": "gaussian", "mean": [0.5] * 5},
            "model": {"name": "krr", "lengthscale": 3.0},
            "algorithm": {"name": "bilevel", "iterations": iterations, "samples_per_iteration": 60},
            "evaluation": {"train_size": 100, "baselines": ["normal", "mixture"]},
            "seed": seed, "device": "cpu"}


def asktell_spec(seed: int) -> dict:
    s = design_spec(seed, 3)
    s["oracle"] = {"name": "external"}
    s.pop("evaluation")
    return s


class Stack:
    def __init__(self, d: Path, appendonly: bool = False, env: dict | None = None):
        self.d = d
        self.redis_dir = d / "redis"
        self.redis_dir.mkdir(parents=True)
        self.appendonly = appendonly
        self.redis_url, self.redis = start_redis(self.redis_dir, appendonly=appendonly)
        self.redis_port = int(self.redis_url.rsplit(":", 1)[1].split("/")[0])
        self.pg = Postgres()
        self.env = {"LWL_BROKER_URL": self.redis_url, "LWL_DATABASE_URL": self.pg.url, **ENV, **(env or {})}
        self.api = Server(d, env=self.env, no_worker=True).start()
        self.workers = [start_worker(d, self.env, f"w{i}") for i in range(2)]
        self.url = self.api.url
        self.statuses: dict[int, int] = {}
        self.views: dict[str, list[tuple[float, dict]]] = {}
        self.jobs: list[str] = []
        self._stop = threading.Event()
        threading.Thread(target=self._poll, daemon=True).start()

    def count(self, status: int) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as http:
            while not self._stop.wait(0.25):
                for j in list(self.jobs):
                    try:
                        r = http.get(f"{self.url}/v1/jobs/{j}")
                    except httpx.TransportError:
                        continue  # the API is down (a row that kills it)
                    self.count(r.status_code)
                    if r.status_code == 200:
                        self.views.setdefault(j, []).append((time.monotonic(), r.json()))

    def job(self, j: str) -> dict:
        return wait_until(lambda: httpx.get(f"{self.url}/v1/jobs/{j}", timeout=10).json(), 60, 0.25, "job view")

    def submit(self, spec: dict) -> str:
        r = httpx.post(f"{self.url}/v1/jobs", json=spec, timeout=30)
        self.count(r.status_code)
        r.raise_for_status()
        self.jobs.append(r.json()["id"])
        return r.json()["id"]

    def wait_all(self, timeout: float = 900) -> list[dict]:
        wait_until(lambda: all(self.job(j)["status"] in TERMINAL for j in self.jobs), timeout, 0.5, "jobs to end")
        return [self.job(j) for j in self.jobs]

    def kill_redis(self, sig=signal.SIGKILL) -> None:
        os.killpg(self.redis.pid, sig)
        self.redis.p.wait(30)
        self.redis.stop()

    def start_redis(self, appendonly: bool | None = None) -> None:
        _, self.redis = start_redis(self.redis_dir, port=self.redis_port,
                                    appendonly=self.appendonly if appendonly is None else appendonly)

    def llen(self) -> int:
        import redis

        return redis.Redis(port=self.redis_port).llen("lwl.cpu")

    def stop(self) -> None:
        self._stop.set()
        for w in self.workers:
            w.stop()
        self.api.stop()
        self.redis.stop()
        self.pg.stop()
        shutil.rmtree(self.d, ignore_errors=True)

    def moved_after(self, t: float, ids: list[str]) -> float | None:
        """Seconds from ``t`` until every job of ``ids`` was seen moving (a higher iteration
        than at ``t``, or ended), by the poller's views; None if one never was."""
        out = 0.0
        for j in ids:
            views = self.views.get(j, [])
            before = [v for s, v in views if s <= t]
            it0 = before[-1]["progress"]["iteration"] if before else -1
            later = [(s, v) for s, v in views if s > t and (v["status"] in TERMINAL or v["status"] == "running"
                                                            and v["progress"]["iteration"] > it0)]
            if not later:
                return None
            out = max(out, later[0][0] - t)
        return out

    def taken_over_after(self, t: float, j: str) -> float | None:
        """Seconds from ``t`` until job ``j`` was seen running on another worker than at ``t``,
        or ended."""
        before = [v for s, v in self.views.get(j, []) if s <= t]
        worker = before[-1]["worker"] if before else None
        later = [s for s, v in self.views.get(j, []) if s > t and (v["status"] in TERMINAL or
                                                                   v["status"] == "running" and v["worker"] != worker)]
        return later[0] - t if later else None

    def taken_after(self, t: float, j: str) -> float | None:
        """Seconds from ``t`` until job ``j`` was seen not queued."""
        later = [s for s, v in self.views.get(j, []) if s > t and v["status"] != "queued"]
        return later[0] - t if later else None


def unfinished(st: Stack) -> list[str]:
    return [j for j in st.jobs if st.job(j)["status"] not in TERMINAL]


# -- rows ------------------------------------------------------------------------------------
def design_round(st: Stack, specs: list[dict]) -> list[str]:
    """Two jobs running, the third waiting in Redis."""
    ids = [st.submit(s) for s in specs]
    wait_until(lambda: sum(st.job(j)["status"] == "running" for j in ids) == 2
               and all(st.job(j)["progress"]["iteration"] >= 3 for j in ids if st.job(j)["status"] == "running"),
               300, 0.2, "two jobs running")
    return ids


def row_redis(st: Stack, specs, sig, restart_aof: bool) -> dict:
    ids = design_round(st, specs)
    queued = [j for j in ids if st.job(j)["status"] == "queued"]
    waiting_before = st.llen()
    st.kill_redis(sig)
    down = time.monotonic()
    # a submission while Redis is down: 503 and nothing stored
    r = httpx.post(f"{st.url}/v1/jobs", json=specs[0], timeout=60)
    st.count(r.status_code)
    during_post = r.status_code
    time.sleep(10)
    st.start_redis(appendonly=restart_aof)
    back = time.monotonic()
    waiting_after = st.llen()
    return {"fault_s": round(back - down, 1), "ids": ids, "t": back, "queued": queued,
            "notes": f"Redis {'SIGTERM' if sig == signal.SIGTERM else 'SIGKILL'}; messages waiting before "
                     f"{waiting_before}, after the restart {waiting_after}; POST /v1/jobs during the outage: "
                     f"{during_post}"}


def row_postgres(st: Stack, specs) -> dict:
    ids = design_round(st, specs)
    queued = [j for j in ids if st.job(j)["status"] == "queued"]
    st.pg.stop_immediately()
    down = time.monotonic()
    time.sleep(15)
    st.pg.start()
    back = time.monotonic()
    return {"fault_s": round(back - down, 1), "ids": ids, "t": back, "queued": queued,
            "notes": "pg_ctl stop -m immediate, started again after 15 s"}


def busy_worker(st: Stack, ids: list[str]) -> tuple[str, int]:
    job = next(st.job(j) for j in ids if st.job(j)["status"] == "running")
    return job["id"], int(job["worker"].rsplit(":", 1)[1])


def row_worker_kill(st: Stack, specs) -> dict:
    ids = design_round(st, specs)
    job, pid = busy_worker(st, ids)
    os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    victim = next(i for i, w in enumerate(st.workers) if w.pid == pid)
    st.workers[victim] = start_worker(st.d, st.env, f"w{victim}-restarted")  # as an orchestrator would
    st.wait_all()
    return {"fault_s": 0.0, "ids": [job], "t": None, "queued": [], "recovery_s": st.taken_over_after(t, job),
            "notes": "a busy worker SIGKILLed and started again at once; recovery: until its job runs on "
                     "another worker (the stale timeout, 10 s, then a free worker)"}


def row_worker_stop(st: Stack, specs, seconds: float) -> dict:
    ids = design_round(st, specs)
    job, pid = busy_worker(st, ids)
    os.kill(pid, signal.SIGSTOP)
    t = time.monotonic()
    time.sleep(seconds)
    os.kill(pid, signal.SIGCONT)
    fault = round(time.monotonic() - t, 1)
    st.wait_all()
    return {"fault_s": fault, "ids": [job], "t": None, "queued": [], "recovery_s": st.taken_over_after(t, job),
            "notes": f"a busy worker SIGSTOPped {seconds:g} s, then SIGCONT; recovery: from the SIGSTOP until "
                     "its job runs on another worker"}


def label_until_done(st: Stack, ids: list[str], on_tell=None) -> None:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        states = {j: st.job(j)["status"] for j in ids}
        if all(s in TERMINAL for s in states.values()):
            return
        for j, s in states.items():
            if s != "awaiting_labels":
                continue
            q = httpx.get(f"{st.url}/v1/jobs/{j}/queries", timeout=30)
            if q.status_code != 200:
                continue
            body = {"batch_id": q.json()["batch_id"],
                    "labels": FRIEDMAN.label(np.asarray(q.json()["inputs"])).tolist()}
            (on_tell or tell)(st, j, body)
        time.sleep(0.2)
    raise TimeoutError("ask/tell jobs did not end")


def tell(st: Stack, j: str, body: dict) -> httpx.Response:
    r = httpx.post(f"{st.url}/v1/jobs/{j}/labels", json=body, timeout=60)
    st.count(r.status_code)
    return r


def row_api_kills(st: Stack, specs) -> dict:
    """The API with the kill hook: every tell that completes a round commits, then the API
    SIGKILLs itself before sending the job's message. The client restarts it and retries the
    tell (200 duplicate), as a client whose request died would."""
    ids = [st.submit(s) for s in specs]
    kills, recoveries = [0], []
    # the test-only launcher installs the kill hook (create_app's after_tell_commit); no variable does
    killer = Server(st.d, env={**st.env, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get(
        "PYTHONPATH"))))}, no_worker=True, port=st.api.port, launcher="tests.service.tell_killer")
    st.api.stop()
    killer.start()

    def fragile_tell(st_, j, body):
        try:
            r = tell(st_, j, body)
            if r.status_code == 200:
                return r
        except httpx.TransportError:
            kills[0] += 1
            killer.proc.p.wait(10)
            killer.stop()
            killer.start()  # the same hook: the next completing tell kills it again
            t = time.monotonic()
            r = tell(st_, j, body)
            assert r.status_code == 200 and r.json()["outcome"] == "duplicate", r.text
            wait_until(lambda: st.job(j)["status"] != "queued", 120, 0.1, "resumed")
            recoveries.append(time.monotonic() - t)
        return None

    try:
        label_until_done(st, ids, fragile_tell)
    finally:
        killer.stop()
        st.api.start()
    return {"fault_s": 0.0, "ids": ids, "t": None, "queued": [], "recovery_s": max(recoveries, default=None),
            "notes": f"API SIGKILLed {kills[0]} times between a tell's commit and its message (test hook); "
                     f"the retried tell answered duplicate and re-drove the job"}


def row_tell_redis_down(st: Stack, specs) -> dict:
    ids = [st.submit(s) for s in specs]
    j = ids[0]
    wait_until(lambda: st.job(j)["status"] == "awaiting_labels", 300, 0.2, "awaiting labels")
    q = httpx.get(f"{st.url}/v1/jobs/{j}/queries", timeout=30).json()
    body = {"batch_id": q["batch_id"], "labels": FRIEDMAN.label(np.asarray(q["inputs"])).tolist()}
    st.kill_redis()
    down = time.monotonic()
    r = tell(st, j, body)
    answer = f"{r.status_code} {r.json().get('outcome')}"
    time.sleep(10)
    st.start_redis()
    back = time.monotonic()
    wait_until(lambda: st.job(j)["status"] != "queued", 120, 0.1, "resumed")
    recovery = time.monotonic() - back
    label_until_done(st, ids)
    return {"fault_s": round(back - down, 1), "ids": ids, "t": None, "queued": [], "recovery_s": recovery,
            "notes": f"the tell during the outage answered {answer}; Redis restarted 10 s later, empty"}


ROWS = {
    "redis-sigterm": ("Redis SIGTERM, restarted 10 s later without persistence", "design",
                      lambda st, sp: row_redis(st, sp, signal.SIGTERM, False), {}),
    "redis-sigkill": ("Redis SIGKILL, restarted 10 s later without persistence", "design",
                      lambda st, sp: row_redis(st, sp, signal.SIGKILL, False), {}),
    "redis-aof": ("Redis SIGKILL, restarted 10 s later with AOF on", "design",
                  lambda st, sp: row_redis(st, sp, signal.SIGKILL, True), {"appendonly": True}),
    "postgres": ("PostgreSQL `pg_ctl stop -m immediate`, 15 s", "design", row_postgres, {}),
    "worker-kill": ("worker SIGKILL", "design", row_worker_kill, {}),
    "worker-stop": ("worker SIGSTOP 30 s, then SIGCONT", "design", lambda st, sp: row_worker_stop(st, sp, 30), {}),
    "api-kills": ("API SIGKILLed between a tell's commit and its message", "asktell3", row_api_kills, {}),
    "tell-redis-down": ("labels told while Redis is down", "asktell1", row_tell_redis_down, {}),
}


def check_design(st: Stack, j: str, ref: dict) -> str | None:
    """None when the job equals its undisturbed run, else what differs."""
    view = st.job(j)
    if view["status"] != "succeeded":
        return f"{view['status']}: {(view.get('error') or {}).get('detail')}"
    res = httpx.get(f"{st.url}/v1/jobs/{j}/result", timeout=60).json()
    hist = httpx.get(f"{st.url}/v1/jobs/{j}/history", timeout=60).json()["history"]
    if res["distribution"] != ref["distribution"]:
        return "distribution differs"
    if json.dumps(res["evaluation"], sort_keys=True) != json.dumps(ref["evaluation"], sort_keys=True):
        return "verdict differs"
    if [h["iteration"] for h in hist] != [h["iteration"] for h in ref["history"]] or \
            [h["objective"] for h in hist] != [h["objective"] for h in ref["history"]]:
        return "history differs"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "faults")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--merge", action="store_true", help="replace these rows in the existing table.json")
    args = ap.parse_args()
    design = [design_spec(s, args.iterations) for s in (11, 12, 13)]
    asktell = [asktell_spec(s) for s in (21, 22, 23)]
    print("reference runs ...", flush=True)
    refs = [run_job(s) for s in design]
    ask_refs = []
    for s in asktell:
        b = json.loads(json.dumps(s))
        b["oracle"], b["evaluation"] = {"name": "friedman1"}, {"enabled": False}
        ask_refs.append(run_job(b)["distribution"])
    rows = []
    for key in args.rows.split(","):
        title, kind, run, opts = ROWS[key]
        d = Path(tempfile.mkdtemp(prefix=f"lwl-fault-{key}-"))
        st = Stack(d, **opts)
        t0 = time.monotonic()
        try:
            specs = design if kind == "design" else asktell[:3 if kind == "asktell3" else 1]
            info = run(st, specs)
            ends = st.wait_all()
            if info.get("recovery_s") is None and info["t"] is not None:
                moving = [j for j in info["ids"] if j not in info["queued"]]
                rec = st.moved_after(info["t"], moving) if moving else 0.0
                taken = [st.taken_after(info["t"], j) for j in info["queued"]]
                info["recovery_s"] = None if rec is None or None in taken else max([rec, *taken])
            problems = {}
            for i, (j, view) in enumerate(zip(st.jobs, ends)):  # st.jobs: in the order of specs
                if kind == "design":
                    why = check_design(st, j, refs[i])
                elif view["status"] != "succeeded":
                    why = view["status"]
                else:
                    res = httpx.get(f"{st.url}/v1/jobs/{j}/result", timeout=60).json()
                    why = None if res["distribution"] == ask_refs[i] else "distribution differs"
                if why:
                    problems[j] = why
            attempts = max(max((v["attempts"] for _, v in st.views.get(j, [])), default=0) for j in st.jobs)
            row = {"row": key, "fault": title, "jobs": len(st.jobs), "succeeded_equal": len(st.jobs) - len(problems),
                   "problems": problems, "fault_s": info["fault_s"],
                   "recovery_s": None if info["recovery_s"] is None else round(info["recovery_s"], 1),
                   "http_500": sum(n for s, n in st.statuses.items() if s >= 500 and s != 503),
                   "http_503": st.statuses.get(503, 0), "statuses": st.statuses, "max_attempts_seen": attempts,
                   "wall_s": round(time.monotonic() - t0, 1), "notes": info["notes"]}
        except Exception as exc:  # a row that could not be run is reported, not hidden
            row = {"row": key, "fault": title, "error": f"{type(exc).__name__}: {exc}",
                   "logs": {p.name: p.read_text(errors="replace")[-2000:] for p in d.glob("*.log")}}
        finally:
            st.stop()
        print(json.dumps({k: v for k, v in row.items() if k != "logs"}), flush=True)
        rows.append(row)
    if args.merge:
        new = {r["row"]: r for r in rows}
        old = json.loads((args.out / "table.json").read_text())["rows"]
        rows = [new.pop(r["row"], r) for r in old] + list(new.values())
    write(args.out, rows, args.iterations)


def write(out: Path, rows: list[dict], iterations: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    doc = {"commit": commit, "iterations": iterations, "rows": rows,
           "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (out / "table.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Faults injected into the distributed stack (issue #48), {doc['when']}, commit {commit}", "",
             f"`python scripts/fault_table.py` (design jobs of {iterations} iterations, not the README job's 300; "
             "2 workers; see the script's docstring for what is counted).", "",
             "| fault | jobs ended succeeded, equal to the undisturbed run | fault lasted | recovery | 500s | 503s "
             "| most attempts of a job | notes |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['fault']} | not run: {r['error']} | | | | | | |")
            continue
        rec = "n/a" if r["recovery_s"] is None else f"{r['recovery_s']} s"
        lines.append(f"| {r['fault']} | {r['succeeded_equal']} of {r['jobs']} | {r['fault_s']} s | {rec} | "
                     f"{r['http_500']} | {r['http_503']} | {r['max_attempts_seen']} | {r['notes']} |")
    lines += ["", "Every job that ended was compared with its undisturbed run: the design jobs' distribution, "
              "verdict (evaluation) and history rows (iterations and objectives) equal; the ask/tell jobs' "
              "distribution equal to the builtin oracle's run. 503s: the submission made during a Redis outage "
              "(nothing stored, `Retry-After`), the poller's reads during a PostgreSQL outage (`Retry-After`); "
              "500s: none allowed. Attempts: 1 is a job's one slice; 2 in the worker rows is the slice that "
              "died with its worker (by design: a job that keeps killing its workers fails after "
              "LWL_MAX_ATTEMPTS); no attempt was spent on a broker or store outage. Recovery is defined in "
              "scripts/fault_table.py; the lost messages are re-sent by the dispatcher 20 s "
              "(LWL_REDISPATCH_SECONDS) after their last send, which had passed in the Redis rows by the "
              "restart; in the told-while-Redis-was-down row it had not (the tell was 11 s before)."]
    (out / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
