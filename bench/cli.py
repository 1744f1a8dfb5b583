"""The CLI's job commands as a lab calls them from a shell loop: wall and CPU time per call.

``lwl submit / status / wait / ask / tell / training-set / predict`` each run as a fresh
process (``python -m lwl.cli ...``, as the ``lwl`` script does) against one ``lwl serve`` on
loopback, ``--repeat`` times; the bench prints the median wall and CPU (user + system, of the
child process) of each, for this tree and for ``--baseline`` (a git ref, checked out in a
temporary worktree: by default the last commit before the light client path, issue 85), with
the ratios. Which heavy modules each tree's ``import lwl.cli`` loads is printed too.

The jobs: a small budgeted GP job (external oracle) labelled to the end in this process
(Friedman-1), for ``status``, ``wait``, ``training-set`` and ``predict``; an ask/tell job at
its first round for ``ask`` and ``tell`` (the first tell is accepted, the repeats are
duplicates: the same request and answer); ``submit`` repeats one spec with one idempotency key.

Usage: python bench/cli.py [--repeat 5] [--baseline a61130c]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl.client import Client  # noqa: E402
from service.processes import ENV_BASE, Server  # noqa: E402

BASELINE = "a61130c"  # the last commit before the light client path (issue 85): import lwl loaded torch
HEAVY = ("torch", "scipy", "sklearn", "ot", "sqlalchemy", "fastapi", "celery")
GOAL_SECONDS = 0.3  # issue 85: wall and CPU per call on a quiet machine


def small_budget_spec(seed: int = 0) -> dict:
    """examples/friedman1_budget.json at a budget of 300 (Q and its validation cut to match)."""
    spec = json.loads((ROOT / "examples" / "friedman1_budget.json").read_text())
    spec["budget"] = 300
    spec["oracle"]["batch_size"] = 100
    for member in spec["test_distributions"]["members"]:
        member["size"] = 1000
    spec["test_distributions"]["validation_per_member"] = 40
    spec["seed"] = seed
    return spec


def label_to_the_end(client: Client, job: str, timeout: float = 900.0) -> None:
    """Answer every batch of ``job`` with Friedman-1's labels until the job ends."""
    from lwl.oracles import make_oracle

    oracle = make_oracle({"name": "friedman1"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.job(job)["status"]
        if status in ("succeeded", "failed", "cancelled"):
            if status != "succeeded":
                raise RuntimeError(f"the bench's budgeted job {status}: {client.job(job).get('error')}")
            return
        batch = client.ask(job)
        if batch is None:
            time.sleep(0.2)
            continue
        client.tell(job, batch[0], np.asarray(oracle.label(batch[1]), dtype=np.float64).reshape(-1))
    raise TimeoutError(f"job {job} did not end within {timeout:.0f} s")


def timed(args: list[str], env: dict, cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit code) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[2:])} exited {done.returncode}: {done.stderr[-800:]}")
    return wall, cpu, done.returncode


def heavy_modules(tree: Path) -> list[str]:
    """Which of HEAVY ``import lwl.cli`` (and the commands it registers) loads from ``tree``."""
    code = ("import sys, lwl.cli; print(' '.join(m for m in %r if m in sys.modules))" % (HEAVY,))
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV_BASE, "PYTHONPATH": str(tree)},
                         cwd=tree, capture_output=True, text=True, check=True)
    return out.stdout.split()


def measure(tree: Path, url: str, jobs: dict, files: dict, repeat: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) per command, run from ``tree``."""
    # An installed lwl has its bytecode compiled (pip compiles at install): a shell that sets
    # PYTHONDONTWRITEBYTECODE would compile every module of lwl on every call instead, about
    # 30 ms that no user pays; one untimed call per command writes the bytecode first.
    env = {k: v for k, v in {**os.environ, **ENV_BASE, "PYTHONPATH": str(tree), "LWL_URL": url}.items()
           if k != "PYTHONDONTWRITEBYTECODE"}
    lwl = [sys.executable, "-m", "lwl.cli"]
    commands = {
        "submit": ["submit", str(files["spec"]), "--idempotency-key", "bench-cli"],
        "status": ["status", jobs["budget"]],
        "wait": ["wait", jobs["budget"]],
        "ask": ["ask", jobs["asktell"], "--out", str(files["asked"])],
        "tell": ["tell", jobs["asktell"], jobs["batch"], str(files["labels"])],
        "training-set": ["training-set", jobs["budget"], "--out", str(files["npz"])],
        "predict": ["predict", jobs["budget"], str(files["inputs"]), "--out", str(files["predictions"])],
    }
    out = {}
    for name, args in commands.items():
        timed(lwl + args, env, tree)  # untimed: writes the bytecode
        runs = [timed(lwl + args, env, tree) for _ in range(repeat)]
        out[name] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", default=BASELINE, help="git ref to compare with (checked out in a temporary worktree)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = tmp / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.baseline], check=True)
        server = Server(tmp / "data").start()
        try:
            with Client(server.url) as c:
                t0 = time.perf_counter()
                budget_job = c.submit(json.dumps(small_budget_spec()))
                label_to_the_end(c, budget_job)
                setup = time.perf_counter() - t0
                ask_spec = copy.deepcopy(small_budget_spec(seed=1))
                files = {"spec": tmp / "spec.json", "asked": tmp / "asked.npy", "labels": tmp / "labels.npy",
                         "npz": tmp / "training_set.npz", "inputs": tmp / "inputs.npy",
                         "predictions": tmp / "predictions.npy"}
                files["spec"].write_text(json.dumps(ask_spec))
                ask_job = c.submit(json.dumps(ask_spec), idempotency_key="bench-cli")
                batch = None
                while batch is None:
                    batch = c.ask(ask_job)
                    time.sleep(0.2)
                np.save(files["labels"], np.zeros(len(batch[1])))
                np.save(files["inputs"], np.random.default_rng(0).standard_normal((100, 5)))
            jobs = {"budget": budget_job, "asktell": ask_job, "batch": batch[0]}
            print(f"lwl serve at {server.url}; the budgeted job labelled to the end in {setup:.0f} s; "
                  f"{args.repeat} calls per command, medians", flush=True)
            now = measure(ROOT, server.url, jobs, files, args.repeat)
            then = measure(base, server.url, jobs, files, args.repeat)
            loads = {"this tree": heavy_modules(ROOT), f"baseline {args.baseline}": heavy_modules(base)}
        finally:
            server.stop()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], check=False)
            subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False)
        for tree, modules in loads.items():
            print(f"import lwl.cli, {tree}: loads {' '.join(modules) or 'none of ' + ', '.join(HEAVY)}")
        print(f"{'command':<14}{'wall s':>9}{'CPU s':>9}{'base wall':>11}{'base CPU':>10}{'wall x':>8}{'CPU x':>8}  goal")
        for name in now:
            (w, u), (bw, bu) = now[name], then[name]
            ok = "met" if w <= GOAL_SECONDS and u <= GOAL_SECONDS else "not met"
            print(f"{name:<14}{w:>9.3f}{u:>9.3f}{bw:>11.3f}{bu:>10.3f}{w / bw:>8.2f}{u / bu:>8.2f}  {ok}")
        print(f"baseline: {args.baseline}; goal: <= {GOAL_SECONDS} s wall and CPU per call (quiet machine)")


if __name__ == "__main__":
    main()
