#!/usr/bin/env bash
# On a machine with a CUDA GPU: one CPU and one GPU worker in a distributed stack; CUDA jobs on
# the GPU worker, CPU jobs on the CPU worker, GPU and CPU results within the stated tolerance
# (scripts/gpu_check.py). Needs redis-server and PostgreSQL (scripts/setup.sh --system).
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
exec python scripts/gpu_check.py "$@"
