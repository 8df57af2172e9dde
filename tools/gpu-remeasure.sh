#!/usr/bin/env bash
# Measures again the figures BENCHMARKS.md quotes from it, one device call (at most 10 minutes) per part:
#   PART=1 RUN=<name> bash tools/gpu-remeasure.sh   # a search round over REMEASURE_SWEEP_OPS with
#                                                   # REMEASURE_SWEEP_SKILLS, then integrate of the run
#                                                   # a call before made (section 2, "The runs behind these figures")
#   PART=2 bash tools/gpu-remeasure.sh   # `bench --ops REMEASURE_BENCH_OPS` with a baseline that fails
#                                        # (section 4) and `bench --all` (section 7; BENCH_S must exceed
#                                        # three builds, about 100 s cold)
#   PART=3 bash tools/gpu-remeasure.sh   # `kernelsmith run` with the defaults on a wiped work folder, timed
#                                        # (section 2, "Item 7"; RUN_S=560 leaves room)
#   PART=4 RUN=<name> bash tools/gpu-remeasure.sh   # the Triton GPU tests and a search round over
#                                                   # REMEASURE_TRITON_OPS (section 6)
#   PART=5 bash tools/gpu-remeasure.sh RUN_TGZ   # integrate a part-4 run (its part-4.tgz's run-<name>.tgz),
#                                                # then a new search round over the Triton ops
#   PART=6 bash tools/gpu-remeasure.sh   # the floor kernels' figures on this GPU (one stream),
#                                        # tools/stream-probe.py and `bench --ops moe.mask_topk_ids` (section 7)
#   PART=7 RUN=<name> bash tools/gpu-remeasure.sh   # the read and write floor kernels' GPU test, the scratch
#                                                   # test, `bench --ops` of the routers under the per-pattern
#                                                   # floor, a round of specialize_size_dispatch over
#                                                   # REMEASURE_DISPATCH_OPS, and integrate (section 7, "Floors")
# Parts 3 and 6 fit one call: RUN_S=480 PART=3 bash tools/gpu-remeasure.sh; PART=6 bash tools/gpu-remeasure.sh
# (part 6's part-6.tgz then holds part 3's part-3.tgz). Hand-written candidates go through
# tools/gpu-agent.sh (a manifest of region files under .dev/; `bash tools/agent-check.sh <manifest>` on
# the CPU machine first).
# Prepare on the CPU machine: `make device-prep` (wheels, header deps, the task tarballs of
# tools/remeasure-tasks.sh; tools/remeasure.env names the ops). Carry, per part (64 MiB at most):
#   1, 4, 7: .whl .dev/wheels .dev/tasks-remeasure.tar.gz
#   2: .whl .dev/deps.tar.gz .dev/tasks-all.tar.gz       (tasks carry their sources)
#   3: .whl .dev/wheels
#   5: .whl .dev/wheels .dev/tasks-remeasure.tar.gz and the run tarball of a part-4 call
#   6: .whl .dev/wheels .dev/tasks-s20.tar.gz (`tar -czf .dev/tasks-s20.tar.gz -C work tasks/<op> ...` of
#      attention.minimax_qknorm_rope activation.bias_gelu_tanh moe.mask_topk_ids lora.kimi_k2_moe_fused_gate
#      embeddings.compute_n_gram_ids embeddings.compute_n_gram_ids_decode)
# Everything a part writes under $OUT is packed into one part-<part>.tgz (a call brings back 8 files).
set -o pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/remeasure.env"
part="${PART:?PART=1 to 7}"
pack() { [ -n "${OUT:-}" ] && tar -czf "/tmp/part-$part.tgz" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "/tmp/part-$part.tgz" "$OUT/"; }
trap pack EXIT
OUT="${OUT:-.}"
status=0
case "$part" in
1)
  RUN="${RUN:-sweep}" SKILLS="$REMEASURE_SWEEP_SKILLS" SWEEP_S="${SWEEP_S:-330}" OPS="$REMEASURE_SWEEP_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz
  status=$?
  run_tar="$OUT/run-${RUN:-sweep}.tgz"
  if [ -f "$run_tar" ]; then
    INTEGRATE_S="${INTEGRATE_S:-150}" bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz "$run_tar"
    status=$((status | $?))
  fi
  ;;
2)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-all.tar.gz || exit 1
  # shellcheck disable=SC2086  # the op list is words
  timeout "${BENCH_S:-150}" python3 -m cli bench --ops $REMEASURE_BENCH_OPS 2>&1 | tee "$OUT/bench-row1.log" | tail -20
  status=$?
  cp BENCHMARKS.md "$OUT/BENCHMARKS-row1.md"
  KERNELSMITH_HARNESS__SWEEP_BUDGET_S="${SWEEP_BUDGET_S:-300}" SWEEP_TIMEOUT_S="${SWEEP_TIMEOUT_S:-380}" \
    bash "$here/gpu-coverage.sh" .dev/tasks-all.tar.gz
  status=$((status | $?))
  cp work/results/results.sqlite "$OUT/" 2>/dev/null
  ;;
3)
  source "$here/device-setup.sh" || exit 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
  rm -rf work/tasks work/runs work/integrate work/bench work/index.json
  start=$(date +%s)
  timeout "${RUN_S:-570}" python3 -m cli run 2>&1 | tee "$OUT/run.log" | tail -40
  status=$?
  echo "kernelsmith run: rc $status, wall $(($(date +%s) - start)) s" | tee -a "$OUT/run.log"
  tar -czf "$OUT/run-work.tgz" -C work --exclude='*/src' --exclude='*/tree' --exclude=cache . 2>/dev/null
  ;;
4)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-remeasure.tar.gz || exit 1
  if [ "${TESTS:-0}" = 1 ]; then
    timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_triton_library.py \
      2>&1 | tee "$OUT/triton-gpu-tests.log" | tail -15
    status=$?
  fi
  RUN="${RUN:-triton}" SKILLS="" SWEEP_S="${SWEEP_S:-360}" OPS="$REMEASURE_TRITON_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz
  status=$((status | $?))
  ;;
5)
  # $1: a run tarball of an earlier part 4 (its part-4.tgz's run-<name>.tgz): integrate first, then a new
  # run (RUN, default triton-2) over the Triton ops: its space has program coarsening (cdfe971),
  # which the earlier run's did not, so that run is not resumed
  run_tar="${1:?the run tarball part 4 brought back}"
  RUN="${RUN:-triton-2}" SKILLS="" INTEGRATE_S="${INTEGRATE_S:-200}" SWEEP_S="${SWEEP_S:-240}" \
    OPS="$REMEASURE_TRITON_OPS" bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz "$run_tar"
  status=$?
  if [ "${TESTS:-0}" = 1 ]; then
    timeout "${TESTS_S:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_integrate_triton.py \
      2>&1 | tee "$OUT/integrate-triton-gpu-tests.log" | tail -15
    status=$((status | $?))
  fi
  ;;
6)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-s20.tar.gz || exit 1
  timeout 60 python3 "$here/stream-probe.py" 2>&1 | tee "$OUT/stream-probe.txt"
  timeout "${BENCH_S:-150}" python3 -m cli bench --ops moe.mask_topk_ids 2>&1 | tee "$OUT/bench-mask.log" | tail -20
  status=$?
  git diff BENCHMARKS.md > "$OUT/bench-mask.diff"
  cp work/cache/device/*.json "$OUT/" 2>/dev/null
  ;;
7)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-remeasure.tar.gz || exit 1
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "floor_copy or read_and_write_streams or scratch" \
    tests/test_harness_gpu.py 2>&1 | tee "$OUT/floor-tests.log" | tail -5
  status=$?
  # shellcheck disable=SC2086  # the op list is words
  timeout "${BENCH_S:-150}" python3 -m cli bench --ops $REMEASURE_DISPATCH_OPS moe.topk_softmax 2>&1 \
    | tee "$OUT/bench-patterns.log" | tail -12
  status=$((status | $?))
  git diff BENCHMARKS.md > "$OUT/bench-patterns.diff"
  cp work/cache/device/*.json "$OUT/" 2>/dev/null
  RUN="${RUN:-dispatch}" SKILLS="specialize_size_dispatch" SWEEP_S="${SWEEP_S:-200}" OPS="$REMEASURE_DISPATCH_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz
  status=$((status | $?))
  run_tar="$OUT/run-${RUN:-dispatch}.tgz"
  if [ -f "$run_tar" ]; then
    INTEGRATE_S="${INTEGRATE_S:-120}" bash "$here/gpu-sweep.sh" .dev/tasks-remeasure.tar.gz "$run_tar"
    status=$((status | $?))
  fi
  ;;
*)
  echo "gpu-remeasure: PART must be 1 to 7, not '$part'" >&2
  exit 2
  ;;
esac
exit $status
