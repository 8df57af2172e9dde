"""Spans of a region: their texts cut out of a task's files, and definition spans found without an index.

Why: the loop, the tests and ad-hoc runs all start from a task's editable spans
(``Task.editable``) and the files they point into; :func:`region_texts` is the one
place that cuts a span's text out. :func:`definition_spans` finds the spans of a
file's kernels, device functions and launchers with the region model, for callers
that have no extract index (tests, ad-hoc runs).

What must stay true:
- Span names are unique: two spans of one name would make one region overwrite the
  other, so that is an error.
- :func:`definition_spans` cuts the same spans as ``extract.tasks.editable_spans``
  on these files (a test checks it).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable, Mapping
from typing import Literal

from optimize.cuda_regions import Region
from pipeline.records import Span
from source.cuda_text import text_of


def region_texts(files: Mapping[str, bytes | str] | os.PathLike[str] | str, spans: Iterable[Span]) -> dict[str, str]:
    """Span name -> its text, cut from ``files`` (path -> contents) or a task's ``src/`` folder."""
    out: dict[str, str] = {}
    for span in spans:
        if isinstance(files, Mapping):
            data = files[span.file]
            data = data.encode("utf-8") if isinstance(data, str) else data
        else:
            data = (pathlib.Path(files) / span.file).read_bytes()
        if span.name in out:
            raise ValueError(f"two editable spans are named {span.name!r}; span names must be unique")
        out[span.name] = data[span.start_byte : span.end_byte].decode("utf-8")
    return out


# --------------------------------------------------------------------------- spans without an index


def definition_spans(file: str, data: bytes) -> list[Span]:
    """Every kernel, device function and launcher definition of a file, as Spans.

    For callers without an extract index (tests, ad-hoc runs); it cuts the same
    spans as ``extract.tasks.editable_spans`` on these files (a test checks it). A
    span covers the ``template<...>`` header when there is one and, for a struct,
    stops at its closing brace; a launcher is a struct or host function that
    launches kernels. Names are the kernel / function / struct names.
    """
    region_like = Region({"_": data.decode("utf-8")})
    doc = region_like.docs[0]
    spans: list[Span] = []
    seen: set[tuple[int, int]] = set()
    launch_funcs = {id(l.func) for l in region_like.launches if l.func is not None}
    for f in region_like.funcs:
        if f.owner is not None:
            if not any(id(g) in launch_funcs for g in region_like.funcs if g.owner is not None and g.owner == f.owner):
                continue
            node = f.owner
            kind: Literal["kernel", "device_function", "launcher"] = "launcher"
            name_node = node.child_by_field_name("name")
            name = text_of(doc.src, name_node) if name_node is not None else f.owner_name or "?"
        else:
            node = f.node
            if f.kind == "kernel":
                kind = "kernel"
            elif f.kind == "device":
                kind = "device_function"
            elif id(f) in launch_funcs:
                kind = "launcher"
            else:
                continue
            name = f.name
        end = node.end_byte  # a struct's span stops at its closing brace, before the ';'
        while node.parent is not None and node.parent.type == "template_declaration":
            node = node.parent
        key = (node.start_byte, end)
        if key in seen:
            continue
        seen.add(key)
        spans.append(Span(file=file, start_byte=node.start_byte, end_byte=end, name=name, kind=kind))
    return spans
