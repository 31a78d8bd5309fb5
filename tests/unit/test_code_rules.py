"""The plugin's rules of prose and names, read from the source (text and
``ast``; nothing is imported or run):

- a module docstring fits on a screen (at most 40 lines): design reasoning
  and history belong in ``docs/``;
- a module fits in 400 lines;
- no machine names (Xeon, EPYC, AMX, AVX, "2-core") in the plugin's code:
  measured figures of one machine belong in ``docs/results.md``;
- ``vllm_gammatune/envs.py`` is the one module that names and reads the
  ``VLLM_GAMMATUNE_*`` environment variables, and it imports only the
  standard library.

That ``policies/`` (and ``methods/``, ``envs.py``) import neither vLLM nor
torch is ``tests/unit/test_layers.py``'s ``test_pure_rooms_...``.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "vllm_gammatune"
ENVS = PACKAGE / "envs.py"
MAX_DOCSTRING_LINES = 40
MAX_MODULE_LINES = 400
MACHINE_NAMES = re.compile(r"\b(?:xeon|epyc|amx|avx|\d+-core\b)", re.IGNORECASE)
PREFIX = "VLLM_GAMMATUNE_"

MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_the_rules_see_the_plugin():
    assert ENVS in MODULES and len(MODULES) > 50


def test_module_docstrings_fit_on_a_screen():
    wrong = []
    for path in MODULES:
        body = _tree(path).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines = body[0].end_lineno - body[0].lineno + 1
            if lines > MAX_DOCSTRING_LINES:
                wrong.append(f"{_name(path)}: module docstring of {lines} lines")
    assert not wrong, (f"module docstrings over {MAX_DOCSTRING_LINES} lines (move the "
                       "reasoning to docs/ and link it):\n  " + "\n  ".join(wrong))


def test_modules_fit_in_400_lines():
    wrong = [f"{_name(path)}: {n} lines" for path in MODULES
             if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not wrong, f"modules over {MAX_MODULE_LINES} lines:\n  " + "\n  ".join(wrong)


def test_no_machine_names_in_the_plugin():
    wrong = [f"{_name(path)}:{number}: {line.strip()}"
             for path in MODULES
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if MACHINE_NAMES.search(line)]
    assert not wrong, ("machine names in the plugin's code (measurements go to "
                       "docs/results.md):\n  " + "\n  ".join(wrong))


def _documentation(tree: ast.Module) -> set[int]:
    """ids of the string constants that are documentation: docstrings and
    other bare string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)}


def test_plugin_variable_names_are_spelt_in_envs_only():
    wrong = []
    for path in MODULES:
        if path == ENVS:
            continue
        tree = _tree(path)
        documentation = _documentation(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and PREFIX in node.value and id(node) not in documentation):
                wrong.append(f"{_name(path)}:{node.lineno}: {node.value!r}")
    assert not wrong, (f"{PREFIX}* names outside vllm_gammatune/envs.py (import the name "
                       "or the reader from envs):\n  " + "\n  ".join(wrong))


def _is_environ(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "environ")
            or (isinstance(node, ast.Name) and node.id == "environ"))


def _environment_keys(tree: ast.Module):
    """(line, key node) of every read of ``os.environ`` / ``os.getenv``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            yield node.lineno, node.slice
        elif isinstance(node, ast.Call):
            func = node.func
            reads = ((isinstance(func, ast.Attribute) and _is_environ(func.value)
                      and func.attr in ("get", "setdefault", "pop"))
                     or (isinstance(func, ast.Attribute) and func.attr == "getenv")
                     or (isinstance(func, ast.Name) and func.id == "getenv"))
            if reads:
                yield node.lineno, node.args[0] if node.args else None
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            yield node.lineno, node.left


def test_only_envs_reads_the_plugin_variables():
    """Outside envs.py an environment read names its variable as a literal
    (so it can be told apart), and that variable is not the plugin's."""
    wrong = []
    for path in MODULES:
        if path == ENVS:
            continue
        for line, key in _environment_keys(_tree(path)):
            literal = isinstance(key, ast.Constant) and isinstance(key.value, str)
            if not literal or key.value.startswith(PREFIX):
                shown = ast.unparse(key) if key is not None else "(no key)"
                wrong.append(f"{_name(path)}:{line}: reads {shown}")
    assert not wrong, ("environment reads outside vllm_gammatune/envs.py that are, or may "
                       "be, the plugin's variables (use envs' readers):\n  "
                       + "\n  ".join(wrong))


def test_envs_imports_only_the_standard_library():
    wrong = []
    for node in ast.walk(_tree(ENVS)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else ["(relative)"]
        else:
            continue
        wrong += [f"{_name(ENVS)}:{node.lineno}: imports {name}" for name in names
                  if name.split(".")[0] not in sys.stdlib_module_names]
    assert not wrong, "\n  ".join(["envs.py must be pure standard library:", *wrong])


@pytest.mark.parametrize("name", ["CACHE", "ALLOW_UNTESTED_VLLM", "CUDA_HOT_PATH", "TRACE"])
def test_envs_names_each_variable_with_a_comment(name):
    """Each variable is assigned once, to its own name, with a ``#:`` comment
    saying what it does and what it allows."""
    lines = ENVS.read_text().splitlines()
    found = [i for i, line in enumerate(lines) if line.startswith(f"{name} = \"{PREFIX}")]
    assert len(found) == 1, f"{_name(ENVS)}: {name} is not assigned once"
    assert lines[found[0] - 1].startswith("#:"), f"{_name(ENVS)}: {name} has no #: comment"
