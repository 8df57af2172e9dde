#!/usr/bin/env bash
# The H200 measurements of the open issues, one device call (about 9 minutes) per part. After
# session 26 (2026-12-05) issue 14 owes part 7's dispatch round (below): parts 3 and 6 and the rest
# of part 1's sweep ran on the H200 (BENCHMARKS.md section 2, session 25). Kept to measure again:
#   PART=3 bash tools/gpu-owed.sh     # issue 14 item 7: `kernelsmith run` on a wiped work dir, timed
#                                     # (H200: rc 0 in 446 s, a round for each default op). Carry .whl
#                                     # .dev/wheels; RUN_S=560 leaves room.
#   PART=6 bash tools/gpu-owed.sh     # issue 14 item 6 (about 90 s): the floor kernels' figures on this
#                                     # GPU (one stream), tools/stream-probe.py, and `bench --ops
#                                     # moe.mask_topk_ids`. Carry .whl .dev/wheels .dev/tasks-s20.tar.gz
#   Parts 3 and 6 fit one call (about 450 + 50 s; .dev/deps.tar.gz does not fit beside them under
#   the 64 MiB limit, and neither part needs it):
#     RUN_S=480 PART=3 bash tools/gpu-owed.sh; PART=6 bash tools/gpu-owed.sh
#   (part 6's owed-6.tgz then holds part 3's owed-3.tgz)
#   Hand-written candidates (SGLang-derived region files in .dev/agent/) go through tools/gpu-agent.sh;
#   on the CPU machine first `bash tools/agent-check.sh <manifest>`: every submission builds and edits
#   only its op. Session 25's kimi run:
#     RUN=agent-s23k CLIENT=claude SUBMIT_S=120 FINISH_S=80 INTEGRATE_S=100 \
#       bash tools/gpu-agent.sh .dev/tasks-s20.tar.gz .dev/agent/manifest-c4.tsv
#   Session 26's MoE gates (one warp per row for the default path up to 512 experts, GLM-5-Next's 288;
#   built for sm_90a, not yet run): the sigmoid gates (manifest-c5) and the softmax gates, whose merges
#   follow cub's tree so ties match (manifest-c6), one call each, after `make device-prep`:
#     RUN=agent-s26 CLIENT=claude SUBMIT_S=150 FINISH_S=100 INTEGRATE_S=120 \
#       bash tools/gpu-agent.sh .dev/tasks-owed.tar.gz .dev/agent/manifest-c5.tsv
#   (carry .whl .dev/wheels .dev/tasks-owed.tar.gz .dev/agent; RUN=agent-s26b and manifest-c6.tsv next)
#   (.dev/tasks-s20.tar.gz: `tar -czf .dev/tasks-s20.tar.gz -C work tasks/attention.minimax_qknorm_rope
#   tasks/activation.bias_gelu_tanh tasks/moe.mask_topk_ids tasks/lora.kimi_k2_moe_fused_gate
#   tasks/embeddings.compute_n_gram_ids tasks/embeddings.compute_n_gram_ids_decode` after `make device-prep`;
#   carry .whl .dev/wheels .dev/tasks-s20.tar.gz .dev/agent)
#   RUN=dispatch2 PART=7 bash tools/gpu-owed.sh  # issue 14, next (about 4 minutes): the read and write
#                                     # floor kernels' GPU test and the scratch test (case 512 passes with the
#                                     # workspace unwritten), `bench --ops` of the routers under the per-pattern
#                                     # floor, then a search round of specialize_size_dispatch over
#                                     # OWED_DISPATCH_OPS (case 512 for the sigmoid gates) and integrate.
#                                     # Session 26 (H100, 187 s) measured the floors; its round was incorrect
#                                     # on the workspace alone, which is scratch since bf85d5b: run it again
#                                     # after `make device-prep`. Carry .whl .dev/wheels .dev/tasks-owed.tar.gz
#   PART=1 RUN=<new name> bash tools/gpu-owed.sh  # issue 14: a search round over OWED_SWEEP_OPS, then
#                                     # integrate (finished in session 25 as sweep-owed-2 and -3)
#   PART=4 bash tools/gpu-owed.sh     # issue 19 item 6: a search round over OWED_TRITON_OPS (merge_state_triton
#                                     # is done: extract, optimize and integrate, 2026-12-05); RUN=<new name>
#   PART=5 bash tools/gpu-owed.sh RUN_TGZ   # integrate a part-4 run (its owed-4.tgz's run-<name>.tgz), then
#                                     # a new search round over the Triton ops (RUN, default triton-owed-2)
#   PART=2 bash tools/gpu-owed.sh     # issue 16 row 1 + issue 18's `bench --all` (both measured on
#                                     # 2026-12-05; BENCH_S must exceed the three builds, about 100 s cold)
# Hand-written candidates go through tools/gpu-agent.sh (a manifest of region files under .dev/).
# Prepare on the CPU machine first: `make device-prep` (wheels, header deps, the task tarballs of
# tools/owed-tasks.sh). Carry, per part (64 MiB at most):
#   1: .whl .dev/wheels .dev/tasks-owed.tar.gz           (integrate reads the sglang wheel)
#   2: .whl .dev/deps.tar.gz .dev/tasks-all.tar.gz       (tasks carry their sources)
#   3: .whl .dev/wheels
#   4: .whl .dev/wheels .dev/tasks-owed.tar.gz           (the GPU tests extract merge_state_triton themselves)
#   6: .whl .dev/wheels .dev/tasks-s20.tar.gz
#   7: .whl .dev/wheels .dev/tasks-owed.tar.gz
#   5: .whl .dev/wheels .dev/tasks-owed.tar.gz and the run tarball (session 18's: .dev/run-triton-owed.tgz,
#      out of its owed-4.tgz; without it, run PART=4 instead)
# Everything a part writes under $OUT is packed into one owed-<part>.tgz (a call brings back 8 files).
set -o pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/owed.env"
part="${PART:?PART=1 to 7}"
pack() { [ -n "${OUT:-}" ] && tar -czf "/tmp/owed-$part.tgz" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "/tmp/owed-$part.tgz" "$OUT/"; }
trap pack EXIT
OUT="${OUT:-.}"
status=0
case "$part" in
1)
  RUN="${RUN:-sweep-owed}" SKILLS="$OWED_SWEEP_SKILLS" SWEEP_S="${SWEEP_S:-330}" OPS="$OWED_SWEEP_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz
  status=$?
  run_tar="$OUT/run-${RUN:-sweep-owed}.tgz"
  if [ -f "$run_tar" ]; then
    INTEGRATE_S="${INTEGRATE_S:-150}" bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz "$run_tar"
    status=$((status | $?))
  fi
  ;;
2)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-all.tar.gz || exit 1
  # shellcheck disable=SC2086  # the op list is words
  timeout "${BENCH_S:-150}" python3 -m pipeline.cli bench --ops $OWED_BENCH_OPS 2>&1 | tee "$OUT/bench-row1.log" | tail -20
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
  timeout "${RUN_S:-570}" python3 -m pipeline.cli run 2>&1 | tee "$OUT/run.log" | tail -40
  status=$?
  echo "kernelsmith run: rc $status, wall $(($(date +%s) - start)) s" | tee -a "$OUT/run.log"
  tar -czf "$OUT/run-work.tgz" -C work --exclude='*/src' --exclude='*/tree' --exclude=cache . 2>/dev/null
  ;;
4)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-owed.tar.gz || exit 1
  if [ "${TESTS:-0}" = 1 ]; then
    timeout "${TESTS_S:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_triton_library.py \
      2>&1 | tee "$OUT/triton-gpu-tests.log" | tail -15
    status=$?
  fi
  RUN="${RUN:-triton-owed}" SKILLS="" SWEEP_S="${SWEEP_S:-360}" OPS="$OWED_TRITON_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz
  status=$((status | $?))
  ;;
5)
  # $1: a run tarball of an earlier part 4 (its owed-4.tgz's run-<name>.tgz): integrate first, then a new
  # run (RUN, default triton-owed-2) over the Triton ops: its space has program coarsening (cdfe971),
  # which the earlier run's did not, so that run is not resumed
  run_tar="${1:?the run tarball part 4 brought back}"
  RUN="${RUN:-triton-owed-2}" SKILLS="" INTEGRATE_S="${INTEGRATE_S:-200}" SWEEP_S="${SWEEP_S:-240}" \
    OPS="$OWED_TRITON_OPS" bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz "$run_tar"
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
  timeout "${BENCH_S:-150}" python3 -m pipeline.cli bench --ops moe.mask_topk_ids 2>&1 | tee "$OUT/bench-mask.log" | tail -20
  status=$?
  git diff BENCHMARKS.md > "$OUT/bench-mask.diff"
  cp work/cache/device/*.json "$OUT/" 2>/dev/null
  ;;
7)
  source "$here/device-setup.sh" || exit 1
  unpack_tasks .dev/tasks-owed.tar.gz || exit 1
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -k "floor_copy or read_and_write_streams or scratch" \
    tests/test_harness_gpu.py 2>&1 | tee "$OUT/floor-tests.log" | tail -5
  status=$?
  # shellcheck disable=SC2086  # the op list is words
  timeout "${BENCH_S:-150}" python3 -m pipeline.cli bench --ops $OWED_DISPATCH_OPS moe.topk_softmax 2>&1 \
    | tee "$OUT/bench-patterns.log" | tail -12
  status=$((status | $?))
  git diff BENCHMARKS.md > "$OUT/bench-patterns.diff"
  cp work/cache/device/*.json "$OUT/" 2>/dev/null
  RUN="${RUN:-dispatch}" SKILLS="specialize_size_dispatch" SWEEP_S="${SWEEP_S:-200}" OPS="$OWED_DISPATCH_OPS" \
    bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz
  status=$((status | $?))
  run_tar="$OUT/run-${RUN:-dispatch}.tgz"
  if [ -f "$run_tar" ]; then
    INTEGRATE_S="${INTEGRATE_S:-120}" bash "$here/gpu-sweep.sh" .dev/tasks-owed.tar.gz "$run_tar"
    status=$((status | $?))
  fi
  ;;
*)
  echo "gpu-owed: PART must be 1 to 7, not '$part'" >&2
  exit 2
  ;;
esac
exit $status
