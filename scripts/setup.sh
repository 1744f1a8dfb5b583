#!/usr/bin/env bash
# Create .venv (once) and install lwl with the service, test and lab (Bluesky) extras. torch is
# installed first at pyproject.toml's pin, so the extras cannot pull another build: on this
# project's machines that is the CPU wheel lying on their disk (pip's find-links).
#
#   --system        also install the Debian servers the distributed-mode tests start
#                   (redis-server, PostgreSQL) and the browser the dashboard tests drive
#                   (chromium) when missing
#   --cuda[=TAG]    install the CUDA build of the same torch from the PyTorch index instead
#                   (TAG cu126, the default, or cu130; torch 2.13 publishes these two as stable
#                   and cu132 as experimental). Also LWL_TORCH_CUDA=TAG, which serve.sh and
#                   test.sh pass through. An existing .venv gets its torch replaced.
#   --dry-run       say what would be installed and run nothing (also LWL_SETUP_DRY_RUN=1)
#
# Says what it installs, and from where, before it does.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }

# the CUDA builds the PyTorch index publishes for the pinned torch (2.13: stable 12.6 and 13.0,
# experimental 13.2; its 12.8 build was dropped in 2.12)
CUDA_TAGS="cu126 cu130 cu132"
CUDA_DEFAULT=cu126  # the widest driver support (CUDA 12 drivers); cu130 for Blackwell or 13.x drivers
TORCH_INDEX=https://download.pytorch.org/whl

system=0
cuda=${LWL_TORCH_CUDA:-}
dry=${LWL_SETUP_DRY_RUN:-0}
for arg in "$@"; do
  case "$arg" in
    --system) system=1 ;;
    --cuda) cuda=$CUDA_DEFAULT ;;
    --cuda=*) cuda=${arg#--cuda=} ;;
    --dry-run) dry=1 ;;
    *) say "unknown option $arg (known: --system, --cuda[=TAG], --dry-run)"; exit 2 ;;
  esac
done
if [ -n "$cuda" ] && [[ " $CUDA_TAGS " != *" $cuda "* ]]; then
  say "unknown CUDA build '$cuda' for --cuda / LWL_TORCH_CUDA (torch's builds: ${CUDA_TAGS// /, })"
  exit 2
fi

# one place names the torch version: pyproject.toml's pin
torch_version=$(sed -n 's/^ *"torch==\([0-9][0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)
if [ -z "$torch_version" ]; then
  say "pyproject.toml pins no torch==VERSION in its dependencies"
  exit 2
fi

# run a command, or only print it under --dry-run
run() {
  if [ "$dry" = 1 ]; then
    say "would run: $*"
  else
    "$@"
  fi
}

if [ "$system" = 1 ]; then
  need=()
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || need+=(postgresql)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the dashboard's browser tests
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    say "installing Debian packages with apt-get${SUDO:+ (sudo)}: ${need[*]}"
    say "  (redis-server and postgresql for the distributed-mode tests, chromium for the dashboard tests)"
    run $SUDO apt-get update -qq
    if [ "$dry" = 1 ]; then
      say "would run: $SUDO apt-get install -y -qq --no-install-recommends ${need[*]}"
    else
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
    # the tests start their own servers on free ports; the packaged services are not needed
    say "stopping the packaged redis-server and postgresql services (the tests start their own)"
    if [ "$dry" = 0 ]; then
      $SUDO service redis-server stop >/dev/null 2>&1 || true
      $SUDO service postgresql stop >/dev/null 2>&1 || true
    fi
  else
    say "Debian packages present: redis-server, postgresql, chromium"
  fi
fi

PY=${PYTHON:-python3}
VPY=.venv/bin/python
if [ ! -x "$VPY" ]; then
  say "creating .venv with $("$PY" --version 2>&1) ($PY)"
  run "$PY" -m venv .venv
fi

# the torch requirement and where it comes from: the CUDA build names its local version
# (2.13.0+cu126), so pip replaces an installed CPU build instead of calling it satisfied
if [ -n "$cuda" ]; then
  torch_req="torch==$torch_version+$cuda"
  torch_from=(--index-url "$TORCH_INDEX/$cuda")
  torch_what="torch==$torch_version, the CUDA build $cuda, from $TORCH_INDEX/$cuda"
else
  torch_req="torch==$torch_version"
  torch_from=()
  torch_what="torch==$torch_version as pip resolves it (the CPU wheel where pip's find-links hold it, as on this project's machines; --cuda for a CUDA build)"
fi

stamp=.venv/.lwl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "pip installing into .venv: pip (upgrade), $torch_what,"
  say "  then lwl in editable mode with its [service,test,lab] extras (dependencies as pyproject.toml lists them)"
  run "$VPY" -m pip install -q --upgrade pip
  run "$VPY" -m pip install -q "$torch_req" "${torch_from[@]}"
  run "$VPY" -m pip install -q -e ".[service,test,lab]"
  run touch "$stamp"
else
  if [ -n "$cuda" ]; then
    # --cuda on an installed .venv: replace its torch when it is another build
    installed=$("$VPY" -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null || echo none)
    if [ "$installed" != "$torch_version+$cuda" ]; then
      say "pip replacing torch $installed in .venv with $torch_what"
      run "$VPY" -m pip install -q "$torch_req" "${torch_from[@]}"
    fi
  fi
  say ".venv is up to date with pyproject.toml (delete $stamp to reinstall)"
fi
