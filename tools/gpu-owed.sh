#!/usr/bin/env bash
# The H200 measurements owed after session 10 (2026-12-02), in device calls of ~500 s:
#   bash tools/gpu-owed.sh TASKS_TARBALL                    # part 1
#   PART=2 bash tools/gpu-owed.sh TASKS_TARBALL             # part 2
# Carry .whl, .dev/wheels and TASKS_TARBALL (`kernelsmith extract --all --no-compile` at this
# commit; the full tarball with both wheels is over the 64 MiB carry, so carry a tarball of
# the ops named below, as session 10 did); for part 1 also .dev/selfcheck (the gzipped
# self-check record of the call before, which the self-check resumes). Each step has its own
# limit, and a step stopped by it keeps what it recorded (SIGTERM unwinds; the self-check
# and optimize resume). Session 10 ran this script as of commit 87125dc.
# Part 1:
#   1. the self-check over the three ops session 10 did not reach (issue 13): selfcheck.tgz;
#   2. the two baseline tests left unreached (tests.log);
#   3. one search round each on the two ops whose PDL gain was lost to prefill sizes, now with
#      pdl_small_grids (issue 14 item 4): runs.tgz.
# Part 2: one search round each over the ops whose 1024-point spaces were not cut (now cut by
#   pairs) and the two not reached, for the evaluation rate and the sweep (issue 14): runs.tgz.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/tasks}"
mkdir -p work && tar -xzf "$tasks" -C work || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0

sweep() {  # sweep RUN SECONDS OPS...: one search round per op, a population of 16 at most
  local run="$1" seconds="$2"
  shift 2
  KERNELSMITH_BUDGET__WALL_S="$seconds" KERNELSMITH_SEARCH__EVALS_PER_ROUND=16 \
    timeout $((seconds + 60)) python3 -m pipeline.cli optimize --ops "$@" --coder offline --search auto \
    --rounds 1 --run "$run" > "$OUT/optimize-$run.log" 2>&1
  local rc=$?
  tail -4 "$OUT/optimize-$run.log"
  return $rc
}

if [ "${PART:-1}" = 2 ]; then
  sweep sweep-d "${SWEEP_S:-400}" activation.relu2 quantization.per_token_quant_fp8 \
    attention.minimax_qknorm_rope moe.moe_topk_sum
  status=$((status | $?))
  tar -czf "$OUT/runs.tgz" -C work --exclude='*/src' runs 2>/dev/null
  exit $status
fi

mkdir -p work/integrate/self-check
gunzip -c .dev/selfcheck/self-check.json.gz > work/integrate/self-check/self-check.json 2>/dev/null
ops="layernorm.fused_inplace_qknorm quantization.hadamard_transform layernorm.fused_norm_residual"
KERNELSMITH_INTEGRATE__CASE_TIMEOUT_S=60 KERNELSMITH_INTEGRATE__WARM_TIMEOUT_S=150 \
  timeout "${SELF_CHECK_S:-150}" python3 -m pipeline.cli integrate --self-check $ops 2>&1 \
  | tee "$OUT/self-check.log" | tail -14
status=$((status | $?))
tar -czf "$OUT/selfcheck.tgz" -C work --exclude='integrate/self-check/tree' --exclude='integrate/self-check/cache' \
  integrate/self-check 2>/dev/null

timeout "${TESTS_S:-90}" python3 -m pytest -v -m gpu -p no:cacheprovider -rs --durations=5 \
  "tests/test_harness_adversarial.py::test_unmodified_baseline_passes" > "$OUT/tests.log" 2>&1
status=$((status | $?))
grep -E 'PASSED|FAILED|ERROR|SKIPPED|passed|failed' "$OUT/tests.log" | tail -8

sweep sweep-c "${SWEEP_S:-170}" moe.shuffle_weighted_sum activation.bias_gelu_tanh
status=$((status | $?))
tar -czf "$OUT/runs.tgz" -C work --exclude='*/src' runs 2>/dev/null
exit $status
