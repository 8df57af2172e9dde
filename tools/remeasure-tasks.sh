#!/usr/bin/env bash
# The CPU half of tools/gpu-remeasure.sh (`make device-prep` runs it after device-wheels and deps):
# every CUDA task (`extract --all --no-compile`, about 90 s on 2 cores) packed as
# .dev/tasks-all.tar.gz (part 3's coverage sweep), and the ops of tools/remeasure.env as
# .dev/tasks-remeasure.tar.gz (parts 1 and 4), so the GPU machine spends no device time extracting.
# Prints each tarball's size: a call carries at most 64 MiB (the wheels take about 57).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/remeasure.env
ks="${KS:-.venv/bin/kernelsmith}"
"$ks" extract --all --no-compile | grep "^coverage:"
# shellcheck disable=SC2086  # the op lists are words
"$ks" extract --no-compile --ops $REMEASURE_TRITON_OPS | grep "no task" || true
mkdir -p .dev
# the CUDA tasks only (the coverage count is of CUDA tasks; an earlier Triton extract may have left some)
cuda=$(cd work && grep -l '"language": "cuda"' tasks/*/task.json | xargs -n1 dirname)
# shellcheck disable=SC2086  # folder names are words
tar -czf .dev/tasks-all.tar.gz -C work $cuda
# shellcheck disable=SC2086  # the op lists are words
ops=$(printf '%s\n' $REMEASURE_SWEEP_OPS $REMEASURE_BENCH_OPS $REMEASURE_TRITON_OPS $REMEASURE_DISPATCH_OPS | sort -u)
missing=$(for op in $ops; do [ -f "work/tasks/$op/task.json" ] || echo "$op"; done)
if [ -n "$missing" ]; then
  echo "remeasure-tasks: no task for: $missing (see work/coverage.json); fix tools/remeasure.env" >&2
  exit 1
fi
# shellcheck disable=SC2086
tar -czf .dev/tasks-remeasure.tar.gz -C work $(for op in $ops; do echo "tasks/$op"; done)
du -h .dev/tasks-all.tar.gz .dev/tasks-remeasure.tar.gz
