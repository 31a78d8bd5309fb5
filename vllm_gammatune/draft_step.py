"""One engine step's drafting: the per-token stop and what is kept of each draft.

``DraftStep`` follows vLLM's draft loop position by position (the proposer's
``_sample_draft_tokens`` feeds it every drafted position): it stops each
request at its planned length or at its per-token stop (the policy's
``stop_measure`` and ``stop_threshold``), keeps the entropies and draft
distributions a per-token verification needs, and says when every request
has stopped, so that the proposer ends the loop without further draft
forwards (``EveryRequestStopped``).
"""

from __future__ import annotations

import torch

from vllm_gammatune.stats import entropy_bits


class EveryRequestStopped(Exception):
    """Raised inside vLLM's draft loop once no request drafts further."""


class DraftStep:
    """Book-keeping of one ``propose`` call (one engine step).

    Args:
        planned: per request, how many tokens the policy asked for.
        stop_thresholds: [batch] per-request early-stop thresholds, or None
            (the policy's ``stop_threshold``): with ``stop_on="confidence"`` a
            request stops after a token whose top draft probability is below
            its threshold (GammaTune+, AssistantThreshold); with
            ``stop_on="entropy"`` after a token whose draft entropy exceeds it
            (AdaSD's T_G, Algorithm 1 line 6).
        keep_entropies: keep every step's H(q_i) (a policy that learns per
            token, as AdaSD learns T_G from the entropy of the first rejected
            draft token).
        keep_distributions: keep every step's draft distribution q_i (a
            policy that relaxes verification needs it).
    """

    def __init__(
        self,
        planned: list[int],
        device: torch.device,
        stop_thresholds: torch.Tensor | None = None,
        stop_on: str = "confidence",
        keep_entropies: bool = False,
        keep_distributions: bool = False,
    ):
        self.num_steps = max(planned)
        self.stop_thresholds = stop_thresholds
        self.stop_on = stop_on
        self.keep_entropies = keep_entropies
        self.keep_distributions = keep_distributions
        # [batch]
        self.planned = torch.tensor(planned, dtype=torch.int32, device=device)
        # [batch] final number of draft tokens per request
        self.lengths = self.planned.clone()
        # [batch] True once the request drafts no further
        self.stopped = torch.zeros_like(self.planned, dtype=torch.bool)
        # [batch] True where the request was stopped early by its threshold
        self.stopped_early = torch.zeros_like(self.stopped)
        self.token_ids: list[torch.Tensor] = []  # num_steps x [batch]
        self.probs: list[torch.Tensor] = []  # vLLM's draft probs, num_steps x [batch, vocab]
        self.distributions: list[torch.Tensor] = []  # q_i, num_steps x [batch, vocab]
        self.entropies: list[torch.Tensor] = []  # H(q_i), num_steps x [batch]

    @property
    def needs_distribution(self) -> bool:
        return (self.stop_thresholds is not None or self.keep_entropies
                or self.keep_distributions)

    def record(
        self,
        token_ids: torch.Tensor,
        probs: torch.Tensor | None,
        distribution: torch.Tensor | None,
    ) -> bool:
        """Add one draft position; return True when every request has stopped."""
        self.token_ids.append(token_ids)
        if probs is not None:
            self.probs.append(probs)
        position = len(self.token_ids)  # tokens drafted so far, 1-based
        reached_plan = self.planned <= position
        if distribution is not None:
            entropy = None
            if self.keep_entropies or self.stop_on == "entropy":
                entropy = entropy_bits(distribution)  # [batch]
            if self.keep_entropies:
                self.entropies.append(entropy)
            if self.keep_distributions:
                self.distributions.append(distribution)
            if self.stop_thresholds is not None:
                if self.stop_on == "entropy":
                    stop = entropy > self.stop_thresholds
                else:
                    stop = distribution.max(dim=-1).values < self.stop_thresholds
                early = stop & ~self.stopped & ~reached_plan
                self.lengths = torch.where(
                    early, torch.full_like(self.lengths, position), self.lengths
                )
                self.stopped_early |= early
                self.stopped |= early
        self.stopped |= reached_plan
        if position >= self.num_steps or self.stop_thresholds is None:
            return False
        return bool(self.stopped.all())


def draft_distribution(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
    """q: the draft's softmax at each request's temperature ([batch, vocab]).

    Greedy requests use temperature 1 (the plain softmax); top-k/top-p are
    not applied to the draft, as in vLLM's own probabilistic drafting.
    """
    logits = logits.float()
    temperature = sampling_metadata.temperature
    if temperature is not None and not sampling_metadata.all_greedy:
        # [batch, 1]; vLLM marks greedy requests with a temperature <= 0
        temperature = torch.where(temperature > 0, temperature,
                                  torch.ones_like(temperature)).float()
        logits = logits / temperature[: logits.shape[0]].unsqueeze(-1)
    return torch.softmax(logits, dim=-1)
