"""gammatune_tools.model_prep.convert: the configs of a converted checkpoint, made loadable.

The conversion itself needs a real GGUF (and minutes); its last step, fixing the
saved configs, is plain JSON and is tested here.
"""

from __future__ import annotations

import json

import pytest

from gammatune_tools.model_prep.convert import fix_configs
from gammatune_tools.model_prep.specs import ModelSpec

SPEC = ModelSpec("M", "target", (), "0" * 64, rope_theta=1_000_000.0, tokenizer_class="Qwen2Tokenizer")


def _saved(directory, config: dict, tokenizer_config: dict | None = None):
    """A checkpoint directory as save_pretrained leaves it (the configs only)."""
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    if tokenizer_config is not None:
        (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return directory


def _read(path) -> dict:
    return json.loads(path.read_text())


def test_quantization_config_dropped_and_rope_theta_from_the_spec(tmp_path):
    out = _saved(tmp_path, {"quantization_config": {"quant_method": "gguf"}, "hidden_size": 8})
    fix_configs(out, SPEC, None)
    assert _read(out / "config.json") == {"hidden_size": 8, "rope_theta": 1_000_000.0}


@pytest.mark.parametrize("config, theta", [
    ({"rope_parameters": {"rope_theta": 5.0}}, 5.0),  # newer transformers nest it
    ({"rope_theta": 7.0}, 7.0),  # already there: kept
])
def test_rope_theta_from_the_saved_config_first(tmp_path, config, theta):
    out = _saved(tmp_path, config)
    fix_configs(out, SPEC, None)
    assert _read(out / "config.json")["rope_theta"] == theta


def test_without_a_spec_no_rope_theta_is_invented(tmp_path):
    out = _saved(tmp_path, {"hidden_size": 8})
    fix_configs(out, None, None)
    assert "rope_theta" not in _read(out / "config.json")


def test_tokenizers_backend_class_replaced_by_the_specs(tmp_path):
    out = _saved(tmp_path, {}, {"tokenizer_class": "TokenizersBackend", "model_max_length": 9})
    fix_configs(out, SPEC, None)
    assert _read(out / "tokenizer_config.json") == {"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 9}


def test_other_tokenizer_class_untouched(tmp_path):
    out = _saved(tmp_path, {}, {"tokenizer_class": "GPT2Tokenizer"})
    before = (out / "tokenizer_config.json").read_text()
    fix_configs(out, SPEC, None)
    assert (out / "tokenizer_config.json").read_text() == before


def test_chat_template_written_only_when_saved_nowhere(tmp_path):
    out = _saved(tmp_path / "a", {}, {})
    fix_configs(out, SPEC, "{{ messages }}")
    assert (out / "chat_template.jinja").read_text() == "{{ messages }}"

    kept = _saved(tmp_path / "b", {}, {"chat_template": "x"})
    fix_configs(kept, SPEC, "{{ messages }}")
    assert not (kept / "chat_template.jinja").exists()

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "chat_template.jinja").write_text("saved")
    fix_configs(_saved(tmp_path / "c", {}, {}), SPEC, "{{ messages }}")
    assert (tmp_path / "c" / "chat_template.jinja").read_text() == "saved"
