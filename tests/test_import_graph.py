"""The import graph: floors, no cycles, no arrows that run back up.

The floors are pipeline -> contract -> source -> extract -> optimize -> bench -> integrate -> agent -> cli: a
module may import its own floor and the floors below it, never one above, and
the project's modules form no import cycle. Imports inside function bodies and
under ``TYPE_CHECKING`` count too: a lazy import hides an arrow, it does not
remove it; so do modules loaded by name, ``importlib.import_module("bench.census")`` or a
``"module:function"`` string. The graph is read with :mod:`ast`, so nothing is imported here.

What must stay true: every project module is read (a file the walk misses is
a file the rule does not cover), and each floor imports in order on its own.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLOORS = ("pipeline", "contract", "source", "extract", "optimize", "bench", "integrate", "agent", "cli")
MAX_LINES = 800
#: a project module named in a string as ``"package.module:function"`` (a handler table's entry)
NAMED_BY_STRING = re.compile(rf"(?:{'|'.join(FLOORS)})(?:\.\w+)*:\w+")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, pathlib.Path]:
    """Every module of the five floors, by dotted name."""
    found: dict[str, pathlib.Path] = {}
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its source (function bodies included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, is_package, node)
            # `from pkg import mod` names the submodule when there is one, else a name of pkg
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        elif _loads_by_name(node):
            candidates = [node.args[0].value]  # a literal, as _loads_by_name checked
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED_BY_STRING.fullmatch(node.value):
            candidates = [node.value.partition(":")[0]]
        else:
            continue
        for target in candidates:
            # `import a.b.c` imports a, a.b and a.b.c; the deepest known one is the arrow that matters
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
    return targets


def _loads_by_name(node: ast.AST) -> bool:
    """``importlib.import_module("literal")`` or ``import_module("literal")``."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return called == "import_module" and isinstance(node.args[0].value, str)


def import_graph() -> dict[str, set[str]]:
    known = project_modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def _floor(module: str) -> int:
    return FLOORS.index(module.split(".")[0])


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{src} -> {dst}" for src, dsts in graph.items() for dst in dsts if _floor(dst) > _floor(src))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_walk_reads_every_floor() -> None:
    modules = project_modules()
    for floor in FLOORS:
        assert floor in modules, f"{floor}/__init__.py is missing"
    assert len(modules) > 50


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_arrow_runs_back_up() -> None:
    found = upward_arrows(import_graph())
    assert found == [], "imports of a higher floor:\n" + "\n".join(found)


def test_no_module_is_too_big() -> None:
    big = {
        name: n
        for name, path in project_modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"


def test_a_module_loaded_by_name_is_an_arrow(tmp_path) -> None:
    """A handler table's ``"module:function"`` and ``import_module("module")`` are arrows like imports:
    the command line once reached every stage that way from the ground floor, unseen by this test."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import importlib\n"
        'HANDLERS = {"run": "cli.run:main"}\n'
        'def load():\n    return importlib.import_module("bench.census")\n'
        'NOT_A_MODULE = "see pipeline.track: the store"\n'
    )
    known = project_modules()
    assert imports_of("pipeline.planted", planted, known) == {"cli.run", "bench.census"}
    assert upward_arrows({"pipeline.planted": {"cli.run", "bench.census"}}) == [
        "pipeline.planted -> bench.census",
        "pipeline.planted -> cli.run",
    ]


def test_the_checks_see_what_they_guard() -> None:
    """The detectors themselves: a planted cycle and an upward arrow are found."""
    graph = {"pipeline.a": {"extract.b"}, "extract.b": {"extract.c"}, "extract.c": {"extract.b"}}
    assert upward_arrows(graph) == ["pipeline.a -> extract.b"]
    assert cycles(graph) == [["extract.b", "extract.c"]]


@pytest.mark.parametrize("floor", FLOORS)
def test_each_floor_imports_alone_in_order(floor: str) -> None:
    """Each floor, with only the floors below it, imports in a fresh interpreter (no torch needed below optimize)."""
    below = FLOORS[: FLOORS.index(floor) + 1]
    code = "import importlib\n" + "".join(f"importlib.import_module({f!r})\n" for f in below)
    if floor in ("pipeline", "contract", "source", "extract"):
        code += "import sys\nassert 'torch' not in sys.modules, 'torch imported by ' + " + repr(floor) + "\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert importlib.util.find_spec(floor) is not None


def test_every_project_import_resolves() -> None:
    """Every ``from <project module> import name`` names something that exists, lazy imports included.

    A lazy import inside a function body runs only when that path runs (often only on a
    GPU): a name moved to another module would fail there first. Modules that need torch
    are checked only where torch is installed.
    """
    known = project_modules()
    missing: list[str] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(name, path.name == "__init__.py", node)
            if base.split(".")[0] not in FLOORS:
                continue
            try:
                module = importlib.import_module(base)
            except ModuleNotFoundError as err:
                if err.name == "torch":
                    continue
                missing.append(f"{name}:{node.lineno}: module {base} ({err})")
                continue
            for alias in node.names:
                if not hasattr(module, alias.name) and f"{base}.{alias.name}" not in known:
                    missing.append(f"{name}:{node.lineno}: {base} has no {alias.name}")
    assert missing == [], "imports that do not resolve:\n" + "\n".join(missing)


def test_every_attribute_of_an_imported_project_module_exists() -> None:
    """``inputs.plan_call`` where ``inputs`` is an imported project module: ``plan_call`` must be there.

    The names a module reads through another module's alias are as much a part of the
    import graph as its ``from`` imports, and break the same way when a name moves.
    """
    known = project_modules()
    missing: list[str] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in known:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                target = aliases[node.value.id]
                try:
                    module = importlib.import_module(target)
                except ModuleNotFoundError as err:
                    if err.name == "torch":
                        continue
                    raise
                if not hasattr(module, node.attr) and f"{target}.{node.attr}" not in known:
                    missing.append(f"{name}:{node.lineno}: {target} has no {node.attr}")
    assert missing == [], "attributes that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_the_task_run_and_integrate_folder_names_are_spelt_once_in_contract_layout():
    """The house issue: run-folder paths were spelt again in integrate/patch.py and integrate/evidence.py.
    A file name of a task, run or integrate folder written as a string anywhere but contract/layout.py
    fails here (docstrings aside); gpu_check's summary.json is its own report in its own output folder,
    and "integrate" is also the stage's name on the command line."""
    from contract import layout

    root = pathlib.Path(__file__).resolve().parent.parent
    names = {
        layout.TASK_FILE,
        layout.RUN_FILE,
        layout.SUMMARY_FILE,
        layout.REPLAY_FILE,
        layout.TEST_PLAN_FILE,
        layout.TRAJECTORY_FILE,
        layout.COMPLETION_FILE,
        layout.BEST_CANDIDATE_FILE,
        layout.MERGED_FILE,
        layout.INTEGRATE_DIR,
    }
    folder = layout.IntegrateFolder(pathlib.Path("x"))
    names |= {
        path.name
        for path in (
            folder.report,
            folder.pr,
            folder.patch,
            folder.patch_record,
            folder.aa_tree,
            folder.exchange,
            folder.self_check_record,
            folder.self_check_table,
        )
    }
    allowed = {
        ("optimize/harness/gpu_check.py", "summary.json"),
        ("cli/parser.py", "integrate"),  # the stage's name, not the folder
        ("cli/stages.py", "integrate"),
        ("cli/run.py", "integrate"),
        ("agent/verbs.py", "integrate"),
        ("agent/command.py", "integrate"),  # the agent's verb
        ("pipeline/digest.py", "integrate"),  # the package's name
    }
    found = []
    for pkg in ("pipeline", "contract", "source", "extract", "optimize", "bench", "integrate", "agent", "cli"):
        for path in sorted((root / pkg).rglob("*.py")):
            rel = str(path.relative_to(root))
            if rel == "contract/layout.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docstrings = {
                id(node.body[0].value)
                for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and node.body
                and isinstance(node.body[0], ast.Expr)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings:
                    if (rel, node.value) not in allowed:
                        found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert found == [], "spell these through contract.layout: " + ", ".join(found)
