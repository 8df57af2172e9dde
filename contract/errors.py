"""Errors of the contract package (families in :mod:`pipeline.errors`).

Why here: a contract the project cannot turn into a call (an unknown symbol, an
expression outside the restricted grammar, no instantiation for a dtype) is the
same mistake whichever stage finds it (extract inventing a shape, the harness
planning a case, integrate calling SGLang's op), so every stage raises and catches
the one type. A missing task folder likewise.
"""

from __future__ import annotations

from pipeline.errors import ConfigError


class ContractError(ConfigError):
    """A contract that cannot be instantiated (unknown symbol, bad expression, no instantiation)."""


class TaskMissing(ConfigError):
    """No extracted task folder for an op, or a task folder missing one of its files."""


class ExprError(ValueError):
    """An expression outside its grammar, or one that has no value at the names given.

    A plain ValueError on purpose: each user says in its own words what the expression
    was (a shape entry, a constraint, a value range) and whether that is fatal.
    ``undefined`` marks the second kind (a name with no value, a division by zero or an
    inexact division) as opposed to text the grammar refuses.
    """

    def __init__(self, message: str, *, undefined: bool = False, syntax: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.undefined = undefined
        self.syntax = syntax  # not Python at all (as opposed to a node the grammar refuses)


__all__ = ["ContractError", "ExprError", "TaskMissing"]
