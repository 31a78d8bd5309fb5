"""gammatune_tools.model_prep.cache: where the cache is, its marker, its lock."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gammatune_tools.model_prep.cache import (CACHE_ENV_VAR, default_cache_dir, exclusive_lock,
                                              read_marker, unlink_if_present)


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / "env_cache"))
    assert default_cache_dir() == tmp_path / "env_cache"
    monkeypatch.setenv(CACHE_ENV_VAR, "")
    assert default_cache_dir() == Path("~/.cache/vllm_gammatune").expanduser()
    monkeypatch.delenv(CACHE_ENV_VAR)
    assert default_cache_dir() == Path("~/.cache/vllm_gammatune").expanduser()


def test_read_marker(tmp_path):
    marker = tmp_path / "COMPLETE.json"
    assert read_marker(marker) is None
    marker.write_text("{not json")
    assert read_marker(marker) is None
    marker.write_text('{"format": 1}')
    assert read_marker(marker) == {"format": 1}


def test_unlink_if_present(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    unlink_if_present(f)
    assert not f.exists()
    unlink_if_present(f)  # already gone: no error


def test_exclusive_lock_makes_a_second_holder_wait(tmp_path):
    lock = tmp_path / "deep" / ".lock"
    events = []

    def second():
        with exclusive_lock(lock):
            events.append("second in")

    with exclusive_lock(lock):
        assert lock.is_file()
        other = threading.Thread(target=second)
        other.start()
        time.sleep(0.2)
        events.append("first out")
    other.join(5)
    assert events == ["first out", "second in"]
