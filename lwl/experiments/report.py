"""Shared helpers for experiment outputs: summary statistics, JSON and figures."""

from __future__ import annotations

import contextlib
import functools
import json
from pathlib import Path

import numpy as np


def mean_2sd(values) -> tuple[float, float]:
    """Mean and two (sample) standard deviations, the paper's Table 1 convention."""
    v = np.asarray(values, dtype=np.float64)
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    return float(v.mean()), 2.0 * sd


def write_json(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: the code that produces results: uncommitted changes here make a result "dirty" (docs do not)
CODE_PATHS = ("lwl", "service", "worker", "scripts", "bench")


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Lay out, write and close a study's figure; returns its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def environment() -> dict:
    """The numerical environment a result was computed in: library versions, the BLAS builds
    numpy and scipy call (and the CPU kernel set each picked), torch's CPU capability and the CPU.
    Two runs of the same code and spec agree to the last digit only within one environment; a
    rebuilt one (another OpenBLAS kernel, another CPU) moves the last bits, and on ill-conditioned
    fits more than that (docs/results/budget-full-8000-gp/README.md, "Rerun at 8,000 on 20,000
    held-out points per member")."""
    import os
    import platform

    import scipy
    import scipy.linalg  # (loads scipy's BLAS so threadpoolctl lists it)
    import torch
    from threadpoolctl import threadpool_info

    cpu = platform.processor() or None
    with contextlib.suppress(OSError):
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    blas = [{k: lib.get(k) for k in ("prefix", "internal_api", "version", "architecture")}
            for lib in threadpool_info() if lib.get("user_api") == "blas"]
    threads = {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
               if k in os.environ}
    return {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
            "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "blas": blas, "cpu": cpu, "machine": platform.machine(), "thread_variables": threads}


def machine_words(env: dict | None = None) -> str:
    """The CPU and the BLAS kernel sets of :func:`environment` in words ("AMD EPYC; openblas
    Haswell"): what a study row records (``computed_on``), since rows of one study resumed on
    another machine round differently and a design's choices can follow the last digits."""
    env = environment() if env is None else env
    kernels = sorted({b["architecture"] for b in env.get("blas", []) if b.get("architecture")})
    return f"{env.get('cpu') or 'an unknown CPU'}; openblas {', '.join(kernels) or 'unknown'}"


@functools.cache
def code_state() -> tuple[str | None, bool | None]:
    """The git commit of the code this process loaded and whether that code (CODE_PATHS) had
    uncommitted changes; ``(None, None)`` outside a checkout. Read once per process, at the first
    call: ``lwl experiment`` calls it when a study starts, so a commit made while the study runs
    does not put its name on rows that the earlier code computed."""
    import subprocess

    import lwl

    root = Path(lwl.__file__).resolve().parents[1]
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True,
                                        timeout=10, check=True).stdout.strip()
        return (git("rev-parse", "HEAD") or None,
                bool(git("status", "--porcelain", "--untracked-files=no", "--", *CODE_PATHS)))
    except (OSError, subprocess.SubprocessError):
        return None, None


def provenance() -> dict:
    """What produced a result: lwl's version and, from a git checkout, the commit and whether
    the code had uncommitted changes when this process first asked (:func:`code_state`), and the
    numerical environment (:func:`environment`)."""
    import lwl

    commit, dirty = code_state()
    return {"lwl": lwl.__version__, "commit": commit, "dirty": dirty, "environment": environment()}


def provenance_line(stamp: dict) -> str:
    where = f"commit {stamp['commit'][:12]}" if stamp.get("commit") else "an unknown commit"
    env = stamp.get("environment")  # results made before it was recorded have none
    on = ""
    if env:
        blas = ", ".join(f"{b['internal_api']} {b['version']} ({b['architecture']})" for b in env["blas"]
                         if b.get("internal_api"))
        on = (f", numpy {env['numpy']}, scipy {env['scipy']}, torch {env['torch']}"
              + (f", {blas}" if blas else "") + (f", on {env['cpu']}" if env.get("cpu") else ""))
    return (f"Produced by lwl {stamp.get('lwl')} at {where}" +
            (" with uncommitted changes" if stamp.get("dirty") else "") + on + ".")


def write_tables(doc: dict, out_dir, markdown) -> tuple[Path, dict | None, list[Path]]:
    """Create ``out_dir``, write results.json and results.md (``markdown(doc)``, with the
    provenance line: :func:`provenance`); returns the folder, the in-memory figure inputs popped
    from ``doc["_figures"]`` and the written paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figs = doc.pop("_figures", None)
    doc["provenance"] = provenance()
    write_json(out / "results.json", doc)
    (out / "results.md").write_text(markdown(doc).rstrip("\n") + "\n\n" + provenance_line(doc["provenance"]) + "\n")
    return out, figs, [out / "results.json", out / "results.md"]


@contextlib.contextmanager
def single_threaded():
    """One thread of BLAS and torch inside, the caller's settings restored after. Every row of the
    budget and robustness studies is computed under it, in worker processes (``--workers`` > 1) and
    in this one alike (the operator-budget study's worker processes too, not its in-process cells,
    whose DeepONets train on every core): a
    torch reduction on two threads rounds differently from one (p14 of the 2,000 gp study: the
    left-out check's z 0.78209368 on one torch thread, 0.78209377 on two), and a design's
    discrete choices can follow the last digits, so a row must not depend on ``--workers``."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(before)


def _single_threaded(task):
    """``fn(*args)`` in a worker process with one thread of BLAS and torch, as the 2-core runs."""
    fn, args = task
    with single_threaded():
        return fn(*args)


@contextlib.contextmanager
def _spawned(workers: int):
    """A pool of ``workers`` spawned processes; leaving it (a failure or an interrupt included)
    cancels the queued tasks instead of running them unsaved."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def in_processes(fn, tasks, workers: int):
    """``fn(*args)`` for every ``args`` of ``tasks`` in ``workers`` spawned processes, results in
    order (a study's problems are deterministic from their specs: the same rows as in one process)."""
    with _spawned(workers) as pool:
        yield from pool.map(_single_threaded, [(fn, args) for args in tasks])


def as_finished(fn, tasks, workers: int):
    """``(args, fn(*args))`` for every ``args`` of ``tasks`` in ``workers`` spawned processes, as
    each finishes (a study that saves every result at once loses none to an interruption)."""
    from concurrent.futures import as_completed

    with _spawned(workers) as pool:
        futures = {pool.submit(_single_threaded, (fn, args)): args for args in tasks}
        for f in as_completed(futures):
            yield futures[f], f.result()
