"""Golden files: a test's actual record compared with the one checked in (``tests/golden/...``).

``UPDATE_GOLDEN=1`` rewrites the files from what the code produces now; the diff is then
reviewed like code. Written once here so every golden test reads and writes the same format
(JSON, one-space indent, a final newline).
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any


def assert_golden(golden: pathlib.Path, actual: Any, *, sort_keys: bool = False) -> None:
    """``actual`` equals the JSON in ``golden`` (written first under ``UPDATE_GOLDEN=1``; ``sort_keys``
    for records whose key order is not part of what is tested)."""
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(actual, indent=1, sort_keys=sort_keys) + "\n", encoding="utf-8")
    assert golden.is_file(), f"{golden} is missing: run with UPDATE_GOLDEN=1 and review the diff"
    assert json.loads(golden.read_text(encoding="utf-8")) == actual
