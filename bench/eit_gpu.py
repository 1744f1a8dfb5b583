"""Table 2 on a GPU, checked in about 10 minutes of device time before the paper-size run
(issue #36): one paper-size AMINO (the paper's channels, trunk, FNO; grid 70, L = 100 pairs)
trained a few epochs on a few real EIT conductivities, in float32 and in TF32.

It prints, per precision: seconds per AdamW step (32 conductivities x 100 pairs), the first and
last epoch's loss (the loss must fall: exit 1 otherwise), peak GPU memory, and the wall time the
`paper` preset and `--models paper` would take at that speed (steps per epoch x epochs x models;
data generation not counted). With ``--out FILE`` it writes the same as JSON.

    python bench/eit_gpu.py [--conductivities 64] [--epochs 4] [--out gpu-eit.json]
    python bench/eit_gpu.py --smoke     # CPU, a tiny model: checks the script itself (a test runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lwl.experiments import eit  # noqa: E402
from lwl.models.amino import AMINORegressor  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conductivities", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, smoke-size model and grid")
    args = ap.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("eit_gpu: no CUDA device (use --smoke to check the script on a CPU)", file=sys.stderr)
        return 2
    preset = eit.PRESETS["smoke" if args.smoke else "paper"]
    device = "cpu" if args.smoke else "cuda"
    cfg = {**preset, "n_train": args.conductivities, "n_val": 1, "n_test": 1}
    t0 = time.perf_counter()
    data = eit.generate_data(cfg, seed=0)
    data_seconds = time.perf_counter() - t0
    M = cfg["grid"]
    a = eit.conductivity(data["c_train"], M)
    lo = eit.PAPER_MODELS["Model 2"]
    f, g = eit.pairs(data["dtn_train"], lo + eit.WIDTH * data["u_train"], M)
    steps_per_epoch = -(-preset["n_train"] // preset["batch_size"])
    models = {"all": preset["candidates"] + 2 * preset["refine"] + int(preset["reference"]), "paper": 4}
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "grid": M,
              "pairs": cfg["pairs"], "conductivities": args.conductivities, "epochs": args.epochs,
              "data_seconds": data_seconds, "precisions": {}}
    ok = True
    for precision in ("float32", "tf32"):
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        times: list[float] = []
        last = [time.perf_counter()]

        def tick(epoch: int, loss: float) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

        model = AMINORegressor(M, **preset["model"], epochs=args.epochs, batch_size=preset["batch_size"], seed=0,
                               device=device, precision=precision).fit(f, g, a, progress=tick)
        steps = -(-args.conductivities // preset["batch_size"])
        step_s = float(np.median(times[1:] if len(times) > 1 else times)) / steps  # epoch 0 warms up
        losses = model.loss_history_
        falls = losses[-1] < losses[0]
        ok &= falls
        row = {"seconds_per_step": step_s, "first_loss": losses[0], "last_loss": losses[-1], "loss_falls": falls,
               "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
               "preset_hours": {k: step_s * steps_per_epoch * preset["epochs"] * n / 3600 for k, n in models.items()}}
        report["precisions"][precision] = row
        print(f"{precision:8s}: {step_s * 1e3:8.1f} ms/step, loss {losses[0]:.4f} -> {losses[-1]:.4f} "
              f"({'falls' if falls else 'DOES NOT FALL'}), paper preset ~{row['preset_hours']['all']:.1f} h, "
              f"--models paper ~{row['preset_hours']['paper']:.1f} h", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
