"""The n-gram lookup ahead of the draft model (drafter ``"ngram+draft_model"``).

Composed into the draft-model drafter (``proposer``), it adds three things
to a step of the host path:

1. teach: a request whose last draft came from the lookup is taught to the
   policy as a free draft (``DraftLengthPolicy.observe_free_draft``), not as
   a draft of the model, and counted as the n-gram's
   (``vllm:gammatune_ngram_*``); the draft model's share of the
   verification goes on as before;
2. look up: vLLM's own n-gram lookup (``NgramProposer``, with the plugin's
   ``prompt_lookup_min`` / ``_max``) over each request's tokens as they
   stand after this verification: the runner's host copy up to the
   accepted drafts, and the token the target just sampled (the draft-model
   path runs before vLLM's book-keeping writes it); a request whose sampled
   token is discarded (a prompt chunk) gets no offer;
3. choose and merge: the policy's free lengths (``free_drafts``); those
   requests get their lookup's tokens in place of the model's (which the
   plan gave a limit of 0), and, where vLLM's rejection sampler reads the
   draft's probabilities, a one-hot row per free token: the lookup proposes
   its token with certainty, as vLLM's n-gram path does without rows.

The draft model needs nothing of the lookup: its next first pass runs over
the tokens the target verified, wherever they came from, and a step the
draft model skips leaves holes it catches up as after any skipped step.

One read of the device a step (the sampled tokens, with the verification
counts the host path reads anyway): the combined drafter runs the host
path on every device (``hot_path``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.telemetry import trace
from vllm_gammatune.telemetry.metrics import StepCounters


def _lookup_config(vllm_config, options):
    """``vllm_config`` with a speculative config that carries the n-gram
    bounds (vLLM's ``draft_model`` zeroes them): what ``NgramProposer``
    reads."""
    config = copy.copy(vllm_config)
    speculative = copy.copy(vllm_config.speculative_config)
    speculative.prompt_lookup_min = options["prompt_lookup_min"]
    speculative.prompt_lookup_max = options["prompt_lookup_max"]
    config.speculative_config = speculative
    return config


class NgramFront:
    """vLLM's n-gram lookup, consulted before the draft model each step."""

    def __init__(self, lookup, policy, records: RequestRecords):
        #: vLLM's ``NgramProposer`` (its ``propose``)
        self._lookup = lookup
        self._policy = policy
        self._records = records
        #: req_id -> free draft tokens handed over for the step being verified
        self._free: dict[str, int] = {}

    @classmethod
    def for_config(cls, vllm_config, options, policy, records: RequestRecords) -> NgramFront:
        """The front with vLLM's lookup at ``options``' bounds
        (``MethodSettings.drafter_options``)."""
        # imported here: vLLM's lookup loads numba, which a later in-process
        # engine start on the CPU cannot survive (docs/methods.md#drafters),
        # and the draft-model drafter imports this module whatever its drafter
        from vllm.v1.spec_decode.ngram_proposer import NgramProposer
        return cls(NgramProposer(_lookup_config(vllm_config, options)), policy, records)

    # -- 1. teach ---------------------------------------------------------------
    def teach(self, req_ids: Sequence[str], num_draft_tokens: Sequence[int],
              valid_counts: Sequence[int], counters: StepCounters | None) -> list[int]:
        """Teach the policy the free drafts of this verification; return
        ``num_draft_tokens`` ([num_reqs]) with those requests' set to 0: the
        draft model's share, for its own observation."""
        model_share = list(num_draft_tokens)
        free, self._free = self._free, {}
        drafted_total = accepted_total = 0
        for i, req_id in enumerate(req_ids):
            drafted = free.get(req_id, 0)
            if not drafted:
                continue
            model_share[i] = 0
            drafted = min(drafted, num_draft_tokens[i])
            if drafted <= 0 or valid_counts[i] <= 0:
                continue
            accepted = min(drafted, valid_counts[i] - 1)
            state = self._records.policy_state(req_id)
            self._policy.observe_free_draft(state, drafted, accepted)
            if trace.writer() is not None:  # VLLM_GAMMATUNE_TRACE only
                trace.record(req_id, drafted, accepted, {"source": "ngram"})
            drafted_total += drafted
            accepted_total += accepted
        if counters is not None and drafted_total:
            counters.record_ngram_verification(drafted_total, accepted_total)
        return model_share

    # -- 2. look up ------------------------------------------------------------
    def offers(self, runner, num_speculative_tokens: int, accepted: Sequence[int],
               next_token_ids: Sequence[int], discarded: Sequence[bool]) -> list[list[int]]:
        """[num_reqs] the lookup's tokens for each request (at most
        ``num_speculative_tokens``; [] without a match). ``accepted``:
        [num_reqs] draft tokens accepted this step; ``next_token_ids``:
        [num_reqs] the token each request just sampled."""
        num_reqs = len(next_token_ids)
        batch = runner.input_batch
        # [num_reqs] tokens before this step's verification
        num_tokens = batch.num_tokens_no_spec[:num_reqs].astype(np.int64)
        lengths = num_tokens + np.asarray(accepted, dtype=np.int64) + 1
        width = int(lengths.max(initial=1))
        # [num_reqs, width] each request's tokens after this verification
        tokens = np.zeros((num_reqs, width), dtype=batch.token_ids_cpu.dtype)
        for i in range(num_reqs):
            known = lengths[i] - 1  # the accepted drafts sit after num_tokens already
            tokens[i, :known] = batch.token_ids_cpu[i, :known]
            tokens[i, known] = next_token_ids[i]
        # vLLM's lookup skips a request whose list of sampled tokens is empty
        sampled = [[] if skip else [1] for skip in discarded]
        return self._lookup.propose(num_speculative_tokens, sampled,
                                    lengths.astype(np.int32), tokens)

    # -- 3. choose and merge -----------------------------------------------------
    def choose(self, req_ids: Sequence[str], offers: Sequence[list[int]], batch) -> list[int]:
        """[num_reqs] the free draft tokens each request verifies (0: the
        draft model's turn), remembered for ``teach``."""
        states = [self._records.policy_state(r) for r in req_ids]
        lengths = self._policy.free_draft_lengths(states, [len(o) for o in offers], batch)
        self._free = {r: k for r, k in zip(req_ids, lengths) if k}
        return lengths

    @staticmethod
    def merge(drafts: list[list[int]], offers: Sequence[list[int]],
              lengths: Sequence[int]) -> list[list[int]]:
        """The step's drafts: the free ones in place of the model's (empty)."""
        return [offer[:k] if k else draft for draft, offer, k in zip(drafts, offers, lengths)]

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
                draft_probs[i, torch.arange(k), torch.tensor(drafts[i][:k])] = 1
        return draft_probs
