"""The test tiers: which marker a test file gets, by its directory under tests/."""

from __future__ import annotations

import os

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

#: test directory (under tests/) -> its tier marker and what the tier means
TIERS = {
    "unit": ("unit", "pure code, no vLLM engine started (tests/unit)"),
    "e2e": ("engine", "starts vLLM engines on the CPU with tiny models (tests/e2e)"),
    "gpu": ("gpu", "needs a CUDA device (tests/gpu)"),
}


def tier_of(path) -> str | None:
    """The tier marker of a test file: by its first directory under tests/."""
    relative = os.path.relpath(os.path.abspath(str(path)), _TESTS_DIR)
    top = relative.split(os.sep, 1)[0]
    return TIERS[top][0] if top in TIERS and top != relative else None
