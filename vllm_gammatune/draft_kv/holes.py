"""Where the draft's KV cache has holes: pure book-keeping, per request and per KV block.

vLLM's draft-model proposer runs a draft forward pass every step, even at
K = 0 (``num_speculative_tokens_per_batch_size``), because the pass over the
step's target tokens is what writes the draft's KV cache; skipping it leaves
holes. When every request of a step plans 0 draft tokens, the plugin skips the
whole proposal, so the step costs what a step without speculation costs, and
``DraftKVHoles`` records, per request, the first position the draft has not
processed. Before such a request drafts again, the draft runs over the missed
positions ``[hole, first position of this step)`` (``catch_up_passes``); the
normal first pass then covers the step's own tokens, and the draft KV is
exact again.

A request that stays at 0 while others draft keeps its hole (the draft pass
writes its new positions too, but on top of the hole, so they stay invalid
until it catches up). Rejected and recomputed positions need nothing: a step
that starts at or before the hole (preemption and recompute) rewrites it.

Prefix caching: a request's first step may start after positions whose KV
blocks it inherits from the prefix cache. Blocks written while the draft
skipped (or on top of a request's hole) hold no valid draft KV, so the
book-keeping also tracks, per physical KV block, whether some position in it
lacks draft KV (``record_blocks``); a request that inherits such a block gets
a hole at that block's first position (``inherit``), and its catch-up rebuilds
the draft KV there (which makes the block valid for later requests too).
Without it, a later request sharing a prompt prefix (a system prompt, or the
same prompt again) drafts against stale draft KV: its output is unaffected
(the target verifies every token), but its acceptance falls.

Why the holes live here and not in the drafter's per-request records
(``drafter.request_records``): the per-block staleness outlives every request
(a block a finished request wrote may be inherited from the prefix cache by a
later one), and a request's hole and the blocks' staleness change together
(``record_blocks`` reads the hole), so they stay one unit, tested apart from
vLLM. The records' sweep drops the per-request part with the request
(``forget_missing``); the per-block part is bounded by the KV cache's blocks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


class DraftKVHoles:
    """Per ``req_id``: first position whose draft KV is missing; per physical
    KV block: whether a position in it lacks draft KV (pure book-keeping)."""

    def __init__(self):
        self._hole_start: dict[str, int] = {}
        #: physical KV blocks holding a position without valid draft KV
        self._stale_blocks: set[int] = set()
        #: requests whose inherited blocks were checked (``inherit``)
        self._seen: set[str] = set()

    def __len__(self) -> int:
        return len(self._hole_start)

    @property
    def num_requests(self) -> int:
        """Requests with an entry (a hole, or their inherited blocks checked)."""
        return len(self._seen | set(self._hole_start))

    @property
    def clear(self) -> bool:
        """No request has a hole and no block is stale: a step's writes
        change nothing (``record_blocks``), nothing is to be caught up."""
        return not self._hole_start and not self._stale_blocks

    def hole_start(self, req_id: str) -> int | None:
        return self._hole_start.get(req_id)

    def forget_missing(self, live_req_ids) -> None:
        for req_id in [r for r in self._hole_start if r not in live_req_ids]:
            del self._hole_start[req_id]
        self._seen.intersection_update(live_req_ids)

    def is_stale(self, block_id: int) -> bool:
        return block_id in self._stale_blocks

    def inherit(self, req_id: str, step_start: int, block_ids, block_size: int) -> None:
        """A request's first step starts at ``step_start``: the positions
        before it come from the prefix cache; a hole opens at the first of
        their blocks (``block_ids``: the request's block table row) whose
        draft KV is stale. Later steps of the request change nothing."""
        if req_id in self._seen:
            return
        self._seen.add(req_id)
        if step_start <= 0 or not self._stale_blocks:
            return
        num_blocks = -(-step_start // block_size)
        for index, block in enumerate(block_ids[:num_blocks]):
            if int(block) in self._stale_blocks:
                hole = self._hole_start.get(req_id)
                start = index * block_size
                self._hole_start[req_id] = start if hole is None else min(hole, start)
                return

    def inherit_step(self, req_ids: Sequence[str], step_starts: Sequence[int], block_rows,
                     block_size: int) -> None:
        """``inherit`` for each request of a step (``block_rows``: their block
        table rows); with no stale block, nothing to inherit: each is seen."""
        if not self._stale_blocks:
            self._seen.update(req_ids)
            return
        for req_id, start, blocks in zip(req_ids, step_starts, block_rows):
            self.inherit(req_id, start, blocks, block_size)

    def record_blocks(self, req_id: str, start: int, end: int, block_ids,
                      block_size: int) -> None:
        """After a step (and ``on_skipped`` / ``on_draft_pass``): the blocks
        holding positions ``[start, end)`` of the request, written this step
        (by the target, and by the draft or its catch-up), are stale while the
        request has a hole, and valid otherwise (every earlier position of a
        request without a hole has draft KV)."""
        blocks = (int(b) for b in block_ids[start // block_size: -(-end // block_size)])
        if req_id in self._hole_start:
            self._stale_blocks.update(blocks)
        else:
            self._stale_blocks.difference_update(blocks)

    def catch_up_tokens(self, req_id: str, step_start: int) -> int:
        """Positions the draft must process before this request drafts now."""
        hole = self._hole_start.get(req_id)
        return 0 if hole is None else max(0, step_start - hole)

    def on_skipped(self, req_ids: Iterable[str], step_starts: Iterable[int]) -> None:
        """The draft skipped this step: its target tokens are not in the draft KV."""
        for req_id, start in zip(req_ids, step_starts):
            hole = self._hole_start.get(req_id)
            self._hole_start[req_id] = start if hole is None else min(hole, start)

    def on_draft_pass(
        self, req_ids: Iterable[str], step_starts: Iterable[int], caught_up: set[str]
    ) -> None:
        """The draft ran over this step's tokens of every request."""
        if not self._hole_start:
            return
        for req_id, start in zip(req_ids, step_starts):
            hole = self._hole_start.get(req_id)
            if hole is not None and (req_id in caught_up or hole >= start):
                del self._hole_start[req_id]
