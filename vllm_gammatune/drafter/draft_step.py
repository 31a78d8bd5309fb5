"""One engine step's drafting: the per-token stop and what is kept of each draft.

``DraftStep`` follows vLLM's draft loop position by position (the proposer's
``_sample_draft_tokens`` feeds it every drafted position): it stops each
request at its planned length or at its per-token stop (the policy's
``stop_measure`` and ``stop_threshold``, or its decision after each pass,
``draft_on``), keeps the entropies and draft
distributions a per-token verification needs, and says when every request
has stopped, so that the proposer ends the loop without further draft
forwards (``EveryRequestStopped``).
"""

from __future__ import annotations

import torch

from vllm_gammatune.verify.divergences import entropy_bits


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
        token_rule: called after each pass with (position, the draft's
            probability of each request's new token, which requests drafted
            in the pass); returns per request None (draft on) or the length
            its draft ends at (a policy that ``decides_per_token``).
        keep_token_probs: keep each pass's token probabilities (traces).
    """

    def __init__(
        self,
        planned: list[int],
        device: torch.device,
        stop_thresholds: torch.Tensor | None = None,
        stop_on: str = "confidence",
        keep_entropies: bool = False,
        keep_distributions: bool = False,
        token_rule=None,
        keep_token_probs: bool = False,
    ):
        self.num_steps = max(planned)
        self.token_rule = token_rule
        self.keep_token_probs = keep_token_probs
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
        # q_i(x_i), the draft's probability of its token, num_steps x [batch]
        self.token_probs: list[torch.Tensor] = []

    @property
    def needs_distribution(self) -> bool:
        return (self.stop_thresholds is not None or self.keep_entropies
                or self.keep_distributions)

    @property
    def needs_token_probs(self) -> bool:
        return self.token_rule is not None or self.keep_token_probs

    def record(
        self,
        token_ids: torch.Tensor,
        probs: torch.Tensor | None,
        distribution: torch.Tensor | None,
        token_probs: torch.Tensor | None = None,
    ) -> bool:
        """Add one draft position; return True when every request has stopped."""
        self.token_ids.append(token_ids)
        if token_probs is not None and self.keep_token_probs:
            self.token_probs.append(token_probs)
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
        if self.token_rule is not None and token_probs is not None:
            self._apply_token_rule(position, token_probs)
        self.stopped |= reached_plan
        if position >= self.num_steps or (self.stop_thresholds is None
                                          and self.token_rule is None):
            return False
        return bool(self.stopped.all())

    def _apply_token_rule(self, position: int, token_probs: torch.Tensor) -> None:
        """The policy's decision after this pass: which drafts end, where."""
        planned = self.planned.tolist()
        active = [not stopped and k >= position
                  for stopped, k in zip(self.stopped.tolist(), planned)]
        decisions = self.token_rule(position, token_probs.tolist(), active)
        lengths = self.lengths.tolist()
        ended = [False] * len(planned)
        for i, end in enumerate(decisions):
            if end is not None and active[i]:
                lengths[i] = min(end, planned[i])
                ended[i] = True
        if any(ended):
            device = self.lengths.device
            self.lengths = torch.tensor(lengths, dtype=self.lengths.dtype, device=device)
            ended_mask = torch.tensor(ended, dtype=torch.bool, device=device)
            self.stopped_early |= ended_mask & (self.lengths < self.planned)
            self.stopped |= ended_mask


def proposed_token_probs(logits: torch.Tensor, token_ids: torch.Tensor,
                         sampling_metadata) -> torch.Tensor:
    """q(x): the draft's probability of the token it proposed ([batch]), at
    each request's temperature (greedy: temperature 1, where the proposed
    token is the top one), without building the distribution."""
    logits = tempered_logits(logits, sampling_metadata)
    chosen = logits.gather(-1, token_ids.long().unsqueeze(-1)).squeeze(-1)
    return torch.exp(chosen - torch.logsumexp(logits, dim=-1))


def draft_distribution(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
    """q: the draft's softmax at each request's temperature ([batch, vocab]).

    Greedy requests use temperature 1 (the plain softmax); top-k/top-p are
    not applied to the draft, as in vLLM's own probabilistic drafting.
    """
    return torch.softmax(tempered_logits(logits, sampling_metadata), dim=-1)


def tempered_logits(logits: torch.Tensor, sampling_metadata) -> torch.Tensor:
    """[batch, vocab] float logits over each request's temperature (greedy
    requests: 1)."""
    logits = logits.float()
    temperature = sampling_metadata.temperature
    if temperature is not None and not sampling_metadata.all_greedy:
        # [batch, 1]; vLLM marks greedy requests with a temperature <= 0
        temperature = torch.where(temperature > 0, temperature,
                                  torch.ones_like(temperature)).float()
        logits = logits / temperature[: logits.shape[0]].unsqueeze(-1)
    return logits
