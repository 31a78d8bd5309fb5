"""One engine step's drafting: the per-token stop and what is kept of each draft.

``DraftStep`` is the book-keeping of one ``propose`` call. It is made from
the policy's plan (``plan_draft_step``: the planned lengths, the per-token
stop of a policy that has one, what the verification and the trace will
need); it follows vLLM's draft loop position by position (the proposer's
``_sample_draft_tokens`` feeds it every drafted position): it stops each
request at its planned length or at its per-token stop (the policy's
``stop_measure`` and ``stop_threshold``, or its decision after each pass,
``draft_on``), keeps the entropies and draft distributions a per-token
verification needs, and says when every request has stopped, so that the
proposer ends the loop without further draft forwards
(``EveryRequestStopped``). After the loop it cuts each request's draft to
its length (``drafts``) and hands out what is kept of it (``kept_drafts``,
``traced_token_probs``, ``draft_probs``).

After the loop the host learns everything it needs of the step in one read
(``read_back``): the drafted tokens, each request's length, and, where
asked, the tokens' probabilities, the last verification's counts and what
AdaSD's device verification leaves for its policy to learn from.
Without early exit (the CUDA hot path, ``docs/cuda.md``) nothing else is
read: the loop runs every planned pass. Where the drafts are then padded to
the step's K (``uniform_shape``), every request keeps every pass the loop
ran (``keeps_every_pass``): the padded step verifies those tokens whatever
a stop would say, so no stop applies there. AdaSD's entropy stops, on its
own verification's path, stay on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from vllm.utils.torch_utils import async_tensor_h2d
from vllm_gammatune.drafter.hot_path import read_on_host
from vllm_gammatune.drafter.tp_agreement import same_decisions_on_every_rank
from vllm_gammatune.policies import (
    DraftLengthPolicy,
    RelaxedVerifier,
    ThresholdStop,
    TokenRule,
)
from vllm_gammatune.policies.contracts import STOP_ON_CONFIDENCE, STOP_ON_ENTROPY
from vllm_gammatune.verify.kept_draft import KeptDraft
from vllm_gammatune.verify.divergences import entropy_bits


class StepRead(NamedTuple):
    """What ``DraftStep.read_back`` hands back besides the step itself."""

    #: [num_reqs] the last verification's accepted + 1, where asked for
    valid_counts: list[int] | None
    #: the host rows of each extra tensor, in order
    extra: list[list[list[float]]]


def _unflattened(values: list[float], shapes) -> list[list[list[float]]]:
    """The rows of each 2-D tensor of ``shapes``, from their values laid end
    to end."""
    tensors, start = [], 0
    for num_rows, num_columns in shapes:
        tensors.append([values[start + i * num_columns:start + (i + 1) * num_columns]
                        for i in range(num_rows)])
        start += num_rows * num_columns
    return tensors


class EveryRequestStopped(Exception):
    """Raised inside vLLM's draft loop once no request drafts further.

    The proposer raises it from its ``_sample_draft_tokens`` and catches it
    around vLLM's ``propose``, which calls that method once per draft pass
    and does nothing after its loop that the plugin does not do itself
    (``compat.internals``: ``DraftModelProposer.propose``)."""


class DraftStep:
    """Book-keeping of one ``propose`` call (one engine step).

    Args:
        planned: per request, how many tokens the policy asked for.
        stop_thresholds: [num_reqs] per-request early-stop thresholds, or None
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
            its draft ends at (a ``TokenRule``).
        keep_token_probs: keep each pass's token probabilities (traces).
        early_exit: end the loop once every request has stopped; off (the
            CUDA hot path), run every planned pass.
        keeps_every_pass: [num_reqs] or None; without early exit and without
            stops, the requests whose draft is every token the loop produced
            (the padded verification, ``uniform_shape``): planned shorter
            than the longest plan, such a request keeps the tokens the passes
            produced past its plan. The others keep their plan (a request
            planned 0 whose draft KV has a hole drafts from a context the
            draft model has not seen).
    """

    def __init__(
        self,
        planned: list[int],
        device: torch.device,
        stop_thresholds: torch.Tensor | None = None,
        stop_on: str = STOP_ON_CONFIDENCE,
        keep_entropies: bool = False,
        keep_distributions: bool = False,
        token_rule=None,
        keep_token_probs: bool = False,
        early_exit: bool = True,
        keeps_every_pass: Sequence[bool] | None = None,
    ):
        assert keeps_every_pass is None or (not early_exit and stop_thresholds is None
                                            and token_rule is None), \
            "a step that keeps every pass has no stop"
        self.keeps_every_pass = keeps_every_pass
        #: draft passes to run at most (the longest plan)
        self.num_passes = max(planned)
        #: the loop ends once every request has stopped (asking the host
        #: after each pass); off, it runs every planned pass
        self.early_exit = early_exit
        #: [num_reqs] the plan, on the host
        self.planned_lengths = list(planned)
        self.token_rule = token_rule
        self.keep_token_probs = keep_token_probs
        self.stop_thresholds = stop_thresholds
        self.stop_on = stop_on
        self.keep_entropies = keep_entropies
        self.keep_distributions = keep_distributions
        #: the lengths are tracked on the device: a threshold stop decides
        #: there, or the loop exits early; otherwise every planned pass runs
        #: and each length is its plan, known on the host (no tensor op)
        self._tracks_on_device = early_exit or stop_thresholds is not None
        if self._tracks_on_device:
            # [num_reqs]
            self.planned = async_tensor_h2d(planned, dtype=torch.int32, device=device)
            # [num_reqs] final number of draft tokens per request
            self.lengths = self.planned.clone()
            # [num_reqs] True once the request drafts no further
            self.stopped = torch.zeros_like(self.planned, dtype=torch.bool)
            # [num_reqs] True where the request was stopped early by its threshold
            self.stopped_early = torch.zeros_like(self.stopped)
        self.token_ids: list[torch.Tensor] = []  # num_passes x [num_reqs]
        # vLLM's draft probs, num_passes x [num_reqs, vocab]
        self.probs: list[torch.Tensor] = []
        self.distributions: list[torch.Tensor] = []  # q_i, num_passes x [num_reqs, vocab]
        self.entropies: list[torch.Tensor] = []  # H(q_i), num_passes x [num_reqs]
        # q_i(x_i), the draft's probability of its token, num_passes x [num_reqs]
        self.token_probs: list[torch.Tensor] = []
        # what the host read of the step (``read_back``): per request, its
        # drafted tokens, its length, whether it stopped early, and the
        # probabilities of its tokens (where kept)
        self._token_rows: list[list[int]] = []
        self._host_lengths: list[int] = []
        self.stopped_early_host: list[bool] = []
        self._token_prob_rows: list[list[float]] = []
        self._read = False

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
        entropy = None if distribution is None else self._keep(distribution)
        if not self._tracks_on_device:
            return False
        reached_plan = self.planned <= position
        if distribution is not None:
            if self.stop_thresholds is not None:
                if self.stop_on == STOP_ON_ENTROPY:
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
        if not self.early_exit or position >= self.num_passes or (
                self.stop_thresholds is None and self.token_rule is None):
            return False
        return bool(self.stopped.all())

    def _keep(self, distribution: torch.Tensor) -> torch.Tensor | None:
        """Keep what the step's verification reads of this pass's
        distribution; its entropy ([num_reqs]) where it is needed."""
        entropy = None
        if self.keep_entropies or self.stop_on == STOP_ON_ENTROPY:
            entropy = entropy_bits(distribution)  # [num_reqs]
        if self.keep_entropies:
            self.entropies.append(entropy)
        if self.keep_distributions:
            self.distributions.append(distribution)
        return entropy


    def _apply_token_rule(self, position: int, token_probs: torch.Tensor) -> None:
        """The policy's decision after this pass: which drafts end, where."""
        lengths = self.lengths.tolist()
        ended = judge_pass(self.token_rule, position, token_probs.tolist(),
                           self.planned_lengths, self.stopped.tolist(), lengths)
        if any(ended):
            device = self.lengths.device
            self.lengths = async_tensor_h2d(lengths, dtype=self.lengths.dtype, device=device)
            ended_mask = async_tensor_h2d(ended, dtype=torch.bool, device=device)
            self.stopped_early |= ended_mask & (self.lengths < self.planned)
            self.stopped |= ended_mask

    # -- after the loop -----------------------------------------------------------
    def read_back(self, valid_counts: torch.Tensor | None = None,
                  extra: Sequence[torch.Tensor] = ()) -> StepRead:
        """Read the step's results on the host, in one read: every request's
        drafted tokens, length and early stop, its tokens' probabilities
        where they are kept, ``valid_counts`` ([num_reqs], the last
        verification's accepted + 1, where given) and the ``extra`` tensors
        (each 2-D, any number of rows: AdaSD's device verification,
        ``verify.adasd_verifier.AdaSDVerifier.unread_results``)."""
        num_reqs = len(self.planned_lengths)
        num_passes = len(self.token_ids)
        # [num_reqs, num_passes + 2 (+ num_passes) (+ 1)]
        columns = [torch.stack(self.token_ids, dim=1)]
        if self._tracks_on_device:
            columns += [self.lengths.unsqueeze(1), self.stopped_early.unsqueeze(1)]
        if self.token_probs:
            columns.append(torch.stack(self.token_probs, dim=1))
        if valid_counts is not None:
            columns.append(valid_counts[:num_reqs].unsqueeze(1))
        # integers read as integers; with a probability among them, as float64
        floats = bool(self.token_probs or extra)
        dtype = torch.float64 if floats else torch.int64
        step = torch.cat([c.to(dtype) for c in columns], dim=1)
        # one transfer: the step's columns, then each extra tensor, flattened
        tensors = [step, *(t.to(dtype) for t in extra)]
        values = read_on_host(torch.cat([t.reshape(-1) for t in tensors]))
        rows, *extra_rows = _unflattened(values, [t.shape for t in tensors])
        self._read = True
        self._token_rows = ([[int(x) for x in row[:num_passes]] for row in rows] if floats
                            else [row[:num_passes] for row in rows])
        if self._tracks_on_device:
            self._host_lengths = [int(row[num_passes]) for row in rows]
            self.stopped_early_host = [row[num_passes + 1] != 0.0 for row in rows]
            column = num_passes + 2
        else:
            self._host_lengths = self.kept_lengths()
            self.stopped_early_host = [False] * num_reqs
            column = num_passes
        if self.token_probs:
            self._token_prob_rows = [row[column:column + num_passes] for row in rows]
            column += num_passes
        counts = None if valid_counts is None else [int(row[column]) for row in rows]
        return StepRead(counts, extra_rows)

    def kept_lengths(self) -> list[int]:
        """[num_reqs] each request's draft length, known on the host where
        every planned pass runs and no stop decides on the device: every pass
        the loop ran where the request keeps every pass, its plan elsewhere."""
        assert not self._tracks_on_device, "the lengths are on the device until read_back"
        num_passes = len(self.token_ids)
        keeps = self.keeps_every_pass or [False] * len(self.planned_lengths)
        return [num_passes if keep else k for keep, k in zip(keeps, self.planned_lengths)]

    def _ensure_read(self) -> None:
        if not self._read:
            self.read_back()

    def drafts(self) -> list[list[int]]:
        """Each request's draft, cut to its length (input batch order)."""
        self._ensure_read()
        return [row[:n] for row, n in zip(self._token_rows, self._host_lengths)]

    def loop_tokens(self) -> list[list[int]]:
        """Per request, every token the draft loop produced (a draft cut to
        0 included: its padded row proposes them)."""
        self._ensure_read()
        return self._token_rows

    def draft_probs(self) -> torch.Tensor | None:
        """[num_reqs, draft passes run, vocab] vLLM's draft probabilities
        (read by its rejection sampler), or None without them."""
        if not self.probs:
            return None
        return torch.stack(self.probs, dim=1).contiguous()

    def kept_drafts(self) -> list[KeptDraft]:
        """Per request: q_i (relaxed modes only) and H(q_i) of its drafted tokens.

        q_i is stored in bfloat16: vocab x 2 bytes per draft token (Qwen2.5's
        151,936 entries: 297 KiB per token, 5.8 MiB for a 20-token draft); kept
        only for AdaSD with relaxed verification, and only until that draft is
        verified. Gen-Only keeps the entropies alone.
        """
        self._ensure_read()
        # [num_reqs, draft passes run]
        entropies = torch.stack(self.entropies, dim=1)
        # [num_reqs, draft passes run, vocab] or None
        distributions = (torch.stack(self.distributions, dim=1).to(torch.bfloat16)
                         if self.distributions else None)
        return [KeptDraft(None if distributions is None else distributions[i, :n],
                          entropies[i, :n])
                for i, n in enumerate(self._host_lengths)]

    def traced_token_probs(self) -> list[list[float]]:
        """Per request: the draft's probability of each token of its draft."""
        self._ensure_read()
        return [row[:n] for row, n in zip(self._token_prob_rows, self._host_lengths)]


def judge_pass(token_rule, position: int, token_probs: Sequence[float],
               planned: Sequence[int], stopped: Sequence[bool],
               lengths: list[int]) -> list[bool]:
    """One pass of a per-token rule, on host lists ([num_reqs] each): the
    requests still drafting at ``position`` are judged; where the rule ends a
    draft, its length in ``lengths`` is set (at most its plan). Returns which
    drafts the rule ended."""
    active = [not s and k >= position for s, k in zip(stopped, planned)]
    ended = [False] * len(planned)
    for i, end in enumerate(token_rule(position, token_probs, active)):
        if end is not None and active[i]:
            lengths[i] = min(end, planned[i])
            ended[i] = True
    return ended


def plan_draft_step(policy: DraftLengthPolicy, states: list, planned: list[int],
                    device: torch.device, keep_token_probs: bool,
                    early_exit: bool = True,
                    keeps_every_pass: Sequence[bool] | None = None) -> DraftStep:
    """The step's ``DraftStep`` for a plan: the policy's per-token stop (a
    ``ThresholdStop``'s threshold per request, or a ``TokenRule``'s decision
    after each pass) and what a ``RelaxedVerifier``'s verification will
    read. The per-pass decisions end the loop, so every tensor-parallel rank
    takes rank 0's. Without early exit a step either keeps every pass
    (``keeps_every_pass``: no stop) or stops on the device (AdaSD)."""
    measure = policy.stop_measure if isinstance(policy, ThresholdStop) else None
    thresholds = None
    if measure is not None and keeps_every_pass is None:  # per request (AdaSD: T_G,
        # Algorithm 1 line 6)
        thresholds = async_tensor_h2d([policy.stop_threshold(s) for s in states],
                                      dtype=torch.float32, device=device)
    token_rule = None
    if isinstance(policy, TokenRule) and early_exit:
        def token_rule(position, token_probs, active):
            return same_decisions_on_every_rank(
                policy.draft_on(states, position, token_probs, active))
    verified_per_token = isinstance(policy, RelaxedVerifier)
    return DraftStep(planned, device, thresholds, stop_on=measure or STOP_ON_CONFIDENCE,
                     keep_entropies=verified_per_token,
                     keep_distributions=verified_per_token and policy.relaxes_verification,
                     token_rule=token_rule, keep_token_probs=keep_token_probs,
                     early_exit=early_exit, keeps_every_pass=keeps_every_pass)
