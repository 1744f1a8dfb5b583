"""A worker's share of the machine (service/core/threads.py): the container's CPU quota read from
cgroup v2 and v1, the cores divided by the local workers, and the pools sized before and after
torch loads (each in a fresh process: a pool's size is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from service.core.threads import cgroup_cpu_quota, configured_threads, default_threads, share, usable_cpus


def test_the_cpu_quota_from_cgroup_v2_and_v1(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None  # no quota
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(v2) == pytest.approx(1.5)
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(v1) is None
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_cpu_quota(v1) == pytest.approx(3.0)
    assert cgroup_cpu_quota(tmp_path / "none") is None


def test_the_usable_cores_are_the_affinity_capped_by_the_quota():
    cores = len(os.sched_getaffinity(0))
    assert usable_cpus(quota=None) <= cores
    assert usable_cpus(quota=0.5) == 1  # a fraction of a core still runs one thread
    assert usable_cpus(quota=1.5) == min(cores, 2)
    assert usable_cpus(quota=1000.0) == cores  # a quota above the affinity changes nothing


def test_each_local_worker_takes_its_share_and_at_least_one_thread():
    assert share(1, cpus=8) == 8
    assert share(2, cpus=8) == 4
    assert share(3, cpus=8) == 2
    assert share(4, cpus=2) == 1  # more workers than cores: one thread each, never zero
    assert share(0, cpus=4) == 4  # (no worker counted: this one alone)


@pytest.mark.parametrize("torch_first", [False, True], ids=["before-torch", "after-torch"])
def test_the_pools_take_the_share_whenever_torch_loads(torch_first):
    code = ("import torch\n" if torch_first else "") + (
        "from service.core.threads import apply_threads\n"
        "apply_threads(1)\n"
        "import torch, os\n"
        "from threadpoolctl import threadpool_info\n"
        "blas = [p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']\n"
        "print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'], max(blas) if blas else 1)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1", "1"]


@pytest.mark.parametrize("operator", [None, "ACTIVE"])
def test_openmp_waits_passively_unless_the_operator_says_otherwise(operator):
    # the spinning default took the README's budgeted job past 12 min beside a busy loop (103 s alone)
    code = ("from service.core.threads import apply_threads\n"
            "apply_threads(1)\n"
            "import os\n"
            "print(os.environ['OMP_WAIT_POLICY'])\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env.update({"PYTHONPATH": str(ROOT)}, **({"OMP_WAIT_POLICY": operator} if operator else {}))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (operator or "PASSIVE")


def test_a_thread_count_below_one_is_refused():
    from service.core.threads import apply_threads

    with pytest.raises(ValueError, match="--threads"):
        apply_threads(0)


@pytest.fixture
def own_settings():
    """Settings read afresh in the test, and again after it (they are cached per process)."""
    from service.core.settings import get_settings

    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_a_worker_started_alone_counts_the_live_workers_of_its_host(tmp_path, monkeypatch, own_settings):
    """``lwl worker`` without --threads: the usable cores divided by the live workers of this
    host in the store, itself included; another host's workers and silent ones do not count."""
    import socket
    import time

    from service.core.store import Store
    from worker.cli import _machine_share

    monkeypatch.setenv("LWL_DATA_DIR", str(tmp_path))
    store = Store(f"sqlite:///{tmp_path / 'lwl.db'}")
    host = socket.gethostname()
    assert _machine_share(tmp_path) == share(1)
    store.register_worker("a", "cpu", ["lwl.cpu"], {"host": host})
    store.register_worker("b", "cpu", ["lwl.cpu"], {"host": "another-host"})
    assert _machine_share(tmp_path) == share(2)
    store.register_worker("c", "cpu", ["lwl.cpu"], {"host": host})
    assert _machine_share(tmp_path) == share(3)
    store.worker_heartbeat("c", None, 0)
    with store.engine.begin() as c:  # "a" went silent an hour ago: not live
        from sqlalchemy import update

        from service.core.store import workers

        c.execute(update(workers).where(workers.c.name == "a").values(heartbeat_at=time.time() - 3600))
    assert _machine_share(tmp_path) == share(2)


def test_an_omp_num_threads_in_the_environment_is_the_operators_choice_and_kept(monkeypatch):
    """The default keeps OMP_NUM_THREADS where it is set (a worker's job is then bit for bit the
    library's run at the same count); a value that is no positive integer is no choice."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert configured_threads() == 3 and default_threads(8) == 3
    for bad in ("", "0", "two"):
        monkeypatch.setenv("OMP_NUM_THREADS", bad)
        assert configured_threads() is None and default_threads(2) == share(2)
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads(1) == share(1)
