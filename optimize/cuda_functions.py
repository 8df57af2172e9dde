"""The functions of the editable region: each definition read once as a kernel, a device function or a host launcher.

Why: every reader of a region (the region model, :class:`optimize.cuda_regions.Region`; the
facts, :mod:`optimize.cuda_facts`; the transforms' sites, :mod:`optimize.cuda_sites`; the
reach, :mod:`optimize.reach`) asks the same questions of a function: which region piece holds
it, whether it is a ``__global__`` kernel, device code or host code, which struct owns it and
which ``template<...>`` headers enclose it. :class:`RegionDoc` is one parsed piece,
:class:`RegionFunction` one definition in it, :func:`read_function` reads a definition and
:func:`template_parameters` a template header; the model builds its function list with them.

What must stay true:
- A definition's kind is read from its head alone: ``__global__`` is a kernel; ``__device__``,
  ``SGL_DEVICE`` or ``SGL_DEVICE_HOST`` device code; anything else host code.
- The owner is the innermost enclosing struct or class; ``templates`` lists the enclosing
  template declarations innermost first.
- Pieces and functions are compared by identity (``eq=False``): two definitions of one
  text are two functions, and the readers above match them with ``is``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from source.cuda_text import last_name, named_children, text_of
from source.treesitter import Node


@dataclass(eq=False)
class RegionDoc:
    span: str
    src: bytes
    root: Node


@dataclass(eq=False)
class RegionFunction:
    doc: RegionDoc
    node: Node  # function_definition
    body: Node
    name: str
    kind: Literal["kernel", "device", "host"]
    owner: Node | None  # enclosing struct/class specifier
    owner_name: str | None
    templates: list[Node]  # enclosing template_declarations, innermost first

    @property
    def qualname(self) -> str:
        return f"{self.owner_name}::{self.name}" if self.owner_name else self.name


def read_function(doc: RegionDoc, node: Node, body: Node, declarator: Node) -> RegionFunction:
    """The function a ``function_definition`` of ``doc`` defines: its name, kind, owner and enclosing templates."""
    head = doc.src[node.start_byte : body.start_byte]
    kind: Literal["kernel", "device", "host"]
    if re.search(rb"\b__global__\b", head):
        kind = "kernel"
    elif re.search(rb"\b(__device__|SGL_DEVICE|SGL_DEVICE_HOST)\b", head):
        kind = "device"
    else:
        kind = "host"
    inner: Node | None = declarator
    while inner is not None and inner.type in ("function_declarator", "pointer_declarator", "reference_declarator"):
        inner = inner.child_by_field_name("declarator")
    name = last_name(text_of(doc.src, inner)) if inner is not None else "?"
    owner = None
    templates: list[Node] = []
    cursor = node.parent
    while cursor is not None:
        if cursor.type == "template_declaration":
            templates.append(cursor)
        if cursor.type in ("struct_specifier", "class_specifier") and owner is None:
            owner = cursor
        cursor = cursor.parent
    owner_name = None
    if owner is not None:
        name_node = owner.child_by_field_name("name")
        owner_name = text_of(doc.src, name_node) if name_node is not None else None
    return RegionFunction(doc, node, body, name, kind, owner, owner_name, templates)


def template_parameters(template: Node, src: bytes) -> list[tuple[str, str]]:
    """(name, "type" | "value") of a template_declaration's parameters, in order."""
    params = template.child_by_field_name("parameters")
    out: list[tuple[str, str]] = []
    if params is None:
        return out
    for p in named_children(params):
        if p.type in (
            "type_parameter_declaration",
            "optional_type_parameter_declaration",
            "variadic_type_parameter_declaration",
        ):
            ident = next((c for c in p.children if c.type == "type_identifier"), None)
            if ident is not None:
                out.append((text_of(src, ident), "type"))
        elif p.type in ("parameter_declaration", "optional_parameter_declaration", "variadic_parameter_declaration"):
            decl = p.child_by_field_name("declarator")
            if decl is not None:
                out.append((text_of(src, decl).lstrip("&*. "), "value"))
    return out
