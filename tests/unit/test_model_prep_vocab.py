"""gammatune_tools.model_prep.vocab: target and draft must map every token to the same id."""

from __future__ import annotations

import pytest
from model_prep_fakes import write_tokenizer_dir

from gammatune_tools.model_prep.errors import VocabMismatchError
from gammatune_tools.model_prep.vocab import check_same_vocab, vocab_from_tokenizer_json


def test_vocab_from_tokenizer_json_includes_added_tokens(tmp_path):
    d = write_tokenizer_dir(tmp_path / "a", {"x": 0, "y": 1}, [("<eos>", 2)])
    assert vocab_from_tokenizer_json(d) == {"x": 0, "y": 1, "<eos>": 2}
    (tmp_path / "none").mkdir()
    assert vocab_from_tokenizer_json(tmp_path / "none") is None


def test_vocab_check(tmp_path):
    a = write_tokenizer_dir(tmp_path / "a", {"x": 0, "y": 1}, [("<eos>", 2)])
    b = write_tokenizer_dir(tmp_path / "b", {"x": 0, "y": 1}, [("<eos>", 2)])
    c = write_tokenizer_dir(tmp_path / "c", {"x": 1, "y": 0}, [("<eos>", 2)])
    e = write_tokenizer_dir(tmp_path / "e", {"x": 0, "y": 1}, [("<eos>", 3)])
    f = write_tokenizer_dir(tmp_path / "f", {"x": 0, "y": 1, "z": 2})
    assert check_same_vocab(a, b) is True
    with pytest.raises(VocabMismatchError, match="different ids"):
        check_same_vocab(a, c)
    with pytest.raises(VocabMismatchError):
        check_same_vocab(a, e)
    with pytest.raises(VocabMismatchError, match=r"only in second: \['z'\]"):
        check_same_vocab(b, f)


def test_vocab_check_skipped_without_tokenizer_json(tmp_path):
    a = write_tokenizer_dir(tmp_path / "a", {"x": 0})
    (tmp_path / "bare").mkdir()
    assert check_same_vocab(a, tmp_path / "bare") is False
