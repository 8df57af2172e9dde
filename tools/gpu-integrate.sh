#!/usr/bin/env bash
# Integrate's proof on the GPU machine in one device call (issue 13):
#   bash tools/gpu-integrate.sh TASKS_TARBALL [RUN_TARBALL] [OP ...]
# 1. with RUN_TARBALL (`tar -czf X -C work/runs <run>` of a run made by `kernelsmith optimize`
#    on a GPU), `kernelsmith integrate --run <run>`: the patch, SGLang's check of it, and the
#    whole-layer end-to-end proxy, then its PR.md (first: its timing has the GPU to itself);
# 2. `kernelsmith integrate --self-check OP...`: the unmodified baseline of each op checked
#    against a byte-for-byte copy of the pristine tree through SGLang's own load_jit and
#    public function (every case must be bitwise equal);
# 3. the integrate GPU tests (GPU_TESTS, default the two integrate files).
# Carry .whl, .dev/wheels and the tarballs (under .dev/). Each step has its own time limit
# (SELF_CHECK_S, INTEGRATE_S, TESTS_S), so one step that hangs leaves the others their time;
# a step stopped by its limit keeps its record (SIGTERM unwinds), and the self-check resumes.
# The check's own limits: KERNELSMITH_INTEGRATE__WARM_TIMEOUT_S, __CASE_TIMEOUT_S, __WARM_BATCH_MODULES.
# Outputs in $OUT: selfcheck.tgz, integrate.tgz, tests.log, and each step's log.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/tasks}"; shift
run_tar=""
if [ -n "${1:-}" ] && [ -f "$1" ]; then run_tar="$1"; shift; fi
mkdir -p work/runs && tar -xzf "$tasks" -C work || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0

if [ -n "$run_tar" ]; then
  run=$(tar -tzf "$run_tar" | head -1 | cut -d/ -f1)  # packed as <run>/...: tar -czf X -C work/runs <run>
  tar -xzf "$run_tar" -C work/runs || exit 1
  timeout "${INTEGRATE_S:-240}" python3 -m cli integrate --run "$run" 2>&1 | tee "$OUT/integrate.log" | tail -40
  status=$((status | $?))
  tar -czf "$OUT/integrate.tgz" -C work --exclude='*/tree' --exclude='*/cache' "integrate/$run" 2>/dev/null
fi

timeout "${SELF_CHECK_S:-240}" python3 -m cli integrate --self-check "$@" 2>&1 | tee "$OUT/self-check.log" | tail -40
status=$((status | $?))
# the record, the table and the worker logs; never the tree copy or the JIT caches (hundreds of MB)
tar -czf "$OUT/selfcheck.tgz" -C work --exclude='integrate/self-check/tree' --exclude='integrate/self-check/cache' \
  integrate/self-check 2>/dev/null

if [ "${TESTS_S:-0}" != 0 ]; then
  timeout "$TESTS_S" python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=5 \
    ${GPU_TESTS:-tests/test_integrate_runner.py tests/test_integrate_e2e.py} > "$OUT/tests.log" 2>&1
  status=$((status | $?))
  tail -15 "$OUT/tests.log"
fi
exit $status
