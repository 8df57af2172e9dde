"""The long-term skill library: versioned optimization recipes in ``optimize/skills/<id>.toml``.

Why: the planner should not rediscover "use 16-byte vectors" every run. A skill
records, once, when a technique applies (a rule over :mod:`optimize.features`),
what it tends to buy, how to do it (text for the LLM coder), what can go wrong,
and, where the edit is mechanical, which :mod:`optimize.transforms` function does
it and over which parameter grid.

Skill file (TOML)::

    id = "launch_bounds"                 # == file stem
    version = 1                          # bump when the method or rule changes meaning
    title = "..."
    category = "occupancy"               # see CATEGORIES
    priority = 0.5                       # prior for ranking, 0..1
    applies_when = "kernels_without_launch_bounds > 0"
    method = "..."                       # our words, for the LLM coder
    risks = ["...", "..."]
    rationale = "..."                    # optional, for a reviewer: why it helps (the PR's "what changed")
    safety = "..."                       # optional, for a reviewer: why the edit keeps the results
    assumes = "..."                      # optional: what must hold for the safety argument
    transform = "set_launch_bounds"      # optional: a name in transforms.registry.TRANSFORMS
    llm_variants = ["...", "..."]        # optional: distinct LLM attempts (params {"variant": ...})
    [effect]
    summary = "..."
    speedup = [1.0, 1.1]                 # rough expected range, geometric-mean speedup
    [grid]                               # optional: transform parameters / selectors -> values
    min_blocks = [0]

The rule language (``applies_when``) is small and evaluated without ``eval``:
numbers, ``"strings"``, ``true``/``false``, feature names (:data:`FEATURE_NAMES`),
``+ - * /``, comparisons ``< <= > >= == !=`` (not chained), ``and or not`` and
parentheses. Unknown feature values (``None``) follow Kleene's three-valued logic:
``unknown and false`` is false, ``unknown or true`` is true, anything else with an
unknown is unknown, and a rule that ends unknown is *undecided* (the skill is not
applied, and the planner says which features were missing).

What must stay true:
- A skill file that does not validate (bad key, unknown feature, type error in
  the rule, unknown transform or grid key) fails :func:`load_skills` with the file
  and the fix; the library never silently drops a skill.
- Rules are type-checked when compiled: arithmetic and ordering on numbers,
  ``and``/``or``/``not`` on booleans, the whole rule boolean.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import pathlib
import re
import tomllib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from optimize.cuda_facts import GridKind
from optimize.features import FEATURE_NAMES, Features, ProfileFacts, StaticFeatures
from pipeline.errors import ConfigError
from pipeline.record_io import Record

SKILL_DIR = pathlib.Path(__file__).resolve().parent / "skills"

CATEGORIES = (
    "memory",
    "parallelism",
    "latency",
    "occupancy",
    "compute",
    "reduction",
    "launch",
    "fusion",
    "hopper",
)


class SkillError(ConfigError):
    """A skill file is invalid (fixed by editing the file)."""


class RuleError(SkillError):
    """An applicability rule does not parse or does not type-check."""


# --------------------------------------------------------------------------- rule language

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
      | (?P<string>"[^"\\]*")
      | (?P<op><=|>=|==|!=|<|>|\+|-|\*|/|\(|\))
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.X,
)
_KEYWORDS = {"and", "or", "not", "true", "false"}
_COMPARE = {"<", "<=", ">", ">=", "==", "!="}

Value = bool | int | float | str | None
Kind = Literal["bool", "num", "str"]


@dataclasses.dataclass(frozen=True)
class _Tok:
    kind: str  # number | string | op | name | kw | end
    text: str
    pos: int


@dataclasses.dataclass(frozen=True)
class _Node:
    op: str  # const | name | not | and | or | neg | + - * / | comparison ops
    args: tuple[Any, ...]
    kind: Kind
    pos: int


def _feature_kinds() -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    for model in (StaticFeatures, ProfileFacts):
        for name, info in model.model_fields.items():
            annotation = info.annotation
            args = (
                typing.get_args(annotation)
                if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
                else (annotation,)
            )
            base = {a for a in args if a is not type(None)}
            if base == {bool}:
                kinds[name] = "bool"
            elif base <= {int, float}:
                kinds[name] = "num"
            elif base == {str}:
                kinds[name] = "str"
            else:  # pragma: no cover - a new feature type must be taught here
                raise TypeError(f"feature {name} has a type the rule language does not know: {annotation}")
    return kinds


FEATURE_KINDS: dict[str, Kind] = _feature_kinds()
#: the values a string feature can take (a rule comparing with anything else is a typo)
STRING_CHOICES: dict[str, frozenset[str]] = {"grid_kind": frozenset(typing.get_args(GridKind))}


class Rule:
    """A compiled applicability rule; see the module docstring for the language."""

    def __init__(self, text: str, *, known: Mapping[str, Kind] | None = None) -> None:
        self.text = text
        self._known = dict(FEATURE_KINDS if known is None else known)
        self._tokens = self._lex(text)
        self._i = 0
        if not self._tokens or self._tokens[0].kind == "end":
            raise RuleError("empty rule", fix='write a condition such as "memory_bound and load_bytes < 16"')
        self.tree = self._or()
        if self._peek().kind != "end":
            self._fail(self._peek(), f"unexpected {self._peek().text!r}")
        if self.tree.kind != "bool":
            self._fail_at(0, f"the rule is a {self.tree.kind}, not a condition")
        self.names: frozenset[str] = frozenset(self._names(self.tree))

    # ----------------------------------------------------------------- parsing

    def _lex(self, text: str) -> list[_Tok]:
        out: list[_Tok] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                start = len(text[pos:]) - len(text[pos:].lstrip()) + pos
                self._fail_at(start, f"unexpected character {text[start]!r}")
            kind = m.lastgroup or "op"
            value = m.group(kind)
            start = m.start(kind)
            if kind == "name" and value in _KEYWORDS:
                kind = "kw"
            out.append(_Tok(kind, value, start))
            pos = m.end()
        out.append(_Tok("end", "end of rule", len(text)))
        return out

    def _peek(self) -> _Tok:
        return self._tokens[self._i]

    def _next(self) -> _Tok:
        tok = self._tokens[self._i]
        self._i += 1
        return tok

    def _fail(self, tok: _Tok, message: str) -> typing.NoReturn:
        self._fail_at(tok.pos, message)

    def _fail_at(self, pos: int, message: str) -> typing.NoReturn:
        caret = " " * pos + "^"
        raise RuleError(
            f"rule {self.text!r}: {message} at column {pos + 1}",
            detail=f"  {self.text}\n  {caret}",
            fix='rules use feature names, numbers, "strings", true/false, + - * /, < <= > >= == !=, and/or/not, ( )',
        )

    def _expect(self, kind: Kind, node: _Node, what: str) -> None:
        if node.kind != kind:
            self._fail_at(node.pos, f"{what} needs a {'condition' if kind == 'bool' else kind}, got a {node.kind}")

    def _or(self) -> _Node:
        left = self._and()
        while self._peek().text == "or" and self._peek().kind == "kw":
            tok = self._next()
            right = self._and()
            self._expect("bool", left, "'or'")
            self._expect("bool", right, "'or'")
            left = _Node("or", (left, right), "bool", tok.pos)
        return left

    def _and(self) -> _Node:
        left = self._not()
        while self._peek().text == "and" and self._peek().kind == "kw":
            tok = self._next()
            right = self._not()
            self._expect("bool", left, "'and'")
            self._expect("bool", right, "'and'")
            left = _Node("and", (left, right), "bool", tok.pos)
        return left

    def _not(self) -> _Node:
        if self._peek().text == "not" and self._peek().kind == "kw":
            tok = self._next()
            inner = self._not()
            self._expect("bool", inner, "'not'")
            return _Node("not", (inner,), "bool", tok.pos)
        return self._compare()

    def _compare(self) -> _Node:
        left = self._sum()
        if self._peek().kind == "op" and self._peek().text in _COMPARE:
            tok = self._next()
            right = self._sum()
            if self._peek().kind == "op" and self._peek().text in _COMPARE:
                self._fail(self._peek(), "comparisons cannot be chained; join them with 'and'")
            if tok.text in ("<", "<=", ">", ">="):
                self._expect("num", left, f"'{tok.text}'")
                self._expect("num", right, f"'{tok.text}'")
            elif left.kind != right.kind:
                self._fail_at(tok.pos, f"'{tok.text}' compares a {left.kind} with a {right.kind}")
            elif left.kind == "str":
                self._check_choice(left, right)
                self._check_choice(right, left)
            return _Node(tok.text, (left, right), "bool", tok.pos)
        return left

    def _check_choice(self, name: _Node, const: _Node) -> None:
        if name.op != "name" or const.op != "const":
            return
        choices = STRING_CHOICES.get(name.args[0])
        if choices is not None and const.args[0] not in choices:
            self._fail_at(const.pos, f"{name.args[0]} is never {const.args[0]!r}; it is one of {sorted(choices)}")

    def _sum(self) -> _Node:
        left = self._term()
        while self._peek().kind == "op" and self._peek().text in ("+", "-"):
            tok = self._next()
            right = self._term()
            self._expect("num", left, f"'{tok.text}'")
            self._expect("num", right, f"'{tok.text}'")
            left = _Node(tok.text, (left, right), "num", tok.pos)
        return left

    def _term(self) -> _Node:
        left = self._unary()
        while self._peek().kind == "op" and self._peek().text in ("*", "/"):
            tok = self._next()
            right = self._unary()
            self._expect("num", left, f"'{tok.text}'")
            self._expect("num", right, f"'{tok.text}'")
            left = _Node(tok.text, (left, right), "num", tok.pos)
        return left

    def _unary(self) -> _Node:
        if self._peek().kind == "op" and self._peek().text == "-":
            tok = self._next()
            inner = self._unary()
            self._expect("num", inner, "'-'")
            return _Node("neg", (inner,), "num", tok.pos)
        return self._atom()

    def _atom(self) -> _Node:
        tok = self._next()
        if tok.kind == "number":
            value: Value = float(tok.text) if re.search(r"[.eE]", tok.text) else int(tok.text)
            return _Node("const", (value,), "num", tok.pos)
        if tok.kind == "string":
            return _Node("const", (tok.text[1:-1],), "str", tok.pos)
        if tok.kind == "kw" and tok.text in ("true", "false"):
            return _Node("const", (tok.text == "true",), "bool", tok.pos)
        if tok.kind == "name":
            if tok.text not in self._known:
                close = difflib.get_close_matches(tok.text, list(self._known), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                self._fail(tok, f"unknown feature {tok.text!r}{hint}")
            return _Node("name", (tok.text,), self._known[tok.text], tok.pos)
        if tok.kind == "op" and tok.text == "(":
            inner = self._or()
            closing = self._next()
            if closing.text != ")":
                self._fail(closing, f"expected ')' but found {closing.text!r}")
            return inner
        self._fail(tok, f"expected a value, a feature name or '(' but found {tok.text!r}")

    def _names(self, node: _Node) -> Iterator[str]:
        if node.op == "name":
            yield node.args[0]
        for arg in node.args:
            if isinstance(arg, _Node):
                yield from self._names(arg)

    # ----------------------------------------------------------------- evaluation

    def evaluate(self, values: Mapping[str, Value]) -> bool | None:
        """True / False, or None when unknown feature values leave it undecided."""
        missing = [n for n in self.names if n not in values]
        if missing:
            raise RuleError(
                f"rule {self.text!r}: no value given for {sorted(missing)}",
                fix="pass Features.flat(), which has every feature name",
            )
        result = self._eval(self.tree, values)
        return None if result is None else bool(result)

    def _eval(self, node: _Node, values: Mapping[str, Value]) -> Value:
        op = node.op
        if op == "const":
            return node.args[0]
        if op == "name":
            return values[node.args[0]]
        if op == "not":
            inner = self._eval(node.args[0], values)
            return None if inner is None else not inner
        if op in ("and", "or"):
            left = self._eval(node.args[0], values)
            right = self._eval(node.args[1], values)
            decisive = op == "or"  # True decides 'or', False decides 'and'
            if left is decisive or right is decisive:
                return decisive
            if left is None or right is None:
                return None
            return not decisive
        if op == "neg":
            inner = self._eval(node.args[0], values)
            return None if inner is None else -inner  # type: ignore[operator]
        left = self._eval(node.args[0], values)
        right = self._eval(node.args[1], values)
        if left is None or right is None:
            return None
        if op == "+":
            return left + right  # type: ignore[operator]
        if op == "-":
            return left - right  # type: ignore[operator]
        if op == "*":
            return left * right  # type: ignore[operator]
        if op == "/":
            return None if right == 0 else left / right  # type: ignore[operator]
        return {
            "<": lambda a, b: a < b,
            "<=": lambda a, b: a <= b,
            ">": lambda a, b: a > b,
            ">=": lambda a, b: a >= b,
            "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b,
        }[op](left, right)

    def explain(self, values: Mapping[str, Value]) -> str:
        """``name=value`` for every feature the rule reads (unknown shown as ``?``)."""
        return ", ".join(f"{n}={'?' if values.get(n) is None else values[n]}" for n in sorted(self.names))

    def __repr__(self) -> str:
        return f"Rule({self.text!r})"


@functools.lru_cache(maxsize=512)
def compile_rule(text: str) -> Rule:
    return Rule(text)


# --------------------------------------------------------------------------- skills


class Effect(Record):
    summary: str
    speedup: tuple[float, float]  # rough expected range of the geometric-mean speedup

    @field_validator("speedup")
    @classmethod
    def _ordered(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not 0.5 <= low <= high <= 10.0:
            raise ValueError(f"speedup range must satisfy 0.5 <= low <= high <= 10, got {list(value)}")
        return value


class Skill(Record):
    id: str
    version: int = Field(ge=1)
    title: str
    category: Literal[CATEGORIES]  # type: ignore[valid-type]
    priority: float = Field(0.5, ge=0.0, le=1.0)
    applies_when: str
    effect: Effect
    method: str
    risks: list[str]
    rationale: str = ""  # reviewer-facing: why it helps (integrate.pr puts it in the PR, not `method`)
    safety: str = ""  # reviewer-facing: why the edited kernel still computes the same results
    assumes: str = ""  # reviewer-facing: what the safety argument relies on
    transform: str | None = None
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    llm_variants: list[str] = Field(default_factory=list)

    _rule: Rule = PrivateAttr()

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", value):
            raise ValueError(f"skill id {value!r} must be lower_snake_case")
        return value

    @field_validator("method", "title")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _check(self) -> Skill:
        from optimize.transforms.registry import TRANSFORMS

        self._rule = compile_rule(self.applies_when)
        if not self.risks:
            raise ValueError("list at least one risk")
        for key, values in self.grid.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"grid.{key} must be a non-empty list of values")
        if self.transform is not None:
            spec = TRANSFORMS.get(self.transform)
            if spec is None:
                raise ValueError(f"unknown transform {self.transform!r}; known: {sorted(TRANSFORMS)}")
            allowed = set(spec.params) | set(spec.selectors)
            unknown = sorted(set(self.grid) - allowed)
            if unknown:
                raise ValueError(f"grid keys {unknown} are not parameters of {self.transform} ({sorted(allowed)})")
        elif self.grid:
            raise ValueError("a grid needs a transform; LLM-only skills list llm_variants instead")
        return self

    @property
    def rule(self) -> Rule:
        return self._rule

    @property
    def mechanical(self) -> bool:
        return self.transform is not None

    def applies(self, flat: Mapping[str, Value]) -> bool | None:
        """True / False / None (undecided: a feature the rule needs is unknown)."""
        return self._rule.evaluate(flat)

    def prompt_text(self) -> str:
        """The skill as the coder's prompt shows it (method, expected effect, risks)."""
        low, high = self.effect.speedup
        risks = "\n".join(f"- {r}" for r in self.risks)
        return (
            f"{self.title} (skill {self.id} v{self.version})\n"
            f"Expected: {self.effect.summary} (roughly {low:.2f}x-{high:.2f}x)\n"
            f"How:\n{self.method.strip()}\nRisks:\n{risks}\n"
        )


@dataclasses.dataclass(frozen=True)
class SkillLibrary:
    skills: tuple[Skill, ...]
    directory: pathlib.Path | None = None

    def __iter__(self) -> Iterator[Skill]:
        return iter(self.skills)

    def __len__(self) -> int:
        return len(self.skills)

    def ids(self) -> list[str]:
        return [s.id for s in self.skills]

    def get(self, skill_id: str) -> Skill:
        for s in self.skills:
            if s.id == skill_id:
                return s
        close = difflib.get_close_matches(skill_id, self.ids(), n=3)
        raise SkillError(
            f"no skill {skill_id!r}" + (f"; did you mean {', '.join(close)}?" if close else ""),
            fix=f"skills live in {self.directory or SKILL_DIR}",
        )

    def applicable(self, features: Features) -> list[Skill]:
        flat = features.flat()
        return [s for s in self.skills if s.applies(flat) is True]

    def only(self, skill_ids: Sequence[str]) -> SkillLibrary:
        """The library cut to ``skill_ids`` (none: all of it), for a run scoped to some skills.

        Why: a sweep over many ops that tests one family (PDL) should spend its GPU time on
        that family's points only. An id the library does not have fails here, with the close
        matches, instead of scoping the run to nothing.
        """
        if not skill_ids:
            return self
        for skill_id in skill_ids:
            self.get(skill_id)
        wanted = set(skill_ids)
        return SkillLibrary(tuple(s for s in self.skills if s.id in wanted), self.directory)


def load_skill(path: str | pathlib.Path) -> Skill:
    path = pathlib.Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise SkillError(f"{path} is not valid TOML: {err}", fix="fix the TOML syntax", where=str(path)) from err
    if data.get("id") != path.stem:
        raise SkillError(f"{path}: id {data.get('id')!r} differs from the file name", fix=f'set id = "{path.stem}"')
    try:
        return Skill.model_validate(data)
    except RuleError as err:  # raised by the rule compiler, not wrapped by pydantic
        err.where = str(path)
        raise
    except ValidationError as err:
        raise SkillError(
            f"{path} is not a valid skill", fix="fix the fields named below", detail=str(err), where=str(path)
        ) from err


def load_skills(directory: str | pathlib.Path | None = None) -> SkillLibrary:
    """Every ``<id>.toml`` of ``directory`` (default: the packaged library), sorted by id."""
    folder = pathlib.Path(directory) if directory is not None else SKILL_DIR
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise SkillError(f"no skill files in {folder}", fix="point at a folder of <id>.toml skills")
    return SkillLibrary(tuple(load_skill(p) for p in files), folder)


__all__ = [
    "CATEGORIES",
    "FEATURE_KINDS",
    "FEATURE_NAMES",
    "Effect",
    "Rule",
    "RuleError",
    "Skill",
    "SkillError",
    "SkillLibrary",
    "compile_rule",
    "load_skill",
    "load_skills",
]
