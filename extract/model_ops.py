"""Which SGLang model files call which op: read from the model code (Python's ast).

A catalog model (``extract/shapes/<model>.toml``) names the classes its checkpoint
loads (``architectures``: config.json's key for an LLM, the DiT class for a diffusion
model). The model file is the one whose ``EntryClass`` lists such a class
(``srt/models/*.py``, ``multimodal_gen/runtime/models/**``). An op is *called by* a
model file when some definition of that file reaches the op's public function through
names: an import of it (``from sglang.kernels.ops.layernorm.norm import rmsnorm``), or a
name imported from another SGLang module whose definition reaches it (the model's
``RMSNorm`` from ``srt/layers/layernorm.py``, whose methods call ``fused_add_rmsnorm``),
followed through every module of the package, re-exports of a package ``__init__``
included.

What is followed: the names a top-level function, class (all its methods) or
assignment uses in its body, never in an annotation; ``alias.attr`` where ``alias`` is
an imported module; imports anywhere in a file (a lazy import inside a method counts).
What is not: calls decided at run time (an attention backend chosen by name from the
server arguments, a kernel looked up in a registry): an op reached only that way is
called by no model file, and :data:`OVERRIDES` (evidence beside each) or the fallback
of :func:`models_for_op` decides its models.

What must stay true:
- Pure reading: nothing is imported or evaluated; the same tree gives the same map.
- A name in a cycle of definitions contributes what was found before the cycle closed
  (never an error, at worst an op left out of one path that another path usually finds).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import pathlib
from collections.abc import Iterable, Mapping

from extract.pyops.modules import _resolve_relative, dotted_name
from extract.shapes import Model
from pipeline.console import working
from pipeline.records import OpEntry

# Where model files live (package-relative); every ``*.py`` below with an ``EntryClass``.
MODEL_DIRS = ("srt/models", "multimodal_gen/runtime/models")
MAP_VERSION = "kernelsmith.model_ops/1"
# The modules followed (package-relative prefixes): the model files, SGLang's layers and
# the ops. Not the runtime (model runner, scheduler, server arguments, memory pools,
# speculative workers): what it calls it calls for every model alike, chosen at run time.
FOLLOWED = (
    "srt/models/",
    "srt/layers/",
    "multimodal_gen/runtime/models/",
    "multimodal_gen/runtime/layers/",
    "kernels/ops/",
)
# Inside those, not followed: the quantization methods (a checkpoint's choice, not the
# architecture's: its registry names every method, MoE ones included, so every model
# would reach every quantized MoE kernel through a Linear layer). A model that calls a
# quantization op itself still imports it and is found.
NOT_FOLLOWED = ("srt/layers/quantization",)

# Ops SGLang reaches from a model only through a run-time choice, written once with the
# evidence. op id -> (model files that call it, why).
OVERRIDES: dict[str, tuple[tuple[str, ...], str]] = {
    "moe.moe_align_block_size": (
        ("srt/models/mixtral.py", "srt/models/qwen3_moe.py", "srt/models/qwen3_next.py"),
        "their FusedMoE layers run the Triton MoE runner, chosen at run time (srt/layers/quantization/unquant.py's "
        "create_moe_runner: MoeRunnerBackend.TRITON for bf16 experts when no other runner is asked for), whose "
        "srt/layers/moe/moe_runner/triton_utils/fused_moe.py aligns tokens through triton_utils/moe_align_block_size.py"
        " -> sglang.kernels.ops.moe.moe_align_block_size; fp8 DeepSeek-V3 takes DeepGEMM there, gpt-oss's mxfp4 "
        "triton_kernels",
    ),
}


@dataclasses.dataclass
class _Module:
    """One parsed module: what each top-level definition refers to, and its imports."""

    dotted: str
    is_package: bool
    defs: dict[str, set[tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # local -> (module, name)
    module_aliases: dict[str, str] = dataclasses.field(default_factory=dict)  # local -> dotted module
    entry_classes: list[str] = dataclasses.field(default_factory=list)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


class _Refs(ast.NodeVisitor):
    """Names and ``alias.attr`` chains used in a node, annotations left out."""

    def __init__(self) -> None:
        self.refs: set[tuple[str, ...]] = set()

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # decorators, defaults and the body; never the parameters' or the return's annotations
        for item in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults, *node.body]:
            if item is not None:
                self.visit(item)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        text = _dotted(node)
        if text is None:
            self.generic_visit(node)
        else:
            self.refs.add(tuple(text.split(".")))

    def visit_Name(self, node: ast.Name) -> None:
        self.refs.add((node.id,))


def _resolve_from(mod: _Module, node: ast.ImportFrom) -> str:
    base = node.module
    return _resolve_relative(mod.dotted, mod.is_package, node.level, base) if node.level else (base or "")


def _parse(rel: str, text: str) -> _Module:
    tree = ast.parse(text)
    mod = _Module(dotted=dotted_name(rel), is_package=rel.endswith("__init__.py"))
    for node in ast.walk(tree):  # every import, at any depth (a lazy import inside a method counts)
        if isinstance(node, ast.ImportFrom):
            source = _resolve_from(mod, node)
            for alias in node.names if source else []:
                if alias.name != "*":
                    mod.imports.setdefault(alias.asname or alias.name, (source, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    mod.module_aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    mod.module_aliases.setdefault(head, head)

    def refs_of(node: ast.AST) -> set[tuple[str, ...]]:
        visitor = _Refs()
        if isinstance(node, ast.ClassDef):
            for item in [*node.decorator_list, *node.bases, *node.body]:
                visitor.visit(item)
        else:
            visitor.visit(node)
        return visitor.refs

    def visit_block(statements: Iterable[ast.stmt]) -> None:
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                mod.defs.setdefault(stmt.name, set()).update(refs_of(stmt))
            elif isinstance(stmt, ast.If):
                visit_block(stmt.body)
                visit_block(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                visit_block(stmt.body)
                for handler in stmt.handlers:
                    visit_block(handler.body)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        mod.defs.setdefault(target.id, set()).update(refs_of(stmt.value))
                        if target.id == "EntryClass":
                            mod.entry_classes = sorted(n[0] for n in refs_of(stmt.value) if len(n) == 1)

    visit_block(tree.body)
    return mod


def _followed(rel: str) -> bool:
    return rel.startswith(tuple(p.rstrip("/") for p in FOLLOWED)) and not rel.startswith(NOT_FOLLOWED)


class ModelOps:
    """The op reach of names in one SGLang package tree (parsed on demand, memoised)."""

    def __init__(self, root: pathlib.Path, ops: Iterable[OpEntry]) -> None:
        self.root = root
        self.public: dict[tuple[str, str], str] = {}
        for op in ops:
            for fn in op.public_functions:
                self.public[(dotted_name(op.module), fn)] = op.id
        self._modules: dict[str, _Module | None] = {}
        self._reach: dict[tuple[str, str], frozenset[str]] = {}
        self._open: set[tuple[str, str]] = set()

    def module(self, dotted: str) -> _Module | None:
        if dotted not in self._modules:
            self._modules[dotted] = None
            parts = dotted.split(".")
            if parts[0] == "sglang" and len(parts) > 1 and _followed("/".join(parts[1:])):
                base = self.root.joinpath(*parts[1:])
                for path in (base.with_suffix(".py"), base / "__init__.py"):
                    if path.is_file():
                        rel = path.relative_to(self.root).as_posix()
                        try:
                            self._modules[dotted] = _parse(rel, path.read_text(encoding="utf-8", errors="replace"))
                        except (SyntaxError, ValueError):
                            pass  # a file Python cannot parse reaches nothing
                        break
        return self._modules[dotted]

    def reach(self, dotted: str, name: str) -> frozenset[str]:
        """The ops that ``name`` of module ``dotted`` reaches."""
        key = (dotted, name)
        if key in self.public:
            return frozenset({self.public[key]})
        if key in self._reach:
            return self._reach[key]
        if key in self._open:
            return frozenset()
        self._open.add(key)
        found: set[str] = set()
        mod = self.module(dotted)
        if mod is not None:
            if name in mod.defs:
                for ref in mod.defs[name]:
                    found |= self._ref(mod, ref)
            elif name in mod.imports:
                found |= self.reach(*mod.imports[name])
            elif self.module(f"{dotted}.{name}") is not None:
                pass  # a submodule named as a value: its uses are attribute chains, read there
        self._open.discard(key)
        self._reach[key] = frozenset(found)
        return self._reach[key]

    def _ref(self, mod: _Module, ref: tuple[str, ...]) -> set[str]:
        head, rest = ref[0], ref[1:]
        if head in mod.defs and not rest:
            return set(self.reach(mod.dotted, head))
        target: str | None = None
        if head in mod.module_aliases:
            target = mod.module_aliases[head]
        elif head in mod.imports:
            source, name = mod.imports[head]
            if not rest or self.module(f"{source}.{name}") is None:
                return set(self.reach(source, name))  # the name itself (a class: all its methods)
            target = f"{source}.{name}"
        elif head in mod.defs:
            return set(self.reach(mod.dotted, head))
        if target is None or not rest:
            return set()
        # alias.a.b: module alias.a with name b, else name a of the aliased module
        for split in range(len(rest), 0, -1):
            module = ".".join([target, *rest[: split - 1]])
            if self.module(module) is not None:
                return set(self.reach(module, rest[split - 1]))
        return set()

    def model_files(self) -> dict[str, list[str]]:
        """Package-relative model file -> the classes its ``EntryClass`` lists."""
        out: dict[str, list[str]] = {}
        for folder in MODEL_DIRS:
            base = self.root / folder
            for path in sorted(base.rglob("*.py")) if base.is_dir() else []:
                rel = path.relative_to(self.root).as_posix()
                mod = self.module(dotted_name(rel))
                if mod is not None and mod.entry_classes:
                    out[rel] = mod.entry_classes
        return out

    def ops_of_file(self, rel: str) -> list[str]:
        """Every op some definition of model file ``rel`` reaches."""
        mod = self.module(dotted_name(rel))
        if mod is None:
            return []
        found: set[str] = set()
        for name in mod.defs:
            found |= self.reach(mod.dotted, name)
        return sorted(found)


def build_map(root: pathlib.Path, ops: Iterable[OpEntry]) -> dict[str, object]:
    """``{"version", "models": {file: {"classes", "ops"}}}`` for the tree at ``root``."""
    graph = ModelOps(root, ops)
    models = {rel: {"classes": classes, "ops": graph.ops_of_file(rel)} for rel, classes in graph.model_files().items()}
    return {"version": MAP_VERSION, "models": models}


def tree_key(root: pathlib.Path, ops: Iterable[OpEntry]) -> str:
    """Content key of what :func:`build_map` reads: every ``.py`` file's path, size and
    modification time, the ops' public functions, and this module's own code."""
    digest = hashlib.sha256(MAP_VERSION.encode())
    digest.update(pathlib.Path(__file__).read_bytes())
    for op in sorted(ops, key=lambda o: o.id):
        digest.update(f"{op.id}:{op.module}:{','.join(op.public_functions)}\n".encode())
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root).as_posix()}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def load_map(root: pathlib.Path, ops: list[OpEntry], cache_dir: pathlib.Path | None = None) -> dict[str, object]:
    """:func:`build_map`, once per process and tree (and under ``<cache>/model_ops/<key>.json``
    when ``cache_dir`` is given): some 1000 modules are parsed, half a minute on 2 cores."""
    memo = (str(root), hashlib.sha256(",".join(sorted(op.id for op in ops)).encode()).hexdigest())
    if memo not in _MAPS:
        key = tree_key(root, ops)
        path = cache_dir / "model_ops" / f"{key}.json" if cache_dir is not None else None
        data: dict[str, object] | None = None
        if path is not None and path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                data = loaded if loaded.get("version") == MAP_VERSION else None
            except (OSError, ValueError):
                data = None
        if data is None:
            with working("reading SGLang's model files for the models each op serves (once per source)"):
                data = build_map(root, ops)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    staging = path.with_suffix(".tmp")
                    staging.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
                    staging.replace(path)
                except OSError:
                    pass  # a cache we cannot fill costs time, not correctness
        _MAPS[memo] = data
    return _MAPS[memo]


_MAPS: dict[tuple[str, str], dict[str, object]] = {}


def callers(model_map: Mapping[str, object], op_id: str) -> list[str]:
    """The model files that call ``op_id`` (read from the code, plus :data:`OVERRIDES`)."""
    models = model_map.get("models", {})
    assert isinstance(models, dict)
    found = [rel for rel, entry in models.items() if op_id in entry.get("ops", [])]
    if op_id in OVERRIDES:
        found += [rel for rel in OVERRIDES[op_id][0] if rel not in found]
    return sorted(found)


# Where each catalog family's model files live: Qwen3ForCausalLM is both SGLang's LLM
# (srt/models/qwen3.py) and a diffusion pipeline's text encoder (multimodal_gen/...).
FAMILY_DIRS = {"llm": "srt/models/", "diffusion": "multimodal_gen/"}


def file_of_class(model_map: Mapping[str, object], cls: str, family: str = "llm") -> str | None:
    """The model file of ``family`` whose ``EntryClass`` lists ``cls``."""
    models = model_map.get("models", {})
    assert isinstance(models, dict)
    prefix = FAMILY_DIRS.get(family, "")
    return next(
        (rel for rel, entry in sorted(models.items()) if rel.startswith(prefix) and cls in entry.get("classes", [])),
        None,
    )


def model_file(model_map: Mapping[str, object], model: Model) -> str | None:
    """The SGLang model file a catalog model runs through (its first architecture that has one)."""
    return next((f for a in model.architectures if (f := file_of_class(model_map, a, model.family))), None)


def model_files(model_map: Mapping[str, object], model: Model) -> list[str]:
    """Every SGLang model file of a catalog model, in the order of its architectures: the main
    class's and, where the checkpoint also loads one from another file, its MTP / next-n draft
    class's (GLM-5-Next: ``glm5_next.py`` and ``glm5_next_nextn.py``)."""
    found = (file_of_class(model_map, a, model.family) for a in model.architectures)
    return list(dict.fromkeys(f for f in found if f))


def select_models(model_map: Mapping[str, object], op: OpEntry, catalog: list[Model]) -> tuple[list[Model], str]:
    """The catalog models ``op`` takes its shapes from, and why (recorded in the task's notes).

    The models one of whose SGLang model files (:func:`model_files`: the main class's, or
    the draft class's in another file) calls the op (:func:`callers`). Where none does
    (the op is reached only through a run-time choice, or only by model files the catalog
    has no model for), the fallback is every catalog model of the op's family: diffusion
    for an op under ``kernels/ops/diffusion/`` or ``multimodal_gen/`` (a Triton op's module may be
    there) or called only from ``multimodal_gen/``,
    else the LLMs; the width checks of :func:`extract.shapes.shape_cases` then keep what fits.
    """
    files = callers(model_map, op.id)
    calling = {m.name: [f for f in model_files(model_map, m) if f in files] for m in catalog}
    chosen = [m for m in catalog if calling[m.name]]
    if chosen:
        named = ", ".join(f"{m.name} ({', '.join(calling[m.name])})" for m in chosen)
        return chosen, f"catalog shapes from the models whose SGLang model file calls this op: {named}"
    diffusion = op.module.startswith(("kernels/ops/diffusion/", "multimodal_gen/")) or (
        bool(files) and all(f.startswith("multimodal_gen/") for f in files)
    )
    family = "diffusion" if diffusion else "llm"
    fallback = [m for m in catalog if m.family == family]
    if files:
        shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        why = f"called by {shown}, none a catalog model's"
    else:
        why = "no SGLang model file calls it by name (a run-time choice, or no model)"
    return fallback, f"{why}: catalog shapes from every {family} catalog model whose widths fit (fallback)"
