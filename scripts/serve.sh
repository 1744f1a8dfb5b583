#!/usr/bin/env bash
# Start lwl on its embedded default. The HTTP service is the next issue's work; until it lands
# this runs the example design job end to end (oracle -> bilevel design -> evaluation) and
# prints where the optimised distribution was written.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
exec lwl run examples/friedman1.json --out runs/demo "$@"
