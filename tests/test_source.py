"""The source floor: one query folder, one launch-API table, and nothing above pipeline imported.

Extract and optimize once kept a query folder each, and the two ``launches.scm`` knew
different launch APIs; these tests keep the one set one.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
from test_import_graph import import_graph

from optimize.cuda_regions import Region
from source import launches
from source import treesitter as ts

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUERIES = ROOT / "source" / "queries"


def _scm_files() -> list[pathlib.Path]:
    """Every ``.scm`` of the project (tracked or new; ignored folders such as .venv and work/ left out)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard", "*.scm"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:  # no git (a copied tree): walk the project folders instead
        skip = {".venv", "work", ".git", "build", ".dev", ".whl"}
        return [p for p in ROOT.rglob("*.scm") if not skip & set(p.relative_to(ROOT).parts)]
    return [ROOT / line for line in done.stdout.splitlines() if (ROOT / line).is_file()]


def test_every_query_lives_in_source_queries():
    found = _scm_files()
    assert found, "no .scm found at all: the walk is broken"
    elsewhere = sorted(str(p.relative_to(ROOT)) for p in found if p.parent != QUERIES)
    assert elsewhere == [], f"queries outside source/queries (one folder, one set): {elsewhere}"
    assert not [p for p in QUERIES.iterdir() if p.is_dir()], "source/queries is flat (every query is CUDA's)"


def test_every_query_compiles_and_every_query_read_exists():
    names = {p.stem for p in QUERIES.glob("*.scm")}
    for name in sorted(names):
        ts.load_query(name)
    read = set()
    for path in [*ROOT.glob("source/**/*.py"), *ROOT.glob("extract/**/*.py"), *ROOT.glob("optimize/**/*.py")]:
        read |= set(re.findall(r"\b(?:matches|captures|load_query)\(\s*\"(\w+)\"", path.read_text(encoding="utf-8")))
    assert read - names == set(), f"queries read but not in source/queries: {sorted(read - names)}"
    assert names - read == set(), f"queries nothing reads: {sorted(names - read)}"


def test_the_launch_query_regex_is_the_table():
    text = (QUERIES / "launches.scm").read_text(encoding="utf-8")
    regexes = re.findall(r'\(#match\? @api "([^"]*)"\)', text)
    assert regexes == [launches.runtime_api_regex()], (
        "launches.scm's runtime regex must be source.launches.runtime_api_regex() "
        "(RUNTIME_KERNEL_ARGUMENT), written out"
    )


#: Each runtime API called as its documentation spells it, the kernel named ``right_kernel``;
#: ``wrong_kernel`` sits in an argument the kernel is not (written out here, not read from the
#: table, so a wrong index in the table fails).
CALLS = {
    "cudaLaunchKernel": "cudaLaunchKernel(right_kernel, wrong_kernel, block, args, 0, stream)",
    "cudaLaunchKernelEx": "cudaLaunchKernelEx(&wrong_kernel, right_kernel, x, y)",
    "cudaLaunchKernelExC": "cudaLaunchKernelExC(&wrong_kernel, right_kernel, args)",
    "cudaLaunchCooperativeKernel": "cudaLaunchCooperativeKernel(right_kernel, wrong_kernel, block, args, 0, stream)",
    "cuLaunchKernel": "cuLaunchKernel(right_kernel, wrong_kernel, 1, 1, 128, 1, 1, 0, stream, params, nullptr)",
    "cuLaunchKernelEx": "cuLaunchKernelEx(&wrong_kernel, right_kernel, params, nullptr)",
    "hipLaunchKernelGGL": "hipLaunchKernelGGL(right_kernel, wrong_kernel, block, 0, stream, x, y)",
    "hipLaunchKernelEx": "hipLaunchKernelEx(&wrong_kernel, right_kernel, x, y)",
}


def _launch_text(call: str) -> str:
    return (
        "__global__ void right_kernel(int x) {}\n"
        "__global__ void wrong_kernel(int x) {}\n"
        f"void launch_it() {{ {call}; }}\n"
    )


def test_every_runtime_api_has_a_written_call():
    assert sorted(CALLS) == sorted(launches.RUNTIME_KERNEL_ARGUMENT)


@pytest.mark.parametrize("api", sorted(CALLS))
def test_both_stages_take_the_kernel_argument_from_the_table(api):
    from extract.index import index_texts

    text = _launch_text(CALLS[api])
    scan = index_texts({"kernels/jit/csrc/launch.cuh": text.encode()}, workers=1)
    assert [launcher.launches for launcher in scan.launchers] == [["right_kernel"]], text
    region = Region({"launch": text})
    assert [(site.runtime, region.launched_kernels(site)) for site in region.launches] == [(True, ["right_kernel"])]
    qualified = Region({"launch": text.replace(f"{api}(", f"ns::{api}(")})
    assert [(site.runtime, qualified.launched_kernels(site)) for site in qualified.launches] == [
        (True, ["right_kernel"])
    ]


def test_an_api_outside_the_table_is_no_launch():
    text = "__global__ void k(int x) {}\nvoid f() { cudaLaunchHostFunc(k, x); my_cudaLaunchKernel(k, x); }\n"
    assert Region({"launch": text}).launches == []
    assert ts.matches("launches", ts.parse(text.encode(), "cuda").root_node) == []


def test_the_source_floor_imports_only_pipeline():
    graph = import_graph()
    found = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.split(".")[0] == "source"
        for target in targets
        if target.split(".")[0] not in ("source", "pipeline")
    )
    assert found == [], "source imports only pipeline: " + ", ".join(found)
    assert any(m.startswith("source.") for m in graph), "the walk does not see the source floor"
