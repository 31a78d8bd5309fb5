"""vLLM's source, read without importing or running it (Python's ``ast``).

``internals.problems`` looks every vLLM internal the plugin touches up here:
a module by its dotted name, a module-level name, or a member of a class (a
method, a class-level field, or an attribute its methods assign to
``self``), following imports and base classes inside vLLM. It reads the
installed vLLM or any source tree, an unpacked wheel included, so a release
this machine cannot run can be checked too.
"""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path


class VllmSourceError(RuntimeError):
    """The vLLM source lacks an internal the plugin relies on, or changed it."""


@dataclasses.dataclass
class _Module:
    tree: ast.Module
    #: module-level name -> node (def, class, assignment or import binding it)
    names: dict[str, ast.AST]
    #: name -> dotted module it was imported from (``from vllm.x import Name``)
    imported_from: dict[str, str]


class VllmSource:
    """vLLM's source files, parsed on demand (``root`` holds the ``vllm`` package)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._modules: dict[str, _Module | None] = {}

    @classmethod
    def installed(cls) -> VllmSource:
        import importlib.util

        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            raise VllmSourceError("vLLM is not installed")
        return cls(Path(list(spec.submodule_search_locations)[0]).parent)

    def module(self, dotted: str) -> _Module | None:
        if dotted not in self._modules:
            self._modules[dotted] = self._parse(dotted)
        return self._modules[dotted]

    def _parse(self, dotted: str) -> _Module | None:
        base = self.root.joinpath(*dotted.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
                return _Module(tree, *_module_names(tree, dotted))
        return None

    def find(self, dotted: str, name: str) -> tuple[ast.AST | None, str]:
        """The node defining ``name`` in module ``dotted`` (following imports
        and base classes inside vLLM), and a reason when there is none."""
        module = self.module(dotted)
        if module is None:
            return None, f"module {dotted} not found"
        head, _, member = name.partition(".")
        node = module.names.get(head)
        if node is None and head in module.imported_from:
            return self.find(module.imported_from[head], name)
        if node is None:
            return None, f"{dotted} has no {head!r}"
        if not member:
            return node, ""
        if not isinstance(node, ast.ClassDef):
            if head in module.imported_from:
                return self.find(module.imported_from[head], name)
            return None, f"{dotted}.{head} is not a class"
        return self._class_member(dotted, module, node, member)

    def _class_member(self, dotted, module, cls: ast.ClassDef, member: str):
        found = member_in_class(cls, member)
        if found is not None:
            return found, ""
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            if base_name is None:
                continue
            if isinstance(module.names.get(base_name), ast.ClassDef):
                node, _ = self._class_member(dotted, module, module.names[base_name], member)
            elif base_name in module.imported_from:
                node, _ = self.find(module.imported_from[base_name], f"{base_name}.{member}")
            else:
                continue
            if node is not None:
                return node, ""
        return None, f"{dotted}.{cls.name} has no member {member!r}"


def _module_names(tree: ast.Module, dotted: str) -> tuple[dict, dict]:
    names: dict[str, ast.AST] = {}
    imported_from: dict[str, str] = {}
    package = dotted.rsplit(".", 1)[0]
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.setdefault(leaf.id, node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], node)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                  + ([node.module] if node.module else []))
            for alias in node.names:
                if source.startswith("vllm"):
                    imported_from[alias.asname or alias.name] = source
                else:
                    names.setdefault(alias.asname or alias.name, node)
    return names, imported_from


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Module statements, looking inside ``if``/``try`` blocks (guarded imports)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
        else:
            yield node


def member_in_class(cls: ast.ClassDef, member: str) -> ast.AST | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == member:
            return node
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == member:
            return node
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == member for t in node.targets):
            return node
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for target in targets:
            if (isinstance(target, ast.Attribute) and target.attr == member
                    and isinstance(target.value, ast.Name) and target.value.id == "self"):
                return node
    return None


def parameters(node: ast.AST) -> list[str] | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return None


def dataclass_fields(node: ast.ClassDef) -> list[str]:
    return [n.target.id for n in node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def unpack_python_files(wheel: str, into: str) -> str:
    """Extract the wheel's ``vllm/**.py`` files (its sources, no binaries)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into, [n for n in archive.namelist()
                                  if n.startswith("vllm/") and n.endswith(".py")])
    return into


def source_version(root: Path) -> str:
    version_file = root / "vllm" / "_version.py"
    if version_file.is_file():
        for node in ast.parse(version_file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id in ("__version__", "version")
                    for t in node.targets) and isinstance(node.value, ast.Constant):
                return str(node.value.value)
    return "unknown"
