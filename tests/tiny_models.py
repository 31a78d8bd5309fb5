"""Tiny random-weight Hugging Face models for speculative-decoding tests.

Everything is built on the fly (no model hub access needed), deterministically
(fixed seeds) and cached on disk (a second call with the same ``root`` is a
no-op).  The models are plain ``LlamaForCausalLM`` checkpoints saved as
safetensors + ``config.json`` + tokenizer files, in float32, which vLLM on CPU
loads in a few seconds.  What they are made of (sizes, weight scales, corpus,
prompts) is ``tiny_model_recipe``; measuring them with plain transformers is
``tiny_model_agreement``.

Entry point::

    from tiny_models import build_tiny_models
    paths = build_tiny_models("/tmp/tiny")
    paths["target"]             # tiny Llama target (vocab V)
    paths["draft"]              # noisy copy of target: ~66 % greedy agreement
    paths["draft_identical"]    # exact copy of target: 100 % agreement
    paths["draft_other_vocab"]  # smaller Llama with its own tokenizer (vocab != V)

Builds run torch single-threaded (``one_torch_thread``): on a busy 2-core
machine, multi-threaded OpenMP makes these tiny forwards ~100x slower.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import string
import tempfile
from typing import Iterable

from tiny_model_recipe import (BOS, CHAT_TEMPLATE, CORPUS, DRAFT_NOISE, DTYPE, EOS, INIT_GAINS,
                               OTHER_ARCH, OTHER_VOCAB, PAD, ROLE_TOKENS, SEED, SPECIAL_TOKENS,
                               TARGET_ARCH, TARGET_VOCAB, recipe_fingerprint)

_STAMP = "tiny_build.json"
_PRINTABLE = set(string.printable) - set("\r\x0b\x0c")


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

@contextlib.contextmanager
def one_torch_thread():
    """Run torch on one thread: these models are tiny, and on a loaded
    machine (e.g. vLLM or other tests running) multi-threaded OpenMP spins
    make each forward ~100x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _is_built(path: str, kind: str) -> bool:
    stamp = os.path.join(path, _STAMP)
    if not os.path.isfile(stamp):
        return False
    try:
        with open(stamp) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return False
    return info.get("fingerprint") == recipe_fingerprint() and info.get("kind") == kind


def _build_atomic(path: str, kind: str, builder) -> str:
    """Run ``builder(tmpdir)`` and move the result to ``path`` atomically.

    Safe against concurrent builders (e.g. pytest-xdist workers): the first
    rename wins, the others discard their copy.
    """
    path = os.path.abspath(path)
    if _is_built(path, kind):
        return path
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}-", dir=parent)
    os.chmod(tmp, 0o755)
    try:
        with one_torch_thread():
            builder(tmp)
        with open(os.path.join(tmp, _STAMP), "w") as f:
            json.dump({"fingerprint": recipe_fingerprint(), "kind": kind}, f)
        if os.path.exists(path) and not _is_built(path, kind):
            shutil.rmtree(path, ignore_errors=True)  # stale or partial build
        try:
            os.rename(tmp, path)
        except OSError:
            if not _is_built(path, kind):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _train_tokenizer(vocab_size: int):
    """Byte-level BPE trained on the inline corpus, as PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeat the corpus so that pair counts are well separated.
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    if len(hf) != vocab_size:
        raise RuntimeError(
            f"tokenizer has {len(hf)} tokens, expected {vocab_size}: corpus too small"
        )
    return hf


def _llama_config(tokenizer, arch: dict):
    from transformers import LlamaConfig

    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **arch,
    )
    cfg.architectures = ["LlamaForCausalLM"]
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) >= Version("4.56"):
        cfg.dtype = DTYPE
    else:  # pragma: no cover - older transformers
        cfg.torch_dtype = DTYPE
    return cfg


def _init_std(name: str, shape) -> float:
    """Per-tensor init std: ``gain / sqrt(fan_in)`` (embeddings: ``gain``)."""
    for key, gain in INIT_GAINS.items():
        if key in name:
            break
    else:
        raise KeyError(name)
    if "embed_tokens" in name:
        return gain
    return gain / math.sqrt(shape[1])


def suppressed_token_ids(tokenizer) -> list[int]:
    """Ids whose lm_head row is zeroed: special tokens and the byte tokens
    that do not decode to printable ASCII (the corpus is ASCII, so every
    merged token is printable).  Generated text is thus valid, readable
    ASCII and never contains special tokens."""
    special = set(tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS))
    out = []
    for i in range(len(tokenizer)):
        if i in special or not set(tokenizer.decode([i])) <= _PRINTABLE:
            out.append(i)
    return out


def _random_state_dict(model, seed: int, special_ids: Iterable[int]):
    """Deterministic init independent of the transformers version."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    sd = {}
    for name, p in sorted(model.state_dict().items()):
        if name.endswith("norm.weight"):
            sd[name] = torch.ones(p.shape, dtype=torch.float32)
        elif p.dim() == 1:  # biases (none in Llama by default)
            sd[name] = torch.zeros(p.shape, dtype=torch.float32)
        else:
            sd[name] = torch.randn(p.shape, generator=gen, dtype=torch.float32) * _init_std(name, p.shape)
    lm = sd["lm_head.weight"]
    for i in special_ids:
        lm[i] = 0.0  # never (practically) emit these tokens
    return sd


def _save_model(path: str, config, state_dict, tokenizer) -> None:
    import torch
    from transformers import GenerationConfig, LlamaForCausalLM

    torch.manual_seed(0)  # HF init is overwritten below; keep it cheap & quiet
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(
        {k: v.contiguous().float() for k, v in state_dict.items()}, strict=True
    )
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)


def _new_model_state(tokenizer, arch: dict, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    config = _llama_config(tokenizer, arch)
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(config)
    return config, _random_state_dict(skeleton, seed, suppressed_token_ids(tokenizer))


# --------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------

def build_tokenizer(dir: str, vocab_size: int = TARGET_VOCAB) -> str:
    """Train and save the tokenizer alone (tokenizer files only)."""
    return _build_atomic(
        dir, f"tokenizer-{vocab_size}", lambda tmp: _train_tokenizer(vocab_size).save_pretrained(tmp)
    )


def build_target(dir: str) -> str:
    """Tiny LlamaForCausalLM target (float32, seed ``SEED``)."""

    def _build(tmp):
        tok = _train_tokenizer(TARGET_VOCAB)
        config, sd = _new_model_state(tok, TARGET_ARCH, SEED)
        _save_model(tmp, config, sd, tok)

    return _build_atomic(dir, "target", _build)


def _load_state(path: str):
    from safetensors.torch import load_file

    return load_file(os.path.join(path, "model.safetensors"))


def _build_copy(dir: str, target_dir: str, kind: str, noise: float, seed: int) -> str:
    def _build(tmp):
        import torch
        from transformers import AutoConfig, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(target_dir)
        config = AutoConfig.from_pretrained(target_dir)
        sd = _load_state(target_dir)
        if noise:
            gen = torch.Generator().manual_seed(seed)
            special_ids = suppressed_token_ids(tok)
            new = {}
            for name in sorted(sd):
                p = sd[name].float()
                if name.endswith("norm.weight"):
                    new[name] = p.clone()
                    continue
                scale = noise * _init_std(name, p.shape)
                new[name] = p + torch.randn(p.shape, generator=gen) * scale
            for i in special_ids:
                new["lm_head.weight"][i] = 0.0
            sd = new
        _save_model(tmp, config, sd, tok)

    return _build_atomic(dir, kind, _build)


def build_draft_same(dir: str, target_dir: str, noise: float = DRAFT_NOISE, seed: int = SEED + 1) -> str:
    """Target copy + Gaussian noise on every weight matrix.

    The noise std is ``noise`` times the tensor's init std (norms untouched).
    Same architecture and tokenizer as the target, so it is a valid
    ``draft_model`` draft.  With the default ``noise`` the teacher-forced
    greedy agreement with the target on ``PROMPTS`` is 0.66 (noise 0.05 ->
    ~0.75, 0.1 -> ~0.58, 0.2 -> ~0.28).
    """
    return _build_copy(dir, target_dir, f"draft-noise{noise}-seed{seed}", noise, seed)


def build_draft_identical(dir: str, target_dir: str) -> str:
    """Exact copy of the target (100 % acceptance)."""
    return _build_copy(dir, target_dir, "draft-identical", 0.0, 0)


def build_draft_other_vocab(dir: str) -> str:
    """Smaller Llama with its own tokenizer of ``OTHER_VOCAB`` tokens.

    Its vocab size differs from the target's (``TARGET_VOCAB``), so vLLM
    0.32 rejects it as a ``draft_model`` draft while building the engine
    config (in the parent process, before any engine process starts) with
    ``pydantic_core.ValidationError`` (a ``ValueError``): "1 validation error
    for SpeculativeConfig / Value error, Target and draft model should have
    the same vocabulary size. Target model vocab_size=768. Draft model
    vocab_size=512. Using models with different tokenizers can cause
    out-of-bounds errors during speculative decoding."  (Unless
    ``use_heterogeneous_vocab`` is set in the speculative config.)
    """

    def _build(tmp):
        tok = _train_tokenizer(OTHER_VOCAB)
        config, sd = _new_model_state(tok, OTHER_ARCH, SEED + 2)
        _save_model(tmp, config, sd, tok)

    return _build_atomic(dir, "draft-other-vocab", _build)


def build_tiny_models(root: str) -> dict:
    """Build (or reuse) all tiny models under ``root``; return their paths."""
    root = os.path.abspath(root)
    target = build_target(os.path.join(root, "target"))
    return {
        "target": target,
        "draft": build_draft_same(os.path.join(root, "draft"), target),
        "draft_identical": build_draft_identical(os.path.join(root, "draft_identical"), target),
        "draft_other_vocab": build_draft_other_vocab(os.path.join(root, "draft_other_vocab")),
    }
