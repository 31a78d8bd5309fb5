"""The n-gram lookup ahead of the draft model (drafter ``"ngram+draft_model"``).

Composed into the draft-model drafter (``proposer``), it adds three things
to a step of the host path:

1. teach: a request whose last draft came from the lookup is taught to the
   policy as a free draft (a ``Verification`` with ``source=FREE``, in the
   step's observation), not as a draft of the model, and counted as the
   n-gram's (``vllm:gammatune_ngram_*``); the draft model's share of the
   verification goes on as before;
2. look up: vLLM's own n-gram match (its per-request function, with the
   plugin's ``prompt_lookup_min`` / ``_max``) over each request's tokens as
   they stand after this verification: the runner's host copy up to the
   accepted drafts, and the token the target just sampled (the draft-model
   path runs before vLLM's book-keeping writes it); a request whose sampled
   token is discarded (a prompt chunk) gets no offer;
3. choose and merge: the policy's free lengths (``free_drafts``); those
   requests get their lookup's tokens in place of the model's (which the
   plan gave a limit of 0), and, where vLLM's rejection sampler reads the
   draft's probabilities, a one-hot row per free token: the lookup proposes
   its token with certainty, as vLLM's n-gram path does without rows.

Unverified offers teach too: an offer the last step did not verify is
compared with the tokens the target emitted in its place, and teaches
``m + 1`` drafted and ``m`` accepted, ``m`` its matched prefix (all of it
where the emitted tokens end first), as a free verification. Without them
a lookup that starts below a draft model that is right almost every time
would never be chosen, so never learnt from (why the match is a fair
verification: ``docs/methods.md``, "Drafters").

The lookup runs one request at a time in vLLM's compiled matcher, not its
batched one (``docs/methods.md``). The draft model needs nothing of the
lookup: its next first pass runs over the tokens the target verified,
wherever they came from, and a step it skips leaves holes it catches up as
after any skipped step. On the CUDA hot path the front's one read of the
device a step is the verification and the sampled tokens, before the plan;
the drafts then reach vLLM on the device (``uniform_shape.pad_on_device``),
free rows in place of the model's (``docs/cuda.md``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from vllm.utils.torch_utils import async_tensor_h2d

from vllm_gammatune.drafter.draft_step import DraftStep
from vllm_gammatune.drafter.observations import accepted_draft_tokens
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.drafter.uniform_shape import UniformShape
from vllm_gammatune.policies import DraftSource, FreeDraftPlanner, Verification
from vllm_gammatune.telemetry import trace
from vllm_gammatune.telemetry.metrics import StepCounters


class NgramFront:
    """vLLM's n-gram lookup, consulted before the draft model each step."""

    def __init__(self, match, options, max_model_len: int, policy: FreeDraftPlanner,
                 records: RequestRecords):
        #: vLLM's per-request matcher:
        #: ``match(tokens, min_n, max_n, max_model_len, k) -> tokens``
        self._match = match
        self._min_n = options["prompt_lookup_min"]
        self._max_n = options["prompt_lookup_max"]
        self._max_model_len = max_model_len
        self._policy = policy
        self._records = records
        #: req_id -> free draft tokens handed over for the step being verified
        self._free: dict[str, int] = {}
        #: req_id -> the offer the last step left unverified
        self._unverified: dict[str, list[int]] = {}

    @classmethod
    def for_config(cls, vllm_config, options, policy, records: RequestRecords) -> NgramFront:
        """The front with vLLM's matcher at ``options``' bounds
        (``MethodSettings.drafter_options``), compiled before the first step
        (its first call compiles it, which would land in a timed step)."""
        # imported here: vLLM's lookup loads numba, which a later in-process
        # engine start on the CPU cannot survive (docs/methods.md#drafters),
        # and the draft-model drafter imports this module whatever its drafter
        from vllm.v1.spec_decode.ngram_proposer import (
            _find_longest_matched_ngram_and_propose_tokens as match,
        )
        max_model_len = vllm_config.model_config.max_model_len
        match(np.zeros(8, dtype=np.int32), 1, 2, max_model_len, 2)
        return cls(match, options, max_model_len, policy, records)

    def forget_step(self) -> None:
        """A step the front did not see (vLLM asked for no draft tokens):
        what it handed over and left unverified no longer lines up with the
        next step's tokens."""
        self._free, self._unverified = {}, {}

    # -- 1. teach ---------------------------------------------------------------
    def teach(self, req_ids: Sequence[str], num_draft_tokens: Sequence[int],
              valid_counts: Sequence[int], counters: StepCounters | None,
              step: int) -> tuple[list[int], list[Verification]]:
        """The free drafts' verifications of this step (drafts planned at
        ``step``), and ``num_draft_tokens`` ([num_reqs]) with those
        requests' set to 0: the draft model's share, for its own."""
        model_share = list(num_draft_tokens)
        free, self._free = self._free, {}
        verifications = []
        drafted_total = accepted_total = 0
        for i, req_id in enumerate(req_ids):
            drafted = free.get(req_id, 0)
            if not drafted:
                continue
            model_share[i] = 0
            drafted = min(drafted, num_draft_tokens[i])
            if drafted <= 0 or valid_counts[i] <= 0:
                continue
            accepted = accepted_draft_tokens(drafted, valid_counts[i])
            verifications.append(Verification(req_id, step, drafted, accepted,
                                              num_reqs=len(req_ids), source=DraftSource.FREE))
            if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
                trace.record(req_id, drafted, accepted, {"source": "ngram"})
            drafted_total += drafted
            accepted_total += accepted
        if counters is not None and drafted_total:
            counters.record_ngram_verification(drafted_total, accepted_total)
        return model_share, verifications

    # -- 2. look up ------------------------------------------------------------
    def offers(self, runner, req_ids: Sequence[str], num_speculative_tokens: int,
               accepted: Sequence[int], next_token_ids: Sequence[int],
               discarded: Sequence[bool],
               step: int) -> tuple[list[list[int]], list[Verification]]:
        """[num_reqs] the lookup's tokens for each request (at most
        ``num_speculative_tokens``; [] without a match), and what the last
        step's unverified offers (made at ``step``) would have earned where
        the target emitted its own tokens (module docstring).
        ``accepted``: [num_reqs] draft tokens accepted this step;
        ``next_token_ids``: [num_reqs] the token each request just sampled."""
        batch = runner.input_batch
        unverified, self._unverified = self._unverified, {}
        offers, scored = [], []
        for i, req_id in enumerate(req_ids):
            if discarded[i]:
                offers.append([])
                continue
            # the accepted drafts sit after the committed tokens already
            known = int(batch.num_tokens_no_spec[i]) + accepted[i]
            context = np.empty(known + 1, dtype=batch.token_ids_cpu.dtype)
            context[:known] = batch.token_ids_cpu[i, :known]
            context[known] = next_token_ids[i]
            if req_id in unverified:
                emitted = context[known - accepted[i]:].tolist()
                scored.append(_scored_offer(req_id, step, len(req_ids), unverified[req_id],
                                            emitted))
            offers.append(self._match(context, self._min_n, self._max_n,
                                      self._max_model_len, num_speculative_tokens).tolist())
        return offers, scored

    # -- 3. choose and merge -----------------------------------------------------
    def choose(self, req_ids: Sequence[str], offers: Sequence[list[int]], batch) -> list[int]:
        """[num_reqs] the free draft tokens each request verifies (0: the
        draft model's turn), remembered for ``teach``; the offers left
        unverified, for the next ``offers``."""
        states = [self._records.policy_states[r] for r in req_ids]
        lengths = self._policy.free_draft_lengths(states, [len(o) for o in offers], batch)
        self._free = {r: k for r, k in zip(req_ids, lengths) if k}
        self._unverified = {r: o for r, o, k in zip(req_ids, offers, lengths) if o and not k}
        return lengths

    def look_up(self, runner, req_ids: Sequence[str], num_speculative_tokens: int,
                accepted: Sequence[int] | None, next_token_ids: Sequence[int],
                step: int) -> tuple[list[list[int]], list[Verification]]:
        """``offers`` for the runner's step: ``accepted`` ([num_reqs] draft
        tokens each accepted this step; None: none), ``next_token_ids``
        ([num_reqs] the token each just sampled, read on the host with the
        verification: ``verification_inbox``), ``step``: the plan of the
        last offers."""
        num_reqs = len(req_ids)
        discarded = runner.discard_request_mask.np[:num_reqs].tolist()
        return self.offers(runner, req_ids, num_speculative_tokens,
                           accepted or [0] * num_reqs, next_token_ids, discarded, step)

    def choose_for_step(self, req_ids: Sequence[str], offers: Sequence[list[int]], batch,
                        num_speculative_tokens: int):
        """The free lengths the policy chooses, and the batch the draft
        model's plan then sees (a limit of 0 where a free draft is
        verified): ((offers, [num_reqs] free lengths), that batch)."""
        lengths = self.choose(req_ids, offers, batch)
        batch = dataclasses.replace(
            batch, draft_limits=tuple(0 if k else num_speculative_tokens for k in lengths),
            free_draft_tokens=tuple(lengths))
        return (offers, lengths), batch

    @staticmethod
    def merge(drafts: list[list[int]], offers: Sequence[list[int]],
              lengths: Sequence[int]) -> list[list[int]]:
        """The step's drafts: the free ones in place of the model's (empty)."""
        return [offer[:k] if k else draft for draft, offer, k in zip(drafts, offers, lengths)]

    @staticmethod
    def on_device(uniform: UniformShape, req_ids: Sequence[str], step: DraftStep, free,
                  k: int) -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        """The hot path's hand-over, the drafts never read by the plugin:
        ([num_reqs, k] the drafts on the device, vLLM's draft probabilities to
        match, [num_reqs] the tokens verification keeps of each row). Every
        row is the loop's tokens padded to ``k`` (``UniformShape.pad_on_device``)
        but a free draft's (``free``: offers and lengths), which is its
        lookup's tokens, proposed with certainty; a row keeps every pass but
        where the plan cut it to 0 (``DraftStep.kept_lengths``), a free row
        its free length."""
        offers, free_lengths = free
        lengths = [f or n for f, n in zip(free_lengths, step.kept_lengths())]
        replaced = {i: offers[i][:f] for i, f in enumerate(free_lengths) if f}
        drafts, probs = uniform.pad_on_device(req_ids, step.token_ids, lengths, replaced, k,
                                              step.draft_probs())
        return drafts, probs, lengths

    @staticmethod
    def probs_with_free_rows(draft_probs: torch.Tensor, drafts: Sequence[list[int]],
                             lengths: Sequence[int]) -> torch.Tensor:
        """vLLM's draft probabilities ([num_reqs, draft passes run, vocab])
        with a one-hot row per free draft token, widened to the longest
        draft."""
        num_reqs, passes, vocab = draft_probs.shape
        width = max([passes, *(k for k in lengths)])
        if width > passes:
            wider = draft_probs.new_zeros((num_reqs, width, vocab))
            wider[:, :passes] = draft_probs
            draft_probs = wider
        for i, k in enumerate(lengths):
            if k:
                draft_probs[i, :k] = 0
                draft_probs[i, :k].scatter_(-1, async_tensor_h2d(
                    drafts[i][:k], dtype=torch.long, device=draft_probs.device).unsqueeze(-1), 1.0)
        return draft_probs


def _scored_offer(req_id: str, step: int, num_reqs: int, offer: list[int],
                  emitted: list[int]) -> Verification:
    """What ``offer`` would have earned where the target emitted ``emitted``
    (module docstring): ``m + 1`` drafted and ``m`` accepted, or all of it
    where the offer or the emitted tokens end first."""
    matched = 0
    for drafted, token in zip(offer, emitted):
        if drafted != token:
            break
        matched += 1
    rejected = matched < min(len(offer), len(emitted))
    return Verification(req_id, step, matched + rejected, matched, num_reqs=num_reqs,
                        source=DraftSource.FREE)
