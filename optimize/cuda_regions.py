"""The editable region as a model: its functions, scopes, constants and launch sites.

Why: a task's editable region is a few pieces of C++ cut out of SGLang's
sources (span name -> text). To say "the launch in ``Launcher::run`` starts
``fused_kernel`` with a block of 256 threads" one must parse every piece, know
which function is a kernel, a device function or a host launcher (each definition
is read by :mod:`optimize.cuda_functions`), resolve names through blocks, structs,
namespaces and the other pieces, evaluate compile-time expressions and find every
``LaunchKernel`` / ``<<<>>>`` / ``cudaLaunchKernel`` expression. :class:`Region`
does that once; the features (:mod:`optimize.features`), the facts under them
(:mod:`optimize.cuda_facts`) and the transforms (:mod:`optimize.transforms`) all
read the same model, so they see the same kernels and the same launch/kernel
association.

What must stay true:
- Only the region texts are read (the editable spans), so the same model
  describes the baseline and any candidate. Headers outside the region are not
  read; the few SGLang constants a region leans on for sizes are in
  :data:`KNOWN_CONSTANTS` for the Hopper target (``SGL_CUDA_ARCH=900``:
  ``kMaxVecBytes`` is 16 there, 32 only on Blackwell).
- A value that cannot be evaluated here is ``None``; a variable's initial value
  is not its value (only ``const`` / ``constexpr`` names evaluate).
- Sizes assume a template type parameter is ``dtype_bytes`` wide (2: bf16/fp16,
  the dtypes SGLang's hot paths run).
- A launch in a preprocessor branch the Hopper build leaves out launches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from contract import dtypes as dtype_table
from extract.cexpr import ARCH_CONSTANTS
from optimize.cuda_functions import RegionDoc, RegionFunction, read_function, template_parameters
from source import treesitter as ts
from source.cuda_text import active_children, binary_value, is_active, last_name, named_children, parse_number, text_of
from source.launches import runtime_kernel
from source.treesitter import Node

#: SGLang constants a region uses for sizes, as they are on Hopper (sm_90a).
KNOWN_CONSTANTS: dict[str, int] = {
    **{k: v for k, v in ARCH_CONSTANTS.items() if k.startswith("k")},  # extract.cexpr: utils.cuh on sm_90a
    "kWarpSize": 32,
    "warpSize": 32,
    "kFullWidth": 32,
    "MAX_GMEM": 16,
    "MAX_SMEM": 16,
    "MAX_PORTABLE": 16,
}


_TYPE_BYTES: dict[str, int] = {
    # element types: the one dtype table's C++ spellings (contract.dtypes), plus C's own names
    **{cpp: dtype_table.TABLE[short].nbytes for cpp, short in dtype_table.CPP_TYPES.items()},
    "unsigned": 4,
    "uint": 4,
    "long": 8,
    "size_t": 8,
    "char": 1,
    # CUDA's and SGLang's vector types
    "float2": 8,
    "fp32x2_t": 8,
    "int2": 8,
    "uint2": 8,
    "half2": 4,
    "__half2": 4,
    "fp16x2_t": 4,
    "bf16x2_t": 4,
    "__nv_bfloat162": 4,
    "float4": 16,
    "fp32x4_t": 16,
    "int4": 16,
    "uint4": 16,
    "double2": 16,
    "longlong2": 16,
    "ulonglong2": 16,
}


ALIGNED_VECTOR_TYPES = {"AlignedVector", "AlignedStorage"}


# --------------------------------------------------------------------------- region model


def _key(doc: RegionDoc, node: Node) -> tuple[int, int, int, str]:
    return (id(doc), node.start_byte, node.end_byte, node.type)


class Region:
    """The editable region parsed once: functions, scopes, launch sites, bindings.

    Shared by :mod:`optimize.features`, :mod:`optimize.cuda_facts` and
    :mod:`optimize.transforms`, so all see the same kernels and the same
    launch/kernel association.
    """

    def __init__(self, regions: Mapping[str, str], *, dtype_bytes: int = 2) -> None:
        self.dtype_bytes = dtype_bytes
        self.docs = [RegionDoc(name, text.encode("utf-8"), ts.parse(text).root_node) for name, text in regions.items()]
        self.funcs: list[RegionFunction] = []
        for doc in self.docs:
            for node in ts.captures("definitions", doc.root).get("function", []):
                body, declarator = node.child_by_field_name("body"), node.child_by_field_name("declarator")
                if body is not None and body.type == "compound_statement" and declarator is not None:
                    self.funcs.append(read_function(doc, node, body, declarator))
        # function_definitions nested in another function (rare: local structs) are kept; lambdas are not functions
        self._scopes: dict[tuple, dict[str, Node]] = {}
        self._bindings: dict[tuple, dict[str, int | bool]] = {}
        self.kernels = [f for f in self.funcs if f.kind == "kernel"]
        self.device_code = [f for f in self.funcs if f.kind in ("kernel", "device")]
        self.hosts = [f for f in self.funcs if f.kind == "host"]
        self._bind_kernel_templates()
        self.launches = self._launch_sites()

    # -------------------------------------------------------------- functions

    def func_of(self, doc: RegionDoc, node: Node) -> RegionFunction | None:
        """The innermost function whose definition contains ``node``."""
        best = None
        for f in self.funcs:
            if f.doc is doc and f.node.start_byte <= node.start_byte and node.end_byte <= f.node.end_byte:
                if best is None or f.node.start_byte >= best.node.start_byte:
                    best = f
        return best

    def template_params(self, f: RegionFunction) -> list[tuple[str, str]]:
        """The kernel's own template parameters (the innermost template_declaration)."""
        if not f.templates or f.templates[0] != f.node.parent:
            return []
        return template_parameters(f.templates[0], f.doc.src)

    # -------------------------------------------------------------- scopes and lookup

    def _scope_defs(self, doc: RegionDoc, scope: Node) -> dict[str, Node]:
        key = _key(doc, scope)
        if key in self._scopes:
            return self._scopes[key]
        defs: dict[str, Node] = {}

        def take(node: Node) -> None:
            if node.type == "template_declaration":
                for c in named_children(node):
                    take(c)
                return
            if node.type in ("declaration", "field_declaration", "alias_declaration"):
                for m in ts.matches("declarations", node):
                    if m["decl"][0].start_byte != node.start_byte:
                        continue
                    name = text_of(doc.src, m["name"][0]).lstrip("&* ")
                    defs.setdefault(name, m["value"][0])
            elif node.type == "function_definition":
                f = next((f for f in self.funcs if f.doc is doc and f.node.start_byte == node.start_byte), None)
                if f is not None:
                    defs.setdefault(f.name, node)
            elif node.type in ("namespace_definition",):
                body = node.child_by_field_name("body")
                if body is not None:
                    for c in active_children(doc.src, body):
                        take(c)

        children = active_children(doc.src, scope)
        for child in children:
            take(child)
        self._scopes[key] = defs
        return defs

    def lookup(self, doc: RegionDoc, at: Node, name: str) -> Node | None:
        """The definition (value / type / function node) ``name`` refers to at ``at``.

        Scopes searched: the enclosing blocks, struct bodies and namespaces of
        ``at``, then every region's top level (regions are pieces of one file).
        """
        cursor: Node | None = at
        while cursor is not None:
            if cursor.type in ("compound_statement", "field_declaration_list", "declaration_list", "translation_unit"):
                found = self._scope_defs(doc, cursor).get(name)
                if found is not None and not (found.start_byte <= at.start_byte < found.end_byte):
                    return found
            cursor = cursor.parent
        for other in self.docs:
            found = self._scope_defs(other, other.root).get(name)
            if found is not None:
                return found
            for f in self.funcs:
                if f.doc is other and f.name == name and f.owner is None:
                    return f.node
        return None

    def doc_of(self, node: Node) -> RegionDoc:
        """The region piece ``node`` belongs to (LookupError for a node of no piece)."""
        for doc in self.docs:
            root = doc.root
            if root.start_byte <= node.start_byte and node.end_byte <= root.end_byte:
                # several docs can overlap in byte ranges; the tree identity decides
                cursor = node
                while cursor.parent is not None:
                    cursor = cursor.parent
                if cursor == root:
                    return doc
        raise LookupError("node from no region")

    def template_binding(self, doc: RegionDoc, at: Node, name: str) -> tuple[bool, int | bool | None]:
        """(is a template parameter in scope, its bound value when a launch fixes it)."""
        cursor: Node | None = at
        while cursor is not None:
            if cursor.type == "template_declaration":
                names = [n for n, _k in template_parameters(cursor, doc.src)]
                if name in names:
                    return True, self._bindings.get(_key(doc, cursor), {}).get(name)
            cursor = cursor.parent
        return False, None

    # -------------------------------------------------------------- evaluation

    def evaluate(self, doc: RegionDoc, node: Node | None, depth: int = 0) -> int | float | bool | None:
        """Value of a compile-time integer expression, or None when it is not known here."""
        if node is None or depth > 12:
            return None
        t = node.type
        src = doc.src
        if t == "number_literal":
            return parse_number(text_of(src, node))
        if t in ("true", "false"):
            return t == "true"
        if (
            t in ("parenthesized_expression", "type_descriptor", "template_argument", "argument_list")
            and node.named_child_count == 1
        ):
            return self.evaluate(doc, named_children(node)[0], depth + 1)
        if t in ("identifier", "type_identifier", "qualified_identifier", "field_identifier", "namespace_identifier"):
            name = last_name(text_of(src, node))
            is_param, bound = self.template_binding(doc, node, name)
            if is_param:
                return bound
            found = self.lookup(doc, node, name)
            if found is not None and found.type != "function_definition":
                found_doc = self.doc_of(found)
                # only names that cannot change: a variable's initial value is not its value
                return self.evaluate(found_doc, found, depth + 1) if _is_const_def(found_doc.src, found) else None
            if name in KNOWN_CONSTANTS:
                return KNOWN_CONSTANTS[name]
            return None
        if t == "sizeof_expression":
            inner = node.child_by_field_name("type") or (node.named_children[0] if node.named_child_count else None)
            if inner is None:
                return None
            if inner.type == "parenthesized_expression" and inner.named_child_count == 1:
                inner = inner.named_children[0]
            return self.type_bytes(doc, inner, depth + 1)
        if t == "call_expression":
            callee = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            name = last_name(text_of(src, callee)) if callee is not None else ""
            if (
                name in ("static_cast", "int", "uint32_t", "int64_t", "size_t")
                and args is not None
                and args.named_child_count == 1
            ):
                return self.evaluate(doc, args.named_children[0], depth + 1)
            return None
        if t == "unary_expression":
            operand = node.child_by_field_name("argument")
            op = text_of(src, node.children[0])
            value = self.evaluate(doc, operand, depth + 1)
            if value is None:
                return None
            return {"-": lambda v: -v, "+": lambda v: v, "!": lambda v: not v, "~": lambda v: ~int(v)}.get(
                op, lambda v: None
            )(value)
        if t == "binary_expression":
            left = self.evaluate(doc, node.child_by_field_name("left"), depth + 1)
            right = self.evaluate(doc, node.child_by_field_name("right"), depth + 1)
            op = text_of(src, ts.field(node, "operator"))
            return binary_value(op, left, right)
        if t == "conditional_expression":
            cond = self.evaluate(doc, node.child_by_field_name("condition"), depth + 1)
            if cond is None:
                return None
            branch = node.child_by_field_name("consequence" if cond else "alternative")
            return self.evaluate(doc, branch, depth + 1)
        return None

    def type_bytes(self, doc: RegionDoc, node: Node | None, depth: int = 0) -> int | None:
        """sizeof of a type node (aliases resolved; template type parameters are dtype_bytes)."""
        if node is None or depth > 12:
            return None
        src = doc.src
        t = node.type
        if t in ("type_descriptor", "parenthesized_expression") and node.named_child_count >= 1:
            named = [c for c in named_children(node) if c.type not in ("type_qualifier",)]
            if len(named) == 1:
                return self.type_bytes(doc, named[0], depth + 1)
            return None
        if t == "template_type":
            name = last_name(text_of(src, ts.field(node, "name")))
            args = named_children(ts.field(node, "arguments"))
            if name in ALIGNED_VECTOR_TYPES and len(args) == 2:
                elem = self.type_bytes(doc, args[0], depth + 1)
                count = self.evaluate(doc, args[1], depth + 1)
                return elem * int(count) if elem is not None and isinstance(count, (int, float)) else None
            if name == "packed_t" and len(args) == 1:
                elem = self.type_bytes(doc, args[0], depth + 1)
                return 2 * elem if elem is not None and elem <= 2 else elem
            return None
        if t in ("primitive_type", "type_identifier", "identifier", "qualified_identifier", "sized_type_specifier"):
            text = text_of(src, node)
            name = last_name(text)
            if name in _TYPE_BYTES:
                return _TYPE_BYTES[name]
            if t == "sized_type_specifier":
                return 8 if "long" in text else 4
            is_param, _bound = self.template_binding(doc, node, name)
            if is_param:
                return self.dtype_bytes
            found = self.lookup(doc, node, name)
            if found is not None and found.type in (
                "type_descriptor",
                "template_type",
                "type_identifier",
                "primitive_type",
            ):
                return self.type_bytes(self.doc_of(found), found, depth + 1)
            return None
        return None

    def is_compile_time(self, doc: RegionDoc, node: Node, depth: int = 0) -> bool:
        """Whether ``node`` is a compile-time expression (literals, constexpr names, template params)."""
        if node is None or depth > 12:
            return False
        if self.evaluate(doc, node) is not None:
            return True
        t = node.type
        if t in ("number_literal", "true", "false", "sizeof_expression"):
            return True
        if t in ("identifier", "type_identifier", "qualified_identifier"):
            name = last_name(text_of(doc.src, node))
            is_param, _ = self.template_binding(doc, node, name)
            if is_param or name in KNOWN_CONSTANTS:
                return True
            found = self.lookup(doc, node, name)
            if found is not None and found.parent is not None:
                decl = found.parent if found.parent.type != "init_declarator" else found.parent.parent
                if decl is not None and re.search(rb"\bconstexpr\b", doc_text_bytes(self, decl)):
                    return True
            # SGLang (and common CUDA) convention: kCamelCase names are compile-time constants
            return bool(re.fullmatch(r"k[A-Z]\w*", name))
        if t in ("parenthesized_expression", "binary_expression", "unary_expression", "conditional_expression"):
            return all(
                self.is_compile_time(doc, c, depth + 1) for c in named_children(node) if c.type not in ("comment",)
            )
        if t == "call_expression":
            callee = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            name = last_name(text_of(doc.src, callee)) if callee is not None else ""
            return (
                name == "static_cast"
                and args is not None
                and all(self.is_compile_time(doc, a, depth + 1) for a in named_children(args))
            )
        return False

    # -------------------------------------------------------------- expansion (host code)

    def expand(self, doc: RegionDoc, node: Node, depth: int = 0, seen: set | None = None) -> str:
        """``node``'s text followed by the definitions of the names it uses, transitively.

        Used to classify a grid expression (``num_blocks`` -> ``div_ceil(...)``) and to
        find which kernels a launch's kernel argument refers to (through local
        variables, struct fields and helper methods).
        """
        seen = set() if seen is None else seen
        parts = [text_of(doc.src, node)]
        if depth > 5:
            return parts[0]
        for ident in ts.walk(node):
            if ident.type not in ("identifier", "field_identifier", "type_identifier"):
                continue
            name = text_of(doc.src, ident)
            if name in seen:
                continue
            seen.add(name)
            found = self.lookup(doc, ident, name)
            if found is None:
                continue
            found_doc = self.doc_of(found)
            parts.append(self.expand(found_doc, found, depth + 1, seen))
        return " ; ".join(parts)

    # -------------------------------------------------------------- kernel template bindings

    def _bind_kernel_templates(self) -> None:
        """Fix kernel template parameters that every instantiation in the region sets alike."""
        for k in self.kernels:
            params = self.template_params(k)
            if not params:
                continue
            template = k.templates[0]
            seen: dict[str, set] = {}
            for doc in self.docs:
                for m in ts.matches("templates", doc.root):
                    if "use" not in m or last_name(text_of(doc.src, m["name"][0])) != k.name:
                        continue
                    args = named_children(m["args"][0])
                    for (pname, pkind), arg in zip(params, args):
                        if pkind != "value":
                            continue
                        seen.setdefault(pname, set()).add(self.evaluate(doc, arg))
            binding = {n: next(iter(v)) for n, v in seen.items() if len(v) == 1 and None not in v}
            self._bindings[_key(k.doc, template)] = binding

    # -------------------------------------------------------------- launch sites

    def _launch_sites(self) -> list[LaunchExpr]:
        out: list[LaunchExpr] = []
        for doc in self.docs:
            for m in ts.matches("launches", doc.root):
                f = None
                if "launch" in m:
                    ctor = m["launch"][0]
                    args = named_children(m["args"][0])
                    outer, pdl_args, final_args = _launch_chain(ctor)
                    f = self.func_of(doc, ctor)
                    out.append(
                        LaunchExpr(
                            doc,
                            f,
                            outer,
                            ctor,
                            args[0] if args else None,
                            args[1] if len(args) > 1 else None,
                            pdl_args,
                            final_args[0] if final_args else None,
                        )
                    )
                elif "chevron" in m:
                    call = m["chevron"][0]
                    cfg = named_children(m["config"][0])
                    f = self.func_of(doc, call)
                    out.append(
                        LaunchExpr(
                            doc,
                            f,
                            call,
                            call,
                            cfg[0] if cfg else None,
                            cfg[1] if len(cfg) > 1 else None,
                            None,
                            m["kernel"][0],
                            chevron=True,
                        )
                    )
                elif "runtime" in m:
                    call = m["runtime"][0]
                    f = self.func_of(doc, call)
                    kernel = runtime_kernel(doc.src, m)
                    out.append(LaunchExpr(doc, f, call, call, None, None, None, kernel, runtime=True))
        # a launch in a branch the Hopper build compiles out launches nothing here
        return [l for l in out if is_active(l.doc.src, l.outer)]

    def launched_kernels(self, launch: LaunchExpr) -> list[str]:
        names = [k.name for k in self.kernels]
        if launch.kernel is not None:
            blob = self.expand(launch.doc, launch.kernel)
            found = [n for n in names if re.search(rf"\b{re.escape(n)}\b", blob)]
            if found:
                return found
        # fall back to every kernel the launching struct / function mentions
        scope = (
            launch.func.owner
            if launch.func is not None and launch.func.owner is not None
            else (launch.func.node if launch.func is not None else launch.doc.root)
        )
        mentioned = {
            text_of(launch.doc.src, n)
            for n in ts.walk(scope)
            if n.type in ("identifier", "field_identifier", "type_identifier") and is_active(launch.doc.src, n)
        }
        return [n for n in names if n in mentioned]


def _is_const_def(src: bytes, value: Node) -> bool:
    """Whether the declaration that gives ``value`` is ``constexpr`` or ``const``."""
    decl = value.parent
    if decl is not None and decl.type == "init_declarator":
        decl = decl.parent
    if decl is None or decl.type not in ("declaration", "field_declaration"):
        return decl is not None and decl.type == "alias_declaration"
    quals = {text_of(src, c) for c in decl.children if c.type == "type_qualifier"}
    return bool(quals & {"constexpr", "const"})


def doc_text_bytes(region: Region, node: Node) -> bytes:
    doc = region.doc_of(node)
    return doc.src[node.start_byte : node.end_byte]


@dataclass(eq=False)
class LaunchExpr:
    doc: RegionDoc
    func: RegionFunction | None
    outer: Node  # the whole launch expression
    ctor: Node  # LaunchKernel(...) call, or the chevron / runtime call
    grid: Node | None
    block: Node | None
    pdl_args: list[tuple[str, Node]] | None  # (method, argument list) of .enable_pdl / .config
    kernel: Node | None
    chevron: bool = False
    runtime: bool = False


def _launch_chain(ctor: Node) -> tuple[Node, list[tuple[str, Node]], list[Node]]:
    """Climb ``LaunchKernel(...).enable_pdl(x)(kernel, args...)`` from the constructor call."""
    current = ctor
    methods: list[tuple[str, Node]] = []
    final_args: list[Node] = []
    while True:
        parent = current.parent
        if parent is None:
            break
        if parent.type == "field_expression" and parent.child_by_field_name("argument") == current:
            call = parent.parent
            if call is None or call.type != "call_expression":
                break
            field_node = parent.child_by_field_name("field")
            method = field_node.text.decode() if field_node is not None and field_node.text is not None else ""
            methods.append((method, ts.field(call, "arguments")))
            current = call
            continue
        if parent.type == "call_expression" and parent.child_by_field_name("function") == current:
            final_args = named_children(ts.field(parent, "arguments"))
            current = parent
            break
        break
    return current, methods, final_args
