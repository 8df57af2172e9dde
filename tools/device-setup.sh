#!/usr/bin/env bash
# Source this at the start of every command on the GPU machine (device tool):
#   source tools/device-setup.sh
# It installs the carried wheels (.whl/, made by `make device-wheels`) into /tmp/site,
# puts this checkout on PYTHONPATH and seeds work/cache/wheels with the carried
# sglang wheel (.dev/wheels/), so `python3 -m cli ...` runs offline there.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "device-setup: installing the carried wheels failed" >&2; return 1 2>/dev/null || exit 1; }
export PYTHONPATH=/tmp/site:$PWD
export PYTHONUNBUFFERED=1
mkdir -p work/cache/wheels
cp -n .dev/wheels/sglang-*.whl work/cache/wheels/ 2>/dev/null || true
# header-only build dependencies (`make deps`), carried as .dev/deps.tar.gz
if [ ! -d .dev/deps ] && [ -f .dev/deps.tar.gz ]; then tar -xzf .dev/deps.tar.gz -C .dev; fi
if [ -d .dev/deps ]; then export HEADER_DEPS_DIR=$PWD/.dev/deps; fi
ks() { python3 -m cli "$@"; }
# The code a call ran, in $OUT/code.txt: the device copy's git HEAD can lag the working tree it was
# given (2026-12-05: HEAD said 3f9bf6d while 403de63's files ran), so the count of tracked files that
# differ from that HEAD and a digest of them all come too; `tools/code-digest.sh` on the CPU machine
# prints the same digest for the working tree there.
if [ -n "${OUT:-}" ] && [ ! -f "$OUT/code.txt" ]; then
  { echo "HEAD $(git rev-parse --short HEAD 2>/dev/null)"
    echo "tracked files differing from HEAD: $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
    echo "digest $(bash tools/code-digest.sh)"; } > "$OUT/code.txt"
  bash tools/code-digest.sh --files > "$OUT/code-files.txt"
fi
# unpack_tasks TARBALL: work/tasks from a tarball made on the CPU machine, and the GPU's name,
# driver and memory in $OUT/gpu.txt (every figure that comes back says which machine made it)
unpack_tasks() {
  mkdir -p work/runs && tar -xzf "${1:?a tarball of work/tasks}" -C work || return 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "${OUT:-.}/gpu.txt"
}
