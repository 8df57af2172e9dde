#!/usr/bin/env python3
"""What `kernelsmith bench --all` would check, found on the CPU (no build, no GPU).

    .venv/bin/python tools/plan-tasks.py WORK_DIR/tasks [OP_ID ...]

For every task (or the named ones): the planned checks (shape kind, dtypes, shape
sizes) or the reason the sweep would stop before building (task does not load,
extract's nvcc failed, contract open or unplannable), and what the completion rules
filled in. Use it to try a curated contract or a completion rule before spending
device time; the GPU still decides build, run and pass.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.health import prepare  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    tasks = pathlib.Path(argv[0])
    wanted = set(argv[1:])
    dirs = sorted(p for p in tasks.iterdir() if (p / "task.json").is_file() and (not wanted or p.name in wanted))
    if wanted - {p.name for p in dirs}:
        print(f"no task for: {sorted(wanted - {p.name for p in dirs})}", file=sys.stderr)
        return 2
    planned = 0
    for task_dir in dirs:
        prep = prepare(task_dir)
        row = prep.row
        if prep.plan is None:
            print(f"{row.op_id}: STOP {row.reason}")
        else:
            planned += 1
            first = prep.plan.checks[0]
            dtypes = sorted({c.dtype for c in prep.plan.checks})
            print(
                f"{row.op_id}: plan {len(prep.plan.checks)} checks ({row.shapes}; {', '.join(dtypes)}); first {first.label}"
            )
        for note in row.filled if wanted else []:
            print(f"    filled: {note}")
        for note in row.still_open if wanted else []:
            print(f"    open: {note}")
    print(f"{planned} of {len(dirs)} task(s) plannable")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
