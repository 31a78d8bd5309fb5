"""Tiny random-weight Hugging Face models for speculative-decoding tests.

Everything is built on the fly (no model hub access needed), deterministically
(fixed seeds) and cached on disk (a second call with the same ``root`` is a
no-op).  The models are plain ``LlamaForCausalLM`` checkpoints saved as
safetensors + ``config.json`` + tokenizer files, in float32, which vLLM on CPU
loads in a few seconds.

Entry point::

    from tiny_models import build_tiny_models
    paths = build_tiny_models("/tmp/tiny")
    paths["target"]             # tiny Llama target (vocab V)
    paths["draft"]              # noisy copy of target: ~66 % greedy agreement
    paths["draft_identical"]    # exact copy of target: 100 % agreement
    paths["draft_other_vocab"]  # smaller Llama with its own tokenizer (vocab != V)

Design notes
------------
* Weights use a per-tensor init std ``INIT_GAINS[kind] / sqrt(fan_in)`` (not
  HF's 0.02), so that each block keeps unit scale and the logits have std ~8:
  the next-token distribution is peaked and the greedy argmax is separated
  from the runner-up by ~1 logit on average (min 0.055 over the 256 greedy
  steps of ``PROMPTS``), far above fp32 kernel differences between batched
  and unbatched execution.  Greedy output is therefore stable, and
  spec-decode with any draft reproduces the target's greedy text exactly.
* The lm_head rows of the special tokens (pad/bos/eos/role markers) and of
  the byte tokens that are not printable ASCII are zeroed, so the models
  (practically) never emit them: generated text is readable ASCII gibberish
  (not one repeated token), and generation always runs to ``max_tokens``,
  which keeps token counts in tests predictable.  Use stop strings or
  ``ignore_eos`` if a test needs specific stop behaviour.
* ``draft`` is the target's weights plus Gaussian noise of relative scale
  ``DRAFT_NOISE``; its teacher-forced greedy agreement with the target is
  0.66 on ``PROMPTS`` (see ``greedy_agreement``).  In vLLM with
  ``num_speculative_tokens=3`` it accepts ~49 % of draft tokens
  (mean acceptance length ~2.5).
* Weights are stored in float32 (``config.json`` ``dtype``); pass
  ``dtype="float32"`` to vLLM (its CPU default would otherwise be bf16).
* Helpers run torch single-threaded (``_one_thread``): on a busy 2-core
  machine, multi-threaded OpenMP makes these tiny forwards ~100x slower.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import string
import tempfile
from typing import Iterable, Sequence

# Cached builds are reused only if their stamp matches ``_fingerprint()``
# (this version + all the constants below); bump it when the build code
# changes in a way the constants do not capture.
BUILD_VERSION = "2"
_STAMP = "tiny_build.json"

SEED = 1234
DTYPE = "float32"

# Special tokens (first ids of the vocabulary, in this order).
PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL_TOKENS = [PAD, BOS, EOS, *ROLE_TOKENS]

TARGET_VOCAB = 768
OTHER_VOCAB = 512

# Simple chat template:  <|bos|><|user|>\nhi<|eos|>\n<|assistant|>\n
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\n' }}{%- endif -%}"
)

TARGET_ARCH = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,  # head_dim 32 (supported by vLLM's CPU attention)
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)
OTHER_ARCH = dict(TARGET_ARCH, hidden_size=64, intermediate_size=128,
                  num_attention_heads=2, num_key_value_heads=1)

# Init gains per tensor kind (std = gain / sqrt(fan_in); embeddings: std = gain).
# HF's default (std 0.02 everywhere) gives near-uniform next-token
# distributions; these give peaked ones (lm_head gain -> logit std) while
# keeping each block's output at unit scale, so the network is not chaotic.
INIT_GAINS = {
    "embed_tokens": 1.0,
    "q_proj": 1.5,
    "k_proj": 1.5,
    "v_proj": 1.0,
    "o_proj": 1.0,
    "gate_proj": 1.0,
    "up_proj": 1.0,
    "down_proj": 1.0,
    "lm_head": 8.0,
}
# Relative std of the noise added to each target tensor to make ``draft``.
DRAFT_NOISE = 0.08

# Prompts of different lengths, shared by the agreement measurement and tests.
PROMPTS = [
    "Hello",
    "The quick brown fox",
    "def add(a, b):\n    return",
    "Once upon a time, in a small village by the sea, there lived",
    "import numpy as np\n\nx = np.arange(10)\nprint(x.sum())\n# the result is",
    "Speculative decoding uses a small draft model to propose tokens that a "
    "larger target model then verifies in a single forward pass, which",
    "Q: What is the capital of France?\nA:",
    "for i in range(3):\n    for j in range(3):\n        if i == j:\n            "
    "print(i, j)\n        else:\n            continue\n# This loop prints the "
    "diagonal pairs of a three by three grid, and the output of the program",
]

_CORPUS = r"""
The quick brown fox jumps over the lazy dog. A small model can still write
text, although the words it picks may not make much sense. Speculative
decoding lets a draft model propose several tokens, and the target model
checks them all at once. When the draft is right, many tokens are accepted in
one step; when it is wrong, the target keeps its own token and the rest of the
proposal is thrown away. The output is the same as if the target had worked
alone, only faster.
Once upon a time, in a small village by the sea, there lived an old man and
his daughter. Every morning they went to the market to sell fish, bread and
apples. The weather was often cold and the road was long, but they were happy.
Q: What is the capital of France?
A: The capital of France is Paris.
Q: How many days are there in a week?
A: There are seven days in a week: Monday, Tuesday, Wednesday, Thursday,
Friday, Saturday and Sunday.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 1000 2048 3.14 2.718
The server receives a request, schedules it in a batch, runs the model and
streams the result back to the client. Latency and throughput both matter.
def add(a, b):
    return a + b

def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)

class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, step=1):
        self.value += step
        return self.value

import numpy as np
x = np.arange(10)
print(x.sum())
for i in range(3):
    for j in range(3):
        if i == j:
            print(i, j)
        else:
            continue
result = [k * k for k in range(20) if k % 2 == 0]
data = {"name": "tiny", "layers": 2, "hidden": 128, "ok": True}
with open("file.txt", "w") as f:
    f.write("hello world\n")
try:
    value = int("12")
except ValueError as error:
    raise RuntimeError("bad value") from error
function greet(name) { return "Hello, " + name + "!"; }
const items = [1, 2, 3].map((v) => v * 2);
SELECT id, name FROM users WHERE age > 30 ORDER BY name;
The acceptance rate measures how often the target agrees with the draft. A
higher rate means longer accepted runs and more tokens per step. If the rate
drops, an adaptive method can lower the number of speculative tokens, and if
it rises again, it can raise it. Good tests use small models, fixed seeds and
short prompts, so that they run quickly on a laptop without a graphics card.
She opened the window, looked at the garden and smiled. The birds were
singing, the sun was warm, and the children were playing under the trees.
"""


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _fingerprint() -> str:
    """Hash of everything that shapes the files (so stale caches rebuild)."""
    blob = json.dumps(
        [BUILD_VERSION, SEED, DTYPE, SPECIAL_TOKENS, TARGET_VOCAB, OTHER_VOCAB,
         CHAT_TEMPLATE, TARGET_ARCH, OTHER_ARCH, INIT_GAINS, _CORPUS],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _is_built(path: str, kind: str) -> bool:
    stamp = os.path.join(path, _STAMP)
    if not os.path.isfile(stamp):
        return False
    try:
        with open(stamp) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return False
    return info.get("fingerprint") == _fingerprint() and info.get("kind") == kind


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
        with _one_thread():
            builder(tmp)
        with open(os.path.join(tmp, _STAMP), "w") as f:
            json.dump({"fingerprint": _fingerprint(), "kind": kind}, f)
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
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
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


_PRINTABLE = set(string.printable) - set("\r\x0b\x0c")


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


# --------------------------------------------------------------------------
# measurement with plain transformers
# --------------------------------------------------------------------------

class _one_thread:
    """Run torch on one thread: these models are tiny, and on a loaded
    machine (e.g. vLLM or other tests running) multi-threaded OpenMP spins
    make each forward ~100x slower."""

    def __enter__(self):
        import torch

        self._n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self._n)


def _load_hf(path: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


def hf_greedy(path_or_model, prompts: Sequence[str] = PROMPTS, max_new_tokens: int = 32,
              tokenizer=None) -> list[list[int]]:
    """Greedy continuation token ids (no eos stop) for each prompt."""
    import torch
    from transformers import AutoTokenizer

    if isinstance(path_or_model, str):
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path_or_model)
        model = _load_hf(path_or_model)
    else:
        model = path_or_model
    outs = []
    with torch.no_grad(), _one_thread():
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            new = []
            for _ in range(max_new_tokens):
                nxt = int(model(ids).logits[0, -1].argmax())
                new.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
            outs.append(new)
    return outs


def greedy_agreement(target_dir: str, draft_dir: str, prompts: Sequence[str] = PROMPTS,
                     max_new_tokens: int = 32) -> dict:
    """Teacher-forced greedy agreement of the draft with the target.

    The target greedily generates ``max_new_tokens`` per prompt; then, on the
    same sequences, we count the positions where the draft's argmax equals
    the target's token.  Returns ``{"agreement", "min_margin", "distinct"}``:
    ``min_margin`` is the smallest top1-top2 logit gap of the target along its
    greedy path (tie safety), ``distinct`` the mean number of distinct tokens
    per continuation (not a single repeated token).
    """
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(target_dir)
    target = _load_hf(target_dir)
    draft = _load_hf(draft_dir)
    agree = total = 0
    min_margin = float("inf")
    distinct = []
    with torch.no_grad(), _one_thread():
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt").input_ids
            n0 = ids.shape[1]
            for _ in range(max_new_tokens):
                logits = target(ids).logits[0, -1]
                top2 = logits.topk(2).values
                min_margin = min(min_margin, float(top2[0] - top2[1]))
                ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
            t_logits = target(ids).logits[0, n0 - 1:-1]
            d_logits = draft(ids).logits[0, n0 - 1:-1]
            t_arg = t_logits.argmax(-1)
            assert torch.equal(t_arg, ids[0, n0:]), "target not self-consistent"
            agree += int((d_logits.argmax(-1) == t_arg).sum())
            total += t_arg.numel()
            distinct.append(len(set(ids[0, n0:].tolist())))
    return {
        "agreement": agree / total,
        "min_margin": min_margin,
        "distinct": sum(distinct) / len(distinct),
    }


if __name__ == "__main__":  # python tests/tiny_models.py [root]
    import sys
    import time

    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "tiny_models")
    t0 = time.time()
    paths = build_tiny_models(root)
    print(json.dumps(paths, indent=2), f"built in {time.time() - t0:.1f}s")
    for key in ("draft", "draft_identical"):
        print(key, greedy_agreement(paths["target"], paths[key]))
