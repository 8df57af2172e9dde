"""The GPU target is one fact (pipeline.target.TARGET): no other code spells its arch, its
SGL_CUDA_ARCH value or its compute capability. Docstrings and comments may name it."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from pipeline.target import TARGET, GpuTarget, capability_of

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLOORS = ("pipeline", "contract", "source", "extract", "optimize", "bench", "integrate", "agent")
SPELLINGS = re.compile(r"\bsm_90a?\b|SGL_CUDA_ARCH=9\d\d|compute_90a?\b")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_no_code_spells_the_target_but_its_record():
    found = []
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            if path == ROOT / "pipeline" / "target.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and id(node) not in docs and isinstance(node.value, str):
                    if SPELLINGS.search(node.value):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value[:60]!r}")
    assert not found, "spell the GPU target through pipeline.target.TARGET:\n" + "\n".join(found)


def test_the_target_s_figures_follow_its_arch():
    assert (TARGET.capability, TARGET.sgl_cuda_arch, TARGET.jit_flag, TARGET.target_name) == (
        (9, 0),
        900,
        "-DSGL_CUDA_ARCH=900",
        "9.0a",
    )
    blackwell = GpuTarget(arch="sm_100a", sm_count=148, name="NVIDIA B200")
    assert (blackwell.capability, blackwell.sgl_cuda_arch, blackwell.target_name) == ((10, 0), 1000, "10.0a")
    with pytest.raises(ValueError, match="sm_<N>"):
        GpuTarget(arch="hopper", sm_count=1, name="x")
    assert [capability_of(a) for a in ("sm_90", "sm_90a", "sm_120")] == [(9, 0), (9, 0), (12, 0)]
    with pytest.raises(ValueError, match="sm_<N>"):
        capability_of("sm_9")
