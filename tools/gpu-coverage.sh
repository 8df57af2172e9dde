#!/usr/bin/env bash
# Issue #3's coverage run, in one device call (carry .whl and .dev/wheels; see README):
#   bash tools/gpu-coverage.sh
# Extracts every op on the GPU machine (16 cores compile the ~250 build units far
# faster than the 2-core CPU machine's 22 minutes), then `kernelsmith bench --all`:
# how many baselines build, run and pass their own generated tests, with the reason
# for each failure. Outputs land in $OUT (BENCHMARKS.md, coverage.json, logs).
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
python3 -m pipeline.cli extract --all 2>&1 | tee "${OUT:-.}/extract-all.log" | tail -5
cp work/coverage.json "${OUT:-.}/" 2>/dev/null
python3 -m pipeline.cli bench --all --no-torch-compile 2>&1 | tee "${OUT:-.}/bench-all.log" | tail -40
cp BENCHMARKS.md "${OUT:-.}/" 2>/dev/null
