#!/usr/bin/env bash
# On a multi-GPU machine (nvidia-h200-x2 or larger), one device call: the census of the same
# ops on 1 GPU, then on every GPU of the host (optimize.scale: one lane per GPU), with the
# wall time of each, the speed-up, and whether every (op, shape) figure agrees between the two
# within the noise band (max(harness.noise_pct, 2 x the larger spread)): each GPU is timed alone.
#   bash tools/gpu-scale.sh .dev/tasks-all.tar.gz
# The tarball: `tar -czf .dev/tasks-all.tar.gz -C <work dir> tasks` of an `extract --all
# --no-compile` made on the CPU machine. SCALE_OPS (default 32) real-shaped ops are taken in name
# order; SCALE_S (default 270) bounds each census. Each census has a work folder of its own, so
# neither resumes from the other and both build from a cold cache. Everything comes back in one
# tarball: $OUT/gpu-scale.tgz (gpu.txt, both logs and results stores, scale.json, scale.md).
set -o pipefail
source "$(dirname "$0")/device-setup.sh" || exit 1
OUT="${OUT:-.}"
tarball="${1:?usage: gpu-scale.sh TASKS.tar.gz}"
stage=$(mktemp -d)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$stage/gpu.txt"
gpus=$(nvidia-smi -L | wc -l)
mkdir -p "$stage/unpacked" && tar -xzf "$tarball" -C "$stage/unpacked"
ops=$(python3 - "$stage/unpacked" "${SCALE_OPS:-32}" <<'PY'
import pathlib, sys
from bench.census import real_shaped
root = pathlib.Path(sys.argv[1])
root = root / "tasks" if (root / "tasks").is_dir() else root
print(" ".join(folder.name for folder, _ in real_shaped(root)[: int(sys.argv[2])]))
PY
)
echo "$(wc -w <<< "$ops") ops, $gpus GPUs"
run() {  # run NAME GPUS-FLAG...: one census, its wall time in NAME.wall_s
  local name=$1; shift
  local start=$(date +%s.%N)
  timeout "${SCALE_S:-270}" python3 -m cli track run --work-dir "$stage/$name" --tasks "$tarball" \
    --ops $ops "$@" > "$stage/$name.log" 2>&1
  local status=$?
  python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$start" "$(date +%s.%N)" \
    > "$stage/$name.wall_s"
  cp "$stage/$name/results/results.sqlite" "$stage/$name.sqlite" 2>/dev/null
  echo "$name: exit $status, $(cat "$stage/$name.wall_s") s; $(tail -1 "$stage/$name.log")"
  return $status
}
run one-gpu --gpus 0
status=$?
run all-gpus
status=$((status | $?))
python3 - "$stage" "$gpus" <<'PY'
import json, pathlib, sys
from pipeline.config import HarnessConfig
from pipeline.store import ResultsStore

stage, gpus = pathlib.Path(sys.argv[1]), int(sys.argv[2])
noise = HarnessConfig().noise_pct

def figures(name):
    work = stage / name
    if not (work / "results" / "results.sqlite").is_file():
        return {}
    return {(r.op_id, r.dtype, r.shape): (r.time_us, r.spread_pct or 0.0)
            for _, _, r in ResultsStore(work).history() if r.variant == "baseline"}

one, wide = figures("one-gpu"), figures("all-gpus")
rows, outside = [], []
for key in sorted(set(one) & set(wide)):
    (a, sa), (b, sb) = one[key], wide[key]
    band = max(noise, 2 * max(sa, sb))
    diff = 100.0 * (b - a) / a
    rows.append({"op": key[0], "dtype": key[1], "shape": key[2], "one_gpu_us": a, "all_gpus_us": b,
                 "diff_pct": round(diff, 2), "band_pct": round(band, 2), "agrees": abs(diff) <= band})
    if abs(diff) > band:
        outside.append(rows[-1])
wall = {n: float((stage / f"{n}.wall_s").read_text()) for n in ("one-gpu", "all-gpus")}
summary = {
    "gpus": gpus, "wall_s": wall, "speedup": round(wall["one-gpu"] / wall["all-gpus"], 2) if wall["all-gpus"] else None,
    "ops_one_gpu": len({k[0] for k in one}), "ops_all_gpus": len({k[0] for k in wide}),
    "shapes_compared": len(rows), "shapes_outside_band": len(outside), "only_one_gpu": len(set(one) - set(wide)),
    "only_all_gpus": len(set(wide) - set(one)), "noise_pct": noise,
}
(stage / "scale.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
lines = [f"Census of {summary['ops_one_gpu']} / {summary['ops_all_gpus']} ops: 1 GPU {wall['one-gpu']:.0f} s, "
         f"{gpus} GPUs {wall['all-gpus']:.0f} s, speed-up {summary['speedup']}x; {len(rows)} (op, shape) figures "
         f"compared, {len(outside)} outside the noise band", "",
         "| op | dtype | shape | 1 GPU µs | all GPUs µs | diff % | band % |", "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
lines += [f"| {r['op']} | {r['dtype']} | {r['shape']} | {r['one_gpu_us']:.2f} | {r['all_gpus_us']:.2f} | "
          f"{r['diff_pct']:+.1f} | {r['band_pct']:.1f} |" for r in (outside or rows[:20])]
(stage / "scale.md").write_text("\n".join(lines) + "\n")
print(lines[0])
PY
tar -czf "$OUT/gpu-scale.tgz" -C "$stage" gpu.txt one-gpu.log all-gpus.log one-gpu.wall_s all-gpus.wall_s \
  $(cd "$stage" && ls one-gpu.sqlite all-gpus.sqlite scale.json scale.md 2>/dev/null)
exit $status
