#!/usr/bin/env bash
# The H200 measurements session 9 (2026-12-02) left owed, in two device calls (~540 s each):
#   bash tools/gpu-owed.sh TASKS_TARBALL              # part 1
#   PART=2 bash tools/gpu-owed.sh TASKS_TARBALL RELEASE_TARBALL...   # part 2
# Carry .whl, .dev/wheels and TASKS_TARBALL (`kernelsmith extract --all --no-compile`
# at this commit: the tasks' contracts changed in session 9); for part 2 also the release
# tarballs (tools/track-tasks.sh) and, to resume a census, work/results from the last run.
# Each step has its own limit, and a step stopped by it keeps what it recorded (SIGTERM
# unwinds; the self-check and the census resume).
# Part 1:
#   1. whether bubblewrap makes its sandbox on this machine (issue 16): bwrap.txt;
#   2. the self-check over the ops that were blocked (order-free rows, dtype demands, the
#      asserted "relu2") and ten planned ones not yet tried (issue 13's >= 20 ops): selfcheck.tgz;
#   3. the GPU tests added or not reached in session 9 (the copy-latency floor included): tests.log;
#   4. one search round with screening on fused_add_rmsnorm (issue 14's evaluation rate): runs.tgz.
# Part 2:
#   1. `bench --ops` over two good ops and one whose baseline cannot build here (issue 16): bench.log;
#   2. the census of each release tarball, TRACK_S each (issue 17): results.sqlite.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/tasks}"
mkdir -p work && tar -xzf "$tasks" -C work || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
status=0

if [ "${PART:-1}" = 2 ]; then
  shift
  timeout "${BENCH_S:-200}" python3 -m pipeline.cli bench --ops activation.silu_and_mul layernorm.rmsnorm \
    moe.route_radix4 --output "$OUT/BENCH.md" > "$OUT/bench.log" 2>&1
  echo "bench exit $?"; tail -8 "$OUT/bench.log"
  TRACK_S="${TRACK_S:-150}" bash "$(dirname "$0")/gpu-track.sh" "$@"  # the census of each release, results.sqlite
  exit $?
fi

python3 -c "from pipeline.sandbox import bwrap; print(bwrap())" > "$OUT/bwrap.txt" 2>&1
cat "$OUT/bwrap.txt"

blocked="attention.topk_transform_paged moe.topk_softmax moe.moe_topk_softmax_out moe.mask_topk_ids
  activation.run_unary_activation"
untried="layernorm.rmsnorm layernorm.rmsnorm_hf layernorm.fused_inplace_qknorm moe.moe_topk_sigmoid_out
  attention.fused_qk_norm_rope_out embeddings.compute_n_gram_ids_decode quantization.per_tensor_quant_fp8
  quantization.hadamard_transform activation.run_activation layernorm.fused_norm_residual"
KERNELSMITH_INTEGRATE__CASE_TIMEOUT_S=60 KERNELSMITH_INTEGRATE__WARM_TIMEOUT_S=150 \
  timeout "${SELF_CHECK_S:-300}" python3 -m pipeline.cli integrate --self-check $blocked $untried 2>&1 \
  | tee "$OUT/self-check.log" | tail -20
status=$((status | $?))
tar -czf "$OUT/selfcheck.tgz" -C work --exclude='integrate/self-check/tree' --exclude='integrate/self-check/cache' \
  integrate/self-check 2>/dev/null

timeout "${TESTS_S:-100}" python3 -m pytest -q -m gpu -p no:cacheprovider -rs --durations=5 \
  tests/test_harness_gpu.py::test_rows_in_no_fixed_order_on_torch_tensors \
  tests/test_harness_gpu.py::test_graph_timing_and_device_ceilings \
  "tests/test_harness_adversarial.py::test_unmodified_baseline_passes" > "$OUT/tests.log" 2>&1
status=$((status | $?))
tail -5 "$OUT/tests.log"

KERNELSMITH_BUDGET__WALL_S="${SEARCH_S:-100}" timeout $(( ${SEARCH_S:-100} + 40 )) python3 -m pipeline.cli optimize \
  --ops layernorm.fused_add_rmsnorm --coder offline --search auto --rounds 2 --run screened > "$OUT/optimize.log" 2>&1
status=$((status | $?))
tail -3 "$OUT/optimize.log"
tar -czf "$OUT/runs.tgz" -C work --exclude='*/src' runs 2>/dev/null
exit $status
