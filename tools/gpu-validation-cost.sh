#!/usr/bin/env bash
# What the judge's checks cost, this code against an older one on the same GPU, in one device call:
#   BASE=.dev/base-bbc4814.tar.gz bash tools/gpu-validation-cost.sh .dev/tasks-cost.tar.gz
# BASE is `git archive <rev> --format=tar.gz -o .dev/base-<rev>.tar.gz` of the code to compare with;
# the tarball holds work/index.json and work/tasks/<op> for OPS (default: layernorm.fused_add_rmsnorm
# activation.silu_and_mul), made here with `kernelsmith extract --ops ...` (both codes read the same
# task schema). Each code runs `optimize --coder offline --rounds 1 --search off` on OPS in a work
# dir of its own, this code first, then the base, then this code again (so a first-run warm-up shows
# as a difference between the two runs of this code). The final validation's cost is each op's best
# evaluation's `seconds` (test, profile, each sanitizer, worker overhead) and its sum; the wall time
# of each whole command is there too. Each run is cut at RUN_S (default 170 s) and keeps what it wrote.
# Outputs in $OUT: cost.tsv (run, code, op, phase, seconds), cost-<run>.log, gpu.txt, code.txt.
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tasks="${1:?a tarball of work/index.json and work/tasks}"
base="${BASE:?BASE names a git archive of the code to compare with}"
ops="${OPS:-layernorm.fused_add_rmsnorm activation.silu_and_mul}"
here=$PWD
mkdir -p /tmp/base && tar -xzf "$base" -C /tmp/base || exit 1
printf 'run\tcode\top\tphase\tseconds\n' > "$OUT/cost.tsv"
status=0

one() {  # one RUN_NAME CODE_DIR LABEL
  local name=$1 code=$2 label=$3 work=/tmp/work-$1
  rm -rf "$work" && mkdir -p "$work/cache" && tar -xzf "$here/$tasks" -C "$work" || return 1
  ln -s "$here/work/cache/wheels" "$work/cache/wheels"
  local start=$(date +%s)
  # shellcheck disable=SC2086  # ops is a list of op ids
  local entry=cli; [ -d "$code/cli" ] || entry=pipeline.cli  # the command line's module before the cli/ floor
  (cd "$code" && PYTHONPATH=/tmp/site:$code timeout "${RUN_S:-170}" python3 -m $entry optimize \
    --work-dir "$work" --run cost --coder offline --rounds 1 --search off --ops $ops) > "$OUT/cost-$name.log" 2>&1
  local rc=$?
  status=$((status | rc))
  printf '%s\t%s\t(all)\twall\t%s\n' "$name" "$label" "$(($(date +%s) - start))" >> "$OUT/cost.tsv"
  python3 - "$work/runs/cost" "$name" "$label" >> "$OUT/cost.tsv" <<'EOF'
import json, pathlib, sys
run, name, label = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
for ev in sorted(run.glob("*/best/evaluation.json")):
    seconds = json.loads(ev.read_text()).get("seconds", {})
    for phase, s in seconds.items():
        print(f"{name}\t{label}\t{ev.parent.parent.name}\t{phase}\t{s}")
    print(f"{name}\t{label}\t{ev.parent.parent.name}\tfinal validation (sum)\t{round(sum(seconds.values()), 3)}")
EOF
  tail -5 "$OUT/cost-$name.log"
}

one head-1 "$here" "this code"
one base /tmp/base "base $(basename "$base" .tar.gz)"
one head-2 "$here" "this code"
column -t -s $'\t' "$OUT/cost.tsv"
exit $status
