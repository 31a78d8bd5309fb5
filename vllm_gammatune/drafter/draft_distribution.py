"""The draft's distribution at each request's temperature, and its probability
of the token it proposed.

A per-token stop or a per-token verification reads q, the distribution the
draft draws its tokens from: the softmax of the draft's logits at the
request's temperature (``draft_distribution``); a trace or a per-token
decision needs only q(x), the probability of each proposed token
(``proposed_token_probs``), read without building q.
"""

from __future__ import annotations

import torch


def proposed_token_probs(logits: torch.Tensor, token_ids: torch.Tensor,
                         sampling_metadata) -> torch.Tensor:
    """q(x): the draft's probability of the token it proposed ([num_reqs]), at
    each request's temperature (greedy: temperature 1, where the proposed
    token is the top one), without building the distribution."""
    logits = tempered_logits(logits, sampling_metadata)
    chosen = logits.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)
    return torch.exp(chosen - torch.logsumexp(logits, dim=-1))


def draft_distribution(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
    """q: the draft's softmax at each request's temperature ([num_reqs, vocab]).

    Greedy requests use temperature 1 (the plain softmax); top-k/top-p are
    not applied to the draft, as in vLLM's own probabilistic drafting.
    """
    return torch.softmax(tempered_logits(logits, sampling_metadata), dim=-1)


def tempered_logits(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
    """[num_reqs, vocab] float logits over each request's temperature (greedy
    requests: 1)."""
    logits = logits.float()
    temperature = sampling_metadata.temperature
    if temperature is not None and not sampling_metadata.all_greedy:
        # [num_reqs]; vLLM marks greedy requests with a temperature <= 0
        temperature = torch.where(temperature > 0, temperature,
                                  torch.ones_like(temperature)).float()
        logits = logits / temperature[: logits.shape[0]].unsqueeze(-1)
    return logits
