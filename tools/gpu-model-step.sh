#!/usr/bin/env bash
# Kernel wins judged where users feel it, in one device call:
#   OPS="op ..." RUN=NAME AA_RUNS=3 bash tools/gpu-model-step.sh TASKS_TARBALL
# 1. with OPS, `kernelsmith run --run $RUN --ops $OPS`: optimize's final validation judges the best at
#    every other op that runs the code it changes (optimize.reach_ops); integrate checks those ops
#    through SGLang too and times the layer recipe with the A/A copy and each changed step in context
#    (RUN_S, default 480 s; a step stopped by it keeps what it wrote, and the same RUN resumes);
#    with RUN and no OPS, `kernelsmith integrate --run $RUN` alone, on a run the tarball carries
#    (work/runs/$RUN, made by an earlier call's run.tgz); with FROM="RUN1 RUN2 ..." too, the one build
#    of everything: `kernelsmith integrate --run $RUN --from $FROM` (every accepted candidate at once);
# 2. with AA_RUNS, `python -m integrate.e2e --pristine --runs $AA_RUNS`: the pristine tree against
#    itself, the A/A evidence for the layer proxy's band (AA_S, default 240 s; each run's record is
#    written as it ends); AA_RECIPE names another layer recipe (e.g. integrate/layers/qwen3-235b-a22b.toml);
#    AA_SHIFT=1 moves each round's buffers elsewhere in memory (--shift-placement); each record keeps
#    every tree's median per round (rows[].rounds_us), which tells a steady per-process offset from scatter;
# 3. with GPU_TESTS (pytest arguments), those GPU tests (TESTS_S, default 200 s), e.g.
#    GPU_TESTS='tests/test_harness_adversarial.py -k "skip_when_answered or fused_race or honest"'.
# The tarball holds work/index.json and work/tasks/<op> for OPS (made on the CPU machine: `kernelsmith
# extract --ops ...`, then `tar -czf X -C work index.json tasks/<op> ...`); carry .whl and .dev/wheels.
# Outputs in $OUT: run.log, run.tgz (the run and integrate records, without src/, the trees and
# the caches; candidates hold SGLang-derived text: keep them under work/, never commit them), aa.log, aa.tgz, tests.log, gpu.txt, code.txt.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
unpack_tasks "${1:?a tarball of work/index.json and work/tasks}" || exit 1
status=0

if [ -n "${OPS:-}" ]; then
  run="${RUN:?RUN names the run}"
  start=$(date +%s)
  # shellcheck disable=SC2086  # OPS is a list of op ids
  timeout "${RUN_S:-480}" python3 -m cli run --run "$run" --ops $OPS > "$OUT/run.log" 2>&1
  status=$((status | $?))
  echo "kernelsmith run: $(($(date +%s) - start)) s wall" | tee -a "$OUT/run.log"
  tail -40 "$OUT/run.log"
  tar -czf "$OUT/run.tgz" -C work --exclude='src' --exclude='tree' --exclude='tree-aa' --exclude='cache' \
    "runs/$run" "integrate/$run" 2>/dev/null
elif [ -n "${RUN:-}" ]; then
  start=$(date +%s)
  # shellcheck disable=SC2086  # FROM is a list of run names
  timeout "${RUN_S:-480}" python3 -m cli integrate --run "$RUN" ${FROM:+--from $FROM} > "$OUT/run.log" 2>&1
  status=$((status | $?))
  echo "kernelsmith integrate: $(($(date +%s) - start)) s wall" | tee -a "$OUT/run.log"
  tail -40 "$OUT/run.log"
  tar -czf "$OUT/run.tgz" -C work --exclude='src' --exclude='tree' --exclude='tree-aa' --exclude='cache' \
    "integrate/$RUN" ${FROM:+"runs/$RUN/merged.json"} 2>/dev/null
fi

if [ "${AA_RUNS:-0}" != 0 ]; then
  timeout "${AA_S:-240}" python3 -m integrate.e2e --pristine --runs "$AA_RUNS" ${AA_RECIPE:+--recipe "$AA_RECIPE"} \
    ${AA_SHIFT:+--shift-placement} \
    > "$OUT/aa.log" 2>&1
  status=$((status | $?))
  tail -30 "$OUT/aa.log"
  tar -czf "$OUT/aa.tgz" -C work --exclude='cache' --exclude='tree-aa' $(cd work && ls -d integrate/pristine*) 2>/dev/null
fi

if [ -n "${GPU_TESTS:-}" ]; then
  eval "timeout -s INT -k 30 ${TESTS_S:-200} python3 -m pytest -q -m gpu -p no:cacheprovider -rs $GPU_TESTS" > "$OUT/tests.log" 2>&1
  status=$((status | $?))
  tail -15 "$OUT/tests.log"
fi
exit $status
