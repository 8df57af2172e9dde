"""Import SGLang's kernel packages from a given tree without running ``sglang/__init__.py``.

Why: ``sglang/__init__.py`` builds SGLang's front-end language API and patches
``transformers`` at import; that pulls 22 packages the GPU machine lacks
(IPython, pydantic, aiohttp's clients, ...) and none of it is on the path from
``sglang.kernels.ops.*`` to ``load_jit`` or to a Triton op's module. Registering
``sglang`` as a plain package whose ``__path__`` is the tree's ``sglang/`` folder makes
every ``sglang.*`` submodule import from that tree, through the normal import
system, with only the packages the kernel path needs. Two kinds of process use it:
integrate's SGLang workers (:mod:`integrate.sglang_bare`) and the harness's worker for a
Triton task whose file imports ``sglang`` (:mod:`optimize.harness.triton_library`).

What must stay true: this module imports only the standard library (it runs inside
worker processes whose ``sys.path`` holds just the project, the tree and the GPU
machine's packages); one process holds at most one sglang tree.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types


def install(package_dir: str) -> types.ModuleType:
    """Make ``import sglang.<anything>`` resolve inside ``package_dir`` (the folder holding kernels/)."""
    package_dir = os.path.abspath(package_dir)
    if not os.path.isdir(os.path.join(package_dir, "kernels", "jit")):
        raise ImportError(f"{package_dir} is not an sglang package folder (no kernels/jit)")
    existing = sys.modules.get("sglang")
    if existing is not None:
        paths = list(getattr(existing, "__path__", []))
        if paths and os.path.abspath(paths[0]) == package_dir:
            return existing
        raise ImportError(f"sglang is already imported from {paths or existing}; start a fresh process")
    spec = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    spec.submodule_search_locations = [package_dir]
    module = importlib.util.module_from_spec(spec)
    module.__doc__ = "SGLang package (kernel modules only; sglang/__init__.py not run)"
    sys.modules["sglang"] = module
    parent = os.path.dirname(package_dir)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    return module


__all__ = ["install"]
