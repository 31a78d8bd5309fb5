"""The drafter's side of skipping the draft model and catching it up.

For a ``CostObserver`` policy (``gammatune_cost``), a step where every
request plans 0 tokens runs no draft pass at all; ``holes.DraftKVHoles``
records the positions the draft missed, and before a request drafts again
``catch_up_passes.run_catch_up`` runs the draft over them. ``DraftCatchUp`` does
this per step for the proposer:

- ``batch_view``: each request's first and last position this step and its
  KV block table row; a request's first step checks the blocks it inherits
  from the prefix cache; the result is what the plan weighs (per request,
  the positions it must catch up before drafting, and the tokens it may
  still generate, over which a catch-up is spread);
- ``on_skipped``: the step ran no draft pass: its positions become holes;
- ``catch_up``: the step drafts: requests that draft and have holes catch
  up first; the holes of every request the pass covers close;
- both record which KV blocks now hold valid draft KV, for requests that
  will inherit them from the prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_gammatune.draft_kv.catch_up_passes import run_catch_up
from vllm_gammatune.draft_kv.holes import DraftKVHoles
from vllm_gammatune.policies import BatchView
from vllm_gammatune.policies.cost_aware import CATCH_UP_HORIZON_TOKENS


@dataclass(frozen=True)
class StepPositions:
    """Where each request of the step stands (rows in input batch order)."""

    #: per request, the position of its first target token this step
    starts: list[int]
    #: per request, the position after its last
    ends: list[int]
    #: the longest query of the step (a prompt chunk is longer than any
    #: decode query)
    longest_query: int


def step_positions(runner, num_reqs: int) -> StepPositions:
    """The step's positions, from the runner's host copies of what it sent
    to the device (synchronous scheduling keeps them exact): the tokens each
    request had computed before the step, and the step's query lengths."""
    # [num_reqs + 1], [num_reqs]
    query_start_loc = runner.query_start_loc.np[:num_reqs + 1]
    starts = runner.input_batch.num_computed_tokens_cpu[:num_reqs]
    query_lens = query_start_loc[1:] - query_start_loc[:-1]
    longest = int(query_lens.max()) if num_reqs else 0
    return StepPositions(starts.tolist(), (starts + query_lens).tolist(), longest)


class DraftCatchUp:
    """Per step: the holes the draft has, and closing them before a draft."""

    def __init__(self, holes: DraftKVHoles):
        self.holes = holes
        self._req_ids: list[str] = []
        self._positions: StepPositions | None = None
        # this step's KV block table rows and the KV block size
        self._block_rows = []
        self._kv_block_size = 1

    def batch_view(self, runner, req_ids: list[str], num_speculative_tokens: int,
                   num_scheduled_tokens: int) -> BatchView:
        """What the policy may know of the step (``BatchView``): whether a
        prompt chunk is in it, and per request the positions to catch up
        before it drafts and the tokens it may still generate (() when
        nothing is to be caught up)."""
        positions = step_positions(runner, len(req_ids))
        self._req_ids, self._positions = req_ids, positions
        block_table = runner.input_batch.block_table[0]
        # [num_reqs, max_num_blocks_per_req] the requests' KV blocks (CPU)
        self._block_rows = block_table.block_table.np[:len(req_ids)]
        self._kv_block_size = block_table.block_size
        self.holes.inherit_step(req_ids, positions.starts, self._block_rows,
                                self._kv_block_size)
        catch_up_tokens, remaining = (0,) * len(req_ids), ()
        if not self.holes.clear:  # the common step: one check, not one a request
            catch_up_tokens = tuple(self.holes.catch_up_tokens(r, s)
                                    for r, s in zip(req_ids, positions.starts))
            remaining = (remaining_tokens(runner, req_ids) if any(catch_up_tokens) else ())
        return BatchView(len(req_ids), num_scheduled_tokens=num_scheduled_tokens,
                         catch_up_tokens=catch_up_tokens,
                         has_prefill=positions.longest_query > 1 + num_speculative_tokens,
                         remaining_tokens=remaining)

    def on_skipped(self) -> None:
        """No request drafted: this step's positions are not in the draft KV."""
        self.holes.on_skipped(self._req_ids, self._positions.starts)
        self._record_written_blocks(self._positions.starts)

    def catch_up(self, proposer, common_attn_metadata, token_ids_cpu, planned: list[int],
                 catch_up_tokens: tuple[int, ...], timer=None) -> int:
        """Run the draft over the positions missed by requests that draft now
        (timed by ``timer``, a ``StepTimer``, when given); return how many."""
        req_ids, starts = self._req_ids, self._positions.starts
        segments = [
            (row, starts[row] - missed, starts[row])
            for row, missed in enumerate(catch_up_tokens)
            if missed > 0 and planned[row] > 0
        ]
        caught_up = {req_ids[row] for row, _, _ in segments}
        num_tokens = 0
        if segments:
            def run() -> int:
                return run_catch_up(proposer, common_attn_metadata, segments, token_ids_cpu,
                                    self._block_rows)

            # Catch-up passes are prefill-like (many tokens per request): the
            # policy fits their cost apart from decode-regime draft passes.
            num_tokens = run() if timer is None else timer.time_catch_up(run)
        self.holes.on_draft_pass(req_ids, starts, caught_up)
        # the blocks written this step: from the caught-up start where one ran
        written_from = list(starts)
        for row, start, _ in segments:
            written_from[row] = start
        self._record_written_blocks(written_from)
        return num_tokens

    def _record_written_blocks(self, written_from: list[int]) -> None:
        """Mark the KV blocks this step wrote as holding draft KV or not, for
        requests that inherit them from the prefix cache (``DraftKVHoles``)."""
        if self.holes.clear:
            return
        for req_id, start, end, blocks in zip(self._req_ids, written_from,
                                              self._positions.ends, self._block_rows):
            self.holes.record_blocks(req_id, start, end, blocks, self._kv_block_size)


def remaining_tokens(runner, req_ids: list[str]) -> tuple[int, ...]:
    """Per request, ``max_tokens`` minus the tokens it has generated (the
    horizon a catch-up is spread over: the cost-aware policy's ``catch_up_share``;
    ``CATCH_UP_HORIZON_TOKENS`` for a request without ``max_tokens``)."""
    remaining = []
    for req_id in req_ids:
        state = runner.requests.get(req_id)
        max_tokens = getattr(getattr(state, "sampling_params", None), "max_tokens", None)
        remaining.append(CATCH_UP_HORIZON_TOKENS if max_tokens is None
                         else max(0, max_tokens - len(state.output_token_ids)))
    return tuple(remaining)
