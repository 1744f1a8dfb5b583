"""The worker's command in the ``lwl`` CLI: ``lwl worker``, one Celery worker process (or one per
GPU). It registers into :data:`lwl.cli.app` through the ``lwl.cli`` entry point (pyproject.toml)
and imports the service's core lazily, as :mod:`service.cli` does."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

console = Console(stderr=True)


class LogLevel(str, Enum):
    """Celery's log levels (``--loglevel``): a typo is refused by the CLI, with the choices."""
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


def worker(device: str = typer.Option("auto", help="cpu (takes lwl.cpu), cuda (takes lwl.gpu, then lwl.cpu) "
                                                   "or auto (cuda when CUDA is available)"),
           data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded store and broker (LWL_DATA_DIR); "
                                                                            "the same folder as lwl serve's"),
           loglevel: LogLevel = typer.Option(LogLevel.warning, "--loglevel", case_sensitive=False,
                                             help="the worker's log level"),
           gpus: Optional[str] = typer.Option(None, "--gpus", help="e.g. 0,1: one supervised GPU worker process "
                                                                    "per device"),
           threads: Optional[int] = typer.Option(None, "--threads", min=1,
                                                 help="torch's threads (default: OMP_NUM_THREADS if set, else this "
                                                      "machine's usable cores, or the container's CPU quota, divided "
                                                      "by its live workers, this one included)")):
    """Run one Celery worker process (one job slice at a time), or one per GPU with --gpus."""
    import os

    if device not in ("auto", "cpu", "cuda"):
        console.print("[red]--device must be auto, cpu or cuda")
        raise typer.Exit(2)
    loglevel = LogLevel(loglevel).value
    if gpus:
        return _gpu_workers(gpus, data_dir, loglevel, threads)
    from service.core.threads import apply_threads, configured_threads

    # before torch loads: its OpenMP pool takes the size it reads then
    threads = threads if threads is not None else (configured_threads() or _machine_share(data_dir))
    apply_threads(threads)
    # a test-only switch: a worker that takes the GPU queue on a machine without CUDA, so that
    # routing can be tested with real processes where no GPU exists
    pretend = os.environ.get("LWL_TEST_PRETEND_GPU") == "1"
    if device == "cuda" and not pretend:
        import torch

        if not torch.cuda.is_available():
            console.print("[red]--device cuda: CUDA is not available on this machine")
            raise typer.Exit(2)
    if device == "auto":
        import torch

        kind = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        kind = device
    os.environ["LWL_WORKER_DEVICE"] = device
    from service.core.settings import get_settings, use_data_dir

    use_data_dir(data_dir)
    from service.core.routing import worker_queues
    from worker.celery_app import celery_app
    from worker.presence import hardware, start_presence
    from service.core.reaper import start_reaper
    from worker.tasks import WORKER_NAME, enqueue, get_store

    settings = get_settings()
    queues = worker_queues(kind)
    start_presence(get_store(), WORKER_NAME, kind, queues, {**hardware(kind, pretend), "threads": threads},
                   settings.heartbeat_seconds)
    from service.core.queue import waiting_messages

    start_reaper(get_store(), settings.stale_seconds, settings.reaper_interval, enqueue,
                 waiting_messages(celery_app), settings.redispatch_seconds, settings.redispatch_hold_seconds)
    _root_said_once()
    celery_app.worker_main(["worker", "--pool=solo", "--concurrency=1", f"--loglevel={loglevel}",
                            "--without-gossip", "--without-mingle", "-Q", ",".join(queues),
                            "-n", f"lwl-{os.getpid()}@%h"])


def _root_said_once() -> None:
    """Running as root (a developer's machine, a CI runner; the container image runs as the user
    ``lwl``): Celery warns at every start in words written for pickle-accepting workers, which
    this one is not (JSON only, never a client's pickle). Say it once, in our words, with what to
    do, and leave Celery's out of the serve log."""
    import os
    import warnings

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", category=SecurityWarning)
    console.print("lwl worker runs as root: it accepts JSON messages only (no pickle), but a worker needs no "
                  "privileges; run it as an unprivileged user where you can (the container image does: USER lwl)",
                  highlight=False, soft_wrap=True)


def _machine_share(data_dir: Optional[Path]) -> int:
    """This worker's share of the machine's cores: the live workers of this host in the store
    (presence rows younger than ``stale_seconds``), this one included (:mod:`service.core.threads`)."""
    import socket

    from service.core.settings import get_settings, use_data_dir
    from service.core.store import Store
    from service.core.threads import share

    use_data_dir(data_dir)
    settings = get_settings()
    host = socket.gethostname()
    try:
        live = Store(settings.resolved_database_url()).list_workers(within=settings.stale_seconds)
    except Exception:  # the store is away: the worker waits for it later; count itself alone
        live = []
    return share(1 + sum(w.info.get("host") == host for w in live))


def _gpu_workers(gpus: str, data_dir: Optional[Path], loglevel: str, threads: Optional[int] = None) -> None:
    """One supervised ``lwl worker --device cuda`` per GPU id, each seeing only its device
    (CUDA_VISIBLE_DEVICES); CUDA is never initialised in this parent process."""
    import os
    import signal
    import threading

    from service.core.supervisor import WorkerSupervisor

    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids or not all(g.isdigit() for g in ids):
        console.print("[red]--gpus: comma-separated GPU ids, e.g. 0,1")
        raise typer.Exit(2)
    from service.core.threads import default_threads

    # each GPU worker's share of the cores, decided here: started at once, they would each count
    # themselves alone in the store
    args = [sys.executable, "-m", "lwl.cli", "worker", "--device", "cuda", "--loglevel", loglevel,
            "--threads", str(threads or default_threads(len(ids)))]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    sups = [WorkerSupervisor(args, {**os.environ, "CUDA_VISIBLE_DEVICES": g}, 1).start() for g in ids]
    console.print(f"lwl: {len(ids)} GPU worker(s) on devices {', '.join(ids)}")
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    for s in sups:
        s.stop()


def register(app: typer.Typer, cli_console: Console | None = None) -> None:
    """Add ``lwl worker`` to ``app`` (the ``lwl.cli`` entry point)."""
    global console
    console = cli_console or console
    app.command()(worker)
