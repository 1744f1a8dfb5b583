"""How many threads a worker's torch and BLAS pools take (``lwl worker --threads``).

torch sizes its intra-op pool to every core it sees, and OpenMP's threads spin while they wait:
two busy processes on two cores then run four spinning threads, and each waits on the other's
(issue 85: the README's budgeted job took 1,770 s beside a busy shell loop, 139 s alone). A
worker takes its share instead: the cores this process may use (its CPU affinity, or the
container's CPU quota where that is less) divided by the workers on this machine. ``lwl serve``
gives each of its ``--workers`` embedded workers that share; a worker started on its own counts
the live workers of its host in the store (itself included). An ``OMP_NUM_THREADS`` set in the
environment is the operator's choice and is kept (:func:`configured_threads`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

# the variables the BLAS and OpenMP runtimes read when they load (a child process inherits them)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The container's CPU quota in cores (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``); None where there is none."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cpus(quota: float | None = None) -> int:
    """The cores this process may run on: its affinity, capped by the CPU quota (rounded up:
    a quota of 1.5 cores keeps two threads busy half the time)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not Linux)
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota() if quota is None else quota
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def share(local_workers: int, cpus: int | None = None) -> int:
    """One worker's threads: the usable cores divided by the workers on this machine, at least one."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, cpus // max(1, local_workers))


def configured_threads() -> int | None:
    """The operator's own choice, where the environment makes one: ``OMP_NUM_THREADS`` (a
    positive integer), which the default then keeps (a job run by a worker is bit for bit the
    library's run at the same thread count: tests and studies pin it)."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return n if n >= 1 else None


def default_threads(local_workers: int) -> int:
    """A worker's threads when ``--threads`` is not given: :func:`configured_threads`, else its
    :func:`share` of the machine among ``local_workers``."""
    return configured_threads() or share(local_workers)


def apply_threads(n: int) -> None:
    """Size this process's pools to ``n`` threads: the environment (read by BLAS and OpenMP when
    they load, and by child processes), torch's intra-op pool, and BLAS pools already loaded."""
    if n < 1:
        raise ValueError(f"--threads: at least 1, got {n}")
    for name in THREAD_VARIABLES:
        os.environ[name] = str(n)
    # OpenMP's threads spin at each barrier by default: beside another busy process the spinning
    # thread holds the core the descheduled one needs (a 300 x 300 GP step on two threads: 701/s quiet,
    # 193/s beside a busy loop; passive, 490/s and 437/s; docs/performance.md). Read when libgomp
    # loads (torch's import, after this), so an operator's own setting is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    from threadpoolctl import threadpool_limits

    threadpool_limits(n)
