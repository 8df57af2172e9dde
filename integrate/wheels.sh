#!/usr/bin/env bash
# Download, into .whl/ at the repository root, the wheels (CPython 3.12, x86-64) that the GPU
# machine lacks for importing SGLang's JIT op modules and loading what load_jit builds.
# Exactly the set in integrate/sglang_runner.py:GPU_WHEELS (a test keeps the two equal);
# integrate/README.md says how the set was found.
#
# On the GPU machine, carry .whl and start the command with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
tool="${DEVICE_WHEELS:-}"
if [ -z "$tool" ]; then
  for candidate in shared/tools/device-wheels ../shared/tools/device-wheels /work/shared/tools/device-wheels; do
    if [ -x "$candidate" ]; then tool="$candidate"; break; fi
  done
fi
[ -n "$tool" ] || { echo "device-wheels not found; set DEVICE_WHEELS=/path/to/device-wheels" >&2; exit 2; }
exec "$tool" \
  apache-tvm-ffi==0.1.11 \
  msgspec==0.23.0 \
  orjson==3.13.0 \
  pybase64==1.5.1 \
  pydantic-core==2.50.5 \
  pyzmq==27.3.0 \
  starlette==1.10.0
