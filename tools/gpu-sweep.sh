#!/usr/bin/env bash
# One search round per op over many ops, then integrate's proof of what was accepted, in one
# device call (issue 14 item 8):
#   RUN=NAME SKILLS=ID,ID OPS="op op ..." bash tools/gpu-sweep.sh TASKS_TARBALL [RUN_TARBALL]
# 1. with RUN_TARBALL (the run-<name>.tgz an earlier call wrote), `kernelsmith integrate --run
#    <name> --skip-e2e` on that run's accepted candidates first: each one patched into SGLang's
#    tree and checked through SGLang's own build and public op (INTEGRATE_S);
# 2. `kernelsmith optimize --ops $OPS --coder offline --search auto --rounds 1 --skills $SKILLS
#    --run $RUN` (SKILLS empty: every skill; SWEEP_S: the run's wall budget; the step's limit is
#    a minute more, and a step stopped by it keeps what it recorded: SIGTERM unwinds and a rerun
#    resumes);
# 3. $OUT/run-$RUN.tgz (the run without its per-candidate source trees, packed as <run>/...,
#    so the next call can pass it as RUN_TARBALL) and the logs.
# Carry .whl, .dev/wheels and the tarballs. Nsight Compute is off (NCU=1 turns it on): the PDL
# family's rules read no ncu figure, and ncu's replay costs device time a sweep needs.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/tasks}"
run_tar="${2:-}"
unpack_tasks "$tasks" || exit 1
status=0

if [ -n "$run_tar" ]; then
  prior=$(tar -tzf "$run_tar" | head -1 | cut -d/ -f1)
  tar -xzf "$run_tar" -C work/runs || exit 1
  timeout "${INTEGRATE_S:-240}" python3 -m cli integrate --run "$prior" --skip-e2e 2>&1 \
    | tee "$OUT/integrate-$prior.log" | tail -30
  status=$((status | $?))
  tar -czf "$OUT/integrate-$prior.tgz" -C work --exclude='*/tree' --exclude='*/cache' "integrate/$prior" 2>/dev/null
fi

if [ -n "${OPS:-}" ]; then
  run="${RUN:?RUN names the run of the sweep}"
  seconds="${SWEEP_S:-420}"
  # shellcheck disable=SC2086  # OPS is a list of op ids
  KERNELSMITH_BUDGET__WALL_S="$seconds" KERNELSMITH_SEARCH__EVALS_PER_ROUND="${EVALS:-16}" \
    KERNELSMITH_HARNESS__NCU_PROFILE="$([ "${NCU:-0}" = 1 ] && echo true || echo false)" \
    timeout $((seconds + 60)) python3 -m cli optimize --ops $OPS --coder offline --search auto \
    --rounds 1 ${SKILLS:+--skills "$SKILLS"} --run "$run" > "$OUT/optimize-$run.log" 2>&1
  status=$((status | $?))
  tail -30 "$OUT/optimize-$run.log"
  tar -czf "$OUT/run-$run.tgz" -C work/runs --exclude='*/src' "$run" 2>/dev/null
fi
exit $status
