"""Hardening (issue 34), against real ``lwl serve`` processes and lab servers on loopback:
outbound calls refuse redirects, uploads are bounded before inflating, keys are checked before
any body is read, headers and slow senders are limited, an HTTP oracle's call has a deadline
and a cancel ends it, loopback mode refuses foreign Host headers and non-JSON bodies, and the
low items (huge integers, empty Idempotency-Key, constant-time keys, 0600 store files).

The servers run with short limits (``LWL_HEADER_TIMEOUT_S`` etc.) so that the whole file takes
well under a minute."""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import threading
import time

import httpx
import numpy as np
import pytest

from service.guard import owner_for_key
from service.openapi import generate
from tests.lwl.test_arrays import npy, npy_header, zip_bomb
from tests.service.conftest import LabHandler, LoopbackLab, Server, http_job, small_job, wait_until

pytestmark = pytest.mark.server

ALICE, BOB = "key-alice", "key-bob"
PROBLEM = "application/problem+json"
MB = 1 << 20
LIMITS = {"LWL_HEADER_TIMEOUT_S": "1", "LWL_BODY_TIMEOUT_S": "1.5", "LWL_KEEP_ALIVE_S": "1"}
ORACLE_ENV = {"LWL_ORACLE_ALLOWED_HOSTS": "127.0.0.1", "LWL_ORACLE_ALLOWED_NETWORKS": "127.0.0.1/32",
              "LWL_ORACLE_BACKOFF_S": "0.05"}


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """Loopback mode (no keys) with an embedded worker and labs allowed on 127.0.0.1."""
    srv = Server(tmp_path_factory.mktemp("open"), env={**LIMITS, **ORACLE_ENV}).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("keyed"), env={**LIMITS, "LWL_API_KEYS": f"alice:{ALICE},bob:{BOB}"},
                 no_worker=True).start()
    yield srv
    srv.stop()


def auth(key=ALICE, **more):
    return {"Authorization": f"Bearer {key}", **more}


def problem(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    return r.json()


def raw(port: int, head: bytes, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(head)
    return s


def read_answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (or the socket times out)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    return out


def read_one(s: socket.socket) -> bytes:
    """One answer (head and Content-Length body), without waiting for the connection to close."""
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                   if line.startswith(b"content-length:")), 0)
    while len(body) < length and (chunk := s.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else -1


def memory_kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def dir_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs if not f.endswith(".log"))


# -- labs ---------------------------------------------------------------------------------------
class Lab(LoopbackLab):
    """A lab endpoint on loopback recording every request: ``redirect`` answers 302 to
    ``location``; ``trickle`` sends a head and then one byte of body every 0.25 s (and records
    when lwl hung up); ``record`` answers 204."""

    def __init__(self, mode: str, host: str = "127.0.0.1", location: str = ""):
        self.mode, self.location, self.requests, self.hung_up_at = mode, location, [], None
        self.got_request = threading.Event()
        lab = self

        class Handler(LabHandler):
            def _any(self):
                self.body()
                lab.requests.append((self.command, self.path, time.monotonic()))
                lab.got_request.set()
                if lab.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", lab.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif lab.mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    try:
                        for _ in range(100000):
                            self.wfile.write(b" ")
                            time.sleep(0.25)
                    except OSError:
                        lab.hung_up_at = time.monotonic()
                else:
                    self.send_response(204)
                    self.end_headers()

            do_GET = do_POST = _any

        super().__init__(Handler, host)


def job_status(srv, job_id):
    return httpx.get(f"{srv.url}/v1/jobs/{job_id}").json()


# -- 1. outbound calls: no redirects ------------------------------------------------------------
def test_a_redirect_to_a_refused_address_is_not_followed(open_server):
    target = Lab("record", host="127.0.0.2")  # loopback, but neither allowed host nor network
    lab = Lab("redirect", location=f"http://127.0.0.2:{target.port}/steal")
    try:
        r = httpx.post(f"{open_server.url}/v1/jobs", json=http_job(lab.url, timeout_s=5, attempts=3))
        job = r.json()["id"]
        wait_until(lambda: job_status(open_server, job)["status"] == "failed", 60, 0.1, "failed")
        err = job_status(open_server, job)["error"]
        assert err["status"] == 502 and "redirect" in err["detail"] and "302" in err["detail"]
        assert len(lab.requests) == 1  # refused at once, not retried
        # the webhook of an ask/tell job: announced to the lab, which redirects; not followed
        spec = small_job(iterations=1)
        spec["oracle"] = {"name": "external", "batch_size": 64, "webhook_url": lab.url.replace("/label", "/hook")}
        spec.pop("evaluation")
        ext = httpx.post(f"{open_server.url}/v1/jobs", json=spec).json()["id"]
        wait_until(lambda: any(p == "/hook" for _, p, _ in lab.requests), 60, 0.1, "webhook")
        time.sleep(0.5)
        httpx.post(f"{open_server.url}/v1/jobs/{ext}/cancel")
        assert target.requests == []  # the redirect target never heard from lwl
    finally:
        lab.close()
        target.close()


# -- 4. the HTTP oracle: a deadline per call, a cancel that interrupts the call --------------------
def test_a_trickling_lab_is_cut_at_the_deadline(open_server):
    lab = Lab("trickle")
    try:
        job = httpx.post(f"{open_server.url}/v1/jobs", json=http_job(lab.url, timeout_s=1.5)).json()["id"]
        assert lab.got_request.wait(60)
        wait_until(lambda: job_status(open_server, job)["status"] == "failed", 20, 0.05, "failed")
        err = job_status(open_server, job)["error"]
        assert "deadline of 1.5 s" in err["detail"], err
        wait_until(lambda: lab.hung_up_at is not None, 5, 0.05, "the lab's connection closed")
        held = lab.hung_up_at - lab.requests[0][2]
        print(f"trickling lab: call cut after {held:.2f} s (timeout_s 1.5)")
        assert 1.4 <= held < 2.5, held  # per-read timeouts would hold it for as long as the lab trickles
    finally:
        lab.close()


def test_a_cancel_during_the_call_ends_the_job_cancelled(open_server):
    lab = Lab("trickle")
    try:
        job = httpx.post(f"{open_server.url}/v1/jobs", json=http_job(lab.url, timeout_s=120)).json()["id"]
        assert lab.got_request.wait(60)
        time.sleep(0.3)
        t0 = time.monotonic()
        assert httpx.post(f"{open_server.url}/v1/jobs/{job}/cancel").status_code == 202
        wait_until(lambda: job_status(open_server, job)["status"] in ("cancelled", "failed"), 10, 0.05, "the end")
        took = time.monotonic() - t0
        print(f"cancel during a lab call: job cancelled after {took:.2f} s")
        assert job_status(open_server, job)["status"] == "cancelled" and took < 3, took
        wait_until(lambda: lab.hung_up_at is not None, 5, 0.05, "the lab's connection closed")
    finally:
        lab.close()


def test_spec_bounds_on_timeout_and_attempts(open_server):
    for field, value in (("timeout_s", 3600), ("attempts", 10_000)):
        spec = http_job("http://127.0.0.1:9/label", timeout_s=1)
        spec["oracle"][field] = value
        assert problem(httpx.post(f"{open_server.url}/v1/jobs", json=spec), 422)["field"] == f"oracle.{field}"


# -- 5. loopback mode: Host, media types, no CORS -------------------------------------------------
def test_a_foreign_host_is_refused_in_no_key_mode(open_server):
    port = open_server.port
    for host in ("rebind.evil.example:%d" % port, "evil.example", "127.0.0.1:%d" % (port + 1), "10.0.0.1:%d" % port):
        r = httpx.get(f"{open_server.url}/v1/jobs", headers={"Host": host})
        assert problem(r, 421)["title"] == "Misdirected request", host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert httpx.get(f"{open_server.url}/v1/jobs", headers={"Host": host}).status_code == 200, host


def test_non_json_bodies_get_415_and_no_cors(open_server):
    url = f"{open_server.url}/v1/jobs"
    before = len(httpx.get(url).json()["items"])
    body = json.dumps(small_job(iterations=1))
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Origin": "http://evil.example", **({"Content-Type": ctype} if ctype else {})}
        r = httpx.post(url, content=body, headers=headers)
        problem(r, 415)
        assert not any(h.startswith("access-control-") for h in r.headers)
    assert len(httpx.get(url).json()["items"]) == before  # nothing was created
    pre = httpx.options(url, headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
                                      "Access-Control-Request-Headers": "content-type"})
    assert pre.status_code >= 400 and not any(h.startswith("access-control-") for h in pre.headers)
    samples = httpx.post(f"{url}/x/samples", content=b'{"n": 1, "seed": 0}', headers={"Content-Type": "text/plain"})
    problem(samples, 415)
    # a dataset needs a non-simple type in loopback mode (a page may send none, or text/plain)
    arr = npy(np.ones((4, 2)))
    for headers in ({}, {"Content-Type": "text/plain"}):
        problem(httpx.post(f"{open_server.url}/v1/datasets", content=arr, headers=headers), 415)
    assert httpx.post(f"{open_server.url}/v1/datasets", content=arr,
                      headers={"Content-Type": "application/octet-stream"}).status_code == 201


# -- 3. the front door: keys before bodies, body caps, header limits, timeouts ---------------------
def test_a_keyless_100mb_body_gets_401_without_being_read(keyed_server):
    pid = keyed_server.proc.pid
    peak = memory_kib(pid, "VmHWM")
    head = (f"POST /v1/jobs/{'0' * 32}/samples HTTP/1.1\r\nHost: 127.0.0.1:{keyed_server.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {100 * MB}\r\n\r\n").encode()
    t0 = time.perf_counter()
    s = raw(keyed_server.port, head)
    s.sendall(b'{"n": 1, "seed": 0' + b" " * 65536)  # the start of the body
    answer = read_answer(s)  # the server answers and closes without waiting for the rest
    took = time.perf_counter() - t0
    print(f"keyless 100 MB body: 401 after {took * 1000:.0f} ms")
    assert status_of(answer) == 401 and b"connection: close" in answer.lower() and took < 2
    sent = 0
    try:
        for _ in range(100):
            sent += s.send(b" " * MB)
    except OSError:
        pass  # broken pipe / reset: nobody reads the rest
    s.close()
    print(f"keyless 100 MB body: {sent / MB:.0f} MB accepted by the sockets' buffers before the reset")
    assert sent < 50 * MB
    assert memory_kib(pid, "VmHWM") - peak < 30 * 1024  # the body never sat in the server's memory
    # every /v1 route that takes a body: 401 from the head alone
    for path, ops in generate()["paths"].items():
        for method in ops:
            if method in ("post", "put", "patch") and path.startswith("/v1/"):
                target = path.replace("{job_id}", "0" * 32).replace("{dataset_id}", "0" * 32)
                s = raw(keyed_server.port, f"{method.upper()} {target} HTTP/1.1\r\nHost: x\r\n"
                                           f"Content-Length: {100 * MB}\r\n\r\n".encode(), timeout=2)
                assert status_of(read_answer(s)) == 401, path
                s.close()


def test_body_caps_on_every_route(keyed_server):
    url = keyed_server.url
    # a declared length above the cap: 413 before a byte is read (the cap of /samples is 64 KiB)
    s = raw(keyed_server.port, f"POST /v1/jobs/{'0' * 32}/samples HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                               f"{ALICE}\r\nContent-Type: application/json\r\nContent-Length: {MB}\r\n\r\n".encode())
    assert status_of(read_answer(s)) == 413
    # a streamed (chunked) body is counted and cut at the cap
    r = httpx.post(f"{url}/v1/jobs/{'0' * 32}/samples", content=iter([b"[" + b" " * 40_000] * 4),
                   headers=auth(**{"Content-Type": "application/json"}))
    problem(r, 413)
    r = httpx.post(f"{url}/v1/jobs/{'0' * 32}/cancel", content=b" " * 100_000, headers=auth())
    problem(r, 413)


def test_a_1mb_header_gets_431(keyed_server):
    s = raw(keyed_server.port, b"")
    threading.Thread(target=lambda: _send_quietly(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MB
                                                  + b"\r\n\r\n"), daemon=True).start()
    t0 = time.perf_counter()
    answer = read_answer(s)
    took = time.perf_counter() - t0
    print(f"1 MB header: 431 after {took * 1000:.0f} ms")
    assert status_of(answer) == 431 and PROBLEM.encode() in answer and took < 1.5
    many = "".join(f"X-H{k}: v\r\n" for k in range(150))
    s = raw(keyed_server.port, f"GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n".encode())
    assert status_of(read_answer(s)) == 431
    assert httpx.get(f"{keyed_server.url}/healthz").status_code == 200


def _send_quietly(s: socket.socket, data: bytes) -> None:
    try:
        s.sendall(data)
    except OSError:
        pass


def _trickle(s: socket.socket, data: bytes, every: float) -> None:
    try:
        for k in range(len(data)):
            s.send(data[k:k + 1])
            time.sleep(every)
    except OSError:
        pass


def test_slow_senders_are_cut_within_the_stated_timeouts(keyed_server):
    port = keyed_server.port
    # a head trickling one byte every 0.2 s: cut at LWL_HEADER_TIMEOUT_S = 1 (408)
    s = raw(port, b"")
    t0 = time.perf_counter()
    threading.Thread(target=_trickle, args=(s, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100, 0.2),
                     daemon=True).start()
    answer = read_one(s)
    head_cut = time.perf_counter() - t0
    assert status_of(answer) == 408 and 0.9 <= head_cut < 1.6, (answer, head_cut)
    # a connection that never sends anything: closed at the same timeout
    s = raw(port, b"")
    t0 = time.perf_counter()
    idle_answer = read_one(s)
    idle_cut = time.perf_counter() - t0
    assert status_of(idle_answer) == 408 and idle_cut < 1.6, idle_cut
    # a body trickling one byte every 0.2 s: cut at LWL_BODY_TIMEOUT_S = 1.5 (408)
    s = raw(port, f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode())
    t0 = time.perf_counter()
    threading.Thread(target=_trickle, args=(s, b" " * 1000, 0.2), daemon=True).start()
    answer = read_one(s)
    body_cut = time.perf_counter() - t0
    assert status_of(answer) == 408 and b"LWL_BODY_TIMEOUT_S" in answer and 1.4 <= body_cut < 2.2, (answer, body_cut)
    # an idle keep-alive connection: closed after LWL_KEEP_ALIVE_S = 1
    s = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    t0 = time.perf_counter()
    answer = read_answer(s)
    keep_alive = time.perf_counter() - t0
    assert status_of(answer) == 200 and 0.9 <= keep_alive < 1.6, keep_alive
    print(f"slow head cut after {head_cut:.2f} s, idle connection after {idle_cut:.2f} s, slow body after "
          f"{body_cut:.2f} s, idle keep-alive after {keep_alive:.2f} s")


# -- 2. uploads bounded before inflating -----------------------------------------------------------
def test_a_small_npz_declaring_a_huge_array_gets_413_and_nothing_is_stored(keyed_server):
    bomb = zip_bomb()  # 389 KB declaring a (10,000,000, 5) float64 array: 400 MB inflated
    url = f"{keyed_server.url}/v1/datasets"
    headers = auth(**{"Content-Type": "application/octet-stream"})
    size, peak = dir_bytes(keyed_server.data_dir), memory_kib(keyed_server.proc.pid, "VmHWM")
    t0 = time.perf_counter()
    r = httpx.post(url, content=bomb, headers=headers)
    took = time.perf_counter() - t0
    print(f"{len(bomb) / 1e3:.0f} KB .npz declaring 400 MB: 413 after {took * 1000:.0f} ms")
    doc = problem(r, 413)
    assert "400000" in doc["detail"] and took < 1.0
    # an .npy whose header declares the same, with 80 bytes behind it
    problem(httpx.post(url, content=npy_header((10_000_000, 5)) + bytes(80), headers=headers), 413)
    # a header that declares less than the data: refused, not half-read
    problem(httpx.post(url, content=npy_header((2, 2)) + bytes(64), headers=headers), 400)
    # an int8 array whose float64 copy would pass the limit (the default 64 MiB: 10M entries take 80 MB)
    problem(httpx.post(url, content=npy(np.zeros((10_000_000, 1), dtype=np.int8)), headers=headers), 413)
    assert dir_bytes(keyed_server.data_dir) - size < 64 * 1024  # nothing stored
    assert memory_kib(keyed_server.proc.pid, "VmHWM") - peak < 150 * 1024
    assert httpx.post(url, content=npy(np.ones((4, 2))), headers=headers).status_code == 201


def test_an_npz_posted_as_npy_labels_gets_400(keyed_server):
    job = httpx.post(f"{keyed_server.url}/v1/jobs", json=small_job(iterations=1), headers=auth()).json()["id"]
    buf = io.BytesIO()
    np.savez(buf, y=np.ones(64))
    r = httpx.post(f"{keyed_server.url}/v1/jobs/{job}/labels?batch_id=1.0", content=buf.getvalue(),
                   headers=auth(**{"Content-Type": "application/x-npy"}))
    assert "expected .npy bytes" in problem(r, 400)["detail"]
    r = httpx.post(f"{keyed_server.url}/v1/jobs/{job}/labels?batch_id=1.0",
                   content=npy_header((10_000_000,)) + bytes(8), headers=auth(**{"Content-Type": "application/x-npy"}))
    problem(r, 413)
    httpx.post(f"{keyed_server.url}/v1/jobs/{job}/cancel", headers=auth())


# -- 6. low items --------------------------------------------------------------------------------
def test_huge_integers_and_empty_idempotency_keys_are_4xx(keyed_server):
    url = f"{keyed_server.url}/v1/jobs"
    text = json.dumps(small_job(iterations=1)).replace('"seed": 0', '"seed": ' + "9" * 5000)
    assert "9" * 5000 in text
    assert "digits" in problem(httpx.post(url, content=text, headers=auth(**{"Content-Type": "application/json"})),
                               400)["detail"]
    r = httpx.post(f"{url}/{'0' * 32}/samples", content='{"n": ' + "9" * 5000 + ', "seed": 0}',
                   headers=auth(**{"Content-Type": "application/json"}))
    assert 400 <= r.status_code < 500 and r.headers["content-type"].startswith(PROBLEM), r.text
    for key in ("",):  # (a value of spaces only is illegal HTTP: clients refuse to send it)
        r = httpx.post(url, json=small_job(iterations=1), headers=auth(**{"Idempotency-Key": key}))
        assert problem(r, 400)["field"] == "Idempotency-Key"


def test_keys_are_compared_in_constant_time_over_every_key(keyed_server):
    keys = {"k-one": "alice", "k-two": "bob"}
    assert owner_for_key(keys, "k-two") == "bob" and owner_for_key(keys, "k-one") == "alice"
    assert owner_for_key(keys, "k-tw") is None and owner_for_key(keys, "") is None and owner_for_key({}, "x") is None
    url = f"{keyed_server.url}/v1/jobs"
    assert httpx.get(url, headers=auth(BOB)).status_code == 200
    for bad in (auth(BOB + "x"), auth(BOB[:-1]), {"Authorization": f"Basic {BOB}"}, {}):
        assert problem(httpx.get(url, headers=bad), 401)["title"] == "Unauthorized"


def test_store_files_are_private(keyed_server):
    httpx.get(f"{keyed_server.url}/v1/jobs", headers=auth())
    names = sorted(f for f in os.listdir(keyed_server.data_dir) if not f.endswith(".log"))
    assert {"lwl.db", "broker.db"} <= set(names), names
    for name in names:
        mode = stat.S_IMODE(os.stat(keyed_server.data_dir / name).st_mode)
        assert mode & 0o077 == 0, (name, oct(mode))
