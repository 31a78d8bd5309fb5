"""Fast checks (transformers only, no vLLM) of the tiny test models as built."""

from __future__ import annotations

import json
import os

from tiny_model_recipe import CHAT_TEMPLATE, EOS, PROMPTS
from tiny_models import build_tiny_models


def _config(path: str) -> dict:
    with open(os.path.join(path, "config.json")) as f:
        return json.load(f)


def test_files_and_idempotence(tiny_models, tiny_models_root):
    for path in tiny_models.values():
        for name in ("config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"):
            assert os.path.isfile(os.path.join(path, name)), (path, name)
        assert _config(path)["dtype"] == "float32"
    stamp = os.path.join(tiny_models["target"], "model.safetensors")
    mtime = os.path.getmtime(stamp)
    assert build_tiny_models(tiny_models_root) == tiny_models
    assert os.path.getmtime(stamp) == mtime  # cached, not rebuilt


def test_tokenizer_round_trip_and_chat(tiny_models):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models["target"])
    for text in [*PROMPTS, "ünïcödé 🙂 and\ttabs\r\n", ""]:
        ids = tok(text).input_ids
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert len({tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}) == 3
    assert tok.eos_token == EOS
    assert tok.chat_template == CHAT_TEMPLATE
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|bos|><|user|>\nHi<|eos|>\n<|assistant|>\n"


def test_vocab_sizes(tiny_models):
    from transformers import AutoTokenizer

    target = _config(tiny_models["target"])["vocab_size"]
    assert target == len(AutoTokenizer.from_pretrained(tiny_models["target"]))
    assert _config(tiny_models["draft"])["vocab_size"] == target
    assert _config(tiny_models["draft_identical"])["vocab_size"] == target
    other = _config(tiny_models["draft_other_vocab"])["vocab_size"]
    assert other != target
    assert other == len(AutoTokenizer.from_pretrained(tiny_models["draft_other_vocab"]))
