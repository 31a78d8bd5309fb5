"""Measure the tiny test models with plain transformers (no vLLM).

How often the draft's greedy token agrees with the target's, how far the
target's greedy choice is from a tie, and greedy continuations.  Run as a
script to build the models and print their agreement::

    python tests/tiny_model_agreement.py [root]
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Sequence

from tiny_model_recipe import PROMPTS
from tiny_models import build_tiny_models, one_torch_thread


def load_hf_model(path: str):
    """A tiny model loaded with plain transformers, in float32, in eval mode."""
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
        model = load_hf_model(path_or_model)
    else:
        model = path_or_model
    outs = []
    with torch.no_grad(), one_torch_thread():
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
    target = load_hf_model(target_dir)
    draft = load_hf_model(draft_dir)
    agree = total = 0
    min_margin = float("inf")
    distinct = []
    with torch.no_grad(), one_torch_thread():
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


if __name__ == "__main__":  # python tests/tiny_model_agreement.py [root]
    import sys
    import time

    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "tiny_models")
    t0 = time.time()
    paths = build_tiny_models(root)
    print(json.dumps(paths, indent=2), f"built in {time.time() - t0:.1f}s")
    for key in ("draft", "draft_identical"):
        print(key, greedy_agreement(paths["target"], paths[key]))
