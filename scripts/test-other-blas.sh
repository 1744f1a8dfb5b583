#!/usr/bin/env bash
# The test suite under another BLAS than the one its committed references were written with:
# a stand-in for "a machine with another CPU" (docs/README.md, tests/tolerance.py).
#
#   ./scripts/test-other-blas.sh [--fast] [pytest args]
#
# numpy's OpenBLAS runs its Sandybridge kernels (no FMA: another rounding than any x86-64 CPU
# of the last ten years picks by itself) on two threads instead of one, torch's MKL its
# COMPATIBLE code path and ATen its default (non-AVX) kernels. The committed references (legacy
# checkpoints, results) were written with each library's own choice for a Xeon; a test that
# passes here compares them at a stated tolerance, not bit for bit. Slower than test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Sandybridge}"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-2}"
export MKL_CBWR="${MKL_CBWR:-COMPATIBLE}"
export ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-default}"
echo "test-other-blas: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS" \
     "MKL_CBWR=$MKL_CBWR ATEN_CPU_CAPABILITY=$ATEN_CPU_CAPABILITY" >&2
exec ./scripts/test.sh "$@"
