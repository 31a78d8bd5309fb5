"""The distributions and the commands: ``pip install vllm-gammatune`` installs
the plugin alone, the harness is its own distribution (``tools/setup.py``),
and every module of ``benchmarks/`` is a command whose name no library module
shares (``python -m benchmarks.X`` must not read as the library's ``X``).

Read from the setup scripts and the source; nothing is built or installed.
"""

from __future__ import annotations

import ast
import pathlib
import runpy

import pytest
import setuptools

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: distribution folder -> the one top-level package it installs
DISTRIBUTIONS = {ROOT: "vllm_gammatune", ROOT / "tools": "gammatune_tools"}
#: the libraries whose module names a command must not take
LIBRARIES = (ROOT / "vllm_gammatune", ROOT / "tools" / "gammatune_tools")
COMMANDS = ROOT / "benchmarks"


def _setup_arguments(folder: pathlib.Path, monkeypatch) -> dict:
    """The keyword arguments ``folder/setup.py`` passes to ``setuptools.setup``."""
    arguments = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: arguments.update(kwargs))
    monkeypatch.chdir(folder)  # find_packages() and open("README.md") are relative
    runpy.run_path(str(folder / "setup.py"))
    return arguments


def _packages_under(folder: pathlib.Path) -> set[str]:
    """Every package in ``folder`` (a directory with an ``__init__.py``), dotted."""
    return {".".join(init.parent.relative_to(folder.parent).parts)
            for init in folder.rglob("__init__.py")}


@pytest.mark.parametrize("folder", sorted(DISTRIBUTIONS), ids=lambda f: f.name)
def test_each_distribution_installs_its_own_package_whole(folder, monkeypatch):
    package = DISTRIBUTIONS[folder]
    packages = set(_setup_arguments(folder, monkeypatch)["packages"])
    assert packages == _packages_under(folder / package)


def test_the_harness_depends_on_the_plugin_and_not_the_other_way(monkeypatch):
    plugin = _setup_arguments(ROOT, monkeypatch)
    tools = _setup_arguments(ROOT / "tools", monkeypatch)
    assert plugin["name"] in tools["install_requires"]
    required = plugin["install_requires"] + sum(plugin["extras_require"].values(), [])
    assert tools["name"] not in required


def _module_names(folder: pathlib.Path) -> set[str]:
    return {path.stem for path in folder.rglob("*.py")
            if path.stem not in ("__init__", "__main__")}


def test_no_command_shares_its_name_with_a_library_module():
    library = set().union(*(_module_names(folder) for folder in LIBRARIES))
    assert sorted(_module_names(COMMANDS) & library) == []


def _runs_as_main(path: pathlib.Path) -> bool:
    """Whether the module has a top-level ``if __name__ == "__main__":``."""
    for node in ast.parse(path.read_text(), str(path)).body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"):
            return True
    return False


def test_every_module_in_benchmarks_is_a_command():
    """What commands share lives in ``gammatune_tools.bench``, not beside them."""
    library_modules = [str(path.relative_to(ROOT)) for path in sorted(COMMANDS.rglob("*.py"))
                       if path.name != "__init__.py" and not _runs_as_main(path)]
    assert library_modules == []
