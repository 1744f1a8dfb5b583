#!/usr/bin/env bash
# Install what the tests need (Python packages, redis-server and PostgreSQL from Debian) and
# run the whole suite: library, embedded service, distributed mode, the dashboard in headless
# chromium (about 20 minutes on 2 cores, measured 2026-12-06; the 25 slowest tests are listed at the end).
#
#   ./scripts/test.sh --fast [pytest args]   the quick loop: no server, browser, distributed or
#                                            slow tests (markers in pyproject.toml), no Debian
#                                            packages; about 2.5 minutes on 2 cores (README)
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
if [ "$fast" = 1 ]; then
  ./scripts/setup.sh
else
  ./scripts/setup.sh --system
fi
. .venv/bin/activate
# one BLAS thread unless the caller says otherwise (scripts/test-other-blas.sh runs two)
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" \
       MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
if [ "$fast" = 1 ]; then
  exec python -m pytest -m "not server and not browser and not distributed and not slow" "$@"
fi
exec python -m pytest --durations=25 "$@"
