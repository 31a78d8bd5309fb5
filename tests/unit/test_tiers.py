"""The test tiers: markers come from the directory a test lives in."""

import os

from tiers import TIERS, tier_of

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_this_test_is_marked_unit(request):
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("engine") is None


def test_tier_by_directory():
    assert tier_of(os.path.join(_TESTS, "unit", "test_config.py")) == "unit"
    assert tier_of(os.path.join(_TESTS, "e2e", "test_server.py")) == "engine"
    assert tier_of(os.path.join(_TESTS, "gpu", "test_cuda.py")) == "gpu"
    # files directly under tests/ belong to no tier
    assert tier_of(os.path.join(_TESTS, "test_tiny_models.py")) is None
    assert tier_of(os.path.join(_TESTS, "gpu")) is None


def test_every_tier_marker_is_registered(pytestconfig):
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert {marker for marker, _ in TIERS.values()} <= registered


def test_every_test_file_is_in_a_tier():
    """So ``-m unit``, ``-m engine`` and ``-m gpu`` together run the whole suite."""
    untiered = []
    for folder, _, files in os.walk(_TESTS):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(folder, name)
                if tier_of(path) is None:
                    untiered.append(os.path.relpath(path, _TESTS))
    assert untiered == []
