"""The long property-based run of the API contract: schemathesis (every check, the settings of
tests/service/schemathesis.toml) against a real ``lwl serve`` with keys, for ``--seconds``
(default 300, at least 10,000 generated cases on 2 cores). Writes the report to
docs/results/contract/schemathesis.log and prints its summary; exit status 1 on any failure.

    python bench/contract.py [--seconds 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.processes import Server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "contract" / "schemathesis.log")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), env={"LWL_API_KEYS": "alice:k-alice,bob:k-bob"}).start()
        try:
            st = shutil.which("st", path=str(Path(sys.executable).parent))
            run = subprocess.run([st, "--config-file", str(ROOT / "tests" / "service" / "schemathesis.toml"), "run",
                                  f"{server.url}/openapi.json", "-H", "Authorization: Bearer k-alice",
                                  "--max-time", str(args.seconds), "--seed", str(args.seed)],
                                 capture_output=True, text=True,  # the hooks write valid .npy/.npz uploads
                                 env={**os.environ, "SCHEMATHESIS_HOOKS": str(ROOT / "tests" / "service" /
                                                                              "schemathesis_hooks.py")})
        finally:
            server.stop()
    text = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:PORT", run.stdout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(f"$ st run ... --max-time {args.seconds} --seed {args.seed}  (exit {run.returncode})\n\n" + text)
    summary = text[text.rfind("SUMMARY"):]
    print(summary)
    print(f"wrote {args.out}")
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
