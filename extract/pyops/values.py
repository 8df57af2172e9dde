"""The values the restricted interpreter computes with.

Plain Python values (ints, strings, lists, dicts) stand for themselves. Everything
else a loader can hold is one of the frozen classes here: a value known only at run
time (:class:`Unknown`, :class:`ParamRef`), one of several (:class:`Alts`), a torch
dtype or tensor (:class:`DtypeValue`, :class:`TensorValue`), ``make_cpp_args``' result
(:class:`CppArgs`), and the references a name can resolve to before it is called or
read (:class:`ClassRef`, :class:`ImportRef`, :class:`ModuleRef`, :class:`Builtin`,
:class:`Probe`, :class:`Bound`, :class:`Mutator`).

What must stay true: a value is *concrete* (:func:`concrete`) exactly when the
interpreter may compute with it as Python would; everything else makes the
expression using it unknown (static mode) or :class:`Unresolvable` (strict mode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from extract.pyops.modules import PyModule
from extract.pyops.target import CPP_SPELLING


class Unresolvable(Exception):
    """A value the restricted evaluator cannot know statically; the message says which."""


@dataclasses.dataclass(frozen=True)
class Unknown:
    """A runtime value (a parameter, an attribute of one): rendered as ``{text}``."""

    text: str


@dataclasses.dataclass(frozen=True)
class ParamRef:
    """Static mode: a function parameter. Renders as ``{name}``; a condition on it
    is judged at its default value when it has one (and the guess is noted)."""

    name: str
    default: object = None
    has_default: bool = False


@dataclasses.dataclass(frozen=True)
class Alts:
    """One of several values (a helper that returns one of a few constants)."""

    options: tuple[object, ...]


@dataclasses.dataclass(frozen=True)
class DtypeValue:
    """A torch dtype, by our short name (``bf16``)."""

    name: str

    @property
    def cpp(self) -> str:
        return CPP_SPELLING[self.name]


@dataclasses.dataclass(frozen=True)
class TensorValue:
    """A tensor argument: its dtype, and where the contract sizes it, its shape.

    ``dims`` holds, per dimension, the contract symbol it is (None for a literal)
    and the value this instantiation is planned at. A loader parameter read from
    it (``w.shape[0]``) makes the instantiation serve that value only: the
    evaluator records the symbol in :attr:`Evaluator.pins`.
    """

    name: str
    dtype: DtypeValue | None = None
    dims: tuple[tuple[str | None, int], ...] | None = None


class Constant(int):
    """An int loader value that is no size (a mode number, a compile-time constant): a
    curated loader value marked ``constant = true``. It renders as the int it is; an
    instantiation made only from dtypes, flags and these is size-free."""


class CppArgs(list[str]):
    """The result of ``make_cpp_args``: rendered C++ template arguments.

    In static mode the items are the argument *texts* and the list renders as
    ``{args}`` inside an f-string; in strict mode they are the C++ spellings and it
    renders as SGLang's ``", ".join(...)``.
    """

    def __init__(self, items: Iterable[str], *, symbolic: bool, texts: list[str] | None = None) -> None:
        super().__init__(items)
        self.symbolic = symbolic
        self.texts = texts or list(self)

    def render(self) -> str:
        return "{args}" if self.symbolic else ", ".join(self)


@dataclasses.dataclass
class JitCapture:
    """The evaluated arguments of one ``load_jit`` call (strict mode).

    ``kwargs`` holds interpreted values; it stays ``Any`` because
    :func:`~.instantiate.instantiate` unpacks ``kwargs.get("cuda_wrappers")`` before
    checking each item, and that narrowing belongs to that module."""

    args: list[str]
    kwargs: dict[str, Any]
    template_args: list[str] = dataclasses.field(default_factory=list)


class ModuleHandle:
    """What ``load_jit`` returns in strict mode: a stand-in for the tvm-ffi module."""

    def __init__(self, capture: JitCapture) -> None:
        self.capture = capture


# --------------------------------------------------------------------------- references
# What a name or attribute evaluates to before it is called or read further.


@dataclasses.dataclass(frozen=True)
class ClassRef:
    """A class defined in ``module``: its class attributes can be read (``Cls.X``)."""

    module: PyModule
    name: str


@dataclasses.dataclass(frozen=True)
class ImportRef:
    """A name imported from a module the interpreter does not follow (``from torch import x``)."""

    source: str
    name: str


@dataclasses.dataclass(frozen=True)
class ModuleRef:
    """A module bound by ``import a.b [as c]``: its attributes resolve in that module."""

    dotted: str


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A builtin the interpreter may call on concrete arguments (``len``, ``min``)."""

    name: str


@dataclasses.dataclass(frozen=True)
class Probe:
    """A platform probe (``is_hip``): calling it gives the answer for the target."""

    name: str


@dataclasses.dataclass(frozen=True)
class Bound:
    """A pure callable bound to its receiver (``", ".join``, ``x.size``): called on
    concrete arguments, its result is the value."""

    fn: Callable[..., object]


@dataclasses.dataclass(frozen=True)
class Mutator:
    """``xs.append`` / ``xs.extend`` of a list the interpreter holds: calling it
    changes that list in place (``how`` is ``"append"`` or ``"extend"``)."""

    target: list[object]
    how: str


def identical(a: object, b: object) -> bool:
    """Python's ``is``, where a torch dtype is the singleton it is in torch
    (``dtype is not torch.bfloat16``): two DtypeValues of one dtype are the same."""
    if isinstance(a, DtypeValue) and isinstance(b, DtypeValue):
        return a == b
    return a is b


def concrete(value: object) -> bool:
    """Whether the interpreter may compute with ``value`` as Python would: no unknown,
    symbolic or alternative part anywhere in it (a :class:`Mutator` is as concrete as
    the list it changes)."""
    if isinstance(value, Mutator):
        return concrete(value.target)
    if isinstance(value, (Unknown, Alts, TensorValue, ModuleHandle, ParamRef)):
        return False
    if isinstance(value, CppArgs):
        return not value.symbolic
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(concrete(v) for v in value)
    if isinstance(value, dict):
        return all(concrete(k) and concrete(v) for k, v in value.items())
    return True


def cpp_literal(value: object) -> str:
    """What ``make_cpp_args`` renders a Python value as (bools first: bool is an int)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, DtypeValue):
        return value.cpp
    if isinstance(value, (int, float, str)):
        return str(value)
    raise Unresolvable(f"template argument {value!r} is not known statically")
