"""The statement half of the restricted interpreter: calls, frames and control flow.

:class:`Evaluator` adds to :class:`~.expressions.Expressions` what running a loader
needs: calls (SGLang's ``load_jit`` and ``make_cpp_args``, platform probes and GPU
queries answered for the target, builtins and bound methods on concrete arguments,
functions of the program), parameter binding with defaults, and statements (``if``
taken on a known test, bounded ``for``/``while``, ``return``, ``raise`` and failing
``assert`` as :class:`~.values.Unresolvable`). In strict mode the first ``load_jit``
call ends the run (:meth:`Evaluator.run_until_load_jit`).

What must stay true: logging statements are not run (they change nothing a loader
returns); a helper that cannot run with unknown arguments is, in static mode, one of
its constant returns or unknown (:meth:`Evaluator.fallback_returns`), and the guess
is noted.
"""

from __future__ import annotations

import libcst as cst

from extract.pyops.expressions import BUILTINS, MAX_DEPTH, MAX_LOOP, Expressions
from extract.pyops.modules import Env, PyFunction, attr_text
from extract.pyops.target import PLATFORM, PLATFORM_CALLS, STDLIB_CALLS
from extract.pyops.values import (
    Alts,
    Bound,
    Builtin,
    CppArgs,
    JitCapture,
    Mutator,
    Probe,
    Unknown,
    Unresolvable,
    concrete,
    cpp_literal,
)

# An augmented assignment (`x += y`) runs as the binary operation it abbreviates.
AUG_OPERATORS: dict[str, type[cst.BaseBinaryOp]] = {
    "AddAssign": cst.Add,
    "SubtractAssign": cst.Subtract,
    "MultiplyAssign": cst.Multiply,
    "FloorDivideAssign": cst.FloorDivide,
    "ModuloAssign": cst.Modulo,
    "BitOrAssign": cst.BitOr,
    "BitAndAssign": cst.BitAnd,
    "LeftShiftAssign": cst.LeftShift,
    "RightShiftAssign": cst.RightShift,
    "DivideAssign": cst.Divide,
    "PowerAssign": cst.Power,
}


_LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log", "warning_once", "info_once"}
)


def _is_logging(call: cst.Call) -> bool:
    """A statement that only logs (``logger.debug(f"{num_threads = }")``, ``print(...)``):
    it changes nothing a loader returns, so it is not run."""
    func = call.func
    if isinstance(func, cst.Name):
        return func.value == "print"
    return isinstance(func, cst.Attribute) and func.attr.value in _LOG_METHODS


class _Return(Exception):
    """A ``return`` unwinding the body being run, with its value."""

    def __init__(self, value: object) -> None:
        self.value = value


class _Captured(Exception):
    """Strict mode: the first ``load_jit`` call reached, ending the loader's run."""

    def __init__(self, capture: JitCapture) -> None:
        self.capture = capture


class Evaluator(Expressions):
    """Evaluates libcst expressions and runs restricted function bodies.

    ``resolve_module(dotted)`` returns a parsed :class:`PyModule` for imports the
    evaluator may follow (op modules and ``kernels/jit/utils``), or None. In strict
    mode, the first ``load_jit`` call ends the run and is returned
    (:meth:`run_until_load_jit`: the loader's job is done at that point).
    """

    # ------------------------------------------------------------------ calls

    def _eval_Call(self, node: cst.Call, env: Env) -> object:
        func_text = attr_text(node.func) or ""
        short = func_text.split(".")[-1]
        if short == "load_jit":
            return self.load_jit(node, env)
        if short == "make_cpp_args":
            return self.make_cpp_args(node, env)
        if short in PLATFORM and not isinstance(env.lookup(short)[1], PyFunction):
            return PLATFORM[short]
        if func_text in PLATFORM_CALLS or (short in PLATFORM_CALLS and not func_text.startswith("torch.")):
            return PLATFORM_CALLS.get(func_text, PLATFORM_CALLS.get(short))
        callee: object
        if func_text in STDLIB_CALLS:
            callee = Bound(STDLIB_CALLS[func_text])
        else:
            callee = self.eval(node.func, env)
        if isinstance(callee, Probe):
            return PLATFORM[callee.name]
        args, kwargs = self.call_args(node, env)
        if isinstance(callee, Builtin):
            if not (concrete(args) and concrete(kwargs)):
                return self.unknown(env, node)
            try:
                return BUILTINS[callee.name](*args, **kwargs)
            except Exception as err:  # noqa: BLE001
                if self.strict:
                    raise Unresolvable(f"`{env.module.code(node)}` failed: {err}") from err
                return Unknown(env.module.code(node))
        if isinstance(callee, Bound):
            if not (concrete(args) and concrete(kwargs)):
                return self.unknown(env, node)
            try:
                return callee.fn(*args, **kwargs)
            except Exception as err:  # noqa: BLE001
                if self.strict:
                    raise Unresolvable(f"`{env.module.code(node)}` failed: {err}") from err
                return Unknown(env.module.code(node))
        if isinstance(callee, Mutator):
            target = callee.target
            if len(args) == 1:
                if callee.how == "append":
                    target.append(args[0])
                elif isinstance(args[0], (list, tuple)):
                    target.extend(args[0])
                else:
                    target.append(args[0])
            return None
        if isinstance(callee, PyFunction):
            return self.call_function(callee, args, kwargs, node, env)
        return self.unknown(env, node)

    def call_args(self, node: cst.Call, env: Env) -> tuple[list[object], dict[str, object]]:
        args: list[object] = []
        kwargs: dict[str, object] = {}
        for arg in node.args:
            value = self.eval(arg.value, env)
            if arg.star == "*":
                if isinstance(value, (list, tuple)):
                    args.extend(value)
                else:
                    args.append(value)
            elif arg.star == "**":
                if isinstance(value, dict):
                    kwargs.update(value)
            elif arg.keyword is not None:
                kwargs[arg.keyword.value] = value
            else:
                args.append(value)
        return args, kwargs

    def bind_params(self, fn: PyFunction, args: list[object], kwargs: dict[str, object]) -> Env:
        """Bind call arguments to parameters; missing ones take defaults (evaluated in the defining module)."""
        env = Env(fn.module)
        params = fn.node.params
        positional = [*params.posonly_params, *params.params]
        if fn.cls is not None and positional and positional[0].name.value in ("self", "cls"):
            positional = positional[1:]
        for i, param in enumerate(positional):
            env.values[param.name.value] = args[i] if i < len(args) else self._keyword_value(fn, param, kwargs)
        if isinstance(params.star_arg, cst.Param):
            env.values[params.star_arg.name.value] = tuple(args[len(positional) :])
        for param in params.kwonly_params:
            env.values[param.name.value] = self._keyword_value(fn, param, kwargs)
        if params.star_kwarg is not None:
            known = {p.name.value for p in [*positional, *params.kwonly_params]}
            env.values[params.star_kwarg.name.value] = {k: v for k, v in kwargs.items() if k not in known}
        return env

    def _keyword_value(self, fn: PyFunction, param: cst.Param, kwargs: dict[str, object]) -> object:
        """A parameter not given by position: its keyword argument, else its default, else missing."""
        name = param.name.value
        if name in kwargs:
            return kwargs[name]
        if param.default is not None:
            return self.eval(param.default, Env(fn.module))
        return self._missing(fn, name)

    def _missing(self, fn: PyFunction, name: str) -> Unknown:
        if self.strict:
            raise Unresolvable(f"parameter `{name}` of {fn.qualname} has no value")
        return Unknown(name)

    def call_function(
        self, fn: PyFunction, args: list[object], kwargs: dict[str, object], node: cst.CSTNode, env: Env
    ) -> object:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise Unresolvable(f"call depth exceeded at {fn.qualname}")
            scope = self.bind_params(fn, args, kwargs)
            return self.run_body(fn, scope)
        except Unresolvable:
            if self.strict:
                raise
            return self.fallback_returns(fn, env, node)
        finally:
            self.depth -= 1

    def fallback_returns(self, fn: PyFunction, env: Env, node: cst.CSTNode) -> object:
        """Static mode: a helper we could not run with unknown arguments.

        When every ``return`` of it is a constant, the result is one of them
        (``_rmsnorm_kernel_class`` returns one of three class names); otherwise it
        is unknown.
        """
        constants: list[cst.BaseExpression | None] = []

        class Returns(cst.CSTVisitor):
            def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
                return inner is fn.node

            def visit_Return(self, ret: cst.Return) -> None:
                constants.append(ret.value)

        fn.node.visit(Returns())
        values: list[object] = []
        for expr in constants:
            if expr is None:
                return Unknown(env.module.code(node))
            try:
                value = self.eval(expr, Env(fn.module))
            except Unresolvable:
                return Unknown(env.module.code(node))
            if not concrete(value) or isinstance(value, (list, dict, set)):
                return Unknown(env.module.code(node))
            values.append(value)
        if not values:
            return Unknown(env.module.code(node))
        unique = tuple(dict.fromkeys(values))
        self.note(f"`{env.module.code(node)}` is one of {', '.join(map(repr, unique))}")
        return unique[0] if len(unique) == 1 else Alts(unique)

    # ------------------------------------------------------------------ statements

    def run_body(self, fn: PyFunction, env: Env) -> object:
        try:
            self.run_block(fn.node.body, env)
        except _Return as ret:
            return ret.value
        return None

    def run_block(self, block: cst.BaseSuite, env: Env) -> None:
        if isinstance(block, cst.SimpleStatementSuite):
            for small in block.body:
                self.run_small(small, env)
            return
        for stmt in block.body:
            self.run_statement(stmt, env)

    def run_statement(self, stmt: cst.CSTNode, env: Env) -> None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.run_small(small, env)
        elif isinstance(stmt, cst.If):
            test = self.condition(stmt.test, env)
            if test is None:
                raise Unresolvable(f"branch on `{env.module.code(stmt.test)}` is not known statically")
            if test:
                self.run_block(stmt.body, env)
            elif stmt.orelse is not None:
                orelse = stmt.orelse
                if isinstance(orelse, cst.Else):
                    self.run_block(orelse.body, env)
                else:
                    self.run_statement(orelse, env)
        elif isinstance(stmt, cst.For):
            iterable = self.eval(stmt.iter, env)
            if not isinstance(iterable, (list, tuple, range, dict, str, set, frozenset)):
                raise Unresolvable(f"loop over `{env.module.code(stmt.iter)}`")
            for i, item in enumerate(iterable):
                if i > MAX_LOOP:
                    raise Unresolvable("loop too long")
                self.bind_target(stmt.target, item, env)
                self.run_block(stmt.body, env)
        elif isinstance(stmt, cst.While) and stmt.orelse is None:
            # a heuristic search (`while lanes < 32 and ...: lanes *= 2`), bounded like a for loop
            for i in range(MAX_LOOP + 2):
                test = self.condition(stmt.test, env)
                if test is None:
                    raise Unresolvable(f"loop condition `{env.module.code(stmt.test)}` is not known statically")
                if not test:
                    break
                if i > MAX_LOOP:
                    raise Unresolvable("loop too long")
                self.run_block(stmt.body, env)
        elif isinstance(stmt, (cst.With, cst.Try)):
            self.run_block(stmt.body, env)
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return
        else:
            raise Unresolvable(f"statement `{type(stmt).__name__}` is not interpreted")

    def run_small(self, small: cst.BaseSmallStatement, env: Env) -> None:
        if isinstance(small, cst.Return):
            raise _Return(None if small.value is None else self.eval(small.value, env))
        if isinstance(small, cst.Assign):
            value = self.eval(small.value, env)
            for target in small.targets:
                self.bind_target(target.target, value, env)
        elif isinstance(small, cst.AnnAssign):
            if small.value is not None:
                self.bind_target(small.target, self.eval(small.value, env), env)
        elif isinstance(small, cst.AugAssign):
            if isinstance(small.target, cst.Name):
                fake = cst.BinaryOperation(
                    left=small.target, operator=AUG_OPERATORS[type(small.operator).__name__](), right=small.value
                )
                env.values[small.target.value] = self.eval(fake, env)
        elif isinstance(small, cst.Expr):
            if isinstance(small.value, cst.Call) and not _is_logging(small.value):
                self.eval(small.value, env)
        elif isinstance(small, cst.Raise):
            raise Unresolvable(f"the function raises here: `{env.module.code(small)}`")
        elif isinstance(small, cst.Assert):
            ok = self.condition(small.test, env)
            if ok is False:
                raise Unresolvable(f"assertion fails: `{env.module.code(small.test)}`")
        elif isinstance(small, (cst.Pass, cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal)):
            return
        else:
            raise Unresolvable(f"statement `{type(small).__name__}` is not interpreted")

    # ------------------------------------------------------------------ SGLang's helpers

    def make_cpp_args(self, node: cst.Call, env: Env) -> CppArgs:
        texts = [env.module.code(arg.value) for arg in node.args]
        args, _ = self.call_args(node, env)
        if self.strict:
            return CppArgs([cpp_literal(v) for v in args], symbolic=False, texts=texts)
        return CppArgs(texts, symbolic=True, texts=texts)

    def load_jit(self, node: cst.Call, env: Env) -> Unknown:
        if not self.strict:
            return Unknown(env.module.code(node))
        args, kwargs = self.call_args(node, env)
        template: list[str] = []
        for arg in node.args:
            if arg.star == "*" and arg.keyword is None:
                value = self.eval(arg.value, env)
                if isinstance(value, CppArgs):
                    template.extend(value)
        capture = JitCapture(
            args=[a if isinstance(a, str) else cpp_literal(a) for a in args], kwargs=kwargs, template_args=template
        )
        raise _Captured(capture)

    def run_until_load_jit(self, fn: PyFunction, args: list[object], kwargs: dict[str, object]) -> JitCapture:
        """Strict mode: run ``fn`` until its first ``load_jit`` call and return what it passed."""
        assert self.strict
        try:
            scope = self.bind_params(fn, args, kwargs)
            self.run_body(fn, scope)
        except _Captured as done:
            return done.capture
        raise Unresolvable(f"{fn.qualname} returned without calling load_jit for these arguments")
