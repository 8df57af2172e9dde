#!/usr/bin/env bash
# The H200 measurements owed at the start of session 10 (2026-12-02), in device calls of ~500 s:
#   bash tools/gpu-owed.sh TASKS_TARBALL                    # part 1
#   PART=2 bash tools/gpu-owed.sh TASKS_TARBALL             # part 2
# Carry .whl, .dev/wheels and TASKS_TARBALL (`kernelsmith extract --all --no-compile` at this
# commit); for part 1 also .dev/selfcheck (the self-check record of the call before, which
# the self-check resumes). Each step has its own limit, and a step stopped by it keeps what it
# recorded (SIGTERM unwinds; the self-check and optimize resume).
# Part 1:
#   1. the self-check over the ops not yet proved (issue 13's >= 20 ops), resuming the
#      earlier record and applying the dtypes the pristine ops demanded there: selfcheck.tgz;
#   2. the GPU tests left unreached (order-free rows, graph timing and ceilings): tests.log;
#   3. one search round each on fused_add_rmsnorm and bias_gelu_tanh, populations cut to the
#      points that compose (issue 14's evaluation rate and sweep): runs.tgz.
# Part 2: one search round each over more ops with catalog shapes (issue 14's sweep), then
#   `bench --ops` with one op whose baseline cannot build here (issue 16): runs.tgz, bench.log.
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
  sweep sweep-b "${SWEEP_S:-300}" moe.shuffle_weighted_sum quantization.per_token_quant_fp8 \
    attention.fused_qk_norm_rope activation.relu2 attention.minimax_qknorm_rope moe.moe_topk_sum
  status=$((status | $?))
  tar -czf "$OUT/runs.tgz" -C work --exclude='*/src' runs 2>/dev/null
  timeout "${BENCH_S:-100}" python3 -m pipeline.cli bench --ops activation.silu_and_mul moe.route_radix4 \
    --output "$OUT/BENCH.md" > "$OUT/bench.log" 2>&1
  echo "bench exit $?"; tail -8 "$OUT/bench.log"
  exit $status
fi

mkdir -p work/integrate/self-check
gunzip -c .dev/selfcheck/self-check.json.gz > work/integrate/self-check/self-check.json 2>/dev/null
ops="moe.topk_softmax moe.moe_topk_softmax_out moe.mask_topk_ids attention.fused_qk_norm_rope_out
  moe.moe_topk_sigmoid_out embeddings.compute_n_gram_ids_decode activation.run_activation
  quantization.per_tensor_quant_fp8 layernorm.fused_inplace_qknorm quantization.hadamard_transform
  layernorm.fused_norm_residual"
KERNELSMITH_INTEGRATE__CASE_TIMEOUT_S=60 KERNELSMITH_INTEGRATE__WARM_TIMEOUT_S=150 \
  timeout "${SELF_CHECK_S:-220}" python3 -m pipeline.cli integrate --self-check $ops 2>&1 \
  | tee "$OUT/self-check.log" | tail -14
status=$((status | $?))
tar -czf "$OUT/selfcheck.tgz" -C work --exclude='integrate/self-check/tree' --exclude='integrate/self-check/cache' \
  integrate/self-check 2>/dev/null

timeout "${TESTS_S:-70}" python3 -m pytest -v -m gpu -p no:cacheprovider -rs --durations=5 \
  tests/test_harness_gpu.py::test_rows_in_no_fixed_order_on_torch_tensors \
  tests/test_harness_gpu.py::test_graph_timing_and_device_ceilings \
  "tests/test_harness_adversarial.py::test_unmodified_baseline_passes" > "$OUT/tests.log" 2>&1
status=$((status | $?))
grep -E 'PASSED|FAILED|ERROR|SKIPPED|passed|failed' "$OUT/tests.log" | tail -8

sweep sweep-a "${SWEEP_S:-150}" layernorm.fused_add_rmsnorm activation.bias_gelu_tanh
status=$((status | $?))
tar -czf "$OUT/runs.tgz" -C work --exclude='*/src' runs 2>/dev/null
exit $status
