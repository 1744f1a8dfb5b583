"""Issue #48's fault table, rerun, with issue #84's rows: faults injected into the distributed
stack while jobs run.

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
kills, the longest. The lease-stolen row: from the SIGSTOP until the job runs on the other
worker. The clock and concurrent-tell rows have no recovery (nothing is down).

Issue #84's rows (real processes, no mocks):

- lease-stolen: one design job labelled by an ``http`` lab oracle, a server on loopback run by
  this script (``LWL_ORACLE_ALLOWED_HOSTS=127.0.0.1``, ``LWL_ORACLE_ALLOWED_NETWORKS=127.0.0.1/32``)
  that records every call: batch id, the calling worker's pid (the connection's port looked up
  in /proc), arrival and answer times. Its worker is SIGSTOPped (when a lab call is on the wire,
  if one comes within 5 s) until the reaper has requeued the job (LWL_STALE_SECONDS, 10 s) and
  the other worker runs it, 2 s more, then SIGCONT. Counted: the stopped worker's calls that
  arrive after the SIGCONT (the fenced slice's; must be 0), its calls in flight at the SIGSTOP
  (arrived before it, answer not yet sent), and batches labelled twice (a batch id called more
  than once, by anyone: the successor resumes from the job's last checkpoint and labels the
  cut-off iteration's batches again).
- clock-ahead / clock-behind: the three design jobs while worker w1 (which also runs a reaper)
  lives under libfaketime (``FAKETIME="+60s"`` / ``"-60s"``, LD_PRELOAD of Debian's
  libfaketime.so.1; the offset a process sees under it is measured and reported). Counted: the
  most attempts of a job (1: no live job reaped), the reaps and 'lease lost' lines logged.
- concurrent-tells: three ask/tell jobs whose rounds are batches of 15 points (``oracle:
  {"name": "external", "batch_size": 15}``), labelled by four client threads per job
  (``Client.batches``, ``Client.ask(batch_id=)``, ``Client.tell``), each round's last four
  tells at once; every round must resume the job exactly once: the job's generation (read from
  the store) equals its rounds (each generation step is a requeue: a round's completing tell,
  a reap, a slice's end, the stranded-round sweeper; none but the tells is expected here).

The jobs are smaller than the issue's README job (300 iterations of examples/friedman1.json):
``--iterations`` (default 60) of the small bilevel job of the service tests, so that the whole
table runs in minutes on two shared cores. Writes docs/results/faults/table.md and .json.

Usage: python bench/faults.py [--iterations 60] [--out docs/results/faults] [--rows a,b]
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
from service.processes import Server, wait_until  # noqa: E402
from service.stack import TERMINAL, LoopbackStack, small_job  # noqa: E402

FRIEDMAN = make_oracle({"name": "friedman1"})
# the defaults of the service except the ones a table of minutes needs: a dead worker's job is
# resumed after 10 s as by default; lost messages are sent again after 20 s as by default
ENV = {"LWL_SLICE_SECONDS": "60"}


def asktell_spec(seed: int) -> dict:
    s = small_job(3, seed)
    s["oracle"] = {"name": "external"}
    s.pop("evaluation")
    return s


class FaultStack(LoopbackStack):
    """A row's stack: two workers (``skew``: worker 1's clock off by that much, libfaketime's
    FAKETIME, e.g. "+60s"), the poller every 0.25 s, and what the rows read from its views,
    logs and store."""

    def __init__(self, d: Path, appendonly: bool = False, env: dict | None = None, skew: str | None = None):
        super().__init__(d, workers=2, env={**ENV, **(env or {})}, appendonly=appendonly,
                         worker_env={1: faketime_env(skew)} if skew else None, poll_s=0.25)

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

    def logged(self, text: str) -> int:
        """Lines of the stack's logs (API, workers) that contain ``text``."""
        return sum(line.count(text) > 0 for p in self.dir.glob("*.log")
                   for line in p.read_text(errors="replace").splitlines())

    def store_rows(self, sql: str) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.pg.url.replace("postgresql+psycopg", "postgresql")) as conn:
            return conn.execute(sql).fetchall()


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # Debian's libfaketime


def faketime_env(offset: str) -> dict:
    if not Path(FAKETIME_LIB).exists():
        raise RuntimeError(f"{FAKETIME_LIB} is missing (apt-get install faketime)")
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset}


def measured_offset(offset: str) -> float:
    """Seconds that a process under ``faketime_env(offset)`` reads ahead of this one's clock."""
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], capture_output=True, text=True,
                         env={**os.environ, **faketime_env(offset)}, check=True).stdout
    return float(out) - (t0 + time.time()) / 2


# -- rows ------------------------------------------------------------------------------------
def design_round(st: FaultStack, specs: list[dict]) -> list[str]:
    """Two jobs running, the third waiting in Redis."""
    ids = [st.submit(s) for s in specs]
    wait_until(lambda: sum(st.job(j)["status"] == "running" for j in ids) == 2
               and all(st.job(j)["progress"]["iteration"] >= 3 for j in ids if st.job(j)["status"] == "running"),
               300, 0.2, "two jobs running")
    return ids


def row_redis(st: FaultStack, specs, sig, restart_aof: bool) -> dict:
    ids = design_round(st, specs)
    queued = [j for j in ids if st.job(j)["status"] == "queued"]
    waiting_before = st.waiting()
    st.kill_redis(sig)
    down = time.monotonic()
    # a submission while Redis is down: 503 and nothing stored
    r = httpx.post(f"{st.url}/v1/jobs", json=specs[0], timeout=60)
    st.count(r)
    during_post = r.status_code
    time.sleep(10)
    st.restart_redis(appendonly=restart_aof)
    back = time.monotonic()
    waiting_after = st.waiting()
    return {"fault_s": round(back - down, 1), "ids": ids, "t": back, "queued": queued,
            "notes": f"Redis {'SIGTERM' if sig == signal.SIGTERM else 'SIGKILL'}; messages waiting before "
                     f"{waiting_before}, after the restart {waiting_after}; POST /v1/jobs during the outage: "
                     f"{during_post}"}


def row_postgres(st: FaultStack, specs) -> dict:
    ids = design_round(st, specs)
    queued = [j for j in ids if st.job(j)["status"] == "queued"]
    st.pg.stop_immediately()
    down = time.monotonic()
    time.sleep(15)
    st.pg.start()
    back = time.monotonic()
    return {"fault_s": round(back - down, 1), "ids": ids, "t": back, "queued": queued,
            "notes": "pg_ctl stop -m immediate, started again after 15 s"}


def busy_worker(st: FaultStack, ids: list[str]) -> tuple[str, int]:
    job = next(st.job(j) for j in ids if st.job(j)["status"] == "running")
    return job["id"], int(job["worker"].rsplit(":", 1)[1])


def row_worker_kill(st: FaultStack, specs) -> dict:
    ids = design_round(st, specs)
    job, pid = busy_worker(st, ids)
    os.kill(pid, signal.SIGKILL)
    t = time.monotonic()
    victim = next(i for i, w in enumerate(st.workers) if w.pid == pid)
    st.replace_worker(victim, f"worker{victim}-restarted")  # as an orchestrator would
    st.wait_all()
    return {"fault_s": 0.0, "ids": [job], "t": None, "queued": [], "recovery_s": st.taken_over_after(t, job),
            "notes": "a busy worker SIGKILLed and started again at once; recovery: until its job runs on "
                     "another worker (the stale timeout, 10 s, then a free worker)"}


def row_worker_stop(st: FaultStack, specs, seconds: float) -> dict:
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


def label_until_done(st: FaultStack, ids: list[str], on_tell=None) -> None:
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


def tell(st: FaultStack, j: str, body: dict) -> httpx.Response:
    r = httpx.post(f"{st.url}/v1/jobs/{j}/labels", json=body, timeout=60)
    st.count(r)
    return r


def row_api_kills(st: FaultStack, specs) -> dict:
    """The API with the kill hook: every tell that completes a round commits, then the API
    SIGKILLs itself before sending the job's message. The client restarts it and retries the
    tell (200 duplicate), as a client whose request died would."""
    ids = [st.submit(s) for s in specs]
    kills, recoveries = [0], []
    # the test-only launcher installs the kill hook (create_app's after_tell_commit); no variable does
    killer = Server(st.dir, env={**st.env, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get(
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


def row_tell_redis_down(st: FaultStack, specs) -> dict:
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
    st.restart_redis()
    back = time.monotonic()
    wait_until(lambda: st.job(j)["status"] != "queued", 120, 0.1, "resumed")
    recovery = time.monotonic() - back
    label_until_done(st, ids)
    return {"fault_s": round(back - down, 1), "ids": ids, "t": None, "queued": [], "recovery_s": recovery,
            "notes": f"the tell during the outage answered {answer}; Redis restarted 10 s later, empty"}


# -- issue #84's rows: a lease stolen from a live slice, a skewed clock, concurrent batch tells --
LAB_ENV = {"LWL_ORACLE_ALLOWED_HOSTS": "127.0.0.1", "LWL_ORACLE_ALLOWED_NETWORKS": "127.0.0.1/32"}


def socket_owner(port: int, server_port: int, pids: list[int]) -> int | None:
    """The process among ``pids`` that holds the loopback TCP socket from local port ``port`` to
    ``server_port`` (/proc/net/tcp, skipping sockets no process holds, e.g. an earlier
    connection's TIME_WAIT from the same port; then each process's descriptors); None if none
    does (the caller had already closed it)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].rsplit(":", 1)[1], 16) == port and int(f[2].rsplit(":", 1)[1], 16) == server_port \
                and f[9] != "0":
            inode = f[9]
            break
    if inode is None:
        return None
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    if os.readlink(fd) == f"socket:[{inode}]":
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None


class CountingLab:
    """An ``http`` lab oracle on loopback: labels with Friedman-1 after ``delay`` seconds and
    records every call: batch id, the calling worker's pid (found from the connection's port),
    when it arrived and when its answer was sent (monotonic)."""

    def __init__(self, pids, delay: float):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls: list[dict] = []
        self.lock = threading.Lock()
        self.delay = delay
        lab = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                call = {"arrived": time.monotonic(),
                        "pid": socket_owner(self.client_address[1], self.server.server_address[1], pids())}
                doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                call["batch_id"] = doc["batch_id"]
                with lab.lock:
                    lab.calls.append(call)
                time.sleep(lab.delay)
                out = json.dumps({"labels": FRIEDMAN.label(np.asarray(doc["inputs"])).tolist()}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                try:
                    self.wfile.write(out)
                finally:
                    call["answered"] = time.monotonic()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/label"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def row_lease_stolen(st: FaultStack, specs) -> dict:
    """A design job labelled by an ``http`` lab; its worker is SIGSTOPped until the reaper has
    requeued the job (stale timeout) and the other worker runs it, 2 s more, then SIGCONT: the
    stopped slice wakes up holding a lease that is no longer the job's."""
    lab = CountingLab(lambda: [w.pid for w in st.workers], delay=0.02)
    try:
        spec = json.loads(json.dumps(specs[0]))
        spec["oracle"] = {"name": "http", "url": lab.url, "batch_size": 10, "timeout_s": 30}
        j = st.submit(spec)
        wait_until(lambda: st.job(j)["status"] == "running" and st.job(j)["progress"]["iteration"] >= 5,
                   300, 0.1, "the job running")
        _, pid = busy_worker(st, [j])
        # stop it while one of its lab calls is on the wire (the lab now holds each for 0.1 s) if
        # one comes within 10 s, else between calls
        lab.delay = 0.1
        try:
            wait_until(lambda: any(c["pid"] == pid and "answered" not in c for c in list(lab.calls)), 10, 0.002,
                       "a lab call")
        except TimeoutError:
            pass
        os.kill(pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        lab.delay = 0.02
        wait_until(lambda: (v := st.job(j))["status"] != "running" or v["worker"].rsplit(":", 1)[1] != str(pid),
                   120, 0.1, "another worker taking the job")
        wait_until(lambda: st.job(j)["status"] == "running", 60, 0.1, "the job running again")
        time.sleep(2)
        os.kill(pid, signal.SIGCONT)
        t_cont = time.monotonic()
        st.wait_all()
    finally:
        lab.close()
    calls = list(lab.calls)
    mine = [c for c in calls if c["pid"] == pid]
    in_flight = [c for c in mine if c["arrived"] <= t_stop and c.get("answered", float("inf")) > t_stop]
    after = [c for c in mine if c["arrived"] > t_cont]
    unknown = [round(c["arrived"] - t_cont, 2) for c in calls if c["pid"] is None]  # s after the SIGCONT
    per_batch: dict[str, int] = {}
    for c in calls:
        per_batch[c["batch_id"]] = per_batch.get(c["batch_id"], 0) + 1
    twice = sum(n > 1 for n in per_batch.values())
    extra = sum(n - 1 for n in per_batch.values())
    # the successor resumes from the job's last checkpoint: the batches of the iteration that
    # was cut off are labelled again by it; the fenced slice's own calls after SIGCONT are `after`
    again_by_successor = sum(1 for b, n in per_batch.items() if n > 1 and
                             any(c["batch_id"] == b and c["pid"] != pid for c in calls))
    st.lease_row = {"lab_calls": len(calls), "batches": len(per_batch), "batches_labelled_twice": twice,
                    "extra_calls": extra, "stopped_pid_calls": len(mine), "in_flight_at_sigstop": len(in_flight),
                    "fenced_calls_after_sigcont": len(after), "calls_of_unknown_caller": len(unknown),
                    "unknown_callers_s_after_sigcont": unknown,
                    "lease_lost_logged": st.logged("lease lost"), "reaps_logged": st.logged("heartbeat older than")}
    return {"fault_s": round(t_cont - t_stop, 1), "ids": [j], "t": None, "queued": [],
            "recovery_s": st.taken_over_after(t_stop, j), "extra": st.lease_row,
            "notes": f"a busy worker SIGSTOPped until the reaper requeued its job and the other worker ran it, "
                     f"2 s more, then SIGCONT; lab calls of the stopped (fenced) slice arriving after SIGCONT: "
                     f"{len(after)} (in flight at the SIGSTOP: {len(in_flight)}; calls whose caller was not found: "
                     f"{len(unknown)}); 'lease lost' logged "
                     f"{st.lease_row['lease_lost_logged']}, reaps {st.lease_row['reaps_logged']}; lab calls "
                     f"{len(calls)} for {len(per_batch)} batches: {twice} batches labelled twice "
                     f"({again_by_successor} again by the successor, which resumes from the last checkpoint); "
                     f"recovery: from the SIGSTOP until the job runs on the other worker"}


def row_clock_skew(st: FaultStack, specs, offset: str) -> dict:
    """The three design jobs while worker w1's clock is ``offset`` off (libfaketime)."""
    seen = measured_offset(offset)
    t0 = time.monotonic()
    design_round(st, specs)
    st.wait_all()
    busy = {v["worker"] for j in st.watched for _, v in st.views.get(j, []) if v.get("worker")}
    skewed = f":{st.workers[1].pid}"
    reaps, lost = st.logged("heartbeat older than"), st.logged("lease lost")
    return {"fault_s": round(time.monotonic() - t0, 1), "ids": st.watched, "t": None, "queued": [], "recovery_s": None,
            "extra": {"measured_offset_s": round(seen, 1), "reaps_logged": reaps, "lease_lost_logged": lost,
                      "skewed_worker_ran_jobs": any(w.endswith(skewed) for w in busy)},
            "notes": f"worker w1 under libfaketime FAKETIME=\"{offset}\" (its clock read {seen:+.0f} s off) for the "
                     f"whole run; it ran jobs: {'yes' if any(w.endswith(skewed) for w in busy) else 'no'}; "
                     f"reaps logged {reaps}, 'lease lost' logged {lost}; fault lasted: the jobs' run"}


def row_concurrent_tells(st: FaultStack, specs, instruments: int = 4) -> dict:
    """Ask/tell jobs whose rounds are several batches of 15 points, labelled by ``instruments``
    client threads per job: per round each thread takes every ``instruments``-th batch of
    ``Client.batches``, asks for each with its batch id (``ask(batch_id=)``), labels and tells
    it; each thread's last batch is told together with the others' (a barrier), so that the
    round's completing tells race. 503s are retried after their Retry-After (1 s)."""
    from lwl.client import ApiError, Client

    ids = [st.submit(s) for s in specs]
    tells = {"accepted": 0, "duplicate": 0, "other": 0, "retried_503": 0}
    sizes: list[int] = []
    raced: list[bool] = []  # per round of 2+ last tells: whether they were all in flight at once
    lock = threading.Lock()
    failures: list[str] = []

    def client() -> Client:
        c = Client(st.url, timeout=60)
        c.http.event_hooks["response"] = [st.count]
        return c

    def tell_one(c: Client, j: str, batch_id: str, y) -> None:
        for _ in range(30):
            try:
                out = c.tell(j, batch_id, y)
            except ApiError as exc:
                if exc.status == 503:
                    with lock:
                        tells["retried_503"] += 1
                    time.sleep(1)  # the answer's Retry-After
                    continue
                raise
            with lock:
                tells[out["outcome"] if out["outcome"] in tells else "other"] += 1
            return
        raise RuntimeError(f"batch {batch_id}: 503 thirty times")

    def instrument(c: Client, j: str, mine: list[str], barrier: threading.Barrier, spans: list) -> None:
        """Label this instrument's batches of the round; the last one is told at the barrier,
        together with the other instruments' last: the round's last tells race."""
        last = None
        try:
            for k, b in enumerate(mine):
                got = c.ask(j, batch_id=b)
                if got is None:
                    continue
                y = FRIEDMAN.label(got[1])
                if k == len(mine) - 1:
                    last = (got[0], y)
                else:
                    tell_one(c, j, got[0], y)
        finally:
            barrier.wait(120)
        if last is not None:
            t = time.monotonic()
            tell_one(c, j, *last)
            with lock:
                spans.append((t, time.monotonic()))

    def coordinator(j: str) -> None:
        clients = [client() for _ in range(instruments)]
        try:
            while st.job(j)["status"] not in TERMINAL:
                if st.job(j)["status"] != "awaiting_labels":
                    time.sleep(0.1)
                    continue
                pending = clients[0].batches(j)
                if not pending:
                    time.sleep(0.1)
                    continue
                with lock:
                    sizes.append(len(pending))
                barrier = threading.Barrier(instruments)
                ids_ = [b.batch_id for b in pending]
                spans: list[tuple[float, float]] = []  # the round's last tells: (sent, answered)
                threads = [threading.Thread(target=instrument, args=(clients[k], j, ids_[k::instruments], barrier,
                                                                     spans)) for k in range(instruments)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if len(spans) > 1:  # did the round's last tells overlap in time (all of them)?
                    with lock:
                        raced.append(max(a for a, _ in spans) < min(b for _, b in spans))
        except Exception as exc:  # reported in the row
            failures.append(f"{j}: {type(exc).__name__}: {exc}")
        finally:
            for c in clients:
                c.close()

    workers = [threading.Thread(target=coordinator, args=(j,)) for j in ids]
    for t in workers:
        t.start()
    for t in workers:
        t.join(900)
    st.wait_all()
    gens = dict(st.store_rows("SELECT id, generation FROM jobs"))
    rounds = dict(st.store_rows("SELECT job_id, max(step) FROM label_batches GROUP BY job_id"))
    sizes_ = [n for (n,) in st.store_rows("SELECT count(*) FROM label_batches GROUP BY job_id, step")]
    once = sum(gens[j] == rounds.get(j) for j in ids)
    sweeps, reaps = st.logged("every batch of its round is told"), st.logged("heartbeat older than")
    extra = {"generations": [gens[j] for j in ids], "rounds": [rounds.get(j) for j in ids],
             "batches_per_round": [min(sizes_, default=0), max(sizes_, default=0)], "tells": tells,
             "max_pending_seen": max(sizes, default=0), "rounds_last_tells_all_overlapping": sum(raced),
             "rounds_with_several_last_tells": len(raced), "sweeps_logged": sweeps, "reaps_logged": reaps,
             "client_failures": failures}
    return {"fault_s": 0.0, "ids": ids, "t": None, "queued": [], "recovery_s": None, "extra": extra,
            "notes": f"{instruments} client threads per job share each round's batches (batch_size 15, a quarter of "
                     f"an iteration's 60 samples; {extra['batches_per_round'][0]} to {extra['batches_per_round'][1]} "
                     f"batches a round), each asking with its own batch_id; each thread's last batch of the round "
                     f"is told at once with the others' (a barrier; they were all in flight together in {sum(raced)} of "
                     f"{len(raced)} rounds); every round resumed exactly once "
                     f"(the job's generation, in the store, equals its rounds) in {once} of {len(ids)} jobs "
                     f"(generations {extra['generations']}, rounds {extra['rounds']}); tells accepted "
                     f"{tells['accepted']}, duplicate {tells['duplicate']}, 503 retried {tells['retried_503']}; "
                     f"sweeper requeues logged {sweeps}, reaps {reaps}"
                     + (f"; client errors: {failures}" if failures else "")}


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
    "lease-stolen": ("lease stolen from a live slice: its worker SIGSTOPped past the stale timeout, then SIGCONT",
                     "design1", row_lease_stolen, {"env": LAB_ENV}),
    "clock-ahead": ("a worker's clock 60 s ahead (libfaketime)", "design",
                    lambda st, sp: row_clock_skew(st, sp, "+60s"), {"skew": "+60s"}),
    "clock-behind": ("a worker's clock 60 s behind (libfaketime)", "design",
                     lambda st, sp: row_clock_skew(st, sp, "-60s"), {"skew": "-60s"}),
    "concurrent-tells": ("concurrent batch tells on PostgreSQL: 4 instruments per round", "asktell3b",
                         row_concurrent_tells, {}),
}


def check_design(st: FaultStack, j: str, ref: dict) -> str | None:
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
    design = [small_job(args.iterations, s) for s in (11, 12, 13)]
    asktell = [asktell_spec(s) for s in (21, 22, 23)]
    batched = [{**s, "oracle": {"name": "external", "batch_size": 15}} for s in asktell]  # 4 batches a round
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
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
        st = FaultStack(d, **opts)
        t0 = time.monotonic()
        try:
            specs = {"design": design, "design1": design[:1], "asktell3": asktell, "asktell1": asktell[:1],
                     "asktell3b": batched}[kind]
            info = run(st, specs)
            ends = st.wait_all()
            if info.get("recovery_s") is None and info["t"] is not None:
                moving = [j for j in info["ids"] if j not in info["queued"]]
                rec = st.moved_after(info["t"], moving) if moving else 0.0
                taken = [st.taken_after(info["t"], j) for j in info["queued"]]
                info["recovery_s"] = None if rec is None or None in taken else max([rec, *taken])
            problems = {}
            for i, (j, view) in enumerate(zip(st.watched, ends)):  # st.watched: in the order of specs
                if kind.startswith("design"):
                    why = check_design(st, j, refs[i])
                elif view["status"] != "succeeded":
                    why = view["status"]
                else:
                    res = httpx.get(f"{st.url}/v1/jobs/{j}/result", timeout=60).json()
                    why = None if res["distribution"] == ask_refs[i] else "distribution differs"
                if why:
                    problems[j] = why
            attempts = max(max((v["attempts"] for _, v in st.views.get(j, [])), default=0) for j in st.watched)
            row = {"row": key, "fault": title, "jobs": len(st.watched), "succeeded_equal": len(st.watched) - len(problems),
                   "problems": problems, "fault_s": info["fault_s"],
                   "recovery_s": None if info["recovery_s"] is None else round(info["recovery_s"], 1),
                   "http_500": sum(n for s, n in st.statuses.items() if s >= 500 and s != 503),
                   "http_503": st.statuses.get(503, 0), "statuses": st.statuses, "max_attempts_seen": attempts,
                   "wall_s": round(time.monotonic() - t0, 1), "notes": info["notes"], **info.get("extra", {})}
        except Exception as exc:  # a row that could not be run is reported, not hidden
            row = {"row": key, "fault": title, "error": f"{type(exc).__name__}: {exc}",
                   "logs": {p.name: p.read_text(errors="replace")[-2000:] for p in d.glob("*.log")}}
        finally:
            st.stop()
            shutil.rmtree(d, ignore_errors=True)
        row["commit"] = commit  # a row merged into an earlier table (--merge) keeps its own
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
    lines = [f"# Faults injected into the distributed stack (issues #48 and #84), {doc['when']}, commit {commit}", "",
             f"`python bench/faults.py` (design jobs of {iterations} iterations, not the README job's 300; "
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
              "bench/faults.py; the lost messages are re-sent by the dispatcher 20 s "
              "(LWL_REDISPATCH_SECONDS) after their last send, which had passed in the Redis rows by the "
              "restart; in the told-while-Redis-was-down row it had not (the tell was 11 s before).", "",
              "Issue #84's rows. Lease stolen: the job's worker was stopped past the stale timeout with an "
              "`http` lab's calls on the wire; the reaper requeued the job, the other worker resumed it from its "
              "last checkpoint (attempt 2), and the woken slice found its lease gone at its next heartbeat and "
              "stopped: the lab's own log (each call's caller found from its connection) counts the calls the "
              "stopped worker made after SIGCONT, beyond the call in flight at the SIGSTOP; the batches labelled "
              "twice are the cut-off iteration's, labelled again by the successor (the price of resuming from a "
              "checkpoint, not of the stale slice). Clock skew: one worker (and its reaper) 60 s ahead or behind; "
              "every lease, heartbeat and cutoff is on the database's clock, so no live job was reaped (most "
              "attempts 1, no reap logged). Concurrent batch tells: four instruments per ask/tell job on "
              "PostgreSQL, each round's completing tells racing; a tell locks the job row, so each round resumed "
              "its job exactly once (the generation equals the rounds, no sweeper requeue) and no tell was "
              "refused (503) or failed (500). Each row's counts are also in table.json."]
    (out / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
