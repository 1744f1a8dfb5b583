"""lwl.outbound against small HTTP servers on loopback: the address checked is the address
connected to, redirects come back unfollowed, the deadline covers a trickling answer, a cancel
interrupts a call in flight, answers are bounded."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lwl import outbound


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Lab:
    """Records every request; answers as ``mode`` says."""

    def __init__(self, mode: str = "ok", host: str = "127.0.0.1", port: int | None = None, location: str = ""):
        self.mode, self.location, self.requests, self.closed_at = mode, location, [], None
        lab = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                lab.requests.append({"method": self.command, "path": self.path, "host": self.headers["Host"],
                                     "body": body, "at": time.monotonic()})
                if lab.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", lab.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif lab.mode == "trickle":  # a head, then one byte of the body every 0.1 s
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    try:
                        for _ in range(1000):
                            self.wfile.write(b" ")
                            time.sleep(0.1)
                    except OSError:
                        lab.closed_at = time.monotonic()
                elif lab.mode == "silent":  # never answers
                    try:
                        while self.connection.recv(1):
                            pass
                    except OSError:
                        pass
                    lab.closed_at = time.monotonic()
                elif lab.mode == "big":
                    self.send_response(200)
                    self.send_header("Content-Length", str(10 << 20))
                    self.end_headers()
                    try:
                        self.wfile.write(bytes(10 << 20))
                    except OSError:
                        pass
                else:
                    out = b'{"ok": true}'
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)

            do_POST = do_GET = _any

        self.port = port or free_port(host)
        self.httpd = ThreadingHTTPServer((host, self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://{host}:{self.port}/x"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def allow_loopback(monkeypatch):
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_HOSTS", "127.0.0.1,rebind.test")
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_NETWORKS", "127.0.0.1/32")


def test_check_url_refuses_what_the_operator_did_not_allow(allow_loopback, monkeypatch):
    assert outbound.check_url("http://127.0.0.1:9/x") == ["127.0.0.1"]
    for url, why in [("http://127.0.0.2/x", "LWL_ORACLE_ALLOWED_HOSTS"), ("ftp://127.0.0.1/x", "http"),
                     ("http://127.0.0.1:99999/x", "port")]:
        with pytest.raises(outbound.URLNotAllowed, match=why):
            outbound.check_url(url)
    monkeypatch.setenv("LWL_ORACLE_ALLOWED_HOSTS", "*")
    for url in ("http://[::ffff:169.254.169.254]/latest", "http://10.0.0.1/", "http://[::1]:8000/", "http://0.0.0.0/"):
        with pytest.raises(outbound.URLNotAllowed, match="not in LWL_ORACLE_ALLOWED_NETWORKS"):
            outbound.check_url(url)


def test_every_resolved_address_must_pass(allow_loopback, monkeypatch):
    real = socket.getaddrinfo

    def fake(host, *a, **k):
        if host == "rebind.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)),
                    (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 80))]
        return real(host, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with pytest.raises(outbound.URLNotAllowed, match="10.0.0.7"):
        outbound.check_url("http://rebind.test/x")


def test_the_checked_address_is_the_one_connected_to(allow_loopback, monkeypatch):
    """A name that resolves to an allowed address at the check and to another one afterwards
    (DNS rebinding) is called at the address that was checked, with its name in Host."""
    good = Lab()
    other = Lab(host="127.0.0.2", port=good.port)  # the rebinding target: same port, refused address
    real, answers = socket.getaddrinfo, iter(["127.0.0.1"])

    def rebinding(host, port, *a, **k):
        if host == "rebind.test":
            ip = next(answers, "127.0.0.2")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]
        return real(host, port, *a, **k)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    try:
        answer = outbound.post(f"http://rebind.test:{good.port}/label", b"{}", {"Content-Type": "application/json"},
                               timeout_s=5)
        assert answer.status == 200
        assert len(good.requests) == 1 and good.requests[0]["host"] == f"rebind.test:{good.port}"
        assert other.requests == []
    finally:
        good.close()
        other.close()


def test_redirects_come_back_unfollowed(allow_loopback):
    target = Lab(host="127.0.0.2")
    lab = Lab("redirect", location=target.url)
    try:
        answer = outbound.post(lab.url, b"{}", {}, timeout_s=5)
        assert answer.status == 302 and answer.headers["Location"] == target.url
        assert len(lab.requests) == 1 and target.requests == []
    finally:
        lab.close()
        target.close()


def test_the_deadline_covers_a_trickling_answer(allow_loopback):
    lab = Lab("trickle")
    try:
        t0 = time.monotonic()
        with pytest.raises(outbound.DeadlineExceeded, match="deadline of 0.8 s"):
            outbound.post(lab.url, b"{}", {}, timeout_s=0.8)
        took = time.monotonic() - t0
        assert 0.8 <= took < 1.3, took  # per read, each byte within 0.1 s would never time out
    finally:
        lab.close()


def test_a_cancel_interrupts_a_call_in_flight(allow_loopback):
    lab = Lab("silent")
    asked = threading.Event()
    try:
        threading.Timer(0.4, asked.set).start()
        t0 = time.monotonic()
        with outbound.cancellation(asked.is_set), pytest.raises(outbound.Cancelled):
            outbound.post(lab.url, b"{}", {}, timeout_s=30)
        took = time.monotonic() - t0
        assert took < 0.4 + 2 * outbound.CANCEL_POLL_S + 0.2, took
        with outbound.cancellation(lambda: True), pytest.raises(outbound.Cancelled):
            outbound.sleep(5)
        outbound.sleep(0.01)
    finally:
        lab.close()


def test_answers_are_bounded(allow_loopback):
    lab = Lab("big")
    try:
        with pytest.raises(outbound.AnswerTooLarge):
            outbound.post(lab.url, b"{}", {}, timeout_s=5, max_bytes=1 << 20)
    finally:
        lab.close()
