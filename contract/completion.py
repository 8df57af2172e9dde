"""Filling what a contract leaves open: the testing agent's deterministic core.

Extract's static inference cannot know every argument: a scalar the op's callers
pass at run time (``page_size``, ``num_bits``, an activation's ``type``), or the
values an integer tensor may hold (positions, cache slots, expert ids, packed
weights). Without them the harness cannot call the baseline at all. This module
fills them by stated rules, in order:

1. a ``str`` scalar takes the first value the public Python function asserts its
   parameter is one of (``assert op_name in {"relu2"}``), else the first literal the
   kernel compares it with (``type == "silu"``) in the task's own sources;
2. the rules of :file:`completion.toml`, matched by argument name and type/role;
3. how an output is compared (``TensorSpec.order``): the ``[[order]]`` rules, matched
   by op and tensor name (an output whose order the kernel does not fix);
4. whether the roofline floor applies (``Contract.byte_bound``): the ``[[floor]]`` rules,
   matched by op (sorts, selections, scans: time ÷ floor is "n/a" for them).

Then, on the GPU, the baseline corrects what was guessed about it (it is the
oracle): :func:`baseline_fixes` turns what a failed baseline run showed (an input
it writes, an output it never writes, a dtype its check demands) into fixes, and
:func:`size_from_rejection` reads the size a TensorMatcher rejection expects (for
shapes the harness invented). The sweep and the loop apply them and run again.

What must stay true:
- Nothing is filled silently: every value is a :class:`Filled` entry with the rule
  and its reason, kept in the :class:`Completion` record beside the run and named
  in ``bench --all``'s table; a wrong guess shows as the *baseline* failing there.
- Only what the harness would otherwise refuse is filled: a scalar the harness
  settles itself (bools, epsilons, scales, a size symbol; :func:`contract.plan.scalar_value`)
  and a tensor that already has a range are left alone.
- What no rule covers stays open and is listed (``Completion.open``): that is the
  LLM testing agent's work (:func:`optimize.agents.testing.complete_contract`).
- Pure Python, no torch: the sweep asks on the CPU before any build.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import pathlib
import re
import tomllib
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from contract import constraints, dtypes
from contract.errors import ContractError
from contract.plan import ANY_SIZE, canonical_dtype, needs_value_range, plan_call, scalar_value
from contract.sizes import eval_expr, expr_symbols, shape_symbols, tensor_specs, token_symbol
from pipeline.record_io import Record, VersionedRecord
from pipeline.records import ArgSpec, Contract, Instantiation, Task, TensorSpec

RULES_PATH = pathlib.Path(__file__).with_name("completion.toml")
BASELINE_REPAIRS = 3  # re-evaluations of a baseline after it contradicted its contract
SOURCE_SUFFIXES = (".cuh", ".cu", ".h", ".hpp", ".cpp")
# Range of "full" packed data, capped to 32 bits so an int64 draw stays representable.
_FULL_BITS = 32


class Filled(Record):
    """One value the static contract did not have."""

    name: str  # argument name
    kind: Literal["value", "range", "role", "dtype", "offsets", "order", "floor"]
    value: float | int | bool | str | None = None  # for "role"/"dtype": the new role / dtype
    value_range: tuple[float | str, float | str] | None = None
    shape: list[str | int] | None = None  # "offsets": the length it takes (batch + 1), if it had none
    rule: str  # "source-literal", "completion.toml: <pattern>", "llm:<model>"
    why: str = ""

    def describe(self) -> str:
        if self.kind in ("role", "dtype", "order"):
            return f"{self.name}: {self.kind} {self.value} ({self.rule})"
        if self.kind == "floor":
            return f"time ÷ floor: n/a, not byte-bound ({self.rule})"
        shown = repr(self.value) if self.kind == "value" else f"[{', '.join(map(str, self.value_range or ()))}]"
        if self.kind == "offsets":
            shown = f"offsets {shown}" + (f", shape {self.shape}" if self.shape else "")
        return f"{self.name} = {shown} ({self.rule})"


class Completion(VersionedRecord):
    op_id: str
    filled: list[Filled] = Field(default_factory=list)
    open: list[str] = Field(default_factory=list)  # still open, in the harness's own words
    # a task extracted without its compile check: the instantiations nvcc refuses, left out of every
    # call of the run (instantiation_key), and nvcc's reason
    dropped: list[str] = Field(default_factory=list)
    dropped_reason: str = ""


def instantiation_key(inst: Instantiation) -> str:
    """``fp32 <fp32_t>``: how a record names one instantiation (its dtype and template arguments)."""
    return f"{inst.dtype} <{', '.join(inst.template_args)}>"


@functools.lru_cache(maxsize=4)
def load_rules(path: pathlib.Path = RULES_PATH) -> dict[str, list[dict]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ContractError(f"completion rules {path} do not load: {err}", fix="fix the TOML file") from err
    return {key: list(data.get(key, [])) for key in ("scalar", "index", "order", "floor")}


# ------------------------------------------------------------------ what is open


def open_scalar(contract: Contract, index: int) -> bool:
    """Whether the harness would refuse to call with this scalar."""
    arg = contract.args[index]
    if arg.kind != "scalar" or arg.scalar is None or arg.scalar.value is not None:
        return False
    if arg.scalar.type == "int" and arg.scalar.name in shape_symbols(contract):
        return False  # settled per case from the sizes
    if arg.scalar.type == "int" and arg.scalar.name in constraints.open_ints(contract):
        return False  # settled per case by the kernel's own checks (constraints.settle_scalars)
    try:
        scalar_value(contract, index, {})
    except ContractError:
        return True
    return False


def open_tensor(spec: TensorSpec) -> bool:
    """An integer, non-bool tensor the kernel reads, with no value range (what
    :func:`contract.plan.require_fillable` refuses)."""
    if spec.dtype == "T":
        return False  # the instantiation's (float) dtype
    try:
        short = canonical_dtype(spec.dtype, "")
    except ContractError:
        return False  # a dtype the harness cannot fill is reported as such, not here
    return needs_value_range(spec.role, short, spec.value_range)


def open_items(contract: Contract) -> list[str]:
    out = []
    for index, arg in enumerate(contract.args):
        if arg.kind == "scalar" and open_scalar(contract, index):
            out.append(f"scalar {arg.scalar.name} ({arg.scalar.type}): no value to call with")  # type: ignore[union-attr]
        elif arg.kind == "tensor" and arg.tensor is not None and open_tensor(arg.tensor):
            out.append(f"tensor {arg.tensor.name} ({arg.tensor.dtype}, {arg.tensor.role}): no value range")
    return out


# ------------------------------------------------------------------ rules


def _matches(name: str, patterns: Sequence[str]) -> str | None:
    return next((p for p in patterns if fnmatch.fnmatchcase(name, p)), None)


def _source_texts(task: Task, task_dir: pathlib.Path | None) -> list[str]:
    """The task's sources, its own files (the module's cuda_files) first: a name like
    ``type`` is compared with literals in shared headers too."""
    if task_dir is None:
        return []
    src = pathlib.Path(task_dir) / "src"
    own = [src / f for f in task.build.cuda_files]
    rest = [p for p in sorted(src.rglob("*")) if p.suffix in SOURCE_SUFFIXES and p not in own]
    return [p.read_text(encoding="utf-8", errors="replace") for p in [*own, *rest] if p.is_file()]


def compared_literal(name: str, texts: Sequence[str]) -> str | None:
    """The first string literal the sources compare ``name`` with (``type == "silu"``)."""
    pattern = re.compile(rf'\b{re.escape(name)}\s*==\s*"([^"\\]+)"|"([^"\\]+)"\s*==\s*{re.escape(name)}\b')
    for text in texts:
        match = pattern.search(text)
        if match:
            return match.group(1) or match.group(2)
    return None


def asserted_literal(task: Task, name: str) -> Filled | None:
    """The first value the public Python function asserts the parameter feeding ``name`` takes
    (:attr:`pipeline.records.EntryParam.allowed`), which outranks a literal the kernel compares."""
    signature = task.entry_signature
    if signature is None:
        return None
    for param in signature.params:
        if param.feeds == name and param.allowed:
            why = f"{signature.function} asserts {param.name} in {param.allowed}"
            return Filled(name=name, kind="value", value=param.allowed[0], rule="python-assert", why=why)
    return None


def _order_rule(op_id: str, spec: TensorSpec, rules: list[dict]) -> Filled | None:
    """How an output of ``op_id`` is compared, from an ``[[order]]`` rule naming the op and the tensor."""
    if spec.role == "input":
        return None
    for rule in rules:
        pattern = _matches(spec.name, rule.get("names", []))
        if pattern is not None and _matches(op_id, rule.get("ops", [])) is not None:
            return Filled(
                name=spec.name, kind="order", value=rule["order"], rule=f"completion.toml: {pattern}", why=rule["why"]
            )
    return None


def _floor_rule(op_id: str, rules: list[dict]) -> Filled | None:
    """``Contract.byte_bound = false`` from the first ``[[floor]]`` rule naming ``op_id``."""
    for rule in rules:
        pattern = _matches(op_id, rule.get("ops", []))
        if pattern is not None and rule.get("byte_bound") is False:
            return Filled(
                name="byte_bound", kind="floor", value=False, rule=f"completion.toml: {pattern}", why=rule["why"]
            )
    return None


def _scalar_rule(name: str, type_: str, rules: list[dict]) -> Filled | None:
    for rule in rules:
        pattern = _matches(name, rule.get("names", []))
        if pattern is not None and rule.get("type") == type_:
            return Filled(
                name=name,
                kind="value",
                value=rule["value"],
                rule=f"completion.toml: {pattern}",
                why=rule.get("why", ""),
            )
    return None


def _dim_text(dim: str | int) -> str:
    """A shape entry as a bound's term: a wildcard (-1) is the size the harness gives it,
    an expression is parenthesised."""
    if dim in (-1, "-1"):
        return str(ANY_SIZE)
    text = str(dim).strip()
    return text if isinstance(dim, int) or text.isidentifier() else f"({text})"


def _smallest(terms: set[str]) -> str | None:
    """``a`` or ``min(a, b, ...)`` over ``terms`` (sorted, so the text is stable); None for none."""
    ordered = sorted(terms)
    if not ordered:
        return None
    return ordered[0] if len(ordered) == 1 else f"min({', '.join(ordered)})"


def _gather_high(contract: Contract, spec: TensorSpec) -> str | None:
    """``min(<leading size of every other multi-row tensor>) - 1``, or None without one."""
    own = spec.shape[0] if spec.shape else None
    tables = {
        _dim_text(t.shape[0])
        for t in tensor_specs(contract)
        if t.name != spec.name and len(t.shape) >= 2 and t.shape[0] != own
    }
    smallest = _smallest(tables)
    return None if smallest is None else f"{smallest} - 1"


def _length_high(contract: Contract, spec: TensorSpec) -> str | None:
    """For a 1-D lengths tensor (``seq_lens[batch]``): the smallest last dimension of the
    floating-point tensors that share its dimension (``scores[batch, max_seq_len]``):
    a length that indexes their rows stays inside them. None without one."""
    if len(spec.shape) != 1 or not isinstance(spec.shape[0], str):
        return None
    own = spec.shape[0]
    rows = set()
    for t in tensor_specs(contract):
        if t.name == spec.name or len(t.shape) < 2 or own not in t.shape[:-1]:
            continue
        if t.dtype != "T" and canonical_dtype(t.dtype, "bf16") not in dtypes.FLOAT_DTYPES:
            continue
        rows.add(_dim_text(t.shape[-1]))
    return _smallest(rows)


def _offsets(contract: Contract, spec: TensorSpec) -> tuple[str, list[str | int] | None] | None:
    """For a 1-D prefix sum over the token dimension (``cu_seqlens[batch + 1]``): the total
    it ends at (the token symbol) and, where its own length says nothing (``-1``, or a
    symbol no other tensor has), ``[batch + 1]`` with ``batch`` the size of the other 1-D
    per-sequence tensors (``cache_indices[B]``). None without a token dimension."""
    if len(spec.shape) != 1:
        return None
    token = token_symbol(contract)
    if token is None:
        return None
    own = spec.shape[0]
    if own == token:
        return None  # one entry per token is no batch of sequences
    others = [t for t in tensor_specs(contract) if t.name != spec.name]
    if isinstance(own, int) and own != -1:
        return token, None
    if isinstance(own, str) and own != "-1" and any(own in map(str, t.shape) for t in others):
        return token, None  # its length is tied to other tensors already
    batches = [
        t.shape[0]
        for t in others
        if t.shape
        and isinstance(t.shape[0], str)
        and t.shape[0] != token
        and (len(t.shape) == 1 or all(d == 1 for d in t.shape[1:]))
    ]
    return token, ([f"{batches[0]} + 1"] if batches else None)


def _known_names(contract: Contract) -> set[str]:
    names = shape_symbols(contract)
    names |= {
        a.scalar.name for a in contract.args if a.kind == "scalar" and a.scalar is not None and a.scalar.type == "int"
    }
    return names


def _full_range(spec: TensorSpec) -> tuple[int, int]:
    short = canonical_dtype(spec.dtype, "")
    bits = min(8 * dtypes.ITEMSIZE[short], _FULL_BITS)
    if short.startswith("uint"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def _index_rule(contract: Contract, spec: TensorSpec, rules: list[dict], known: set[str]) -> Filled | None:
    for rule in rules:
        pattern = _matches(spec.name, rule.get("names", []))
        if pattern is None or spec.role not in rule.get("roles", ["input"]):
            continue
        if "dtypes" in rule and canonical_dtype(spec.dtype, "") not in rule["dtypes"]:
            continue
        kind = rule.get("kind")
        bounds: tuple[float | str, float | str] | None = None
        high: str | None
        if kind == "open":
            return None
        if kind == "bounded":
            low, high = str(rule["low"]), str(rule["high"])
            if (expr_symbols(low) | expr_symbols(high)) <= known:
                bounds = (low, high)
        elif kind == "gather":
            high = _gather_high(contract, spec)
            bounds = None if high is None else ("0", high)
        elif kind == "lengths":
            high = _length_high(contract, spec)
            bounds = None if high is None else ("1", high)
        elif kind == "offsets":
            found = _offsets(contract, spec)
            if found is not None:
                total, shape = found
                return Filled(
                    name=spec.name,
                    kind="offsets",
                    value_range=("0", total),
                    shape=shape,
                    rule=f"completion.toml: offsets {pattern}",
                    why=rule.get("why", ""),
                )
        elif kind == "zeros":
            bounds = (0, 0)
        elif kind == "full":
            bounds = _full_range(spec)
        else:
            raise ContractError(
                f"completion rule for {pattern!r} has an unknown kind {kind!r}", fix=f"fix {RULES_PATH.name}"
            )
        if bounds is not None:
            return Filled(
                name=spec.name,
                kind="range",
                value_range=bounds,
                rule=f"completion.toml: {kind} {pattern}",
                why=rule.get("why", ""),
            )
    return None


# ------------------------------------------------------------------ applying


def apply(contract: Contract, filled: Sequence[Filled]) -> Contract:
    """The contract with ``filled`` written in (by argument name). A role change drops
    the contract's PyTorch reference: references read tensors by role, so one written
    for the old roles would check the wrong arguments."""
    args: list[ArgSpec] = []
    for arg in contract.args:
        for f in filled:  # in order: a tensor may get an order and, later, a role the baseline proves
            if arg.kind == "scalar" and arg.scalar is not None and arg.scalar.name == f.name:
                arg = arg.model_copy(update={"scalar": arg.scalar.model_copy(update={"value": f.value})})
            elif arg.kind == "tensor" and arg.tensor is not None and arg.tensor.name == f.name:
                field: dict[str, object] = (
                    {f.kind: f.value} if f.kind in ("role", "dtype", "order") else {"value_range": f.value_range}
                )
                if f.kind == "offsets":
                    field.update(structure="offsets", **({"shape": f.shape} if f.shape else {}))
                arg = arg.model_copy(update={"tensor": arg.tensor.model_copy(update=field)})
        args.append(arg)
    update: dict = {"args": args}
    if any(f.kind == "floor" for f in filled):
        update["byte_bound"] = False
    if any(f.kind == "role" for f in filled):
        update["reference"] = None
    return contract.model_copy(update=update)


_EVIDENCE_WHY = {
    "written": "the baseline modifies it, so it is updated in place, not read only",
    "never_written": "the baseline never writes any of it, so it is read (or accumulated into), not produced",
}


def roles_from_baseline(contract: Contract, evidence: dict[str, str]) -> list[Filled]:
    """Role fixes the baseline's own behaviour proves (WorkerResult.role_evidence): the
    oracle defines what the op does, so an input it writes or an output it never
    writes was a wrong guess of extract's. Both become ``inout``: its values are then
    drawn like an input's and compared after the call like an output's."""
    roles = {a.tensor.name: a.tensor.role for a in contract.args if a.kind == "tensor" and a.tensor is not None}
    return [
        Filled(
            name=name, kind="role", value="inout", rule=f"baseline: {what.replace('_', ' ')}", why=_EVIDENCE_WHY[what]
        )
        for name, what in evidence.items()
        if what in _EVIDENCE_WHY and roles.get(name) in ("input", "output")
    ]


_REJECTION = re.compile(
    r"Tensor match failed for Tensor<([\d,\s]*)>\[.*?dtype=(\w+).*?"
    r"Size mismatch for shape#(\d+)(?:\('[^']*'\))?: expected (\d+) but got (\d+)",
    re.S,
)
_NAMED_DEMAND = re.compile(r"\bexpects (\w+)\s*=\s*(\d+), got \d+")


def size_from_rejection(contract: Contract, sizes: dict[str, int], dtype: str, message: str) -> tuple[str, int] | None:
    """(symbol, value) a baseline's TensorMatcher rejection asks for, or None.

    SGLang's matcher says which tensor (its shape and dtype), which dimension and
    what it expected: "Tensor<8, 128>[..dtype=bfloat16..] .. Size mismatch for
    shape#1: expected 6144 but got 128". The tensor is found among this call's
    tensors by shape and dtype; the symbol is the one that dimension's entry names
    (``s``, or ``c*s`` with the value divisible by ``c``). Only for sizes the harness
    invented (a synthetic shape): a rejected *catalog* shape is a real mismatch.
    A check that names one of the contract's symbols ("expects freq_dim=256, got
    128") is read the same way."""
    named = _NAMED_DEMAND.search(message)
    if named is not None and named.group(1) in sizes and int(named.group(2)) != sizes[named.group(1)]:
        return named.group(1), int(named.group(2))  # "expects freq_dim=256, got 128": our symbol by name
    match = _REJECTION.search(message)
    if match is None:
        return None
    dims = tuple(int(x) for x in match.group(1).replace(" ", "").split(",") if x)
    got_dtype, dim, expected = match.group(2), int(match.group(3)), int(match.group(4))
    try:
        plan = plan_call(contract, sizes, dtype)
        wanted = canonical_dtype(got_dtype, dtype)
    except ContractError:
        return None
    specs = {s.name: s for s in tensor_specs(contract)}
    for tensor in plan.tensors:
        if tensor.shape != dims or tensor.dtype != wanted or dim >= len(dims):
            continue
        entry = specs[tensor.name].shape[dim]
        solved = _solve(entry, expected, sizes)
        if solved is not None and solved[0] in sizes and solved[1] > 0:
            return solved
    return None


def _solve(entry: str | int, value: int, sizes: dict[str, int] | None = None) -> tuple[str, int] | None:
    """``s`` -> (s, value); ``c*s`` / ``s*c`` -> (s, value // c) when exact; ``n / d``
    with both at known sizes -> (d, n // value) when exact (awq_marlin_repack's
    ``size_n / pack_factor``: the divisor is the packing, the numerator the width),
    else (n, value * d); else None."""
    text = str(entry).strip()
    if text.isidentifier():
        return text, value
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for const, name in ((node.left, node.right), (node.right, node.left)):
            if isinstance(const, ast.Constant) and type(const.value) is int and isinstance(name, ast.Name):
                return (name.id, value // const.value) if const.value and value % const.value == 0 else None
    known = sizes or {}
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)) and value > 0:
        num, den = node.left, node.right
        if isinstance(den, ast.Name) and den.id in known:
            try:
                numerator: int | None = eval_expr(ast.unparse(num), known)
            except ContractError:
                numerator = None
            if numerator is not None and numerator % value == 0 and numerator // value > 0:
                return den.id, numerator // value
            if isinstance(num, ast.Name):
                return num.id, value * known[den.id]
    return None


_DTYPE_DEMAND = re.compile(r"\b(\w+) (?:on CUDA )?must be (float32|float16|bfloat16|int32|int64|int8|uint8)\b")


def dtype_from_rejection(contract: Contract, message: str) -> Filled | None:
    """The dtype a baseline's check demands of one of the contract's tensors
    ("correction_bias must be float32"), when the contract says otherwise."""
    specs = {s.name: s for s in tensor_specs(contract)}
    for match in _DTYPE_DEMAND.finditer(message):
        name, dtype = match.group(1), match.group(2)
        spec = specs.get(name)
        if spec is not None and spec.dtype != dtype:
            return Filled(name=name, kind="dtype", value=dtype, rule="baseline: check", why=match.group(0))
    return None


def baseline_fixes(contract: Contract, evidence: dict[str, str], detail: str) -> list[Filled]:
    """Every contract fix one failed baseline run proves: roles from its evidence, and
    a dtype its own check demands. The sweep and the loop both learn through this."""
    fixes = roles_from_baseline(contract, evidence)
    demanded = dtype_from_rejection(contract, detail)
    return fixes + ([demanded] if demanded is not None and demanded.name not in {f.name for f in fixes} else [])


def refixed(task: Task, fixes: Sequence[Filled], task_dir: pathlib.Path | None) -> tuple[Task, Completion]:
    """The task with the baseline's ``fixes`` applied and the rules run again (a fixed
    tensor may now need what they fill: a dtype turned integer); the record's
    ``filled`` is the fixes, then what the rules added. The sweep and the loop both
    take a fix through here."""
    fixed, more = complete(task.model_copy(update={"contract": apply(task.contract, fixes)}), task_dir)
    return fixed, more.model_copy(update={"filled": [*fixes, *more.filled]})


def complete(
    task: Task, task_dir: pathlib.Path | None = None, *, rules_path: pathlib.Path = RULES_PATH
) -> tuple[Task, Completion]:
    """The task with every open item a rule covers filled in, and the record of it. A
    contract the harness cannot read at all is returned as it is (planning reports it)."""
    rules = load_rules(rules_path)
    try:
        return _complete(task, task_dir, rules)
    except ContractError as err:
        return task, Completion(op_id=task.op_id, open=[f"not completed: {err.message}"])


def _complete(task: Task, task_dir: pathlib.Path | None, rules: dict[str, list[dict]]) -> tuple[Task, Completion]:
    contract = task.contract
    texts: list[str] | None = None
    known = _known_names(contract)
    filled: list[Filled] = []
    for index, arg in enumerate(contract.args):
        if arg.kind == "scalar" and arg.scalar is not None and open_scalar(contract, index):
            entry = None
            if arg.scalar.type == "str":
                entry = asserted_literal(task, arg.scalar.name)
                texts = _source_texts(task, task_dir) if texts is None else texts
                literal = None if entry is not None else compared_literal(arg.scalar.name, texts)
                if literal is not None:
                    entry = Filled(
                        name=arg.scalar.name,
                        kind="value",
                        value=literal,
                        rule="source-literal",
                        why=f'the kernel compares {arg.scalar.name} with "{literal}" (the first such literal)',
                    )
            entry = entry or _scalar_rule(arg.scalar.name, arg.scalar.type, rules["scalar"])
            if entry is not None:
                filled.append(entry)
        elif arg.kind == "tensor" and arg.tensor is not None and open_tensor(arg.tensor):
            entry = _index_rule(contract, arg.tensor, rules["index"], known)
            if entry is not None:
                filled.append(entry)
        if arg.kind == "tensor" and arg.tensor is not None and arg.tensor.order is None:
            ordered = _order_rule(task.op_id, arg.tensor, rules["order"])
            if ordered is not None:
                filled.append(ordered)
    floor = _floor_rule(task.op_id, rules["floor"]) if contract.byte_bound else None
    if floor is not None:
        filled.append(floor)
    completed = apply(contract, filled)
    record = Completion(op_id=task.op_id, filled=filled, open=open_items(completed))
    return task.model_copy(update={"contract": completed}), record
