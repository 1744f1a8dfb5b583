"""Per-iteration cost of the worker's store writes as a job grows: the checkpoint (the packed
stepper state), the progress and one history row, in one transaction (``Store.save_step``).

A real bilevel stepper state (the README's Friedman-1 job after its first steps) is given a
history of n records (copies of a real record) for n = 10, 1,000 and 10,000 iterations, and
each save is timed on a SQLite store in a temporary directory:

- ``without history`` (what the worker does): the checkpoint leaves the records out; the
  store appends one row per iteration;
- ``with history`` (the baseline, as before): the whole history rides in every checkpoint.

Usage: python bench/checkpoint.py [--saves 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lwl.design.state import StepperState, pack  # noqa: E402
from lwl.runner import build_stepper  # noqa: E402
from lwl.spec import parse_job_spec  # noqa: E402
from service.core.store import Store  # noqa: E402


def real_state() -> StepperState:
    spec = json.loads((ROOT / "examples" / "friedman1.json").read_text())
    spec["algorithm"] = {"name": "bilevel", "iterations": 30}
    spec = parse_job_spec(spec)
    stepper = build_stepper(spec)
    oracle = spec.oracle.build()
    state = stepper.init()
    while not state.history:
        labels = stepper.cached_labels(state)
        state = stepper.step(state, oracle.label(stepper.queries(state)) if labels is None else labels)
    return state


def time_saves(store: Store, job_id: str, state: StepperState, n: int, saves: int, with_history: bool) -> float:
    record = state.history[-1]
    history = [dict(record, iteration=i) for i in range(n)]
    t = 0.0
    for s in range(saves):
        it = n + s
        state = state.replace(iteration=it, history=[*history, dict(record, iteration=it)] if with_history else [])
        t0 = time.perf_counter()
        blob = pack(state, history=with_history)
        ok = store.save_step(job_id, "lease", blob, {"iteration": it, "total": n + saves},
                             dict(record, iteration=it))
        t += time.perf_counter() - t0
        assert ok
    return t / saves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--saves", type=int, default=200)
    args = ap.parse_args()
    state = real_state()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{Path(d) / 'bench.db'}")
        for n in (10, 1_000, 10_000):
            times = {}
            for mode in (False, True):
                job, _ = store.create_job("bench", {"oracle": {"name": "friedman1"}}, n + args.saves)
                store.acquire(job.id, 0, "lease", "bench")
                times[mode] = time_saves(store, job.id, state, n, args.saves, mode)
            rows.append((n, times[False], times[True]))
    print(f"{'iterations':>10} {'without history ms':>19} {'with history ms':>16} {'saved':>7}")
    for n, new, old in rows:
        print(f"{n:>10} {1e3 * new:>19.3f} {1e3 * old:>16.3f} {old / new:>6.1f}x")
    base = rows[0][1]
    print("growth 10 -> 10,000 iterations: without history "
          f"{rows[-1][1] / base:.2f}x, with history {rows[-1][2] / rows[0][2]:.2f}x")


if __name__ == "__main__":
    main()
