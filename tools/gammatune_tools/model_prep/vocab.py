"""Check that target and draft share exactly the same vocabulary."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .errors import VocabMismatchError

logger = logging.getLogger(__name__)


def vocab_from_tokenizer_json(model_dir: Path) -> dict[str, int] | None:
    """Token -> id of a model's ``tokenizer.json``, added tokens included; None without one."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = dict(data.get("model", {}).get("vocab") or {})
    for tok in data.get("added_tokens") or []:
        vocab[tok["content"]] = tok["id"]
    return vocab


def check_same_vocab(dir_a: str | os.PathLike, dir_b: str | os.PathLike) -> bool:
    """Raise :class:`VocabMismatchError` unless both tokenizers map tokens to ids alike.

    Compares the ``tokenizer.json`` vocabularies, added tokens included.  Returns
    False (and checks nothing) when either directory has no ``tokenizer.json``.
    """
    a, b = Path(dir_a), Path(dir_b)
    va, vb = vocab_from_tokenizer_json(a), vocab_from_tokenizer_json(b)
    if va is None or vb is None:
        logger.warning("vocab check skipped: no tokenizer.json in %s", a if va is None else b)
        return False
    if va != vb:
        only_a = sorted(set(va) - set(vb))[:5]
        only_b = sorted(set(vb) - set(va))[:5]
        diff_ids = sorted(t for t in set(va) & set(vb) if va[t] != vb[t])[:5]
        raise VocabMismatchError(
            f"tokenizers differ: {a} has {len(va)} tokens, {b} has {len(vb)}; "
            f"only in first: {only_a}, only in second: {only_b}, different ids: {diff_ids}"
        )
    logger.info("vocab check passed: %d tokens identical", len(va))
    return True
