"""Steps in the shape vLLM's CUDA graphs replay: every request verifies K drafts.

On CUDA, vLLM's V1 runner replays a FULL CUDA graph for a decode step only
when every request's query is exactly ``1 + num_speculative_tokens``
(``CudagraphDispatcher.uniform_decode_query_len``); any other decode step
runs PIECEWISE, its attention launched layer by layer from the host. A
per-request draft length makes every query a different length. So on the
CUDA hot path each request's draft is padded to the step's K (``pad``): its
draft is every token the step's draft loop produced for it (as many as the
longest plan: the padded step verifies them all, so a request planned
shorter keeps what the passes produced past its plan, and no per-token stop
applies), then its last token repeated, each padded position proposed with
certainty (a one-hot row where vLLM's rejection sampler reads draft
probabilities). After vLLM's rejection sampling, each request's output is
cut after its drafted tokens (``keep_verified``): no filler is kept, so the
draft's KV cache holds every accepted position and the policy observes
drafts the draft model made.

Lossless: the target's logits at a position depend on the tokens before it
alone, which padding leaves as they were. Greedy, the token kept after a
request's draft is the target's argmax there, the bonus token of the
unpadded step. Sampled, a padded token proposed with certainty is accepted
with the target's probability of it and otherwise replaced by a sample of
the target's distribution without it, so the kept token is distributed as
the target's, as the bonus token is.

vLLM fixes ``uniform_decode_query_len`` at ``1 + num_speculative_tokens``
when the engine starts, so a step where no request drafts replays a FULL
graph only padded the same way, with K fillers per request and a drafted
length of 0 (the policy's choice, where that verification costs next to
nothing: ``CostObserver.pads_skipped_step``, ``docs/cuda.md``, "A step where
no request drafts"). AdaSD verifies its own drafts token by token and keeps
its own lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vllm.utils.torch_utils import async_tensor_h2d
from vllm_gammatune.verify.device_verification import PLACEHOLDER_TOKEN_ID


class UniformShape:
    """The drafted lengths of the step being verified, by ``req_id``."""

    def __init__(self):
        #: the requests of the padded drafts this drafter handed over last,
        #: in that step's order, and the draft tokens the loop produced for
        #: each: what their verification keeps
        self._req_ids: list[str] = []
        self._lengths: list[int] = []

    def pad(self, req_ids: Sequence[str], drafts: list[list[int]],
            token_rows: list[list[int]], num_speculative_tokens: int,
            draft_probs: torch.Tensor | None) -> tuple[list[list[int]], torch.Tensor | None]:
        """Each request's padded row of ``num_speculative_tokens``: every token
        the draft loop produced for it (``token_rows``, [num_reqs]; its
        ``drafts`` entry is what verification keeps, all of them or none),
        then fillers; and vLLM's draft probabilities ([num_reqs, draft passes
        run, vocab]) widened to match with a one-hot row per filler. A row's
        tokens are the ones its probabilities were sampled with, kept or not,
        so vLLM's rejection sampler sees proposals drawn from them."""
        k = num_speculative_tokens
        self._req_ids = list(req_ids)
        # a draft is at most the loop's passes; verification keeps at most
        # what vLLM scheduled (``verified_lengths``)
        self._lengths = list(map(len, drafts))
        padded = [_filled((row or draft)[:k], k) for draft, row in zip(drafts, token_rows)]
        if draft_probs is None:
            return padded, None
        passes = draft_probs.shape[1]
        # [num_reqs, k - passes] the filler tokens
        fillers = (None if passes >= k else
                   async_tensor_h2d([row[passes:] for row in padded], dtype=torch.long,
                                    device=draft_probs.device))
        return padded, _widened(draft_probs, fillers, k)

    def pad_on_device(self, req_ids: Sequence[str], token_ids: Sequence[torch.Tensor],
                      lengths: Sequence[int], replaced: dict[int, list[int]],
                      num_speculative_tokens: int, draft_probs: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``pad`` without reading the drafts: ``token_ids`` (one [num_reqs]
        tensor per draft pass) padded to ``[num_reqs, num_speculative_tokens]``
        on the device, where vLLM copies them to the host itself as it does
        its own draft model's. ``lengths``: [num_reqs] what verification
        keeps of each row; ``replaced``: row -> tokens (the n-gram front's
        free drafts), padded alike and proposed with certainty in place of
        the row's draft, its probabilities one-hot."""
        k = num_speculative_tokens
        num_reqs = len(req_ids)
        self._req_ids, self._lengths = list(req_ids), list(lengths)
        # [num_reqs, passes]
        rows = torch.stack(list(token_ids), dim=1)[:num_reqs]
        passes = rows.shape[1]
        # [num_reqs, k]: every pass's token, then the last one repeated
        padded = (rows[:, :k] if passes >= k else
                  torch.cat((rows, rows[:, -1:].expand(-1, k - passes)), dim=1))
        probs = None
        if draft_probs is not None:
            probs = _widened(draft_probs[:num_reqs], None if passes >= k else padded[:, passes:], k)
        if replaced:
            device = padded.device
            # [num_replaced]
            index = async_tensor_h2d(list(replaced), dtype=torch.long, device=device)
            # [num_replaced, k]
            tokens = async_tensor_h2d([_filled(t[:k], k) for t in replaced.values()],
                                      dtype=padded.dtype, device=device)
            padded = padded.index_copy(0, index, tokens)
            if probs is not None:
                one_hot = probs.new_zeros((len(replaced), k, probs.shape[-1]))
                one_hot.scatter_(-1, tokens.long().unsqueeze(-1), 1.0)
                probs = probs.index_copy(0, index, one_hot)
        return padded.contiguous(), probs

    def clear(self) -> None:
        """The drafts handed over were not padded (a skipped step)."""
        self._req_ids, self._lengths = [], []

    def verified_lengths(self, req_ids: Sequence[str],
                         num_draft_tokens: Sequence[int]) -> list[int] | None:
        """[num_reqs] of the step being verified (input batch order): the
        draft tokens the loop produced for each request, at most those vLLM
        scheduled (``num_draft_tokens``); None where nothing was padded."""
        if not self._req_ids:
            return None
        if self._req_ids == req_ids:  # vLLM kept the batch's order: no lookup
            return list(map(min, self._lengths, num_draft_tokens))
        by_req_id = dict(zip(self._req_ids, self._lengths))
        return [min(by_req_id.get(r, n), n) for r, n in zip(req_ids, num_draft_tokens)]


def _filled(row: list[int], k: int) -> list[int]:
    """``row`` (at most ``k`` tokens) padded to ``k`` with its last token
    (0 for an empty row)."""
    return row + [row[-1] if row else 0] * (k - len(row))


def _widened(draft_probs: torch.Tensor, fillers: torch.Tensor | None, k: int) -> torch.Tensor:
    """vLLM's draft probabilities ([num_reqs, draft passes run, vocab]) as
    ``[num_reqs, k, vocab]``: a one-hot row for each filler token
    (``fillers``: [num_reqs, k - passes] on the device; None where the
    passes fill ``k``)."""
    num_reqs, passes, vocab = draft_probs.shape
    if passes >= k:
        return draft_probs[:, :k].contiguous()
    wider = draft_probs.new_zeros((num_reqs, k, vocab))
    wider[:, :passes] = draft_probs
    wider[:, passes:].scatter_(-1, fillers.long().unsqueeze(-1), 1.0)
    return wider


def keep_verified(output: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """vLLM's rejection-sampling ``output`` ([num_reqs, max_spec_len + 1],
    emitted tokens then ``PLACEHOLDER_TOKEN_ID``) cut after each request's
    drafted tokens (``lengths``: [num_reqs], on the device): at most that
    many accepted drafts, then the token emitted at the next position."""
    positions = torch.arange(output.shape[1], device=output.device)
    return output.masked_fill(positions.unsqueeze(0) > lengths.unsqueeze(1),
                              PLACEHOLDER_TOKEN_ID)
