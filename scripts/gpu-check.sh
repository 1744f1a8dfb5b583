#!/usr/bin/env bash
# The GPU pass of the library tests and the RTE bench with the DeepONet on CUDA.
# Tests parametrised by tests/conftest.py:devices() run on "cpu" and "cuda"; the CUDA-only tests
# stop being skipped. Needs a CUDA machine where lwl's dependencies import (no service needed).
# Usage: scripts/gpu-check.sh [LOG_DIR]
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA here'; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 2
parallel=()  # pytest-xdist, where installed: half the cores, at most 8 workers
python3 -c "import xdist" 2>/dev/null && parallel=(-n "$(python3 -c "import os; print(max(1, min(8, (os.cpu_count() or 2) // 2)))")")
python3 -m pytest -q -p no:cacheprovider "${parallel[@]}" tests/lwl 2>&1 | tee "$out/tests.log" | tail -30
status=${PIPESTATUS[0]}
python3 bench/rte.py --device cuda 2>&1 | tee "$out/bench-rte.log"
exit "$status"
