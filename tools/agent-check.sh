#!/usr/bin/env bash
# Before a device call, on the CPU machine: every submission of a tools/gpu-agent.sh manifest built
# as the harness would build it (`kernelsmith agent build`: nvcc for sm_90a, the task's recipe) and
# checked for edits to other ops' code, which `agent submit` refuses (optimize.reach). No GPU time
# goes to a candidate that does not compile or would be refused.
#   bash tools/agent-check.sh MANIFEST      (the tasks in ./work/tasks, e.g. after `make device-prep`)
# Prints one line per submission; exits 1 when any fails.
set -uo pipefail
cd "$(dirname "$0")/.."
manifest="${1:?a manifest of submissions (OP <tab> RATIONALE <tab> REGION=FILE ...)}"
ks="${KS:-.venv/bin/kernelsmith}"
source tools/manifest.sh
status=0
check() {  # N OP RATIONALE --region ...
  local n="$1" op="$2" answer verdict rc
  shift 3
  answer=$("$ks" agent build "$op" "$@" 2>&1)
  verdict=$(printf '%s' "$answer" | python3 -c '
import json, sys
text = sys.stdin.read()
try:
    d = json.loads(text)
except ValueError:
    print("FAILED: " + (text.strip().splitlines() or ["no answer"])[-1][:300]); sys.exit(1)
bad = (not d["ok"]) or bool(d["foreign"])
lines = d["errors"].strip().splitlines() or [""]
first = next((l for l in lines if "error" in l), lines[0])
why = "builds" if d["ok"] else "does not build: " + first.strip()[:200]
print(("FAILED: " if bad else "ok: ") + why + ("; edits other ops code: " + ", ".join(d["foreign"]) if d["foreign"] else ""))
sys.exit(1 if bad else 0)')
  rc=$?
  echo "$n $op: $verdict"
  [ $rc -ne 0 ] && status=1
}
each_submission "$manifest" check
exit $status
