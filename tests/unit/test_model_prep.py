"""The gammatune_tools.model_prep package: what it offers and what it must not load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gammatune_tools.model_prep as mp
from gammatune_tools.model_prep import cache, download, prepare, specs


def test_every_public_name_is_offered_by_the_package():
    missing = [name for name in mp.__all__ if not hasattr(mp, name)]
    assert missing == []
    # the package offers the very objects of its modules, not copies
    assert mp.prepare_pair is prepare.prepare_pair
    assert mp.assemble_gguf is download.assemble_gguf
    assert mp.TARGET_SPEC is specs.TARGET_SPEC
    assert mp.default_cache_dir is cache.default_cache_dir


def test_package_imports_without_vllm_or_torch():
    code = (
        "import sys; import gammatune_tools.model_prep; "
        "bad = [m for m in ('vllm', 'torch', 'transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(mp.__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
