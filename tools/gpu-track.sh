#!/usr/bin/env bash
# On the GPU machine, one device call: the census of each carried release.
#   bash tools/gpu-track.sh .dev/track/tasks-0.5.20.tar.gz ... .dev/track/tasks-0.5.23.tar.gz
# Carry .whl and the tarballs (tools/track-tasks.sh), oldest release first; not the sglang wheel
# (CUDA census tasks are standalone), so four or five releases fit the 64 MiB. Each release gets
# TRACK_S seconds (default 120). OPS="op op ...": only these ops (`track run --ops`). The store starts
# as the repository's history/census/ (`track rebuild`), so the census resumes: ops a release already
# has there are not timed again. STORE=FILE: a results.sqlite an earlier call brought back, copied
# in instead (carry the file too). The results store, the batches new in this call (JSON lines) and
# each census log come back in $OUT; the
# dashboard and the regressions are made on the CPU machine from that store (asv and
# matplotlib live there): mkdir -p W/results && cp $OUT/results.sqlite W/results/ &&
# kernelsmith track --work-dir W --html W/dashboard
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${STORE:-}" ]; then
  mkdir -p work/results && cp "$STORE" work/results/results.sqlite || exit 1
else
  python3 -m cli track rebuild --history history/census | tail -1
fi
ls history/census/*.jsonl 2>/dev/null | sort > /tmp/history-before.txt
status=0
for tarball in "$@"; do
  name=$(basename "$tarball" .tar.gz)
  # shellcheck disable=SC2086  # OPS is a list of op ids
  timeout "${TRACK_S:-120}" python3 -m cli track run --tasks "$tarball" ${OPS:+--ops $OPS} \
    > "$OUT/$name.log" 2>&1
  status=$((status | $?))
  tail -2 "$OUT/$name.log"
done
cp work/results/results.sqlite "$OUT/" 2>/dev/null
# the batches this call added, as JSON lines (harness.history_dir): copy them into history/census/ and commit
mkdir -p "$OUT/history"
ls history/census/*.jsonl 2>/dev/null | sort | comm -13 /tmp/history-before.txt - | xargs -r cp -t "$OUT/history/"
exit $status
