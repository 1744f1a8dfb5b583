#!/usr/bin/env bash
# Install what the tests need (Python packages, redis-server and PostgreSQL from Debian) and
# run the whole suite: library, embedded service, distributed mode, the dashboard in headless
# chromium (about 10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --system
. .venv/bin/activate
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=2 MKL_NUM_THREADS=1
exec python -m pytest "$@"
