"""Shared pytest setup: test tiers and tiny models.

Tiers (markers, registered here so ``--strict-markers`` accepts them) are
given by directory: ``tests/unit`` -> ``unit`` (pure code, no engine; the
whole tier runs in well under a minute), ``tests/e2e`` -> ``engine`` (vLLM
engines on the CPU with tiny models), ``tests/gpu`` -> ``gpu`` (needs CUDA).
``python -m pytest -m unit`` runs one tier; ``python -m pytest tests`` runs
them all.

``from tiny_models import ...`` works in every test module (``pytest.ini``
puts ``tests/`` on the import path).  The models are
built once per session (a few seconds, CPU only); set
``VLLM_GAMMATUNE_TINY_MODELS=/some/dir`` to keep and reuse them across runs.
"""

from __future__ import annotations

import os

import pytest
from tiers import TIERS, tier_of


def pytest_configure(config) -> None:
    for marker, meaning in TIERS.values():
        config.addinivalue_line("markers", f"{marker}: {meaning}")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        marker = tier_of(item.path)
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))


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
