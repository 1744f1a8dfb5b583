"""The README's service tour, run as written (bash and curl) against a real ``lwl serve``: only
the port and the job spec change (a job that runs in seconds in place of the minute-long
examples/friedman1.json). Without its wait step, /distribution and /samples answer 409."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from service.routers.jobs import EXAMPLE_JOB
from tests.conftest import ROOT
from tests.service.conftest import Server

pytestmark = pytest.mark.server


def tour() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Five minutes with the service"):]
    return re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's tour uses curl")
def test_the_readme_tour_works_as_written(tmp_path):
    script = tour()
    assert "examples/friedman1.json" in script and "localhost:8000" in script
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(EXAMPLE_JOB))
    server = Server(tmp_path / "data").start()
    try:
        script = (script.replace("localhost:8000", f"localhost:{server.port}")
                  .replace("@examples/friedman1.json", f"@{spec}")
                  .replace("@examples/", f"@{ROOT / 'examples'}/"))
        run = subprocess.run(["bash", "-e", "-c", script], check=False, cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    finally:
        server.stop()
    out = run.stdout
    assert run.returncode == 0, run.stderr + out[-2000:]
    assert "no result yet" not in out and '"status":409' not in out, out[-3000:]
    assert '"status":"succeeded"' in out
    assert '"family":"gaussian"' in out.replace(" ", "")  # the distribution document
    assert '"samples"' in out and '"shape":[600,5]' in out.replace(" ", "")
    assert np.load(tmp_path / "x.npy").shape == (100_000, 5)
