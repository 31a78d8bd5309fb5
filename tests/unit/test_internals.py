"""The list of every vLLM internal the plugin touches stays true."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from vllm_gammatune.compat import internals
from vllm_gammatune.compat.internals import INTERNALS, USES, Internal, VllmSource
from vllm_gammatune.patches import base

DOCS_PATCHES = Path(__file__).resolve().parents[2] / "docs" / "patches.md"


def test_every_internal_exists_in_the_installed_vllm_with_its_parameters():
    assert internals.problems(VllmSource.installed()) == []


def test_a_missing_or_changed_internal_is_named():
    source = VllmSource.installed()
    changed = [
        Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner._sample", "rebind",
                 "w", "r", params=("self", "logits", "metadata")),
        Internal("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.no_such_member",
                 "read", "w", "r"),
        Internal("vllm.no_such_module", "X", "read", "w", "r"),
        Internal("vllm.forward_context", "set_forward_context", "call", "w", "r",
                 keywords=("no_such_keyword",)),
    ]
    found = internals.problems(source, changed)
    assert len(found) == 4
    assert "GPUModelRunner._sample" in found[0] and "'spec_decode_metadata'" in found[0]
    assert "no member 'no_such_member'" in found[1]
    assert "module vllm.no_such_module not found" in found[2]
    assert "no parameter no_such_keyword" in found[3]
    with pytest.raises(internals.VllmSourceError, match="no_such_member"):
        internals.check_vllm(source, changed)


def test_members_are_found_through_vllm_base_classes():
    source = VllmSource.installed()
    node, reason = source.find("vllm.v1.spec_decode.draft_model",
                               "DraftModelProposer._sample_from_logits")
    assert node is not None, reason


def test_entries_are_well_formed():
    from vllm_gammatune.patches import ALL_PATCHES

    patch_modules = {p.__name__.rsplit(".", 1)[1] for p in ALL_PATCHES}
    for entry in INTERNALS:
        assert entry.use in USES, entry
        assert entry.module.startswith("vllm.") and entry.why and entry.remove_when, entry
        assert (entry.use == "rebind") == bool(entry.patch), entry
        if entry.patch:
            assert entry.patch in patch_modules, entry
    assert len({i.target for i in INTERNALS}) == len(INTERNALS)


def test_every_rebind_is_listed_and_every_listed_rebind_is_done():
    import vllm_gammatune

    vllm_gammatune.register()
    applied = set(base.APPLIED.values())
    assert applied == internals.rebind_targets()
    by_patch = {patch_id.split(".", 1)[0] for patch_id in base.APPLIED}
    assert by_patch == {i.patch for i in INTERNALS if i.use == "rebind"}


def test_rebind_keeps_the_original_and_refuses_to_patch_twice():
    owner = types.SimpleNamespace(__name__="fake_module", f=lambda x: x + 1)
    original = owner.f
    base.rebind(owner, "f", lambda orig, x: orig(x) * 10, patch_id="test.f")
    try:
        assert owner.f(1) == 20
        assert owner.f.__wrapped__ is original
        assert base.is_patched(owner, "f")
        with pytest.raises(base.PatchError, match="already patched by 'test.f'"):
            base.rebind(owner, "f", lambda orig, x: x, patch_id="test.f.again")
        with pytest.raises(base.PatchError, match="has no 'g'"):
            base.rebind(owner, "g", lambda orig: None, patch_id="test.g")
    finally:
        base.APPLIED.pop("test.f", None)


def test_docs_patch_index_is_the_list():
    assert internals.markdown_table() in DOCS_PATCHES.read_text(encoding="utf-8")


def test_source_check_command(tmp_path, capsys):
    assert internals.main([]) == 0
    assert "0 problem(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        internals.main(["--source", str(tmp_path)])
    assert "holds no 'vllm' package" in capsys.readouterr().err
