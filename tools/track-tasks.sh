#!/usr/bin/env bash
# On the CPU machine: tasks of several SGLang releases for `kernelsmith track run` on the GPU
# (issue 17), one tarball each, so the GPU spends no time extracting:
#   bash tools/track-tasks.sh 0.5.23 0.5.22 0.5.21 0.5.20      -> .dev/track/tasks-<version>.tar.gz
# Each release is extracted with `kernelsmith extract --all --no-compile` from its PyPI wheel
# (about 3 min each on 2 cores); a release that fails to extract is reported and skipped.
set -uo pipefail
ks="${KS:-.venv/bin/kernelsmith}"
mkdir -p .dev/track
for version in "$@"; do
  work=$(mktemp -d)
  if "$ks" extract --all --no-compile --sglang-version "$version" --work-dir "$work" > ".dev/track/extract-$version.log" 2>&1; then
    tar -czf ".dev/track/tasks-$version.tar.gz" -C "$work" tasks
    echo "$version: $(ls "$work/tasks" | wc -l) tasks -> .dev/track/tasks-$version.tar.gz ($(du -h ".dev/track/tasks-$version.tar.gz" | cut -f1))"
  else
    echo "$version: extract failed, see .dev/track/extract-$version.log" >&2
  fi
  rm -rf "$work"
done
