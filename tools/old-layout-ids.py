"""The op-id map of the older JIT layout: each op id extract gives a ``jit_kernel/`` release (its module
stem as the group), and the id the same public function has in the first ``kernels/jit`` release.

    kernelsmith extract --list --language cuda --work-dir OLD --sglang <0.5.16's sglang folder>
    kernelsmith extract --list --language cuda --work-dir NEW --sglang <0.5.17's sglang folder>
    python tools/old-layout-ids.py OLD/index.json NEW/index.json [NEWER/index.json ...] > extract/jit_layout_ids.json

A function found under one id in the first newer index that has it is renamed to that id (under
several, to the one whose module path ends as ours, when one does); one the newer releases do not
have, or have ambiguously, keeps its own. The map holds names only.
"""

from __future__ import annotations

import json
import sys


def main(old_path: str, *newer_paths: str) -> int:
    old = json.load(open(old_path, encoding="utf-8"))
    newer = [json.load(open(p, encoding="utf-8")) for p in newer_paths]
    renamed: dict[str, str] = {}
    for op in old["ops"]:
        function = op["id"].rsplit(".", 1)[-1]
        for index in newer:
            ids = sorted({o["id"] for o in index["ops"] if o["id"].rsplit(".", 1)[-1] == function})
            if ids:  # the first newer release that has the function decides
                tail = "." + op["id"].split(".", 1)[1]  # a sub-module's op: dsv4.compress_old.compress_forward
                same_tail = [i for i in ids if i.endswith(tail)]
                pick = ids if len(ids) == 1 else same_tail if len(same_tail) == 1 else []
                if pick and pick[0] != op["id"]:
                    renamed[op["id"]] = pick[0]
                break
    json.dump(dict(sorted(renamed.items())), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
