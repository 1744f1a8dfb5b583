"""A Bluesky RunEngine labels an lwl ask/tell job with (simulated) ophyd devices.

    pip install 'lwl[service,lab]'
    lwl serve &                                    # or a deployed service (LWL_URL, LWL_API_KEY)
    python examples/bluesky_lab.py examples/friedman1_budget.json [--budget 300]

One simulated axis per input coordinate (``ophyd.sim.SynAxis``) and a detector
(``ophyd.sim.SynSignal``) whose reading is Friedman-1 of the axes' positions. The detector is
unreliable: about 5% of its readings are NaN and 5% of its triggers raise. Those points are told
as failed (they count against the budget and are never training data); the job goes on. On a
beamline, replace ``devices`` by the real positioners and detector and ``label_key`` by the data
key of the measured quantity.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from bluesky import RunEngine
from ophyd.sim import SynAxis, SynSignal

from lwl.client import Client
from lwl.integrations.bluesky import LwlAgent, lwl_plan
from lwl.oracles import make_oracle


def devices(dim: int):
    """``dim`` axes and a detector reading Friedman-1 there; one point in ten fails (a fixed
    function of where the axes stand: half raise in the trigger, half read NaN)."""
    friedman = make_oracle({"name": "friedman1"})
    axes = [SynAxis(name=f"x{i + 1}", value=0.1234567) for i in range(dim)]  # parked where it reads

    def reading() -> float:
        x = np.array([[float(a.position) for a in axes]])
        luck = int(abs(x[0, 0]) * 1e6) % 20
        if luck == 0:
            raise RuntimeError("detector: no beam")  # told as a failed point
        return float("nan") if luck == 1 else float(friedman.label(x)[0])

    return axes, SynSignal(func=reading, name="det")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", default="examples/friedman1_budget.json")
    ap.add_argument("--budget", type=int, default=None, help="override the spec's label budget")
    args = ap.parse_args()
    spec = json.load(open(args.spec))
    if args.budget is not None:
        spec["budget"] = args.budget
    dim = len(spec["test_distributions"]["members"][0]["gaussian"]["mean"])
    axes, det = devices(dim)
    RE = RunEngine({})
    t0 = time.perf_counter()
    with Client(os.environ.get("LWL_URL", "http://127.0.0.1:8000"), os.environ.get("LWL_API_KEY")) as lwl:
        job = lwl.submit(spec)
        print("job", job)
        agent = LwlAgent(lwl, job)
        RE(lwl_plan(agent, detectors=[det], motors=axes, label_key="det"))
        doc = lwl.job(job)
        print(f"{doc['status']} after {time.perf_counter() - t0:.0f} s: {agent.told} points measured, "
              f"{agent.failed} failed (told as failed)")
        if doc["status"] == "succeeded" and spec.get("budget") is not None:
            result = lwl.result(job)
            X, y = lwl.training_set(job)
            print(f"labels used {result['labels_used']} of {result['budget']}, training set {len(y)} points, "
                  f"{result['labels_failed']} failed points left out")
        elif doc["status"] != "succeeded":
            print("error:", (doc.get("error") or {}).get("detail"))


if __name__ == "__main__":
    main()
