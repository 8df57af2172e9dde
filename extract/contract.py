"""The tensor contract of an op's entry point: what the harness must feed it.

Inference reads two sources and says what it could not settle; this module
finds the launcher and assembles the ``records.Contract`` (arguments, roles,
symbols, curated overrides), the reading itself is done by
:mod:`extract.launcher_facts` (C++) and :mod:`extract.wrapper_facts` (Python):

- **C++** (the launcher struct the export wraps, located through the index's
  spans): the entry's parameters in call order (``tvm::ffi::TensorView`` ->
  tensor; ``float``/``double``/integers/``bool``/``std::string`` -> scalar), the
  ``TensorMatcher({N, D}).with_strides({S, 1}).with_dtype<T>().verify(x)`` chains
  (symbol names from ``SymbolicSize{"name"}``; literals kept), ``RuntimeCheck`` /
  ``CHECK_HOST`` conditions (``hidden % kVecSize == 0`` becomes a divisibility,
  with ``kVecSize = kMaxVecBytes / sizeof(T)`` evaluated for sm_90a, strictest
  dtype), a ``X * k == Y.unwrap()`` relation (Y's dimension becomes ``k*X``), an
  ``if (x <= E) {...} else { RuntimeCheck(false, ...) }`` limit, and
  ``D.set_value(kDim)`` (a width fixed by a template argument). An entry that
  only forwards to another member (``run_activation`` -> ``launch``) is followed.
- **Python** (the functions the op reaches): ``register_custom_op(mutates_args=...)``
  mapped through ``module.<export>(...)`` call arguments, a public function that
  returns nothing (it writes into an argument), and parameter defaults for scalar
  values (``eps=1e-6``).

Roles: a tensor named like an output (``out``, ``output``, ``*_out``, ``dst``) is
``output``; ``residual`` or a mutated non-output tensor is ``inout``.

Curated contracts (``extract/curated/<op_id>.toml``) complete or override the
inferred one key by key (``args`` as a whole); ``origin`` then says ``curated``.
Their extra keys (``dtypes``, ``[[shapes]]``, ``allowed_values`` computed from a
Python predicate) are read by :mod:`extract.tasks` and :mod:`extract.shapes`.

What must stay true: inference never raises on odd C++; anything it cannot
settle is listed in ``Contract.unresolved`` (index ranges, metadata tensors, raw
pointers, unknown string values), so a contract without ``unresolved`` entries
is one the harness can trust as is. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib
from collections.abc import Iterable, Sequence
from typing import Any

from extract import pyops
from extract.cexpr import CPP_TYPES
from extract.cxx import balanced_end, strip_comments, template_params
from extract.cxx_nodes import find_definition
from extract.launcher_facts import READ_FROM_USES, CppFacts, cpp_facts, plain_matcher, scalar_type
from extract.wrapper_facts import PyFacts, python_facts
from pipeline.errors import ConfigError
from pipeline.records import (
    CPP_DTYPE,
    DTYPES,
    ArgSpec,
    Contract,
    Index,
    Instantiation,
    LauncherDef,
    OpEntry,
    ScalarSpec,
    TensorSpec,
)

CURATED_DIR = pathlib.Path(__file__).with_name("curated")

_OUTPUT_NAMES = re.compile(r"^(out|output|outputs|dst|result|out_\w+|output_\w+|\w+_out|\w+_output)$")
_INOUT_NAMES = re.compile(r"^(residual|\w+_inplace)$")
_INDEX_NAMES = re.compile(r"(ids?|indices|index|indptr|loc|locs|offsets?|lens?|table|mask|seq_?lens?|positions?|pos)$")


def _fits_scalar(kind: str, value: object) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def launcher_source(root: pathlib.Path, scan: Index, entry_text: str, files: list[str]) -> tuple[str, str, str] | None:
    """(struct-or-function text, method, file) for a wrapper's C++ entry, through the index spans."""
    struct, method = pyops.entry_parts(entry_text)
    launchers: list[LauncherDef] = list(getattr(scan, "launchers", []) or [])
    name = struct or method
    matches = [ln for ln in launchers if ln.name == name]
    own = [ln for ln in matches if ln.file in files]
    if own or matches:
        launcher = (own or matches)[0]
        data = (root / launcher.file).read_bytes()[launcher.start_byte : launcher.end_byte]
        return data.decode("utf-8", errors="replace"), method, launcher.file
    # not a launcher (a struct that delegates, a function that launches nothing itself): search the op's files
    for file in files:
        path = root / file
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if struct:
            m = re.search(rf"(template\s*<[^;{{}}]*>\s*)?(struct|class)\s+{re.escape(struct)}\b[^;{{]*\{{", text)
            if m:
                end = balanced_end(text, m.end() - 1)
                return text[m.start() : end], method, file
            # ``using Alias = std::conditional_t<c, A, B>``: the first named struct stands in
            alias = re.search(rf"using\s+{re.escape(struct)}\s*=\s*([^;]+);", text)
            if alias:
                for name in re.findall(r"\b([A-Z]\w*)\s*<", alias.group(1)):
                    found = launcher_source(root, scan, f"{name}<>::{method}", files)
                    if found is not None:
                        return found
        # a namespace-qualified free function (``ipc_a2a::spin_wait``)
        if find_definition(strip_comments(text), method) is not None:
            return text, method, file
    return None


def read_only_tensors(text: str, names: Iterable[str]) -> set[str]:
    """The tensors of ``names`` the launcher ``text`` reaches only through const pointers.

    Why: a name says little about direction from the op's side. ``gating_output`` is the
    router's output and topk_softmax's *input*; taken as an output, the harness poisoned it
    before every call, so the baseline ranked NaN logits and no candidate could match it
    (every PDL member of topk_softmax and moe_topk_softmax_out was "incorrect" on the H200,
    2026-12-02). A tensor whose every ``x.data_ptr()`` is cast to a pointer to const
    (``static_cast<const T*>(x.data_ptr())``, ``(const float*)x.data_ptr()``) is read, never
    written, whatever its name. One raw or mutable use anywhere keeps it out of the set.
    """
    code = strip_comments(text)
    out: set[str] = set()
    for name in names:
        uses = len(re.findall(rf"\b{re.escape(name)}\s*\.\s*data_ptr\s*\(\s*\)", code))
        const = len(
            re.findall(
                rf"(?:static_cast\s*<\s*const\b[^<>;]*\*\s*>\s*\(\s*|\(\s*const\b[^();]*\*\s*\)\s*)"
                rf"{re.escape(name)}\s*\.\s*data_ptr\s*\(\s*\)",
                code,
            )
        )
        if uses and const == uses:
            out.add(name)
    return out


def infer_contract(
    op: OpEntry,
    scan: Index,
    root: pathlib.Path,
    *,
    program: pyops.Program | None = None,
    entry: str | None = None,
    dtypes: Iterable[str] = DTYPES,
) -> Contract:
    """Infer the contract of ``entry`` (default: the op's first entry point).

    The steps: the launcher located (:func:`launcher_source`) and read (``cpp_facts``, ``python_facts``),
    each argument read in order (:class:`_EntryReading`), the contract assembled (:func:`_assemble_contract`).
    """
    root = pathlib.Path(root)
    dtypes = [d for d in dtypes]
    program = program or pyops.Program(root)
    entry = entry or (op.entry_points[0] if op.entry_points else "")
    unresolved: list[str] = []
    entries = [t for c in op.load_jit for e, t in pyops.call_exports(c, root) if e == entry]
    if not entries:
        return Contract(entry=entry, args=[], symbols=[], unresolved=[f"export `{entry}` has no C++ entry"])
    if len(set(entries)) > 1:
        unresolved.append(f"`{entry}` wraps one of {', '.join(dict.fromkeys(entries))}; inferred from the first")
    found = launcher_source(root, scan, entries[0], op.files)
    if found is None:
        return Contract(
            entry=entry,
            args=[],
            symbols=[],
            unresolved=[*unresolved, f"C++ entry `{entries[0]}` not found in {op.files}"],
        )
    text, method, file = found
    context = (root / file).read_text(encoding="utf-8", errors="replace")
    facts = cpp_facts(text, method, dtypes, context)
    positions = {name: i for i, (_kind, name) in enumerate(template_params(strip_comments(text)))}
    first_typename = next(
        (name for kind, name in template_params(strip_comments(text)) if kind in ("typename", "class")), None
    )
    unresolved += facts.unresolved
    py = python_facts(program, op, entry)
    tensor_names = [name for ptype, name in facts.params if "TensorView" in ptype]
    read_only = read_only_tensors(text, tensor_names)
    any_output = any(_OUTPUT_NAMES.match(n) for n in tensor_names if n not in read_only)
    reading = _EntryReading(facts, py, positions, first_typename, tensor_names, read_only, any_output, unresolved)
    args: list[ArgSpec] = []
    for position, (ptype, name) in enumerate(facts.params):
        if "TensorView" in ptype:
            args.append(ArgSpec(kind="tensor", tensor=reading.tensor(position, name)))
        else:
            args.append(ArgSpec(kind="scalar", scalar=reading.scalar(position, ptype, name)))
    return _assemble_contract(entry, args, reading)


@dataclasses.dataclass
class _EntryReading:
    """What :func:`infer_contract` reads the entry's arguments with, and what they add, in argument order."""

    facts: CppFacts
    py: PyFacts
    positions: dict[str, int]  # template parameter -> its position
    first_typename: str | None  # the launcher's first type parameter (the element type)
    tensor_names: list[str]
    read_only: set[str]  # tensors the launcher reaches only through const pointers
    any_output: bool  # a tensor, not read-only, is named like an output
    unresolved: list[str]  # in the order found: the contract keeps the first of each
    symbols: list[str] = dataclasses.field(default_factory=list)  # in order of first use
    type_params: dict[str, int] = dataclasses.field(default_factory=dict)

    def tensor(self, position: int, name: str) -> TensorSpec:
        """A tensor argument from its matchers (shape, strides, dtype) and its role; adds its symbols and notes."""
        facts, unresolved, positions = self.facts, self.unresolved, self.positions
        candidates = facts.matchers.get(name, [])
        if not candidates:
            unresolved.append(f"tensor `{name}`: no TensorMatcher declares its shape")
            return TensorSpec(name=name, shape=[], dtype="T", role="input")
        best = plain_matcher(candidates)  # several verify it in ``if constexpr`` arms
        if best.text == READ_FROM_USES:
            unresolved.append(
                f"tensor `{name}`: no TensorMatcher; shape {best.shape} read from how the launcher uses it"
            )
        if len({(tuple(m.shape), tuple(m.strides or ()), m.dtype) for m in candidates}) > 1:
            unresolved.append(
                f"tensor `{name}`: {len(candidates)} different matchers verify it (constexpr branches?); "
                "took the outermost, least constrained"
            )
        shape = [facts.relations.get(d, d) if isinstance(d, str) else d for d in best.shape]
        strides = None
        if best.strides is not None:
            strides = [facts.relations.get(d, d) if isinstance(d, str) else d for d in best.strides]
            if _is_contiguous(shape, strides):
                strides = None
        dtype = best.dtype or "T"
        if dtype.startswith("?") and dtype[1:] not in positions and dtype[1:] == self.first_typename:
            dtype = "T"  # a helper's own first type parameter: the element type, as ever
        if dtype.startswith("?") and dtype[1:] in positions:
            self.type_params[dtype[1:]] = positions[dtype[1:]]
        if dtype.startswith("?") or "|" in dtype:
            unresolved.append(f"tensor `{name}`: element type `{dtype.lstrip('?')}` is not the instantiation dtype")
        role = self.role(position, name)
        if dtype in ("int32", "int64", "uint8", "uint32", "uint64", "int8") or _INDEX_NAMES.search(name):
            unresolved.append(f"tensor `{name}` ({dtype}): index/metadata values, range not known")
        if "sorted" in name:
            unresolved.append(f"tensor `{name}`: its values must come sorted (order and padding not known)")
        spec = TensorSpec(name=name, shape=shape, dtype=dtype, role=role, strides=strides)
        for dim in [*shape, *(strides or [])]:
            if isinstance(dim, str):
                for sym in re.findall(r"[A-Za-z_]\w*", dim):
                    if sym not in self.symbols:
                        self.symbols.append(sym)
        return spec

    def role(self, position: int, name: str) -> str:
        """A tensor's role: read-only stays input, then its name, then what the Python writes or returns."""
        py = self.py
        role = "input"
        if name in self.read_only and position not in py.written:
            pass  # the launcher only reads it, whatever its name says
        elif _OUTPUT_NAMES.match(name):
            role = "output"
        elif _INOUT_NAMES.match(name) or position in py.written:
            role = "inout"
        elif not py.returns_value and not self.any_output and name == self.tensor_names[0]:
            role = "inout"
            self.unresolved.append(f"tensor `{name}`: assumed updated in place (the public function returns nothing)")
        if position in py.written and role == "input":
            role = "inout"
        return role

    def scalar(self, position: int, ptype: str, name: str) -> ScalarSpec:
        """A scalar argument: its kind from the C++ type, its value from what the wrapper passes or defaults to."""
        py = self.py
        kind = scalar_type(ptype)
        if kind is None:
            self.unresolved.append(f"parameter `{name}` of type `{ptype}` is neither a tensor nor a scalar")
            kind = "int"
        value = py.defaults.get(name)
        literal = py.literal_args.get(position)
        # what the wrapper passes on this path beats a default (None never fits)
        if literal is not None and _fits_scalar(kind, literal):
            value = float(literal) if kind == "float" else literal
        if kind == "str":
            value = value if isinstance(value, str) else None
            if value is None:
                self.unresolved.append(f"string argument `{name}`: value not known")
        if value is not None and not isinstance(value, (int, float, str, bool)):
            value = None
        if kind == "int" and position in py.sized_args and literal is None:
            value = None  # the wrapper passes a tensor's size: tied to it below
        return ScalarSpec(name=name, type=kind, value=value)


def _assemble_contract(entry: str, args: list[ArgSpec], reading: _EntryReading) -> Contract:
    """The last step: tie sized scalars, keep the launcher's facts over the contract's symbols, build the Contract."""
    facts = reading.facts
    symbols = reading.symbols
    args, tied = _tie_sized_scalars(args, reading.py.sized_args)
    symbols += [s for s, constraint in tied.items() if not constraint and s not in symbols]
    checks = list(facts.checks)
    scalar_names = {a.scalar.name for a in args if a.scalar is not None}
    constraints = [c for c in facts.constraints if set(re.findall(r"[A-Za-z_]\w*", c)) & (set(symbols) | scalar_names)]
    constraints += [c for c in tied.values() if c]
    for sym, tparam in facts.fixed_by_template.items():
        checks.append(f"{sym} == {tparam} (template argument: one instantiation per value)")
    shape_syms = {
        s
        for a in args
        if a.tensor
        for d in a.tensor.shape
        if isinstance(d, str)
        for s in re.findall(r"[A-Za-z_]\w*", d)
    }
    return Contract(
        entry=entry,
        args=args,
        symbols=[s for s in symbols if s in shape_syms] + [s for s in symbols if s not in shape_syms],
        divisibility={k: v for k, v in facts.divisibility.items() if k in symbols},
        max_values={k: v for k, v in facts.max_values.items() if k in symbols},
        allowed_values={k: v for k, v in facts.allowed.items() if k in symbols},
        checks=checks,
        constraints=constraints,
        unresolved=list(dict.fromkeys(reading.unresolved)),
        origin="inferred",
        type_params=reading.type_params,
    )


def _tie_sized_scalars(args: list[ArgSpec], sized: dict[int, tuple[int, int]]) -> tuple[list[ArgSpec], dict[str, str]]:
    """Int scalars the wrapper reads from a tensor it passes along (``size_limit =
    k_cache.shape[0]``): where that dimension is open (``-1``) it becomes a symbol of
    the scalar's name (an int named after a size takes that size in the harness); where
    it is a symbol, the scalar is settled equal to it (a constraint). Returns the
    arguments and, per new symbol or tied scalar, the constraint to add ("" for none)."""
    tied: dict[str, str] = {}
    out = list(args)
    for position, (tensor_at, dim) in sized.items():
        if not (position < len(out) and tensor_at < len(out)):
            continue
        scalar, tensor = out[position].scalar, out[tensor_at].tensor
        if scalar is None or tensor is None or scalar.type != "int" or scalar.value is not None:
            continue
        if not -len(tensor.shape) <= dim < len(tensor.shape):
            continue
        entry = tensor.shape[dim]
        if entry in (-1, "-1"):
            shape = list(tensor.shape)
            shape[dim] = scalar.name
            out[tensor_at] = out[tensor_at].model_copy(update={"tensor": tensor.model_copy(update={"shape": shape})})
            tied[scalar.name] = ""
        elif isinstance(entry, str) and re.fullmatch(r"[A-Za-z_]\w*", entry) and entry != scalar.name:
            tied[scalar.name] = f"({scalar.name} == {entry})"
    return out, tied


def settle_type_params(contract: Contract, instantiations: Sequence[Instantiation]) -> Contract:
    """Tensors whose dtype is a launcher template type parameter (``?QDType``), settled by
    what the instantiations pass at its position: the instantiation's own dtype in every
    one -> ``T``; one fixed C++ type in all -> that type. Anything else stays open."""
    if not contract.type_params or not instantiations:
        return contract
    args: list[ArgSpec] = []
    unresolved = list(contract.unresolved)
    for arg in contract.args:
        spec = arg.tensor
        name = spec.dtype[1:] if spec is not None and spec.dtype.startswith("?") else ""
        position = contract.type_params.get(name)
        if spec is not None and position is not None:
            given = [
                inst.template_args[position] if position < len(inst.template_args) else None for inst in instantiations
            ]
            settled = None
            if all(g == CPP_DTYPE.get(inst.dtype) for g, inst in zip(given, instantiations)):
                settled = "T"
            elif len(set(given)) == 1 and given[0] in CPP_TYPES:
                settled = CPP_TYPES[given[0]][0]
            if settled is not None:
                arg = arg.model_copy(update={"tensor": spec.model_copy(update={"dtype": settled})})
                unresolved = [
                    u
                    for u in unresolved
                    if u != f"tensor `{spec.name}`: element type `{name}` is not the instantiation dtype"
                ]
        args.append(arg)
    return contract.model_copy(update={"args": args, "unresolved": unresolved})


def _is_contiguous(shape: list[str | int], strides: list[str | int]) -> bool:
    """Declared strides that say no more than "contiguous" (``{D, 1}`` for ``[N, D]``).

    Only rank 1 and 2 are judged; a higher-rank stride list is kept as declared.
    """
    if len(shape) != len(strides) or not strides or strides[-1] != 1:
        return False
    if len(shape) == 1:
        return True
    return len(shape) == 2 and strides[0] == shape[1]


# =========================================================================== curated


def curated_path(op_id: str) -> pathlib.Path:
    return CURATED_DIR / f"{op_id}.toml"


def _read_curated(path: pathlib.Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"curated contract {path} is not valid TOML: {err}", fix="fix the TOML syntax") from err


def load_curated(op_id: str) -> dict[str, Any] | None:
    """The curated TOML of ``op_id``, or None. ``same_as = "<op id>"`` takes that op's file, with
    this file's own keys over it: two public ops of one launcher (moe.topk_softmax and
    moe.moe_topk_softmax_out) keep one contract, written once. The named file holds a contract
    itself (no chains)."""
    path = curated_path(op_id)
    if not path.is_file():
        return None
    data = _read_curated(path)
    twin = data.pop("same_as", None)
    if twin is None:
        return data
    twin_path = curated_path(str(twin))
    base = _read_curated(twin_path) if twin_path.is_file() else {}
    if not base or "same_as" in base:
        raise ConfigError(
            f"curated contract {path} says same_as = {twin!r}, which has no curated contract of its own",
            fix=f"name an op whose {twin_path.name} holds the contract itself",
        )
    return base | data


_CONTRACT_KEYS = {
    "entry",
    "symbols",
    "divisibility",
    "max_values",
    "checks",
    "constraints",
    "unresolved",
    "reference",
    "extra_bytes",
}


def allowed_from_python(program: pyops.Program, module: str, spec: dict[str, Any]) -> list[int]:
    """Evaluate a Python predicate of the op module (``_is_supported_rmsnorm_hidden_size``) over candidates."""
    fn = program.function(module, spec["python"])
    if fn is None:
        raise ConfigError(f"predicate {spec['python']} not found in {module}", fix="fix the curated contract")
    step, start, stop = int(spec.get("step", 1)), int(spec.get("min", spec.get("step", 1))), int(spec["max"])
    out = []
    for value in range(start, stop + 1, step):
        ev = pyops.Evaluator(program.sets.resolve, strict=True)
        try:
            if ev.call_function(fn, [value], {}, fn.node, pyops.Env(fn.module)) is True:
                out.append(value)
        except pyops.Unresolvable:
            continue
    return out


def apply_curated(
    inferred: Contract, curated: dict[str, Any], *, program: pyops.Program | None = None, module: str = ""
) -> Contract:
    """Curated keys replace inferred ones; ``args`` replace as a whole; origin becomes ``curated``."""
    data = inferred.model_dump()
    for key in _CONTRACT_KEYS:
        if key in curated:
            data[key] = curated[key]
    if "args" in curated:
        args = []
        for item in curated["args"]:
            item = dict(item)
            kind = item.pop("kind")
            if kind == "tensor":
                args.append({"kind": "tensor", "tensor": item})
            else:
                args.append({"kind": "scalar", "scalar": item})
        data["args"] = args
        if "unresolved" not in curated:
            data["unresolved"] = []
    allowed = dict(data.get("allowed_values") or {})
    for sym, spec in (curated.get("allowed_values") or {}).items():
        if isinstance(spec, dict):
            if program is None:
                raise ConfigError(
                    f"allowed_values of {sym!r} come from a Python predicate, which needs the op's program",
                    fix="pass program= and module= to apply_curated (contract_for does)",
                )
            allowed[sym] = allowed_from_python(program, module, spec)
        else:
            allowed[sym] = [int(v) for v in spec]
    data["allowed_values"] = allowed
    data["origin"] = "curated"
    return Contract.model_validate(data)


def contract_for(
    op: OpEntry, scan: Index, root: pathlib.Path, *, program: pyops.Program | None = None
) -> tuple[Contract, dict[str, Any] | None]:
    """The op's contract (inferred, then curated when ``extract/curated/<op_id>.toml`` exists) and the curated table."""
    program = program or pyops.Program(pathlib.Path(root))
    curated = load_curated(op.id)
    entry = (curated or {}).get("entry")
    dtypes = (curated or {}).get("dtypes", list(DTYPES))
    inferred = infer_contract(op, scan, root, program=program, entry=entry, dtypes=dtypes)
    if curated is None:
        return inferred, None
    return apply_curated(inferred, curated, program=program, module=op.module), curated
