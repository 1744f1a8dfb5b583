#!/usr/bin/env bash
# Install (first time) and start lwl on its embedded default: the HTTP API on 127.0.0.1:8000
# and one worker process, with a SQLite job store and a local broker under ./lwl-data.
# Extra arguments go to `lwl serve` (e.g. --port 9000 --data-dir /var/lib/lwl).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
exec lwl serve "$@"
