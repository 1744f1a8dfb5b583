"""The GPU check, for a machine with a CUDA GPU (run by scripts/gpu-check.sh).

A distributed stack on loopback (redis-server, PostgreSQL, ``lwl serve --no-worker``, one
``lwl worker --device cpu`` and one ``lwl worker --device cuda``). An AMA job with
``device: cuda`` must run on the GPU worker, the same job with ``device: cpu`` and a bilevel job
with ``device: auto`` on the CPU worker; the GPU and CPU AMA results must agree: the designed
KLE parameters within 5% and the relative OOD error within 10% (DeepONet training on the GPU
is not bit-identical to the CPU's: other kernels, other summation orders).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.processes import ENV_BASE, Backends, Proc, Server, start_worker, wait_until  # noqa: E402


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here: run this on a GPU machine")
        return 2
    d = Path(tempfile.mkdtemp(prefix="lwl-gpu-check-"))
    backends = Backends(d)
    env = backends.env
    api = Server(d, env=env, no_worker=True).start()
    cpu = start_worker(d, env, "cpu")
    gpu = Proc([sys.executable, "-m", "lwl.cli", "worker", "--device", "cuda"],
               {**os.environ, **ENV_BASE, "LWL_DATA_DIR": str(d), **env}, d / "gpu.log")
    ok = True
    try:
        url = api.url
        wait_until(lambda: httpx.get(f"{url}/v1/workers").json()["alive"] == {"cpu": 1, "cuda": 1}, 120, 0.5, "workers")
        workers = {w["device"]: w for w in httpx.get(f"{url}/v1/workers").json()["items"]}
        print("workers:", {k: (w["pid"], w.get("gpu")) for k, w in workers.items()})
        ama = json.loads((ROOT / "examples" / "darcy_ama.json").read_text())
        jobs = {}
        for device in ("cuda", "cpu"):
            s = dict(ama, device=device)
            jobs[device] = httpx.post(f"{url}/v1/jobs", json=s).json()["id"]
        bilevel = json.loads((ROOT / "examples" / "friedman1.json").read_text())
        jobs["bilevel"] = httpx.post(f"{url}/v1/jobs", json=bilevel).json()["id"]
        t0 = time.monotonic()
        wait_until(lambda: all(httpx.get(f"{url}/v1/jobs/{j}").json()["status"] in ("succeeded", "failed")
                               for j in jobs.values()), 3600, 2, "the jobs")
        views = {k: httpx.get(f"{url}/v1/jobs/{j}").json() for k, j in jobs.items()}
        for k, v in views.items():
            print(f"{k}: {v['status']} on {v['worker']} (queue {v['queue']})")
        ok &= all(v["status"] == "succeeded" for v in views.values())
        ok &= views["cuda"]["worker"].endswith(f":{workers['cuda']['pid']}")
        ok &= views["cpu"]["worker"].endswith(f":{workers['cpu']['pid']}")
        ok &= views["bilevel"]["worker"].endswith(f":{workers['cpu']['pid']}")
        res = {k: httpx.get(f"{url}/v1/jobs/{jobs[k]}/result").json() for k in ("cuda", "cpu")}
        for p in ("shift", "amplitude", "omega"):
            a, b = res["cuda"]["distribution"].get(p), res["cpu"]["distribution"].get(p)
            if a is not None:
                close = abs(a - b) <= 0.05 * max(abs(b), 1e-3)
                print(f"KLE {p}: GPU {a:.4g}, CPU {b:.4g} {'(within 5%)' if close else '(DIFFERS)'}")
                ok &= close
        ea, eb = (res[k]["evaluation"]["relative_ood_error"] for k in ("cuda", "cpu"))
        close = abs(ea - eb) <= 0.10 * eb
        print(f"relative OOD error: GPU {ea:.4g}, CPU {eb:.4g} {'(within 10%)' if close else '(DIFFERS)'}; "
              f"{time.monotonic() - t0:.0f} s")
        ok &= close
    finally:
        for p in (gpu, cpu):
            p.stop()
        api.stop()
        backends.stop()
        shutil.rmtree(d, ignore_errors=True)
    print("GPU check", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
