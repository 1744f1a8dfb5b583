"""A worker's presence in the store: registered at start with its device, queues and hardware,
a heartbeat every few seconds with the job it is running, removed when it stops.

``GET /v1/workers`` lists these rows; a job whose queue has no live worker says so in its view
(:mod:`service.routers.jobs`); the API routes ``device: auto`` jobs by them
(:mod:`service.core.routing`). A worker that dies without removing itself goes silent and is
no longer counted live after ``stale_seconds``.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time

import lwl
from service.core.store import Store

log = logging.getLogger("lwl.presence")

CURRENT = {"job": None, "slices": 0}  # what this process is doing (set by worker.tasks)


def hardware(device: str, pretend: bool = False) -> dict:
    """Host, pid, lwl version and, on a GPU worker, the GPU's name and memory."""
    info = {"host": socket.gethostname(), "pid": os.getpid(), "version": lwl.__version__,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if device == "cuda":
        if pretend:
            info.update(gpu="pretend GPU (LWL_TEST_PRETEND_GPU, tests only)", gpu_memory_bytes=0)
        else:
            import torch

            props = torch.cuda.get_device_properties(0)
            info.update(gpu=props.name, gpu_memory_bytes=int(props.total_memory))
    return info


def start_presence(store: Store, name: str, device: str, queues: list[str], info: dict,
                   interval: float) -> threading.Event:
    store.register_worker(name, device, queues, info)
    stop = threading.Event()

    def beat():
        failing_since = None  # monotonic time of the first failed beat of the current outage
        while not stop.wait(interval):
            try:
                store.worker_heartbeat(name, CURRENT["job"], CURRENT["slices"])
            except Exception as exc:  # the store may be briefly unreachable; try again next beat
                if failing_since is None:  # one line per outage, not a traceback per beat
                    failing_since = time.monotonic()
                    log.warning("worker heartbeat not written (%s: %s); trying again every %g s",
                                type(exc).__name__, exc, interval)
                continue
            if failing_since is not None:
                log.warning("worker heartbeat written again after %.0f s", time.monotonic() - failing_since)
                failing_since = None

    def leave():
        stop.set()
        try:
            store.remove_worker(name)
        except Exception:
            pass

    threading.Thread(target=beat, daemon=True, name="lwl-presence").start()
    atexit.register(leave)
    return stop
