#!/usr/bin/env bash
# Create .venv (once) and install lwl with the service, test and lab (Bluesky) extras. torch is
# pinned to the CPU wheel that lies on this machine's disk and installed first, so nothing pulls a
# CUDA build.
# With --system, also install the Debian servers the distributed-mode tests start
# (redis-server, PostgreSQL) and the browser the dashboard tests drive (chromium) when missing.
# Says what it installs, and from where, before it does.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "setup: $*" >&2; }

if [ "${1:-}" = "--system" ]; then
  need=()
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || need+=(postgresql)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)  # the dashboard's browser tests
  if [ ${#need[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    say "installing Debian packages with apt-get${SUDO:+ (sudo)}: ${need[*]}"
    say "  (redis-server and postgresql for the distributed-mode tests, chromium for the dashboard tests)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # the tests start their own servers on free ports; the packaged services are not needed
    say "stopping the packaged redis-server and postgresql services (the tests start their own)"
    $SUDO service redis-server stop >/dev/null 2>&1 || true
    $SUDO service postgresql stop >/dev/null 2>&1 || true
  else
    say "Debian packages present: redis-server, postgresql, chromium"
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1) ($PY)"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
stamp=.venv/.lwl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "pip installing into .venv: pip (upgrade), torch==2.13.0 (CPU wheel), lwl in editable mode with"
  say "  its [service,test] extras (dependencies as pyproject.toml lists them)"
  python -m pip install -q --upgrade pip
  python -m pip install -q "torch==2.13.0"
  python -m pip install -q -e ".[service,test,lab]"
  touch "$stamp"
else
  say ".venv is up to date with pyproject.toml (delete $stamp to reinstall)"
fi
