#!/usr/bin/env bash
# Issue #3's coverage sweep in one device call (carry .whl, and .dev/wheels or the tarball):
#   bash tools/gpu-coverage.sh [TASKS_TARBALL]
# With TASKS_TARBALL (a .tar.gz of work/tasks from `kernelsmith extract --all` on the CPU
# machine: same nvcc, same tasks), the GPU machine spends no time extracting; without
# it, `extract --all` runs here first (16 cores). Then `kernelsmith bench --all`: how many
# baselines build, run and pass their own generated tests, with the reason for each
# failure. The sweep resumes from work/bench/health/ when run again on a warm machine;
# KERNELSMITH_HARNESS__SWEEP_BUDGET_S=300 makes it stop starting work after 300 s and
# still write its table (set SWEEP_TIMEOUT_S, the hard stop, about 100 s above it).
# A tarball made with `extract --all --no-compile` (the CPU machine's 2 cores take half an
# hour over the compile check) needs COMPILE_CHECK=1: `extract --all` then runs here over
# the unpacked tasks (`--ops` of exactly those), which are current (same task keys), so
# it only compile-checks them on this machine's cores (carry .dev/wheels too: it reads the
# sglang wheel). It builds every instantiation, so over all 210 tasks it did not finish
# within one 600 s call (2026-12-01); without it the sweep builds only what its checks
# need and, where a module does not build, leaves out the instantiations nvcc refuses.
# Outputs land in $OUT: BENCHMARKS.md (with the new section), health.tar.gz, logs.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
if [ -n "${1:-}" ]; then
  mkdir -p work && tar -xzf "$1" -C work || exit 1
  if [ "${COMPILE_CHECK:-0}" = 1 ]; then  # exactly the tarball's tasks, nothing extracted anew
    python3 -m cli extract --ops $(ls work/tasks) 2>&1 | tee "$OUT/extract-check.log" | grep -c 'baseline compiles'
  fi
else
  python3 -m cli extract --all 2>&1 | tee "$OUT/extract-all.log" | tail -5
  cp work/coverage.json "$OUT/" 2>/dev/null
fi
export KERNELSMITH_HARNESS__HEALTH_WORKERS="${KERNELSMITH_HARNESS__HEALTH_WORKERS:-8}"
timeout "${SWEEP_TIMEOUT_S:-560}" python3 -m cli bench --all 2>&1 | tee "$OUT/bench-all.log" | grep -v '^\[' | tail -20
status=$?
cp BENCHMARKS.md "$OUT/" 2>/dev/null
tar -czf "$OUT/health.tar.gz" -C work bench 2>/dev/null
exit $status
