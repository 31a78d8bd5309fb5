"""What the tiny test models are: tokens, sizes, weight scales, corpus, prompts.

Everything that shapes the files lives here; :func:`recipe_fingerprint` hashes
it, so a cached build made from another recipe is rebuilt (``tiny_models``).

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
  0.66 on ``PROMPTS`` (see ``tiny_model_agreement.greedy_agreement``).  In
  vLLM with ``num_speculative_tokens=3`` it accepts ~49 % of draft tokens
  (mean acceptance length ~2.5).
* Weights are stored in float32 (``config.json`` ``dtype``); pass
  ``dtype="float32"`` to vLLM (its CPU default would otherwise be bf16).
"""

from __future__ import annotations

import hashlib
import json

# Cached builds are reused only if their stamp matches ``recipe_fingerprint()``
# (this version + all the constants below); bump it when the build code
# changes in a way the constants do not capture.
BUILD_VERSION = "2"

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

CORPUS = r"""
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


def recipe_fingerprint() -> str:
    """Hash of everything that shapes the files (so stale caches rebuild)."""
    blob = json.dumps(
        [BUILD_VERSION, SEED, DTYPE, SPECIAL_TOKENS, TARGET_VOCAB, OTHER_VOCAB,
         CHAT_TEMPLATE, TARGET_ARCH, OTHER_ARCH, INIT_GAINS, CORPUS],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
