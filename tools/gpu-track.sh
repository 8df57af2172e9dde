#!/usr/bin/env bash
# On the GPU machine, one device call: the census of each carried release.
#   bash tools/gpu-track.sh .dev/track/tasks-0.5.20.tar.gz ... .dev/track/tasks-0.5.23.tar.gz
# Carry .whl and the tarballs (tools/track-tasks.sh), oldest release first. Each release gets
# TRACK_S seconds (default 120). OPS="op op ...": only these ops (`track run --ops`). STORE=FILE:
# a results.sqlite an earlier call brought back, copied in first, so the census resumes: ops a
# release already has in the store are not timed again (carry the file too). The results store and each census log come back in $OUT; the
# dashboard and the regressions are made on the CPU machine from that store (asv and
# matplotlib live there): mkdir -p W/results && cp $OUT/results.sqlite W/results/ &&
# kernelsmith track --work-dir W --html W/dashboard
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${STORE:-}" ]; then mkdir -p work/results && cp "$STORE" work/results/results.sqlite || exit 1; fi
status=0
for tarball in "$@"; do
  name=$(basename "$tarball" .tar.gz)
  # shellcheck disable=SC2086  # OPS is a list of op ids
  timeout "${TRACK_S:-120}" python3 -m pipeline.cli track run --tasks "$tarball" ${OPS:+--ops $OPS} \
    > "$OUT/$name.log" 2>&1
  status=$((status | $?))
  tail -2 "$OUT/$name.log"
done
cp work/results/results.sqlite "$OUT/" 2>/dev/null
# each batch as JSON lines (harness.history_dir): copy them into the repository's history/census/ and commit
mkdir -p "$OUT/history" && cp history/census/*.jsonl "$OUT/history/" 2>/dev/null
exit $status
