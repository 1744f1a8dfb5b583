"""Device-aware routing: which Celery queue a job's slices go to, and which queues a worker takes.

- ``device: "cuda"`` jobs go to ``lwl.gpu``, which only GPU workers consume: a CPU worker never
  takes them. While no GPU worker is alive the job stays queued and its view says so.
- ``device: "cpu"`` jobs go to ``lwl.cpu``.
- ``device: "auto"`` (the default) follows the algorithm: algorithms that train neural
  operators (their registry entry has ``prefers_gpu``: AMA, particle AMA) go to ``lwl.gpu`` when
  a GPU worker is alive at submission, everything else (and those, when no GPU worker is alive)
  to ``lwl.cpu``. The queue is chosen once, when the job is submitted, and kept for its slices.

GPU workers consume ``lwl.gpu`` first and then ``lwl.cpu`` (an idle GPU may run CPU work; CPU
workers never run GPU work).
"""

from __future__ import annotations

QUEUE_CPU, QUEUE_GPU = "lwl.cpu", "lwl.gpu"
DEVICE_OF_QUEUE = {QUEUE_CPU: "cpu", QUEUE_GPU: "cuda"}


def prefers_gpu(algorithm: str | None) -> bool:
    from lwl.registry import ALGORITHMS

    try:
        return bool(ALGORITHMS.get(algorithm).extra.get("prefers_gpu", False))
    except (KeyError, ValueError):
        return False


def queue_for(spec: dict, gpu_alive: bool) -> str:
    """The queue of a job spec (a validated spec's JSON) given whether a GPU worker is alive."""
    device = spec.get("device", "auto")
    if device == "cuda":
        return QUEUE_GPU
    if device == "cpu":
        return QUEUE_CPU
    algorithm = (spec.get("algorithm") or {}).get("name")
    return QUEUE_GPU if gpu_alive and prefers_gpu(algorithm) else QUEUE_CPU


def worker_queues(device: str) -> list[str]:
    """The queues a worker of ``device`` (cpu or cuda) consumes, in priority order."""
    return [QUEUE_GPU, QUEUE_CPU] if device == "cuda" else [QUEUE_CPU]
