"""gammatune_tools.model_prep.errors: one base class; a checksum error that says what differs."""

from __future__ import annotations

import pytest

from gammatune_tools.model_prep.errors import (ChecksumError, ModelPrepError, PartDownloadError,
                                               VocabMismatchError)


@pytest.mark.parametrize("error", [ChecksumError, PartDownloadError, VocabMismatchError])
def test_every_error_is_a_model_prep_error(error):
    assert issubclass(error, ModelPrepError) and issubclass(error, RuntimeError)


def test_checksum_error_names_both_hashes_and_sizes():
    err = ChecksumError("Model-X", "a" * 64, "b" * 64, 1_000, 999)
    assert str(err) == (f"SHA-256 mismatch for the reassembled GGUF of Model-X: expected {'a' * 64}, "
                        f"got {'b' * 64} (size: expected 1,000 bytes, got 999). The corrupt file was deleted.")
    assert (err.model, err.expected_size, err.actual_size) == ("Model-X", 1_000, 999)


def test_checksum_error_without_sizes_leaves_them_out():
    assert "size" not in str(ChecksumError("Model-X", "a" * 64, "b" * 64))
