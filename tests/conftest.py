"""Shared pytest setup: make ``tests/`` importable and provide tiny models.

``from tiny_models import ...`` works in every test module.  The models are
built once per session (a few seconds, CPU only); set
``VLLM_GAMMATUNE_TINY_MODELS=/some/dir`` to keep and reuse them across runs.
"""

from __future__ import annotations

import os
import sys

import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)


@pytest.fixture(scope="session")
def tiny_models_root(tmp_path_factory) -> str:
    return os.environ.get("VLLM_GAMMATUNE_TINY_MODELS") or str(
        tmp_path_factory.mktemp("tiny_models")
    )


@pytest.fixture(scope="session")
def tiny_models(tiny_models_root) -> dict:
    """{"target", "draft", "draft_identical", "draft_other_vocab"} -> path."""
    from tiny_models import build_tiny_models

    return build_tiny_models(tiny_models_root)
