"""scripts/setup.sh chooses where torch comes from: pyproject.toml's pin as pip resolves it, or
with ``--cuda`` the CUDA build of the same version from the PyTorch index. The script runs for
real under ``--dry-run`` (it prints each install command instead of running it), in a copy of
the repository's setup files, so nothing is downloaded and no shared environment is touched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

INDEX = "https://download.pytorch.org/whl"


def pinned_torch() -> str:
    return re.search(r'"torch==([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)


@pytest.fixture
def repo(tmp_path) -> Path:
    """The two files setup.sh reads, laid out as in the repository (it cds to its parent)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy2(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def setup(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("LWL_TORCH_CUDA", "LWL_SETUP_DRY_RUN")}
    return subprocess.run(["bash", str(repo / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env={**clean, **env}, timeout=60)


def pip_installs(out: str) -> list[str]:
    return [line.split("would run: ", 1)[1] for line in out.splitlines() if "would run: " in line and " pip install" in line]


def test_cuda_installs_the_pinned_torch_from_the_pytorch_cuda_index(repo):
    version = pinned_torch()
    run = setup(repo, "--cuda", "--dry-run")
    assert run.returncode == 0, run.stderr
    torch = [cmd for cmd in pip_installs(run.stderr) if "torch==" in cmd]
    assert torch == [f".venv/bin/python -m pip install -q torch=={version}+cu126 --index-url {INDEX}/cu126"]
    assert f"from {INDEX}/cu126" in run.stderr  # said before it is done
    assert not (repo / ".venv").exists()  # a dry run creates nothing

    newer = setup(repo, "--cuda=cu130", "--dry-run")
    assert f"torch=={version}+cu130 --index-url {INDEX}/cu130" in newer.stderr
    by_variable = setup(repo, "--dry-run", LWL_TORCH_CUDA="cu130")  # what serve.sh and test.sh pass on
    assert f"--index-url {INDEX}/cu130" in by_variable.stderr


def test_default_install_uses_no_pytorch_index_and_names_the_extras_it_installs(repo):
    run = setup(repo, "--dry-run")
    assert run.returncode == 0, run.stderr
    installs = pip_installs(run.stderr)
    assert f".venv/bin/python -m pip install -q torch=={pinned_torch()}" in installs
    assert not any(INDEX in cmd for cmd in installs)
    # the message announces what the install command installs
    extras = re.search(r"pip install -q -e \.(\[[a-z,]+\])", run.stderr).group(1)
    assert extras == "[service,test,lab]" and f"its {extras} extras" in run.stderr


def test_an_unknown_cuda_build_or_option_is_refused_naming_the_known_ones(repo):
    run = setup(repo, "--cuda=cu128", "--dry-run")  # torch 2.12 dropped its 12.8 build
    assert run.returncode == 2
    assert "unknown CUDA build 'cu128'" in run.stderr and "cu126, cu130" in run.stderr
    assert pip_installs(run.stderr) == []
    other = setup(repo, "--gpu")
    assert other.returncode == 2 and "unknown option --gpu" in other.stderr and "--cuda" in other.stderr


def _venv_with_torch(repo: Path, version: str) -> None:
    """A real .venv (without pip) whose site-packages holds torch's metadata at ``version``, and
    an install stamp newer than pyproject.toml: an up-to-date environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True, timeout=120)
    purelib = sysconfig.get_path("purelib", vars={"base": str(repo / ".venv"), "platbase": str(repo / ".venv")})
    info = Path(purelib) / f"torch-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    stamp = repo / ".venv" / ".lwl-installed"
    stamp.touch()
    os.utime(repo / "pyproject.toml", (stamp.stat().st_mtime - 10,) * 2)


def test_cuda_on_an_installed_venv_replaces_a_cpu_torch_and_keeps_a_cuda_one(repo):
    version = pinned_torch()
    _venv_with_torch(repo, f"{version}+cpu")
    plain = setup(repo, "--dry-run")
    assert plain.returncode == 0 and pip_installs(plain.stderr) == [] and "up to date" in plain.stderr
    cuda = setup(repo, "--cuda", "--dry-run")
    assert f"replacing torch {version}+cpu" in cuda.stderr
    assert pip_installs(cuda.stderr) == [f".venv/bin/python -m pip install -q torch=={version}+cu126 "
                                         f"--index-url {INDEX}/cu126"]

    shutil.rmtree(repo / ".venv")
    _venv_with_torch(repo, f"{version}+cu126")
    again = setup(repo, "--cuda", "--dry-run")
    assert again.returncode == 0 and pip_installs(again.stderr) == [], again.stderr
