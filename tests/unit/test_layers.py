"""The repository's layers: which folder may import which, no import cycle,
no ``sys.path`` manipulation, no private name imported across modules.

Read from the source (``ast``), nothing is imported. Every import counts,
including those inside functions: a lazy import still ties two modules.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = "vllm_gammatune"
#: folders whose Python files are read; a module's name is its path from the
#: folder's parent (the harness is its own distribution under tools/)
SOURCE_FOLDERS = ("vllm_gammatune", "tools/gammatune_tools", "benchmarks", "examples", "tests")

#: a room of the plugin -> the other rooms it may import (its own always)
ALLOWED = {
    "policies": set(),
    "methods": {"policies"},
    "compat": set(),
    "telemetry": set(),
    "verify": {"policies", "methods", "telemetry", "compat"},
    "draft_kv": {"policies", "telemetry", "compat"},
    "drafter": {"draft_kv", "verify", "policies", "methods", "telemetry", "compat"},
    "integration": {"drafter", "draft_kv", "verify", "policies", "methods", "telemetry",
                    "compat"},
    "patches": {"integration", "verify", "compat"},
    # the command line stands above everything: it reports on every room
    "cli": {"", "patches", "integration", "drafter", "draft_kv", "verify", "policies",
            "methods", "telemetry", "compat"},
    # the package's __init__: register() checks compatibility, then patches
    "": {"compat", "patches", "integration"},
    # the environment variables (envs.py): the floor, below every room
    "envs": set(),
}
#: rooms every room may import
FLOOR = {"envs"}
#: rooms that never import vLLM or torch (tested directly, usable anywhere)
PURE = ("policies", "methods", "envs")


def _python_files():
    for folder in SOURCE_FOLDERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _import_root(path: pathlib.Path) -> pathlib.Path:
    """The folder a module's import name starts from."""
    for folder in SOURCE_FOLDERS:
        if path.is_relative_to(ROOT / folder):
            return (ROOT / folder).parent
    raise ValueError(f"{path} is in none of SOURCE_FOLDERS {SOURCE_FOLDERS}")


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(_import_root(path)).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, [alias.name for alias in node.names], node.lineno))
    return found


MODULES = {_module_name(path): path for path in _python_files()}


def _room(module: str) -> str | None:
    """The plugin room of a module (``""`` for the package's __init__)."""
    parts = module.split(".")
    if parts[0] != PACKAGE:
        return None
    return parts[1] if len(parts) > 1 else ""


def _edges() -> dict[str, set[str]]:
    """module -> the repository's modules it imports (a name taken from a
    package that is itself a module counts as importing that module)."""
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for imported, names, _ in _imports(path):
            if imported in MODULES:
                targets.add(imported)
            targets.update(f"{imported}.{name}" for name in names
                           if f"{imported}.{name}" in MODULES)
        targets.discard(module)
        edges[module] = targets
    return edges


def test_the_plugin_top_level_holds_only_its_init_envs_and_folders():
    top = sorted(p.name for p in (ROOT / PACKAGE).iterdir()
                 if p.suffix == ".py" and p.name not in ("__init__.py", "envs.py"))
    assert top == []


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_rooms_import_only_the_rooms_below_them(room):
    wrong = []
    for module, path in MODULES.items():
        if _room(module) != room:
            continue
        for imported, _, line in _imports(path):
            target = _room(imported)
            if (target is not None and target != room and target not in ALLOWED[room]
                    and target not in FLOOR):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert wrong == []


def test_the_plugin_never_imports_the_harness():
    wrong = [f"{MODULES[m].relative_to(ROOT)} imports {t}"
             for m, targets in _edges().items() if _room(m) is not None
             for t in targets if not t.startswith(PACKAGE)]
    assert wrong == []


def test_the_harness_library_never_imports_the_commands():
    wrong = [f"{MODULES[m].relative_to(ROOT)} imports {t}"
             for m, targets in _edges().items() if m.startswith("gammatune_tools")
             for t in targets if t.startswith(("benchmarks", "examples", "tests"))]
    assert wrong == []


def test_no_command_imports_another():
    """What two commands share lives in ``gammatune_tools.bench``: a command
    is run (``python -m benchmarks.X``), never imported by another."""
    wrong = [f"{MODULES[m].relative_to(ROOT)} imports {t}"
             for m, targets in _edges().items() if m.startswith("benchmarks.")
             for t in targets if t.startswith("benchmarks.")]
    assert wrong == []


@pytest.mark.parametrize("room", PURE)
def test_pure_rooms_import_neither_vllm_nor_torch(room):
    wrong = []
    for module, path in MODULES.items():
        if _room(module) != room:
            continue
        for imported, _, line in _imports(path):
            if imported.split(".")[0] in ("vllm", "torch"):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {imported}")
    assert wrong == []


def test_no_import_cycle_anywhere():
    edges = _edges()
    cycles, state = [], {}

    def visit(module, stack):
        state[module] = "open"
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert cycles == []


def _is_sys_path(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path"
            and isinstance(node.value, ast.Name) and node.value.id == "sys")


def test_no_sys_path_manipulation():
    """Imports resolve as installed (``pip install -e``) or from the
    repository root (``python -m benchmarks.X``); tests get ``tests/`` from
    pytest's ``pythonpath`` setting."""
    wrong = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            changes = (
                (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and _is_sys_path(node.func.value))
                or (isinstance(node, ast.Assign)
                    and any(_is_sys_path(t) for t in node.targets))
                or (isinstance(node, ast.AugAssign) and _is_sys_path(node.target)))
            if changes:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert wrong == []


def test_no_private_name_imported_across_modules():
    wrong = []
    for module, path in MODULES.items():
        for imported, names, line in _imports(path):
            if imported.split(".")[0] not in {m.split(".")[0] for m in MODULES}:
                continue  # another project's private names are its own business
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(ROOT)}:{line} {imported}: {private}")
    assert wrong == []
