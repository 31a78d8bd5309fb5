"""Every vLLM internal the plugin touches, in one list, and the check of it.

vLLM has no stable API for what this plugin does (a speculative method with
its own drafter, a per-request acceptance hook), so the plugin leans on
vLLM's internals. This list names each one: the module, the name, how the
plugin uses it, the parameters or attributes it relies on, why, and when it
can go. It is the single source for

- the compatibility check at ``register()`` (``check_vllm``): every entry is
  looked up in the installed vLLM's *source* (Python's ``ast``, nothing is
  imported or run) and a missing name or a changed signature refuses the
  plugin's methods with a message naming it;
- ``python -m vllm_gammatune.compat.internals --source DIR``: the same check against
  an unpacked vLLM source tree (a release's wheel, downloaded without
  installing it), which is how a vLLM release this machine cannot run is
  checked (``docs/patches.md`` records the results);
- the patch index in ``docs/patches.md`` (``python -m vllm_gammatune.compat.internals
  --markdown`` prints it);
- ``tests/unit/test_internals.py``: every ``rebind`` the code performs is an
  entry of use ``rebind`` and every such entry is rebound.


The index itself (``INTERNALS``, and what each use means) is
``compat.internals_index``.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import vllm_gammatune.envs as envs
from vllm_gammatune.compat.vllm_source import (
    VllmSource,
    VllmSourceError,
    dataclass_fields,
    member_in_class,
    parameters,
    source_version,
    unpack_python_files,
)
from vllm_gammatune.compat.internals_index import INTERNALS, USES, Internal


def problems(source: VllmSource, internals: Iterable[Internal] = INTERNALS) -> list[str]:
    """What the vLLM at ``source`` lacks or changed, one line per internal."""
    found = []
    for internal in internals:
        node, reason = source.find(internal.module, internal.name)
        if node is None:
            found.append(f"{internal.target} ({internal.use}): {reason}")
            continue
        if not (internal.params or internal.keywords):
            continue
        if isinstance(node, ast.ClassDef):
            init = member_in_class(node, "__init__")
            names = parameters(init)[1:] if init is not None else dataclass_fields(node)
        else:
            names = parameters(node)
        if names is None:
            found.append(f"{internal.target} ({internal.use}): not a function")
            continue
        expected = list(internal.params)
        if names[: len(expected)] != expected:
            found.append(f"{internal.target} ({internal.use}): parameters are "
                         f"{tuple(names)}, the plugin relies on {tuple(expected)} first")
        missing = [k for k in internal.keywords if k not in names]
        if missing:
            found.append(f"{internal.target} ({internal.use}): no parameter "
                         f"{', '.join(missing)}")
    return found


def check_vllm(source: VllmSource | None = None,
               listed: Iterable[Internal] = INTERNALS) -> None:
    """Raise ``VllmSourceError`` naming every internal the vLLM at hand lacks.

    vLLM loads the plugin in every process it starts, and parsing vLLM's
    sources is too slow to repeat in each, so a passed check of the installed
    vLLM is remembered in a marker file keyed by the checked files' paths,
    sizes and times and by this list (under ``envs.cache_dir()``:
    ``$VLLM_GAMMATUNE_CACHE`` or ``~/.cache/vllm_gammatune``); a failed check
    is never remembered.
    """
    remember = source is None and listed is INTERNALS
    source = source or VllmSource.installed()
    marker = _passed_marker(source) if remember else None
    if marker is not None and marker.exists():
        return
    found = problems(source, listed)
    if not found and marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError:
            pass  # a read-only home: the check runs again next time
    if found:
        raise VllmSourceError(
            "vllm-gammatune cannot run on this vLLM: it relies on internals that "
            "are missing or changed:\n  " + "\n  ".join(found))


def _passed_marker(source: VllmSource) -> Path:
    import hashlib

    digest = hashlib.sha256(repr(INTERNALS).encode())
    for module in sorted({i.module for i in INTERNALS}):
        base = source.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return Path(envs.cache_dir()) / "vllm_checks" / f"internals-{digest.hexdigest()[:32]}.ok"


def rebind_targets() -> set[tuple[str, str]]:
    """(module, name) of every entry the plugin rebinds."""
    return {(i.module, i.name) for i in INTERNALS if i.use == "rebind"}


def markdown_table() -> str:
    """The patch index of ``docs/patches.md``."""
    rows = ["| vLLM internal | use | why | remove when |", "|---|---|---|---|"]
    for i in INTERNALS:
        detail = f" `{'`, `'.join(i.params)}`" if i.params else ""
        patch = f" (`patches/{i.patch}.py`)" if i.patch else ""
        rows.append(f"| `{i.module}` `{i.name}`{detail} | {i.use}{patch} | {i.why} | "
                    f"{i.remove_when} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m vllm_gammatune.compat.internals",
        description="Check every vLLM internal the plugin touches against a vLLM "
                    "source tree (default: the installed vLLM).")
    parser.add_argument("--source", help="a vLLM wheel (.whl, not installed) or a "
                        "directory holding the vllm package")
    parser.add_argument("--markdown", action="store_true",
                        help="print the patch index as a markdown table and exit")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table())
        return 0
    import tempfile

    with tempfile.TemporaryDirectory() as unpacked:
        if args.source and args.source.endswith(".whl"):
            where = os.path.basename(args.source)
            source = VllmSource(unpack_python_files(args.source, unpacked))
        else:
            source = VllmSource(args.source) if args.source else VllmSource.installed()
            where = str(source.root / "vllm")
        if not (source.root / "vllm").is_dir():
            parser.error(f"--source: {args.source!r} holds no 'vllm' package")
        version = source_version(source.root)
        found = problems(source)
    print(f"vLLM {version} ({where}): {len(INTERNALS)} internals checked, "
          f"{len(found)} problem(s)")
    for line in found:
        print(f"  FAIL {line}")
    if not found:
        print("  ok: every internal is present with the parameters the plugin relies on")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
