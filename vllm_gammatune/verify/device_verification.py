"""AdaSD's verification as tensor operations, for the CUDA hot path.

The host verification (``adasd_verifier``) walks each request's draft token
by token on the host. On the CUDA hot path nothing may be read on the host
before the step's draft passes are launched (``drafter.hot_path``), so the
same lines of Algorithm 1 (lines 8-19) run here over all the step's verified
tokens at once:

- p_i: softmax of the target's logits at the verified positions; d_i:
  d_JS(p_i, q_i) (``divergences.js_distance``, line 11);
- y_i: argmax p_i for a greedy request, else a sample of p_i with the
  request's generator (line 9), request by request in batch order, as the
  host verification draws them;
- accepted where ``x_i == y_i`` or ``d_i < T_V`` (strict, the policy's
  ``accepts_mismatch``; T_V per request from its policy state, sent from
  the host without waiting);
- per request, the accepted count is the length of its leading run of
  accepted tokens; vLLM's output row follows from it (``emitted_tokens``).

Everything a tensor here is built from on the host is host data the
verification already has (the draft counts, which requests have kept
drafts, T_V, which requests are greedy); nothing is read back. What the
policy learns from (lines 12-16 and 18-19) stays on the device as one
[num_reqs, NUM_FIXED_COLUMNS + max_spec_len] float64 tensor per step
(``verification_results``), which the drafter reads with the step's drafts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from vllm.utils.torch_utils import async_tensor_h2d
from vllm_gammatune.verify.divergences import js_distance

#: vLLM's rejection sampler marks the positions after the last emitted token so
PLACEHOLDER_TOKEN_ID = -1

#: columns of ``verification_results``, per request; the JS distances of its
#: draft tokens (position by position, 0 where there is none) follow them
ACCEPTED, REJECTED, REJECTED_ENTROPY, REJECTED_DISTANCE, RELAXED = range(5)
NUM_FIXED_COLUMNS = 5


@dataclass(frozen=True)
class VerifiedTokens:
    """Where the tokens of the verified requests are, in three layouts: the
    step's flat tokens ([num_tokens], vLLM's), the verified tokens alone
    ([num_verified_tokens], request by request), and one row per request
    ([num_reqs, max_spec_len])."""

    #: [num_verified_tokens] each verified token's index among the step's tokens
    token_index: torch.Tensor
    #: [num_reqs, max_spec_len] each position's index among the verified
    #: tokens; num_verified_tokens (one past the last) where there is none
    padded_index: torch.Tensor
    #: [num_reqs] how many tokens of each request are verified (0: none)
    num_verified: torch.Tensor
    #: per verified request: (its row, its first verified token, its number
    #: of tokens)
    segments: list[tuple[int, int, int]]

    def padded(self, values: torch.Tensor, fill) -> torch.Tensor:
        """[num_verified_tokens] -> [num_reqs, max_spec_len], ``fill`` where
        a request has no verified token."""
        return torch.cat([values, values.new_full((1,), fill)])[self.padded_index]


def verified_tokens(num_draft_tokens: Sequence[int], verified_rows: Sequence[int],
                    max_spec_len: int, device: torch.device) -> VerifiedTokens:
    """The layout of the tokens of ``verified_rows`` (ascending request rows)
    among a step's ``num_draft_tokens``; built on the host, sent without waiting."""
    starts = [0]
    for n in num_draft_tokens:
        starts.append(starts[-1] + n)
    verified = set(verified_rows)
    token_index, segments, lengths = [], [], []
    for r, n in enumerate(num_draft_tokens):
        lengths.append(n if r in verified else 0)
        if r in verified:
            segments.append((r, len(token_index), n))
            token_index.extend(range(starts[r], starts[r] + n))
    padding = len(token_index)
    firsts = {r: first for r, first, _ in segments}
    padded_index = [[firsts[r] + i if i < n else padding for i in range(max_spec_len)]
                    for r, n in enumerate(lengths)]
    return VerifiedTokens(
        token_index=async_tensor_h2d(token_index, dtype=torch.int64, device=device),
        padded_index=async_tensor_h2d(padded_index, dtype=torch.int64, device=device).view(
            len(num_draft_tokens), max_spec_len),
        num_verified=async_tensor_h2d(lengths, dtype=torch.int64, device=device),
        segments=segments)


def target_tokens(p: torch.Tensor, tokens: VerifiedTokens, greedy: Sequence[bool],
                  generators: Mapping[int, torch.Generator]) -> torch.Tensor:
    """y_i (line 9): [num_verified_tokens] argmax p_i for a greedy request,
    else a sample of p_i with the request's generator (the global one
    without), request by request in batch order.

    Args:
        p: [num_verified_tokens, vocab] the target's distributions.
        greedy: per request row (host data), whether it samples greedily.
        generators: request row -> its seeded generator (vLLM's
            ``SamplingMetadata.generators``).
    """
    targets = p.argmax(dim=-1)
    for r, first, n in tokens.segments:
        if not greedy[r]:
            rows = slice(first, first + n)
            # argmax p / E with E ~ Exp(1): the draw torch.multinomial makes
            # for one sample (same generator use, same token), without its
            # check of the input, which reads on the host
            race = torch.empty_like(p[rows]).exponential_(1, generator=generators.get(r))
            targets[rows] = (p[rows] / race).argmax(dim=-1)
    return targets


def relaxed_acceptance(tokens: VerifiedTokens, draft_token_ids: torch.Tensor,
                       target_logits: torch.Tensor, q: torch.Tensor,
                       verification_thresholds: Sequence[float], greedy: Sequence[bool],
                       generators: Mapping[int, torch.Generator]):
    """Lines 9-11 over the verified tokens: (x, y, d, accepted), each
    [num_verified_tokens].

    Args:
        draft_token_ids: [num_tokens] the step's draft tokens.
        target_logits: [num_tokens, vocab] what vLLM samples the target from.
        q: [num_verified_tokens, vocab] the draft's distributions.
        verification_thresholds: T_V per verified request.
        greedy, generators: as ``target_tokens`` takes them.
    """
    device = target_logits.device
    # [num_verified_tokens, vocab]
    p = torch.softmax(target_logits.index_select(0, tokens.token_index).float(), dim=-1)
    distances = js_distance(p, q)
    targets = target_tokens(p, tokens, greedy, generators)
    drafted = draft_token_ids.index_select(0, tokens.token_index)
    # T_V of each token's request, compared in float64 as the host compares
    # its Python floats
    thresholds = async_tensor_h2d(
        [t for t, (_, _, n) in zip(verification_thresholds, tokens.segments)
         for _ in range(n)],
        dtype=torch.float64, device=device)
    accepted = (drafted == targets) | (distances.double() < thresholds)
    return drafted, targets, distances, accepted


def accepted_counts(tokens: VerifiedTokens, accepted: torch.Tensor) -> torch.Tensor:
    """[num_reqs] the length of each request's leading run of accepted
    tokens (lines 10-15), 0 for a request with no verified token.

    Args:
        accepted: [num_verified_tokens] bool.
    """
    padded = tokens.padded(accepted, False)  # [num_reqs, max_spec_len]
    return padded.to(torch.int64).cumprod(dim=1).sum(dim=1)


def emitted_tokens(tokens: VerifiedTokens, num_accepted: torch.Tensor,
                   drafted: torch.Tensor, targets: torch.Tensor,
                   bonus_token_ids: torch.Tensor) -> torch.Tensor:
    """[num_reqs, max_spec_len + 1] vLLM's output: the accepted draft tokens,
    then y_i at the first rejection (line 17) or the bonus token where every
    token was accepted (a request with no verified token: the bonus token
    alone); -1 after the last emitted token.

    Args:
        num_accepted: [num_reqs]; drafted, targets: [num_verified_tokens];
        bonus_token_ids: [num_reqs, 1].
    """
    num_reqs, max_spec_len = tokens.padded_index.shape
    device = drafted.device
    # [num_reqs, max_spec_len + 1]
    extra_column = torch.full((num_reqs, 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64,
                              device=device)
    drafted = torch.cat([tokens.padded(drafted.to(torch.int64), PLACEHOLDER_TOKEN_ID),
                         extra_column], dim=1)
    targets = torch.cat([tokens.padded(targets.to(torch.int64), PLACEHOLDER_TOKEN_ID),
                         extra_column], dim=1)
    position = torch.arange(max_spec_len + 1, device=device)
    accepted = num_accepted.unsqueeze(1)
    num_verified = tokens.num_verified.unsqueeze(1)
    rejected = accepted < num_verified
    output = torch.where(position < accepted, drafted, PLACEHOLDER_TOKEN_ID)
    output = torch.where((position == accepted) & rejected, targets, output)
    output = torch.where((position == num_verified) & ~rejected,
                         bonus_token_ids.to(torch.int64), output)
    return output.to(torch.int32)


def verification_results(tokens: VerifiedTokens, num_accepted: torch.Tensor,
                         entropies: torch.Tensor, distances: torch.Tensor,
                         num_relaxed: torch.Tensor) -> torch.Tensor:
    """[num_reqs, NUM_FIXED_COLUMNS + max_spec_len] float64, what the policy
    learns from (lines 12-16): per request the accepted count, whether a
    token was rejected, that token's entropy and distance (0 without one),
    how many accepted tokens differ from the target's, then the distance of
    each draft token (the first ``accepted`` are the accepted ones).

    Args:
        num_accepted, num_relaxed: [num_reqs].
        entropies, distances: [num_verified_tokens] H(q_i) and d_JS.
    """
    rejected = num_accepted < tokens.num_verified
    padded_entropies = tokens.padded(entropies.double(), 0.0)
    padded_distances = tokens.padded(distances.double(), 0.0)
    at_rejection = num_accepted.clamp(0, padded_entropies.shape[1] - 1).unsqueeze(1)
    no_value = torch.zeros_like(rejected, dtype=torch.float64)
    columns = [
        num_accepted.double(),
        rejected.double(),
        torch.where(rejected, padded_entropies.gather(1, at_rejection).squeeze(1), no_value),
        torch.where(rejected, padded_distances.gather(1, at_rejection).squeeze(1), no_value),
        num_relaxed.double(),
    ]
    return torch.cat([torch.stack(columns, dim=1), padded_distances], dim=1)


def relaxed_counts(tokens: VerifiedTokens, num_accepted: torch.Tensor,
                   drafted: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[num_reqs] accepted draft tokens that differ from the target's (the
    relaxed acceptances)."""
    max_spec_len = tokens.padded_index.shape[1]
    position = torch.arange(max_spec_len, device=drafted.device)
    differs = tokens.padded(drafted.to(torch.int64) != targets.to(torch.int64), False)
    return (differs & (position < num_accepted.unsqueeze(1))).sum(dim=1)
