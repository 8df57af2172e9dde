"""The tensor contract of an op's entry point: what the harness must feed it.

Inference reads two sources and says what it could not settle:

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
from typing import Any, Iterable, Sequence

import libcst as cst

from contract import dtypes as dtype_table
from extract import pyops
from pipeline.errors import ConfigError
from pipeline.records import CPP_DTYPE, DTYPES, ArgSpec, Contract, Instantiation, OpEntry, ScalarSpec, TensorSpec

CURATED_DIR = pathlib.Path(__file__).with_name("curated")

# Constants of include/sgl_kernel/utils.cuh for sm_90a (Hopper):
# kMaxVecBytes = SGL_ARCH_BLACKWELL_OR_GREATER ? 32 : 16.
ARCH_CONSTANTS: dict[str, int] = {
    "kMaxVecBytes": 16,
    "kWarpThreads": 32,
    "SGL_ARCH_BLACKWELL_OR_GREATER": 0,
    "SGL_ARCH_HOPPER_OR_GREATER": 1,
    "SGL_CUDA_ARCH": 900,
}
# C++ element types -> (torch dtype name, bytes), from the one dtype table.
CPP_TYPES: dict[str, tuple[str, int]] = {cpp: (dtype_table.torch_name(s), dtype_table.TABLE[s].nbytes) for cpp, s in dtype_table.CPP_TYPES.items()}
DTYPE_BYTES = {d: dtype_table.TABLE[d].nbytes for d in DTYPES}

_OUTPUT_NAMES = re.compile(r"^(out|output|outputs|dst|result|out_\w+|output_\w+|\w+_out|\w+_output)$")
_INOUT_NAMES = re.compile(r"^(residual|\w+_inplace)$")
_INDEX_NAMES = re.compile(r"(ids?|indices|index|indptr|loc|locs|offsets?|lens?|table|mask|seq_?lens?|positions?|pos)$")


# =========================================================================== C++ text helpers


def strip_comments(text: str) -> str:
    """Comments replaced by spaces (newlines kept); string literals kept (they hold symbol names)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def balanced_end(text: str, start: int) -> int:
    """Index just past the bracket that closes ``text[start]`` (``(``, ``[`` or ``{``)."""
    open_ch = text[start]
    close_ch = _PAIRS[open_ch]
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside (), [], {} and template <> brackets."""
    parts, depth, angle, buf = [], 0, 0, []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and re.search(r"[\w:]$", "".join(buf)) and text[i + 1 : i + 2] not in ("<", "="):
            angle += 1  # a template bracket hugs its name (``foo<T>``); ``a < b`` and ``a <= b`` do not
        elif ch == ">" and angle > 0 and depth == 0:
            angle -= 1
        if depth == 0 and angle == 0 and text.startswith(sep, i):
            parts.append("".join(buf).strip())
            buf = []
            i += len(sep)
            continue
        buf.append(ch)
        i += 1
    tail = "".join(buf).strip()
    if tail or parts:
        parts.append(tail)
    return [p for p in parts if p != ""]


@dataclasses.dataclass
class CppFunction:
    name: str
    params: list[tuple[str, str]]  # (type, name)
    body: str
    template: str = ""
    bound: dict[str, int] = dataclasses.field(default_factory=dict)  # template parameters a call fixed (_bound)


def template_params(struct_text: str) -> list[tuple[str, str]]:
    """``template <typename T, bool kUsePDL>`` at the head of a struct -> [(kind, name)]."""
    match = re.match(r"\s*template\s*<", struct_text)
    if not match:
        return []
    end = _angle_end(struct_text, match.end() - 1)
    out = []
    for part in split_top(struct_text[match.end() : end - 1]):
        part = part.split("=")[0].strip()
        words = part.replace("...", " ").split()
        if len(words) >= 2:
            out.append((" ".join(words[:-1]), words[-1]))
    return out


def _angle_end(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "<":
            depth += 1
        elif text[i] == ">":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def find_function(text: str, name: str) -> CppFunction | None:
    """The first *definition* of member/free function ``name`` in ``text`` (not a call, not a declaration)."""
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        before = text[: match.start()].rstrip()
        # a definition's name follows a return type (an identifier, '>', '&' or '*'),
        # a call follows an operator, '(', ',' or 'return'
        if not before or before[-1] in "=(,.;{}!+-/%|?:" or re.search(r"\b(return|else|case)\s*$", before):
            continue
        if before.endswith("->") or before.endswith("::") and not re.search(r"\w::$", before):
            continue
        open_at = match.end() - 1
        close = balanced_end(text, open_at)
        rest = text[close:]
        head = re.match(r"\s*(const\s*)?(noexcept(\([^)]*\))?\s*)?(override\s*)?(->\s*[\w:<>, ]+)?\s*", rest)
        after = close + (head.end() if head else 0)
        if after >= len(text) or text[after] != "{":
            continue
        body_end = balanced_end(text, after)
        params = []
        for part in split_top(text[open_at + 1 : close - 1]):
            decl = part.split("=")[0].strip()
            words = re.match(r"(.*?)([A-Za-z_]\w*)\s*$", decl)
            if words and words.group(1).strip():
                params.append((" ".join(words.group(1).split()), words.group(2)))
            elif decl and decl != "void":
                params.append((decl, ""))
        template = ""
        tmatch = re.search(r"template\s*<[^;{}]*>\s*(static\s+)?(inline\s+)?[\w:<>,\s&*]*$", text[max(0, match.start() - 300) : match.start()])
        if tmatch:
            template = tmatch.group(0)
        return CppFunction(name=name, params=params, body=text[after + 1 : body_end - 1], template=template)
    return None


# =========================================================================== C expressions


class _CExpr:
    """A tiny parser for the integer expressions contract checks use.

    Supports literals (with u/l suffixes), identifiers, ``sizeof(Type)``,
    ``static_cast<...>(x)``, ``device::``/``host::`` prefixes, ``+ - * / %``,
    shifts, comparisons, ``&& || !`` and ``?:``, into a tuple tree:
    ``("num", v)``, ``("name", n)``, ``("sizeof", type)``, ``("un", op, x)``,
    ``("bin", op, a, b)``, ``("if", cond, a, b)``. Anything else raises
    ValueError: the caller then keeps the check as text only. One parser serves
    both uses, evaluating (:func:`eval_c`) and translating to Python
    (:func:`c_to_python`), so the two cannot read a check differently.
    """

    _TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+[uUlL]*|[A-Za-z_][\w:]*|<=|>=|==|!=|&&|\|\||<<|>>|[-+*/%()<>!?:])")
    _LEVELS = [["||"], ["&&"], ["==", "!="], ["<", "<=", ">", ">="], ["<<", ">>"], ["+", "-"], ["*", "/", "%"]]

    def __init__(self, text: str) -> None:
        self.tokens = self._tokenize(text)
        self.pos = 0

    def _tokenize(self, text: str) -> list[str]:
        text = re.sub(r"static_cast\s*<[^<>]*(<[^<>]*>)?[^<>]*>", "", text)
        tokens, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = self._TOKEN.match(text, pos)
            if not match:
                raise ValueError(f"cannot read {text[pos:]!r}")
            tokens.append(match.group(1))
            pos = match.end()
        return tokens

    def tree(self) -> tuple:
        result = self.ternary()
        if self.pos != len(self.tokens):
            raise ValueError("trailing tokens")
        return result

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ValueError("unexpected end")
        self.pos += 1
        return tok

    def ternary(self) -> tuple:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            a = self.ternary()
            if self.take() != ":":
                raise ValueError("expected :")
            return ("if", cond, a, self.ternary())
        return cond

    def binary(self, level: int) -> tuple:
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()
            left = ("bin", op, left, self.binary(level + 1))
        return left

    def unary(self) -> tuple:
        tok = self.peek()
        if tok in ("!", "-", "+"):
            self.take()
            operand = self.unary()
            return operand if tok == "+" else ("un", tok, operand)
        return self.atom()

    def atom(self) -> tuple:
        tok = self.take()
        if tok == "(":
            value = self.ternary()
            if self.take() != ")":
                raise ValueError("expected )")
            return value
        if re.match(r"0[xX]", tok):
            return ("num", int(tok, 16))
        if tok[0].isdigit():
            return ("num", int(tok.rstrip("uUlL")))
        name = tok.split("::")[-1]
        if name == "sizeof":
            if self.take() != "(":
                raise ValueError("expected (")
            type_name = self.take().split("::")[-1]
            if self.take() != ")":
                raise ValueError("expected )")
            return ("sizeof", type_name)
        if name in ("true", "false"):
            return ("num", int(name == "true"))
        return ("name", name)


_C_OPS: dict[str, Any] = {
    "||": lambda a, b: int(bool(a) or bool(b)), "&&": lambda a, b: int(bool(a) and bool(b)),
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: int(a / b), "%": lambda a, b: a % b,
}  # fmt: skip


def _sizeof(type_name: str, sizes: dict[str, int]) -> int:
    if type_name in sizes:
        return sizes[type_name]
    if type_name in CPP_TYPES:
        return CPP_TYPES[type_name][1]
    raise ValueError(f"sizeof({type_name})")


def _c_value(node: tuple, env: dict[str, int], sizes: dict[str, int]) -> int:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "sizeof":
        return _sizeof(node[1], sizes)
    if kind == "name":
        if node[1] in env:
            return env[node[1]]
        raise ValueError(f"unknown name {node[1]}")
    if kind == "un":
        value = _c_value(node[2], env, sizes)
        return int(not value) if node[1] == "!" else -value
    if kind == "if":
        return _c_value(node[2], env, sizes) if _c_value(node[1], env, sizes) else _c_value(node[3], env, sizes)
    return _C_OPS[node[1]](_c_value(node[2], env, sizes), _c_value(node[3], env, sizes))


def eval_c(text: str, env: dict[str, int], sizes: dict[str, int] | None = None) -> int | None:
    """Evaluate a C++ integer expression, or None when it uses anything unknown."""
    try:
        return _c_value(_CExpr(text).tree(), env, sizes or {})
    except (ValueError, ZeroDivisionError, IndexError):
        return None


_PY_OPS = {"||": "or", "&&": "and", "/": "//"}


def c_to_python(text: str, name_of: Any) -> str | None:
    """A C++ condition as a Python expression with its names renamed, or None.

    ``name_of(name)`` gives a name's replacement (a contract symbol or scalar name,
    or an integer constant) or None when the name means nothing outside the C++
    (a local, a pointer, a method call): the condition is then not translated.
    ``D.unwrap()`` is read as ``D``; integer division becomes ``//``.
    """
    text = re.sub(r"\b(\w+)\.unwrap\(\)", r"\1", text)

    def emit(node: tuple) -> str:
        kind = node[0]
        if kind == "num":
            return str(node[1])
        if kind == "sizeof":
            return str(_sizeof(node[1], {}))  # a built-in type; a template's T stays unknown
        if kind == "name":
            value = name_of(node[1])
            if value is None:
                raise ValueError(f"unknown name {node[1]}")
            return str(value)
        if kind == "un":
            return f"(not {emit(node[2])})" if node[1] == "!" else f"(-{emit(node[2])})"
        if kind == "if":
            return f"({emit(node[2])} if {emit(node[1])} else {emit(node[3])})"
        return f"({emit(node[2])} {_PY_OPS.get(node[1], node[1])} {emit(node[3])})"

    try:
        return emit(_CExpr(text).tree())
    except (ValueError, IndexError):
        return None


# =========================================================================== C++ side


_READ_FROM_USES = "(shape read from its uses: no TensorMatcher)"  # a _Matcher's text when no TensorMatcher declared it


@dataclasses.dataclass
class _Matcher:
    shape: list[str | int]
    strides: list[str | int] | None
    dtype: str | None
    verified: list[str]
    depth: int
    text: str


def _plain(matchers: Sequence[_Matcher]) -> _Matcher:
    """Of the matchers verifying one tensor (``if constexpr`` arms), the plain path's:
    the outermost, then the least constrained (no strides)."""
    return min(matchers, key=lambda m: (m.depth, m.strides is not None))


@dataclasses.dataclass
class CppFacts:
    """What the launcher source says about one entry."""

    struct: str | None
    params: list[tuple[str, str]]
    symbols: dict[str, str]  # C++ variable -> symbol name
    matchers: dict[str, list[_Matcher]]  # tensor name -> matchers that verify it (all bodies seen)
    checks: list[str]
    divisibility: dict[str, int]
    max_values: dict[str, int]
    relations: dict[str, str]  # symbol -> expression over other symbols ("2*output_width")
    fixed_by_template: dict[str, str]  # symbol -> template parameter that sets it
    unresolved: list[str]
    constraints: list[str] = dataclasses.field(default_factory=list)  # checks as Python over symbols/scalars
    allowed: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # symbol -> the cases of a refusing switch


def _symbol_name(display: str, var: str) -> str:
    """A SymbolicSize's display name as a contract symbol: an identifier, so shape entries
    stay arithmetic ("hidden_dim x 2" -> ``hidden_dim_x_2``; the C++ variable if nothing is left)."""
    name = re.sub(r"\W+", "_", display).strip("_")
    return name if name and not name[0].isdigit() else var


def _body_symbols(body: str) -> dict[str, str]:
    symbols: dict[str, str] = {}
    for match in re.finditer(r"(?:auto\s+|SymbolicSize\s*&?\s*)?(\w+)\s*=\s*SymbolicSize\s*[{(]\s*\"([^\"]*)\"", body):
        symbols[match.group(1)] = _symbol_name(match.group(2), match.group(1))
    for match in re.finditer(r"SymbolicSize\s+(\w+)\s*[{(]\s*\"([^\"]*)\"", body):
        symbols[match.group(1)] = _symbol_name(match.group(2), match.group(1))
    for match in re.finditer(r"(?:auto\s+)?(\w+)\s*=\s*SymbolicSize\s*[{(]\s*[})]", body):
        symbols.setdefault(match.group(1), match.group(1))
    return symbols


_CAST = re.compile(r"^static_cast\s*<[^<>]*>\s*\((.*)\)$")
_UNWRAP = re.compile(r"\b(\w+)\.unwrap\(\)")
_SIMPLE_CAST = re.compile(r"static_cast\s*<[^<>]*>\s*\(\s*(\w+)\s*\)")


def _dim(item: str, symbols: dict[str, str]) -> str | int:
    """One TensorMatcher dimension: an integer, a symbol's name, or the C++ text.

    Value-preserving C++ around a size is removed first: ``static_cast<int64_t>(n)``
    is ``n`` and ``D.unwrap()`` is ``D``, so the contract holds an expression the
    harness can evaluate instead of C++ it must refuse.
    """
    item = item.strip()
    while (cast := _CAST.match(item)) is not None and balanced_end(item, item.index("(")) == len(item):
        item = cast.group(1).strip()
    item = _SIMPLE_CAST.sub(r"\1", item)
    item = _UNWRAP.sub(lambda m: symbols.get(m.group(1), m.group(1)), item)
    if re.fullmatch(r"-?\d+[uUlL]*", item):
        return int(item.rstrip("uUlL"))
    if item in symbols:
        return symbols[item]
    return item


def _matchers(body: str, symbols: dict[str, str], tparams: dict[str, str]) -> tuple[dict[str, list[_Matcher]], list[str]]:
    out: dict[str, list[_Matcher]] = {}
    notes: list[str] = []
    for match in re.finditer(r"\bTensorMatcher\s*\(", body):
        end = body.find(";", match.end())
        while end >= 0 and body[match.start() : end].count("(") > body[match.start() : end].count(")"):
            end = body.find(";", end + 1)
        stmt = body[match.start() : end if end >= 0 else len(body)]
        open_at = stmt.find("(")
        shape_text = stmt[open_at + 1 : balanced_end(stmt, open_at) - 1].strip()
        if shape_text.startswith("{"):
            shape = [_dim(x, symbols) for x in split_top(shape_text.strip("{} "))]
        else:
            shape = [shape_text]
            notes.append(f"TensorMatcher shape `{shape_text}` is not a literal list")
        strides = None
        smatch = re.search(r"\.with_strides\s*\(\s*\{", stmt)
        if smatch:
            s_open = stmt.find("(", smatch.start())
            strides = [_dim(x, symbols) for x in split_top(stmt[s_open + 1 : balanced_end(stmt, s_open) - 1].strip().strip("{}"))]
        dtype = None
        dmatch = re.search(r"\.with_dtype\s*<([^()]*?)>\s*\(", stmt)
        if dmatch:
            options = [t.strip().split("::")[-1] for t in split_top(dmatch.group(1))]
            if len(options) == 1 and options[0] in tparams:
                dtype = f"?{options[0]}"  # settle_type_params: "T" where every instantiation passes its dtype
            elif len(options) == 1 and options[0] in CPP_TYPES:
                dtype = CPP_TYPES[options[0]][0]
            elif len(options) == 1 and re.fullmatch(r"[A-Za-z_]\w*", options[0]):
                # an alias extract does not follow (`typename C::DType`, `using DType = InT`):
                # the element type, as launchers name it; a wrong guess is the baseline's to
                # refuse ("DType mismatch: expected float32"), which the sweep repairs
                dtype = "T"
            else:
                dtype = "|".join(CPP_TYPES.get(o, (o, 0))[0] for o in options)
        verified = re.findall(r"\.verify\s*\(\s*(\w+)(?:\.value\(\))?\s*\)", stmt)
        depth = body[: match.start()].count("{") - body[: match.start()].count("}")
        for name in verified:
            out.setdefault(name, []).append(_Matcher(shape, strides, dtype, verified, depth, " ".join(stmt.split())))
    return out, notes


def _check_conditions(body: str) -> list[str]:
    conds = []
    for match in re.finditer(r"\b(RuntimeCheck|CHECK_HOST)\s*\(", body):
        open_at = match.end() - 1
        args = split_top(body[open_at + 1 : balanced_end(body, open_at) - 1])
        if args and args[0].strip() not in ("false", "0"):  # an unconditional failure is a limit, read elsewhere
            conds.append(" ".join(args[0].split()))
    return conds


def _constants(text: str) -> dict[str, str]:
    """``constexpr auto kVecSize = ...;`` / ``int elements_in_vec = ...;`` -> name: expression text."""
    out = {}
    for match in re.finditer(r"(?:static\s+)?(?:constexpr\s+|const\s+)?(?:auto|int|int64_t|uint32_t|uint|size_t|std::size_t|int32_t)\s+(\w+)\s*=\s*([^;{}]+);", text):
        out.setdefault(match.group(1), " ".join(match.group(2).split()))
    return out


def _unwrap_vars(body: str, symbols: dict[str, str]) -> dict[str, str]:
    """Locals holding a symbol's value: ``const auto hidden = static_cast<uint32_t>(D.unwrap());``."""
    out = {}
    for match in re.finditer(r"(\w+)\s*=\s*(?:static_cast<[^>]*>\s*\()?\s*(\w+)\.unwrap\(\)\s*\)?\s*;", body):
        if match.group(2) in symbols:
            out[match.group(1)] = symbols[match.group(2)]
    return out


def _bound(fn: CppFunction, targs: str | None) -> CppFunction:
    """``fn`` as called with explicit template arguments (``run_hadamard<12, DType>(...)``):
    each integer argument bound to its template parameter, and every ``if constexpr``
    chain whose conditions those decide cut to the arm taken. Without it, the checks of
    every arm (``dim % 48`` for the 12N kernel, ``dim % 80`` for the 20N one) would all
    be read as the caller's."""
    if not targs or not fn.template:
        return fn
    env = dict(ARCH_CONSTANTS)
    for (_kind, name), arg in zip(template_params(fn.template), split_top(targs)):
        value = eval_c(arg.strip(), env)
        if value is not None:
            env[name] = value
    if len(env) == len(ARCH_CONSTANTS):
        return fn
    bound = {k: v for k, v in env.items() if k not in ARCH_CONSTANTS}
    return dataclasses.replace(fn, body=prune_constexpr(fn.body, env), bound=bound)


_IF_CONSTEXPR = re.compile(r"\bif\s+constexpr\s*\(")


def prune_constexpr(body: str, env: dict[str, int]) -> str:
    """``body`` with each ``if constexpr (c) {..} else if constexpr (..) {..} else {..}``
    chain whose conditions ``env`` decides replaced by the block of the arm taken
    (nothing when no arm is). A chain with an undecidable condition before the taken
    arm is left whole."""
    out, pos = [], 0
    while (match := _IF_CONSTEXPR.search(body, pos)) is not None:
        arms: list[tuple[str | None, int, int]] = []  # (condition or None for else, block start, block end)
        at = match.start()
        cursor = match.end() - 1
        while True:
            close = balanced_end(body, cursor)
            cond = body[cursor + 1 : close - 1]
            brace = re.match(r"\s*\{", body[close:])
            if brace is None:
                arms = []
                break
            start = close + brace.end() - 1
            end = balanced_end(body, start)
            arms.append((cond, start, end))
            tail = re.match(r"\s*else\s+if\s+constexpr\s*\(", body[end:])
            if tail is not None:
                cursor = end + tail.end() - 1
                continue
            tail = re.match(r"\s*else\s*\{", body[end:])
            if tail is not None:
                start = end + tail.end() - 1
                arms.append((None, start, balanced_end(body, start)))
            break
        if not arms:
            out.append(body[pos : match.end()])
            pos = match.end()
            continue
        chosen: tuple[int, int] | None = None
        decided = True
        for cond, start, end in arms:
            value = 1 if cond is None else eval_c(cond, env)
            if value is None:
                decided = False
                break
            if value:
                chosen = (start, end)
                break
        stop = arms[-1][2]
        out.append(body[pos:at])
        if not decided:
            out.append(body[at:stop])
        elif chosen is not None:
            out.append(body[chosen[0] : chosen[1]])
        pos = stop
    out.append(body[pos:])
    return "".join(out)


def cpp_facts(struct_text: str, method: str, dtypes: Iterable[str], context: str = "") -> CppFacts:
    """Read an entry ``method`` of a launcher struct (or a free function when ``method`` is in ``struct_text`` alone).

    ``context`` is the whole file: a forwarding call to a helper outside the
    struct (``details::impl(...)``) is looked up there.
    """
    text = strip_comments(struct_text)
    whole = strip_comments(context) if context else text
    tparams_list = template_params(text)
    typenames = [name for kind, name in tparams_list if kind in ("typename", "class")]
    # the first type parameter is the element type make_cpp_args fills with the dtype
    tparams = {name: ("dtype" if i == 0 else "type") for i, name in enumerate(typenames)}
    unresolved: list[str] = []
    entry = find_function(text, method)
    if entry is None:
        return CppFacts(None, [], {}, {}, [], {}, {}, {}, {}, [f"entry `{method}` not found in the launcher source"])
    bodies: list[tuple[CppFunction, dict[str, str]]] = [(entry, {})]  # (function, its name -> entry's name)
    seen = {method}
    # Follow forwarding calls (to depth 3): run_activation(...) -> launch(input, out, ...),
    # run_norm(...) -> run_impl(...), fused_x(...) -> details::x_impl<...>(...).
    queue = [(entry, {}, 0)]
    while queue:
        caller, caller_alias, level = queue.pop(0)
        if level >= 3:
            continue
        for callee_match in re.finditer(r"\b(\w+)\s*(?:<([^;(){}]*)>)?\s*\(", caller.body):
            callee = callee_match.group(1)
            if callee in seen or callee in ("RuntimeCheck", "CHECK_HOST", "TensorMatcher", "static_cast", "LaunchKernel", "Panic", "if", "for", "while", "switch", "return", "sizeof"):
                continue
            target = find_function(text, callee) or (find_function(whole, callee) if whole is not text else None)
            if target is None or not any("TensorView" in t for t, _ in target.params):
                continue
            seen.add(callee)
            open_at = callee_match.end() - 1
            args = split_top(caller.body[open_at + 1 : balanced_end(caller.body, open_at) - 1])
            alias = {}
            for (_ptype, pname), arg in zip(target.params, args):
                arg = arg.strip()
                if re.fullmatch(r"\w+", arg):
                    alias[pname] = caller_alias.get(arg, arg)
            target = _bound(target, callee_match.group(2))
            bodies.append((target, alias))
            queue.append((target, alias, level + 1))
    symbols: dict[str, str] = {}
    matchers: dict[str, list[_Matcher]] = {}
    checks: list[str] = []
    divisibility: dict[str, int] = {}
    max_values: dict[str, int] = {}
    allowed: dict[str, list[int]] = {}
    relations: dict[str, str] = {}
    fixed: dict[str, str] = {}
    struct_consts = _constants(re.sub(r"\{[^{}]*\}", "", text))
    pending: list[tuple[str, dict[str, str], dict[str, str], dict[str, str], dict[str, list[_Matcher]]]] = []
    body_matchers: list[dict[str, list[_Matcher]]] = []  # per body, its own names (pending holds the same dicts)
    for fn, alias in bodies:
        body_symbols = _body_symbols(fn.body)
        symbols.update(body_symbols)
        found, notes = _matchers(fn.body, body_symbols, tparams)
        body_matchers.append(found)
        unresolved += notes
        for name, items in found.items():
            matchers.setdefault(alias.get(name, name), []).extend(items)
        for var, tparam in re.findall(r"(\w+)\.set_value\s*\(\s*(\w+)\s*\)", fn.body):
            if var in body_symbols:
                fixed[body_symbols[var]] = tparam
        unwrap = _unwrap_vars(fn.body, body_symbols)
        consts = {**struct_consts, **{k: str(v) for k, v in fn.bound.items()}, **_constants(fn.body)}
        conds = _check_conditions(fn.body)
        checks += conds
        pending += [(cond, {**body_symbols, **unwrap}, alias, consts, found) for cond in conds]
        for cond in conds:
            for part in split_top(cond, "&&"):
                _read_condition(part, unwrap, body_symbols, consts, dtypes, divisibility, relations)
        for match in re.finditer(r"\bif\s*\(\s*(\w+)\s*<=\s*([^{]+?)\)\s*\{", fn.body):
            var, limit = match.group(1), match.group(2)
            block_end = balanced_end(fn.body, match.end() - 1)
            rest = fn.body[block_end:]
            if re.match(r"\s*else\s*\{[^{}]*RuntimeCheck\s*\(\s*false", rest) and var in unwrap:
                value = _eval_per_dtype(limit, consts, dtypes, min)
                if value is not None:
                    max_values[unwrap[var]] = value
        # `switch (num_experts) { case 256: ... case 384: ... default: Panic(...) }`:
        # the cases are the only values the launcher accepts.
        for match in re.finditer(r"\bswitch\s*\(\s*(\w+)\s*\)\s*\{", fn.body):
            var = match.group(1)
            block = fn.body[match.end() - 1 : balanced_end(fn.body, match.end() - 1)]
            refused = re.search(r"\bdefault\s*:\s*(?:\{\s*)?(?:Panic\s*\(|RuntimeCheck\s*\(\s*false)", block)
            cases = [int(v) for v in re.findall(r"\bcase\s+(\d+)\s*:", block)]
            if var in unwrap and refused is not None and cases:
                allowed[unwrap[var]] = sorted(set(cases))
    # Launchers written without TensorMatcher read shapes by hand (`x.dim() == 2`,
    # `const int64_t num_tokens = x.shape()[0]`): those uses give the tensor a shape.
    read: dict[str, tuple[list[str | int], bool]] = {}
    for pname in [n for t, n in entry.params if "TensorView" in t and n not in matchers]:
        found_shape = _shape_from_uses([(fn.body, local) for fn, alias in bodies if (local := _reverse(alias, pname))])
        if found_shape is not None:
            read[pname] = found_shape
    # A tensor read only from the end (`mlp.size(-1)`) has the rank of those whose rank
    # is checked, and their leading dimensions (the rows every such kernel shares).
    ranked = [shape for shape, explicit in read.values() if explicit]
    for pname, (shape, explicit) in read.items():
        if not explicit and ranked and len(ranked[0]) > len(shape):
            read[pname] = (list(ranked[0][: len(ranked[0]) - len(shape)]) + shape, False)
    for pname, (shape, _explicit) in read.items():
        cast = _cast_dtype([(fn.body, local) for fn, alias in bodies if (local := _reverse(alias, pname))])
        item = _Matcher(shape, None, cast, [pname], 99, _READ_FROM_USES)
        matchers[pname] = [item]
        for (_fn, alias), found in zip(bodies, body_matchers):  # so each body's checks can read x.size(i)
            if (local := _reverse(alias, pname)) is not None:
                found.setdefault(local, [item])
    scalars = {name for ptype, name in entry.params if "TensorView" not in ptype and _scalar_type(ptype) in ("int", "bool")}
    constraints = [
        c for cond, names, alias, consts, found in pending
        if (c := _constraint(cond, names, alias, consts, found, scalars, {t: s for s, t in fixed.items()}, relations, dtypes)) is not None
    ]  # fmt: skip
    return CppFacts(
        struct=None,
        params=entry.params,
        symbols=symbols,
        matchers=matchers,
        checks=list(dict.fromkeys(checks)),
        divisibility=divisibility,
        max_values=max_values,
        relations=relations,
        fixed_by_template=fixed,
        unresolved=unresolved,
        constraints=list(dict.fromkeys(constraints)),
        allowed=allowed,
    )


def _reverse(alias: dict[str, str], name: str) -> str | None:
    """A body's own name for the entry's ``name`` (the entry body: the name itself)."""
    if not alias:
        return name
    return next((local for local, entry_name in alias.items() if entry_name == name), None)


# `.shape()[i]` or `.size(i)` after a tensor (or its `.value()`): two groups, one set.
_DIM_USE = r"(?:\.value\(\))?(?:\.shape\(\)\s*\[\s*(-?\d+)\s*\]|\.size\(\s*(-?\d+)\s*\))"


def _dim_index(match: re.Match, first: int) -> int:
    """The dimension a `_DIM_USE` match reads, its groups starting at ``first``."""
    shape_index, size_index = match.group(first), match.group(first + 1)
    return int(shape_index if shape_index is not None else size_index)


def _cast_dtype(bodies: list[tuple[str, str]]) -> str | None:
    """The dtype a launcher without TensorMatcher reads a tensor's data as: the one
    concrete type its ``data_ptr()`` is cast to (``static_cast<float*>(w.data_ptr())``,
    ``w.data_ptr<int32_t>()``); None when it is never cast, or cast to two types or a
    template parameter (the element type)."""
    found: set[str] = set()
    for body, name in bodies:
        who = re.escape(name)
        for m in re.finditer(
            rf"(?:static_cast|reinterpret_cast)\s*<\s*(?:const\s+)?([\w:]+)\s*(?:const\s*)?\*\s*>\s*\(\s*{who}(?:\.value\(\))?\.data_ptr\(\)\s*\)"
            rf"|\b{who}(?:\.value\(\))?\.data_ptr\s*<\s*(?:const\s+)?([\w:]+)\s*>\s*\(\)",
            body,
        ):
            found.add((m.group(1) or m.group(2)).split("::")[-1])
    if len(found) != 1:
        return None
    (cpp,) = found
    return CPP_TYPES[cpp][0] if cpp in CPP_TYPES else None


def _shape_from_uses(bodies: list[tuple[str, str]]) -> tuple[list[str | int], bool] | None:
    """A tensor's shape from how a launcher without TensorMatcher reads it, and whether
    a check states its rank; None when nothing reads it.

    Rank: a check ``x.dim() == N`` / ``x.ndim() >= N``, else one more than the highest
    dimension read. Dimension names: the local it is read into (``const int64_t
    num_tokens = x.shape()[0];``), or the name a check equates it with
    (``y.shape()[0] == num_tokens``, ``out.size(-1) == a + m``); else
    ``<tensor>_dim<i>``. Extract does not guess beyond that: the baseline judges.
    """
    rank: int | None = None
    used: set[int] = set()
    named: dict[int, str] = {}
    for body, name in bodies:
        conds = _check_conditions(body)
        refs = [name] + re.findall(rf"(?:const\s+)?auto\s*&?\s*(\w+)\s*=\s*{re.escape(name)}(?:\.value\(\))?\s*;", body)
        for ref in refs:
            who = re.escape(ref)
            for m in re.finditer(rf"\b{who}\.n?dim\(\)\s*(==|>=)\s*(\d+)", body):
                rank = int(m.group(2)) if rank is None else max(rank, int(m.group(2)))
            for m in re.finditer(rf"\b{who}{_DIM_USE}", body):
                used.add(_dim_index(m, 1))
            for m in re.finditer(rf"(?:int64_t|int|auto|int32_t|uint32_t|size_t)\s+(\w+)\s*=\s*(?:static_cast<[^<>]*>\s*\()?\s*{who}{_DIM_USE}", body):
                named.setdefault(_dim_index(m, 2), m.group(1))
            for cond in conds:
                for part in split_top(cond, "&&"):
                    m = re.fullmatch(rf"\s*{who}{_DIM_USE}\s*==\s*([\w\s+*]+?)\s*", part)
                    if m is not None:
                        named.setdefault(_dim_index(m, 1), " ".join(m.group(3).split()))
    if rank is None and not used:
        return None
    explicit = rank is not None or any(i >= 0 for i in used)
    if rank is None:
        rank = max([i + 1 for i in used if i >= 0] + [-i for i in used if i < 0])
    shape: list[str | int] = []
    for i in range(rank):
        dim = named.get(i, named.get(i - rank))
        shape.append(dim if dim is not None else f"{bodies[0][1]}_dim{i}")
    return shape, explicit


_SIZE_CALL = re.compile(rf"\b(\w+){_DIM_USE}")


def _constraint(
    cond: str,
    names: dict[str, str],
    alias: dict[str, str],
    consts: dict[str, str],
    found: dict[str, list[_Matcher]],
    scalars: set[str],
    by_tparam: dict[str, str],
    relations: dict[str, str],
    dtypes: Iterable[str],
) -> str | None:
    """One RuntimeCheck condition as a Python expression over the contract's own names,
    or None when it reads anything else (a pointer, a stride, a value read from data,
    a constant that differs by dtype).

    Why: the harness invents sizes for ops no model config sizes, and fills scalars
    the callers pass at run time; the kernel's own checks say which values it
    accepts (``kH == 3 || kH == 6 || kH == 12``, ``numel % hidden_size == 0``), so
    the harness can choose values the baseline will not reject. Names map to: a
    SymbolicSize (``D.unwrap()``) or a local holding one -> its symbol (or the
    relation extract folded it into: ``input_width`` -> ``(2*output_width)``); a
    template parameter that fixes a width -> that width's symbol; a scalar
    parameter of the entry -> itself; ``x.size(i)`` / ``x.shape()[i]`` -> the
    dimension its TensorMatcher names; a ``constexpr`` with one value for every
    dtype -> the number; any other local -> its own definition, translated the same way.
    """
    dtypes = list(dtypes)
    sizes: dict[str, str | int] = {}

    def size_token(match: re.Match) -> str:
        matched = found.get(match.group(1))
        if not matched:
            return match.group(0)
        shape = _plain(matched).shape
        index = _dim_index(match, 2)
        if not -len(shape) <= index < len(shape) or shape[index] in (-1, "-1"):
            return match.group(0)
        token = f"__size_{len(sizes)}"
        sizes[token] = shape[index]
        return token

    def symbol(sym: str) -> str:
        return f"({relations[sym]})" if sym in relations else sym

    def name_of(name: str, depth: int = 0) -> str | int | None:
        if name in sizes:
            dim = sizes[name]
            return dim if isinstance(dim, int) else symbol(dim) if re.fullmatch(r"\w+", dim) else f"({dim})"
        if name in names:
            return symbol(names[name])
        if name in by_tparam:
            return symbol(by_tparam[name])
        own = alias.get(name, name)
        if own in scalars:
            return own
        values = _eval_per_dtype(name, consts, dtypes, set)  # one value for every dtype, or no number
        if values is not None:
            return next(iter(values)) if len(values) == 1 else None
        if name in consts and depth < 4:  # a local defined from sizes: `const int64_t kH = A_log.shape()[0];`
            inner = c_to_python(_SIZE_CALL.sub(size_token, consts[name]), lambda n: name_of(n, depth + 1))
            return None if inner is None else f"({inner})"
        return None

    translated = c_to_python(_SIZE_CALL.sub(size_token, cond), name_of)
    if translated is None or not set(re.findall(r"[A-Za-z_]\w*", translated)) - {"and", "or", "not", "if", "else"}:
        return None  # untranslatable, or only constants: nothing for the harness to choose
    return translated


def _eval_per_dtype(expr: str, consts: dict[str, str], dtypes: Iterable[str], pick: Any) -> int | None:
    values = []
    for dtype in dtypes:
        env = dict(ARCH_CONSTANTS)
        sizes = {"T": DTYPE_BYTES[dtype], "DType": DTYPE_BYTES[dtype], "Float": DTYPE_BYTES[dtype], "scalar_t": DTYPE_BYTES[dtype]}
        for _ in range(3):  # constants defined from constants
            for name, text in consts.items():
                if name not in env:
                    value = eval_c(text, env, sizes)
                    if value is not None:
                        env[name] = value
        value = eval_c(expr, env, sizes)
        if value is None:
            return None
        values.append(value)
    return pick(values) if values else None


def _read_condition(
    cond: str,
    unwrap: dict[str, str],
    symbols: dict[str, str],
    consts: dict[str, str],
    dtypes: Iterable[str],
    divisibility: dict[str, int],
    relations: dict[str, str],
) -> None:
    def symbol_of(text: str) -> str | None:
        text = text.strip()
        m = re.fullmatch(r"(?:static_cast<[^>]*>\s*\()?\s*(\w+)(?:\.unwrap\(\))?\s*\)?", text)
        if not m:
            return None
        name = m.group(1)
        if name in unwrap:
            return unwrap[name]
        if name in symbols and text.endswith("unwrap()"):
            return symbols[name]
        return None

    m = re.fullmatch(r"\s*(.+?)\s*%\s*(.+?)\s*==\s*0\s*", cond)
    if m:
        sym = symbol_of(m.group(1))
        if sym:
            value = _eval_per_dtype(m.group(2), consts, list(dtypes), max)
            if value and value > 1:
                divisibility[sym] = max(value, divisibility.get(sym, 1))
        return
    m = re.fullmatch(r"\s*(\w+)\s*\*\s*(\d+)\s*==\s*(.+?)\s*", cond) or re.fullmatch(r"\s*(\d+)\s*\*\s*(\w+)\s*==\s*(.+?)\s*", cond)
    if m:
        a, k = (m.group(1), m.group(2)) if not m.group(1).isdigit() else (m.group(2), m.group(1))
        left, right = symbol_of(a), symbol_of(m.group(3))
        if left and right and left != right:
            relations[right] = f"{int(k)}*{left}"


# =========================================================================== Python side


@dataclasses.dataclass
class PyFacts:
    """What the op's Python says about an export's arguments."""

    written: set[int]  # positions of export arguments the Python marks as mutated
    defaults: dict[str, Any]  # public function parameter -> default (concrete values only)
    returns_value: bool
    literal_args: dict[int, Any]  # export argument positions given a literal (str/int/float/bool)
    # export argument position -> (position of the tensor argument, dimension) the wrapper
    # reads it from (`size_limit = k_cache.shape[0]` before `module.store_cache(..., size_limit)`)
    sized_args: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)


def _root_name(expr: cst.BaseExpression, assigned: dict[str, cst.BaseExpression], depth: int = 0) -> str | None:
    """The Python name a tensor expression derives from (``out_2d = out.view(...)`` -> ``out``)."""
    while True:
        if isinstance(expr, cst.Name):
            if expr.value in assigned and depth < 8:
                inner = _root_name(assigned[expr.value], {k: v for k, v in assigned.items() if k != expr.value}, depth + 1)
                return inner or expr.value
            return expr.value
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
            expr = expr.func.value
        elif isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        else:
            return None


def _literal(node: cst.BaseExpression) -> Any:
    """The value of a literal argument (str, int, float, bool), else :data:`_NOT_LITERAL`."""
    if isinstance(node, cst.SimpleString):
        return str(node.evaluated_value)
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _literal(node.expression)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner
    return _NOT_LITERAL


_NOT_LITERAL = object()


def constant_args(program: pyops.Program, nodes: frozenset[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Parameters that hold one known literal on every path from the op's public function.

    ``gelu_and_mul`` calls ``run_activation("gelu", ...)``, which passes its ``op_name``
    down to ``module.run_activation(..., op_name)``: the export's ``type`` argument is
    ``"gelu"``, but only following the string through the callers says so; likewise an
    int or float a wrapper passes down (``page_size=64``). Among the functions
    ``nodes`` (what the op reaches), a parameter is constant when every call to its
    function there passes the same literal, or a caller's constant parameter.
    Calls are resolved as the program's call graph resolves them
    (:meth:`extract.pyops.Program.resolve`); only calls of plain functions count.
    """
    funcs = {n: f for n in nodes if (f := program.function(*n)) is not None}
    edges: list[tuple[tuple[str, str], tuple[str, str], cst.Call]] = []
    for node, fn in funcs.items():
        found: list[cst.Call] = []

        class Calls(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if isinstance(call.func, cst.Name):
                    found.append(call)

        fn.node.visit(Calls())
        for call in found:
            callees = [c for c in program.resolve(node[0], call.func.value) if c in funcs and c != node and "." not in c[1]]
            if len(callees) == 1:
                edges.append((node, callees[0], call))
    consts: dict[tuple[str, str], dict[str, Any]] = {n: {} for n in funcs}
    for _ in range(6):  # call chains in these wrappers are a few levels deep
        seen: dict[tuple[tuple[str, str], str], set[Any]] = {}
        for caller, callee, call in edges:
            params = [p.name.value for p in [*funcs[callee].node.params.posonly_params, *funcs[callee].node.params.params]]
            for i, arg in enumerate(call.args):
                if arg.star:
                    continue
                name = arg.keyword.value if arg.keyword is not None else (params[i] if i < len(params) else None)
                if name is None:
                    continue
                value = _literal(arg.value)
                if value is _NOT_LITERAL and isinstance(arg.value, cst.Name):
                    value = consts[caller].get(arg.value.value, _NOT_LITERAL)
                seen.setdefault((callee, name), set()).add((type(value).__name__, value) if value is not _NOT_LITERAL else None)
        updated: dict[tuple[str, str], dict[str, Any]] = {n: {} for n in funcs}
        for (callee, name), values in seen.items():
            if len(values) == 1 and None not in values:
                updated[callee][name] = next(iter(values))[1]
        if updated == consts:
            break
        consts = updated
    return consts


def python_facts(program: pyops.Program, op: OpEntry, export: str) -> PyFacts:
    public = op.public_functions[0]
    target = program.public_target(op.module, public)
    defaults: dict[str, Any] = {}
    returns_value = True
    written: set[int] = set()
    literals: dict[int, Any] = {}
    sized: dict[int, tuple[int, int]] = {}
    if target is None:
        return PyFacts(written, defaults, returns_value, literals, sized)
    fn = program.function(op.module, target)
    ev = pyops.Evaluator(program.sets.resolve, strict=True)
    defaults = {k: v for k, v in pyops.parameter_defaults(ev, fn).items() if v is None or isinstance(v, (int, float, str, bool))}

    class Returns(cst.CSTVisitor):
        def __init__(self) -> None:
            self.values = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is fn.node

        def visit_Return(self, node: cst.Return) -> None:
            if node.value is not None and not (isinstance(node.value, cst.Name) and node.value.value == "None"):
                self.values += 1

    visitor = Returns()
    fn.node.visit(visitor)
    returns_value = visitor.values > 0
    reached = program.reach((op.module, target))
    consts = constant_args(program, reached)
    for rel, qual in sorted(reached):
        caller = program.function(rel, qual)
        if caller is None:
            continue
        mutated: set[str] = set()
        for deco in caller.node.decorators:
            if isinstance(deco.decorator, cst.Call):
                for arg in deco.decorator.args:
                    if arg.keyword is not None and arg.keyword.value == "mutates_args":
                        try:
                            value = ev.eval(arg.value, pyops.Env(caller.module))
                        except pyops.Unresolvable:
                            continue
                        if isinstance(value, (list, tuple)):
                            mutated |= {v for v in value if isinstance(v, str)}
        found: list[cst.Call] = []

        class Calls(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                if isinstance(node.func, cst.Attribute) and node.func.attr.value == export:
                    found.append(node)

        caller.node.visit(Calls())
        for call in found:
            assigned = pyops._assignments_before(caller, call)
            passed = {arg.value.value: i for i, arg in enumerate(call.args) if isinstance(arg.value, cst.Name)}
            frame = None
            for i, arg in enumerate(call.args):
                value = _literal(arg.value)
                if value is not _NOT_LITERAL:
                    literals.setdefault(i, value)
                elif isinstance(arg.value, cst.Name) and arg.value.value in consts.get((rel, qual), {}):
                    literals.setdefault(i, consts[(rel, qual)][arg.value.value])
                elif i not in literals:
                    # what the wrapper computes from its own defaults (`multiplier if
                    # multiplier is not None else 1.0`): the value a caller passing nothing gets
                    frame = frame or _defaults_frame(ev, caller, call)
                    try:
                        computed = ev.eval(arg.value, frame)
                    except pyops.Unresolvable:
                        computed = None
                    if isinstance(computed, (int, float, bool)):
                        literals[i] = computed
                root = _root_name(arg.value, assigned)
                if root is not None and root in mutated:
                    written.add(i)
                if isinstance(arg.value, cst.Name) and arg.value.value in assigned:
                    read = _SIZE_READ.fullmatch(caller.module.code(assigned[arg.value.value]).strip())
                    if read and read.group(1) in passed:
                        sized.setdefault(i, (passed[read.group(1)], int(read.group(2) or read.group(3))))
    return PyFacts(written, defaults, returns_value, literals, sized)


def _defaults_frame(ev: pyops.Evaluator, fn: pyops.PyFunction, site: cst.CSTNode) -> pyops.Env:
    """``fn``'s frame at ``site`` with each parameter at its default (none bound without
    one) and its locals evaluated on first use (pyops' call-site frame)."""
    return pyops._LazyEnv(fn.module, pyops.parameter_defaults(ev, fn), pyops._assignments_before(fn, site), ev)


# `t.shape[i]` / `t.size(i)`: a scalar a wrapper reads from a tensor it passes along
_SIZE_READ = re.compile(r"(\w+)\s*\.\s*(?:shape\s*\[\s*(-?\d+)\s*\]|size\s*\(\s*(-?\d+)\s*\))")


# =========================================================================== assembly


def _fits_scalar(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def _scalar_type(cpp_type: str) -> str | None:
    t = cpp_type.replace("const", "").replace("&", "").strip()
    if t in ("float", "double"):
        return "float"
    if t in ("bool",):
        return "bool"
    if t in ("std::string", "string", "std::string_view", "tvm::ffi::String"):
        return "str"
    if t in ("int", "int32_t", "int64_t", "uint32_t", "uint64_t", "size_t", "unsigned", "long", "uint", "std::size_t"):
        return "int"
    return None


def launcher_source(root: pathlib.Path, scan: Any, entry_text: str, files: list[str]) -> tuple[str, str, str] | None:
    """(struct-or-function text, method, file) for a wrapper's C++ entry, through the index spans."""
    struct, method = pyops._entry_parts(entry_text)
    launchers = list(getattr(scan, "launchers", []) or [])
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
        if find_function(strip_comments(text), method) is not None:
            return text, method, file
    return None


def infer_contract(
    op: OpEntry,
    scan: Any,
    root: pathlib.Path,
    *,
    program: pyops.Program | None = None,
    entry: str | None = None,
    dtypes: Iterable[str] = DTYPES,
) -> Contract:
    """Infer the contract of ``entry`` (default: the op's first entry point)."""
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
            entry=entry, args=[], symbols=[], unresolved=[*unresolved, f"C++ entry `{entries[0]}` not found in {op.files}"]
        )
    text, method, file = found
    context = (root / file).read_text(encoding="utf-8", errors="replace")
    facts = cpp_facts(text, method, dtypes, context)
    positions = {name: i for i, (_kind, name) in enumerate(template_params(strip_comments(text)))}
    first_typename = next((name for kind, name in template_params(strip_comments(text)) if kind in ("typename", "class")), None)
    type_params: dict[str, int] = {}
    unresolved += facts.unresolved
    py = python_facts(program, op, entry)
    args: list[ArgSpec] = []
    symbols: list[str] = []
    tensor_names = [name for ptype, name in facts.params if "TensorView" in ptype]
    any_output = any(_OUTPUT_NAMES.match(n) for n in tensor_names)
    for position, (ptype, name) in enumerate(facts.params):
        if "TensorView" in ptype:
            candidates = facts.matchers.get(name, [])
            if not candidates:
                unresolved.append(f"tensor `{name}`: no TensorMatcher declares its shape")
                spec = TensorSpec(name=name, shape=[], dtype="T", role="input")
            else:
                best = _plain(candidates)  # several verify it in ``if constexpr`` arms
                if best.text == _READ_FROM_USES:
                    unresolved.append(f"tensor `{name}`: no TensorMatcher; shape {best.shape} read from how the launcher uses it")
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
                if dtype.startswith("?") and dtype[1:] not in positions and dtype[1:] == first_typename:
                    dtype = "T"  # a helper's own first type parameter: the element type, as ever
                if dtype.startswith("?") and dtype[1:] in positions:
                    type_params[dtype[1:]] = positions[dtype[1:]]
                if dtype.startswith("?") or "|" in dtype:
                    unresolved.append(f"tensor `{name}`: element type `{dtype.lstrip('?')}` is not the instantiation dtype")
                role = "input"
                if _OUTPUT_NAMES.match(name):
                    role = "output"
                elif _INOUT_NAMES.match(name) or position in py.written:
                    role = "inout"
                elif not py.returns_value and not any_output and name == tensor_names[0]:
                    role = "inout"
                    unresolved.append(f"tensor `{name}`: assumed updated in place (the public function returns nothing)")
                if position in py.written and role == "input":
                    role = "inout"
                if dtype in ("int32", "int64", "uint8", "uint32", "uint64", "int8") or _INDEX_NAMES.search(name):
                    unresolved.append(f"tensor `{name}` ({dtype}): index/metadata values, range not known")
                if "sorted" in name:
                    unresolved.append(f"tensor `{name}`: its values must come sorted (order and padding not known)")
                spec = TensorSpec(name=name, shape=shape, dtype=dtype, role=role, strides=strides)
                for dim in [*shape, *(strides or [])]:
                    if isinstance(dim, str):
                        for sym in re.findall(r"[A-Za-z_]\w*", dim):
                            if sym not in symbols:
                                symbols.append(sym)
            args.append(ArgSpec(kind="tensor", tensor=spec))
        else:
            kind = _scalar_type(ptype)
            if kind is None:
                unresolved.append(f"parameter `{name}` of type `{ptype}` is neither a tensor nor a scalar")
                kind = "int"
            value = py.defaults.get(name)
            literal = py.literal_args.get(position)
            if _fits_scalar(kind, literal):  # what the wrapper passes on this path beats a default
                value = float(literal) if kind == "float" else literal
            if kind == "str":
                value = value if isinstance(value, str) else None
                if value is None:
                    unresolved.append(f"string argument `{name}`: value not known")
            if value is not None and not isinstance(value, (int, float, str, bool)):
                value = None
            if kind == "int" and position in py.sized_args and literal is None:
                value = None  # the wrapper passes a tensor's size: tied to it below
            args.append(ArgSpec(kind="scalar", scalar=ScalarSpec(name=name, type=kind, value=value)))
    args, tied = _tie_sized_scalars(args, py.sized_args)
    symbols += [s for s, constraint in tied.items() if not constraint and s not in symbols]
    checks = list(facts.checks)
    scalar_names = {a.scalar.name for a in args if a.scalar is not None}
    constraints = [c for c in facts.constraints if set(re.findall(r"[A-Za-z_]\w*", c)) & (set(symbols) | scalar_names)]
    constraints += [c for c in tied.values() if c]
    for sym, tparam in facts.fixed_by_template.items():
        checks.append(f"{sym} == {tparam} (template argument: one instantiation per value)")
    shape_syms = {s for a in args if a.tensor for d in a.tensor.shape if isinstance(d, str) for s in re.findall(r"[A-Za-z_]\w*", d)}
    return Contract(
        entry=entry,
        args=args,
        symbols=[s for s in symbols if s in shape_syms] + [s for s in symbols if s not in shape_syms],
        divisibility={k: v for k, v in facts.divisibility.items() if k in symbols},
        max_values={k: v for k, v in facts.max_values.items() if k in symbols},
        allowed_values={k: v for k, v in facts.allowed.items() if k in symbols},
        checks=checks,
        constraints=constraints,
        unresolved=list(dict.fromkeys(unresolved)),
        origin="inferred",
        type_params=type_params,
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
            given = [inst.template_args[position] if position < len(inst.template_args) else None for inst in instantiations]
            settled = None
            if all(g == CPP_DTYPE.get(inst.dtype) for g, inst in zip(given, instantiations)):
                settled = "T"
            elif len(set(given)) == 1 and given[0] in CPP_TYPES:
                settled = CPP_TYPES[given[0]][0]
            if settled is not None:
                arg = arg.model_copy(update={"tensor": spec.model_copy(update={"dtype": settled})})
                unresolved = [u for u in unresolved if u != f"tensor `{spec.name}`: element type `{name}` is not the instantiation dtype"]
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


def load_curated(op_id: str) -> dict[str, Any] | None:
    path = curated_path(op_id)
    if not path.is_file():
        return None
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"curated contract {path} is not valid TOML: {err}", fix="fix the TOML syntax") from err


_CONTRACT_KEYS = {"entry", "symbols", "divisibility", "max_values", "checks", "constraints", "unresolved", "reference", "extra_bytes"}


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


def apply_curated(inferred: Contract, curated: dict[str, Any], *, program: pyops.Program | None = None, module: str = "") -> Contract:
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


def contract_for(op: OpEntry, scan: Any, root: pathlib.Path, *, program: pyops.Program | None = None) -> tuple[Contract, dict[str, Any] | None]:
    """The op's contract (inferred, then curated when ``extract/curated/<op_id>.toml`` exists) and the curated table."""
    program = program or pyops.Program(pathlib.Path(root))
    curated = load_curated(op.id)
    entry = (curated or {}).get("entry")
    dtypes = (curated or {}).get("dtypes", list(DTYPES))
    inferred = infer_contract(op, scan, root, program=program, entry=entry, dtypes=dtypes)
    if curated is None:
        return inferred, None
    return apply_curated(inferred, curated, program=program, module=op.module), curated
