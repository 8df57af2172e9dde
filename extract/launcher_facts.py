"""What a launcher's C++ says about one entry: its parameters, TensorMatcher chains, checks.

Reads the text of the launcher struct (or free function) the index located, with
the C++ text toolkit (:mod:`extract.cxx`) and the expression parser
(:mod:`extract.cexpr`): ``TensorMatcher({N, D}).with_strides({S, 1}).with_dtype<T>()
.verify(x)`` chains (symbol names from ``SymbolicSize{"name"}``), ``RuntimeCheck`` /
``CHECK_HOST`` conditions and refusing ``switch`` statements (read by
:mod:`extract.launcher_checks`: divisibilities, relations, limits, constraints as Python),
``D.set_value(kDim)``, and the shapes of tensors a launcher without TensorMatcher reads by hand. An entry that forwards to another
member or helper is followed (to depth 3), with template arguments bound and
decided ``if constexpr`` arms cut.

What must stay true: reading never raises on odd C++; what it cannot settle is
named in :attr:`CppFacts.unresolved`. :mod:`extract.contract` turns the facts into a
``records.Contract``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from extract.cexpr import ARCH_CONSTANTS, CPP_TYPES, eval_c
from extract.cxx import CppFunction, balanced_end, split_top, strip_comments, template_params
from extract.cxx_nodes import calls_in, find_definition
from extract.launcher_checks import (
    DIM_USE,
    check_conditions,
    constraint,
    dim_index,
    read_condition,
    read_limits,
)

READ_FROM_USES = "(shape read from its uses: no TensorMatcher)"  # a Matcher's text when no TensorMatcher declared it


@dataclasses.dataclass
class Matcher:
    shape: list[str | int]
    strides: list[str | int] | None
    dtype: str | None
    verified: list[str]
    depth: int
    text: str


def plain_matcher(matchers: Sequence[Matcher]) -> Matcher:
    """Of the matchers verifying one tensor (``if constexpr`` arms), the plain path's:
    the outermost, then the least constrained (no strides)."""
    return min(matchers, key=lambda m: (m.depth, m.strides is not None))


@dataclasses.dataclass
class CppFacts:
    """What the launcher source says about one entry."""

    struct: str | None
    params: list[tuple[str, str]]
    symbols: dict[str, str]  # C++ variable -> symbol name
    matchers: dict[str, list[Matcher]]  # tensor name -> matchers that verify it (all bodies seen)
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


def _matchers(
    body: str, symbols: dict[str, str], tparams: dict[str, str]
) -> tuple[dict[str, list[Matcher]], list[str]]:
    out: dict[str, list[Matcher]] = {}
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
            strides = [
                _dim(x, symbols)
                for x in split_top(stmt[s_open + 1 : balanced_end(stmt, s_open) - 1].strip().strip("{}"))
            ]
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
            out.setdefault(name, []).append(Matcher(shape, strides, dtype, verified, depth, " ".join(stmt.split())))
    return out, notes


def _constants(text: str) -> dict[str, str]:
    """``constexpr auto kVecSize = ...;`` / ``int elements_in_vec = ...;`` -> name: expression text."""
    out: dict[str, str] = {}
    for match in re.finditer(
        r"(?:static\s+)?(?:constexpr\s+|const\s+)?(?:auto|int|int64_t|uint32_t|uint|size_t|std::size_t|int32_t)\s+(\w+)\s*=\s*([^;{}]+);",
        text,
    ):
        out.setdefault(match.group(1), " ".join(match.group(2).split()))
    return out


def _unwrap_vars(body: str, symbols: dict[str, str]) -> dict[str, str]:
    """Locals holding a symbol's value: ``const auto hidden = static_cast<uint32_t>(D.unwrap());``."""
    out = {}
    for match in re.finditer(r"(\w+)\s*=\s*(?:static_cast<[^>]*>\s*\()?\s*(\w+)\.unwrap\(\)\s*\)?\s*;", body):
        if match.group(2) in symbols:
            out[match.group(1)] = symbols[match.group(2)]
    return out


def bound(fn: CppFunction, targs: str | None) -> CppFunction:
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
        for arm_cond, start, end in arms:
            value = 1 if arm_cond is None else eval_c(arm_cond, env)
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
    struct (``details::impl(...)``) is looked up there. The steps: the entry and the
    helpers it forwards to (:func:`_forwarded_bodies`), what each of their bodies says
    (:func:`_read_bodies`), the shapes of tensors read by hand
    (:func:`_read_shapes_from_uses`), and the checks as constraints (:func:`_constraints`).
    """
    text = strip_comments(struct_text)
    whole = strip_comments(context) if context else text
    tparams_list = template_params(text)
    typenames = [name for kind, name in tparams_list if kind in ("typename", "class")]
    # the first type parameter is the element type make_cpp_args fills with the dtype
    tparams = {name: ("dtype" if i == 0 else "type") for i, name in enumerate(typenames)}
    entry = find_definition(text, method)
    if entry is None:
        return CppFacts(None, [], {}, {}, [], {}, {}, {}, {}, [f"entry `{method}` not found in the launcher source"])
    bodies = _forwarded_bodies(entry, method, text, whole)
    reading = _read_bodies(bodies, text, tparams, dtypes)
    _read_shapes_from_uses(entry, bodies, reading)
    constraints = _constraints(entry, reading, dtypes)
    return CppFacts(
        struct=None,
        params=entry.params,
        symbols=reading.symbols,
        matchers=reading.matchers,
        checks=list(dict.fromkeys(reading.checks)),
        divisibility=reading.divisibility,
        max_values=reading.max_values,
        relations=reading.relations,
        fixed_by_template=reading.fixed,
        unresolved=reading.unresolved,
        constraints=list(dict.fromkeys(constraints)),
        allowed=reading.allowed,
    )


def _forwarded_bodies(
    entry: CppFunction, method: str, text: str, whole: str
) -> list[tuple[CppFunction, dict[str, str]]]:
    """The entry and the functions it forwards to: (function, its name -> the entry's name).

    Forwarding calls are followed (tree-sitter reads the calls, to depth 3): run_activation(...) ->
    launch(input, out, ...), run_norm(...) -> run_impl(...), fused_x(...) -> details::x_impl<...>(...);
    a callee is looked up in the struct's ``text``, then in the ``whole`` file.
    """
    bodies: list[tuple[CppFunction, dict[str, str]]] = [(entry, {})]  # (function, its name -> entry's name)
    seen = {method}
    queue: list[tuple[CppFunction, dict[str, str], int]] = [(entry, {}, 0)]  # (function, alias, depth)
    while queue:
        caller, caller_alias, level = queue.pop(0)
        if level >= 3:
            continue
        for call in calls_in(caller.body):
            callee = call.name
            if callee in seen or callee in (
                "RuntimeCheck",
                "CHECK_HOST",
                "TensorMatcher",
                "static_cast",
                "LaunchKernel",
                "Panic",
                "if",
                "for",
                "while",
                "switch",
                "return",
                "sizeof",
            ):
                continue
            target = find_definition(text, callee) or (find_definition(whole, callee) if whole is not text else None)
            if target is None or not any("TensorView" in t for t, _ in target.params):
                continue
            seen.add(callee)
            open_at = call.open_paren
            args = split_top(caller.body[open_at + 1 : balanced_end(caller.body, open_at) - 1])
            alias = {}
            for (_ptype, pname), arg in zip(target.params, args):
                arg = arg.strip()
                if re.fullmatch(r"\w+", arg):
                    alias[pname] = caller_alias.get(arg, arg)
            target = bound(target, call.template_args)
            bodies.append((target, alias))
            queue.append((target, alias, level + 1))
    return bodies


#: one check to translate: (condition, its names' symbols, the body's alias, constants, the body's matchers)
_Pending = tuple[str, dict[str, str], dict[str, str], dict[str, str], dict[str, list[Matcher]]]


@dataclasses.dataclass
class _Reading:
    """What the entry's bodies say, read body by body (:func:`_read_bodies`); the shapes read
    from uses are added after (:func:`_read_shapes_from_uses`)."""

    symbols: dict[str, str] = dataclasses.field(default_factory=dict)
    matchers: dict[str, list[Matcher]] = dataclasses.field(default_factory=dict)
    checks: list[str] = dataclasses.field(default_factory=list)
    divisibility: dict[str, int] = dataclasses.field(default_factory=dict)
    max_values: dict[str, int] = dataclasses.field(default_factory=dict)
    allowed: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    relations: dict[str, str] = dataclasses.field(default_factory=dict)
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)  # symbol -> template parameter that sets it
    unresolved: list[str] = dataclasses.field(default_factory=list)
    pending: list[_Pending] = dataclasses.field(default_factory=list)
    # per body, its own names (pending holds the same dicts)
    body_matchers: list[dict[str, list[Matcher]]] = dataclasses.field(default_factory=list)


def _read_bodies(
    bodies: list[tuple[CppFunction, dict[str, str]]], text: str, tparams: dict[str, str], dtypes: Iterable[str]
) -> _Reading:
    """Each body's symbols, TensorMatcher chains, ``set_value`` fixings, checks and limits."""
    reading = _Reading()
    struct_consts = _constants(re.sub(r"\{[^{}]*\}", "", text))
    for fn, alias in bodies:
        body_symbols = _body_symbols(fn.body)
        reading.symbols.update(body_symbols)
        found, notes = _matchers(fn.body, body_symbols, tparams)
        reading.body_matchers.append(found)
        reading.unresolved += notes
        for name, items in found.items():
            reading.matchers.setdefault(alias.get(name, name), []).extend(items)
        for var, tparam in re.findall(r"(\w+)\.set_value\s*\(\s*(\w+)\s*\)", fn.body):
            if var in body_symbols:
                reading.fixed[body_symbols[var]] = tparam
        unwrap = _unwrap_vars(fn.body, body_symbols)
        consts = {**struct_consts, **{k: str(v) for k, v in fn.bound.items()}, **_constants(fn.body)}
        conds = check_conditions(fn.body)
        reading.checks += conds
        reading.pending += [(cond, {**body_symbols, **unwrap}, alias, consts, found) for cond in conds]
        for cond in conds:
            for part in split_top(cond, "&&"):
                read_condition(part, unwrap, body_symbols, consts, dtypes, reading.divisibility, reading.relations)
        read_limits(fn.body, unwrap, consts, dtypes, reading.max_values, reading.allowed)
    return reading


def _read_shapes_from_uses(
    entry: CppFunction, bodies: list[tuple[CppFunction, dict[str, str]]], reading: _Reading
) -> None:
    """A matcher for each tensor parameter no TensorMatcher verifies but the bodies read by hand,
    added to ``reading.matchers`` and to each body's own matchers."""
    # Launchers written without TensorMatcher read shapes by hand (`x.dim() == 2`,
    # `const int64_t num_tokens = x.shape()[0]`): those uses give the tensor a shape.
    read: dict[str, tuple[list[str | int], bool]] = {}
    for pname in [n for t, n in entry.params if "TensorView" in t and n not in reading.matchers]:
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
        item = Matcher(shape, None, cast, [pname], 99, READ_FROM_USES)
        reading.matchers[pname] = [item]
        for (_fn, alias), found in zip(bodies, reading.body_matchers):  # so each body's checks can read x.size(i)
            if (local := _reverse(alias, pname)) is not None:
                found.setdefault(local, [item])


def _constraints(entry: CppFunction, reading: _Reading, dtypes: Iterable[str]) -> list[str]:
    """The checks as Python over the contract's names (:func:`extract.launcher_checks.constraint`), in order."""
    scalars = {
        name for ptype, name in entry.params if "TensorView" not in ptype and scalar_type(ptype) in ("int", "bool")
    }
    constraints = [
        c
        for cond, names, alias, consts, found in reading.pending
        if (
            c := constraint(
                cond,
                names,
                alias,
                consts,
                _plain_shapes(found),
                scalars,
                {t: s for s, t in reading.fixed.items()},
                reading.relations,
                dtypes,
            )
        )
        is not None
    ]
    return constraints


def _plain_shapes(found: dict[str, list[Matcher]]) -> dict[str, list[str | int]]:
    """Each tensor's shape as its plain path's matcher (:func:`plain_matcher`) states it."""
    return {name: plain_matcher(items).shape for name, items in found.items() if items}


def _reverse(alias: dict[str, str], name: str) -> str | None:
    """A body's own name for the entry's ``name`` (the entry body: the name itself)."""
    if not alias:
        return name
    return next((local for local, entry_name in alias.items() if entry_name == name), None)


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
        conds = check_conditions(body)
        refs = [name] + re.findall(rf"(?:const\s+)?auto\s*&?\s*(\w+)\s*=\s*{re.escape(name)}(?:\.value\(\))?\s*;", body)
        for ref in refs:
            who = re.escape(ref)
            for m in re.finditer(rf"\b{who}\.n?dim\(\)\s*(==|>=)\s*(\d+)", body):
                rank = int(m.group(2)) if rank is None else max(rank, int(m.group(2)))
            for m in re.finditer(rf"\b{who}{DIM_USE}", body):
                used.add(dim_index(m, 1))
            for m in re.finditer(
                rf"(?:int64_t|int|auto|int32_t|uint32_t|size_t)\s+(\w+)\s*=\s*(?:static_cast<[^<>]*>\s*\()?\s*{who}{DIM_USE}",
                body,
            ):
                named.setdefault(dim_index(m, 2), m.group(1))
            for cond in conds:
                for part in split_top(cond, "&&"):
                    equated = re.fullmatch(rf"\s*{who}{DIM_USE}\s*==\s*([\w\s+*]+?)\s*", part)
                    if equated is not None:
                        named.setdefault(dim_index(equated, 1), " ".join(equated.group(3).split()))
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


def scalar_type(cpp_type: str) -> str | None:
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
