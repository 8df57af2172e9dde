"""The floor kernels (issue 14 item 6): PTX that assembles, launch structs that match cuda.h, a report that says what set the floor."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess

import pytest
from test_harness_evaluate import DEVICE

from optimize.harness import floor_kernels, roofline


def _cuda_include() -> pathlib.Path | None:
    """The toolkit's include folder, found the way the project finds nvcc (None without one)."""
    from pipeline.toolchain import ToolchainError, find_nvcc

    try:
        include = find_nvcc().home / "include"
    except ToolchainError:
        return None
    return include if (include / "cuda.h").is_file() else None


@pytest.mark.parametrize("major,minor", [(9, 0), (10, 0)])
def test_the_floor_kernels_assemble(tmp_path, major, minor):
    """ptxas accepts the exact text the driver is given, so a typo fails here, not on the GPU."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas on this machine")
    source = tmp_path / "floor.ptx"
    source.write_text(floor_kernels.ptx(major, minor))
    done = subprocess.run(
        [ptxas, f"-arch=sm_{major}{minor}", str(source), "-o", str(tmp_path / "floor.cubin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    for name in floor_kernels.FloorKernels.NAMES:
        assert f".entry {name}(" in source.read_text()


def _entry(text: str, name: str) -> str:
    start = text.index(f".entry {name}(")
    return text[start : text.index("\n}", start)]


def test_pdl_kernels_trigger_first_and_wait_before_touching_memory():
    text = floor_kernels.ptx(9, 0)
    for name in ("ks_empty", "ks_copy16", "ks_read16", "ks_fill16"):
        assert "griddepcontrol" not in _entry(text, name), f"{name} is the plain launch"
        body = _entry(text, f"{name}_pdl")
        trigger, wait = body.index("griddepcontrol.launch_dependents"), body.index("griddepcontrol.wait")
        assert trigger < wait
        accesses = [body.index(a) for a in ("ld.global", "st.global") if a in body]
        assert all(wait < at for at in accesses), f"{name}: no access before the wait"
        if name != "ks_empty":
            assert body.replace(floor_kernels.PDL_PROLOGUE, "") == _entry(text, name).replace(
                f"{name}(", f"{name}_pdl("
            ), f"{name}: the PDL launch does the same work"
            assert "setp.ge.u64" in body, f"{name}: threads past n16 touch nothing"
    copy = _entry(text, "ks_copy16")
    assert "ld.global.v4.u32" in copy and "st.global.v4.u32" in copy, "16 bytes per access"


def test_the_read_stream_loads_every_vector_and_stores_only_the_impossible_fold():
    """The loads feed a predicate the kernel stores under, so ptxas cannot drop them; a zero-filled
    source folds to 0, never the magic word, so the stream writes nothing."""
    read = _entry(floor_kernels.ptx(9, 0), "ks_read16")
    assert "ld.global.v4.u32" in read and read.count("st.global") == 1
    assert f"setp.ne.u32 %p, %r8, {floor_kernels.SINK_MAGIC};" in read
    assert read.index("@%p bra DONE", read.index("setp.ne.u32")) < read.index("st.global.u32")
    assert floor_kernels.SINK_MAGIC != 0
    fill = _entry(floor_kernels.ptx(9, 0), "ks_fill16")
    assert "ld.global" not in fill and "st.global.v4.u32" in fill, "the write stream only writes, 16 bytes a thread"


def test_launch_structs_match_cuda_h(tmp_path):
    """sizeof and offsetof of CUlaunchAttribute and CUlaunchConfig, from a C program built against cuda.h."""
    include, cc = _cuda_include(), shutil.which("cc")
    if include is None or cc is None:
        pytest.skip("needs cuda.h (next to nvcc) and a C compiler")
    program = tmp_path / "sizes.c"
    program.write_text(
        "#include <cuda.h>\n#include <stddef.h>\n#include <stdio.h>\n"
        'int main(void) { printf("%zu %zu %zu %zu %zu %zu %d\\n", sizeof(CUlaunchAttribute),'
        " offsetof(CUlaunchAttribute, value), sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),"
        " offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),"
        " (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION); return 0; }\n"
    )
    built = subprocess.run(
        [cc, f"-I{include}", str(program), "-o", str(tmp_path / "sizes")], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr
    printed = subprocess.run([str(tmp_path / "sizes")], capture_output=True, text=True, check=True).stdout.split()
    ours = [
        ctypes.sizeof(floor_kernels.LaunchAttribute),
        floor_kernels.LaunchAttribute.value.offset,
        ctypes.sizeof(floor_kernels.LaunchConfig),
        floor_kernels.LaunchConfig.hStream.offset,
        floor_kernels.LaunchConfig.attrs.offset,
        floor_kernels.LaunchConfig.numAttrs.offset,
        floor_kernels.PROGRAMMATIC_STREAM_SERIALIZATION,
    ]
    assert [int(x) for x in printed] == ours


def test_the_pdl_attribute_allows_programmatic_serialization():
    attr = floor_kernels.pdl_attribute()
    assert attr.id == floor_kernels.PROGRAMMATIC_STREAM_SERIALIZATION
    assert int.from_bytes(bytes(attr)[8:12], "little") == 1 and not any(bytes(attr)[12:])


def test_the_report_says_which_variant_set_each_floor():
    device = DEVICE.model_copy(
        update={
            "min_kernel_us": 0.61,
            "copy_latency_us": [(4096, 0.7), (16384, 0.9)],
            "floor_variants_us": {
                "empty kernel": [(0, 0.74)],
                "empty kernel + PDL": [(0, 0.61)],
                "torch copy_": [(4096, 0.87), (16384, 1.08)],
                "vector copy + PDL": [(4096, 0.7), (16384, 0.9)],
            },
        }
    )
    text = "\n".join(roofline.latency_lines(device))
    assert "4 KiB 0.70 µs, 16 KiB 0.90 µs" in text
    assert "| bytes moved | torch copy_ | vector copy + PDL |" in text
    assert "| 16 KiB | 1.080 | 0.900 |" in text
    assert "empty kernel 0.740, empty kernel + PDL 0.610" in text
    assert "Read latency" not in text, "a cache from before the read and write streams shows the copy alone"
    patterns = device.model_copy(update={"read_latency_us": [(4096, 0.55)], "write_latency_us": [(4096, 0.5)]})
    text = "\n".join(roofline.latency_lines(patterns))
    assert "Read latency (bytes read: µs per call" in text and "4 KiB 0.55 µs" in text
    assert "Write latency (bytes written: µs per call" in text and "4 KiB 0.50 µs" in text
    old_cache = device.model_copy(update={"copy_latency_us": [], "floor_variants_us": {}})
    assert roofline.latency_lines(old_cache) == []
