"""Errors of the extract stage (see pipeline.errors for the families)."""

from pipeline.errors import ConfigError, KernelsmithError, SourceError, ToolchainError, UnknownOpError


class ParseError(KernelsmithError):
    """A source file tree-sitter or libcst could not read; recorded, never fatal for the run."""


__all__ = ["ConfigError", "ParseError", "SourceError", "ToolchainError", "UnknownOpError"]
