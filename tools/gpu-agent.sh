#!/usr/bin/env bash
# The agent interface tried on the GPU as an outside coder uses it (issue 15 item 5), one device call:
#   RUN=NAME CLIENT=NAME bash tools/gpu-agent.sh TASKS_TARBALL MANIFEST
# MANIFEST is a tab-separated file, one submission a line: OP <tab> RATIONALE <tab> REGION=FILE ...
# (the files are the coder's new region texts; keep them out of git when they derive from SGLang's
# source, e.g. under .dev/). For each line, `kernelsmith agent submit OP --region ... --run $RUN
# --client $CLIENT`; then `agent finish` (final validation of each op's best) and, when a candidate
# was accepted, `kernelsmith integrate --run $RUN --skip-e2e` (SGLang's build and public op).
# Outputs in $OUT: submit-N.json (each verdict as the interface answered it), finish.json,
# integrate.log, run-$RUN.tgz (the run without per-candidate source trees) and agent.log.
# THEN_TESTS="PYTEST ARGS" fills what is left of the call (CALL_S, default 580 s from the start) with
# `pytest -m gpu` over those arguments, output in $OUT/tests.log (e.g. the adversarial kernels:
# THEN_TESTS="tests/test_harness_adversarial.py -k judged_as_expected").
set -o pipefail
started=$(date +%s)
source "$(dirname "$0")/device-setup.sh" || exit 1
source "$(dirname "$0")/manifest.sh"
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/tasks}"
manifest="${2:?a manifest of submissions}"
run="${RUN:-agent}"
client="${CLIENT:-cli}"
unpack_tasks "$tasks" || exit 1
status=0
submit() {  # N OP RATIONALE --region ...
  local n="$1" op="$2" rationale="$3"
  shift 3
  echo "== submit $n: $op" | tee -a "$OUT/agent.log"
  timeout "${SUBMIT_S:-150}" python3 -m cli agent submit "$op" "$@" --rationale "$rationale" \
    --run "$run" --client "$client" > "$OUT/submit-$n.json" 2>> "$OUT/agent.log"
  status=$((status | $?))
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['outcome'], d['speedup_geomean'], d['detail'][:300])" \
    "$OUT/submit-$n.json" 2>/dev/null | tee -a "$OUT/agent.log"
}
each_submission "$manifest" submit
timeout "${FINISH_S:-200}" python3 -m cli agent finish --run "$run" > "$OUT/finish.json" 2>> "$OUT/agent.log"
status=$((status | $?))
tail -c 3000 "$OUT/finish.json"
tar -czf "$OUT/run-$run.tgz" -C work/runs --exclude='*/src' "$run" 2>/dev/null  # before integrate, which may hit its limit
if grep -q '"status": "improved"' "$OUT/finish.json"; then
  timeout "${INTEGRATE_S:-200}" python3 -m cli integrate --run "$run" --skip-e2e > "$OUT/integrate.log" 2>&1
  status=$((status | $?))
  tail -30 "$OUT/integrate.log"
  tar -czf "$OUT/integrate-$run.tgz" -C work --exclude='*/tree' --exclude='*/cache' "integrate/$run" 2>/dev/null
fi
echo "agent run: rc $status, wall $(($(date +%s) - started)) s" | tee -a "$OUT/agent.log"
left=$((${CALL_S:-580} - $(date +%s) + started))
if [ -n "${THEN_TESTS:-}" ] && [ "$left" -gt 40 ]; then
  # shellcheck disable=SC2086  # THEN_TESTS is pytest's words
  timeout "$left" python3 -m pytest -q -m gpu -p no:cacheprovider -rA --durations=0 $THEN_TESTS > "$OUT/tests.log" 2>&1
  echo "tests: rc $?, limit $left s" | tee -a "$OUT/tests.log"
  tail -25 "$OUT/tests.log"
fi
exit $status
