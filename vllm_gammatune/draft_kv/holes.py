"""Skipping the draft model on steps where no request drafts, and catching up.

vLLM's draft-model proposer runs a draft forward pass every step, even at
K = 0 (``num_speculative_tokens_per_batch_size``), because the pass over the
step's target tokens is what writes the draft's KV cache; skipping it leaves
holes. When every request of a step plans 0 draft tokens, the plugin skips the
whole proposal, so the step costs what a step without speculation costs, and
records, per request, the first position the draft has not processed
(``DraftKVHoles``). Before such a request drafts again, ``run_catch_up`` runs
the draft over the missed positions ``[hole, first position of this step)``
with the committed token ids, in as few passes as the drafter's buffers allow
(a chunked prefill of the draft); the normal first pass then covers the step's
own tokens, and the draft KV is exact again.

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
same prompt again) drafted against stale draft KV: its output was unaffected
(the target verifies every token), but its acceptance fell (on the 2-core CPU
a repeated two-request batch accepted 0.3-0.4 of its draft tokens instead of
0.7-0.85).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch


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

    def hole_start(self, req_id: str) -> int | None:
        return self._hole_start.get(req_id)

    def forget_missing(self, live_req_ids) -> None:
        for req_id in [r for r in self._hole_start if r not in live_req_ids]:
            del self._hole_start[req_id]
        self._seen = {r for r in self._seen if r in live_req_ids}

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
        for req_id, start in zip(req_ids, step_starts):
            hole = self._hole_start.get(req_id)
            if hole is not None and (req_id in caught_up or hole >= start):
                del self._hole_start[req_id]


def plan_catch_up_passes(
    segments: list[tuple[int, int, int]], capacity: int
) -> list[list[tuple[int, int, int]]]:
    """Split (row, start, end) segments into passes of at most ``capacity`` tokens.

    A request appears at most once per pass; a segment longer than what a
    pass has left continues in the next pass (like a chunked prefill).
    """
    passes: list[list[tuple[int, int, int]]] = []
    pending = [s for s in segments if s[2] > s[1]]
    while pending:
        room, current, rest = capacity, [], []
        for row, start, end in pending:
            if room <= 0:
                rest.append((row, start, end))
                continue
            take = min(end - start, room)
            current.append((row, start, start + take))
            room -= take
            if start + take < end:
                rest.append((row, start + take, end))
        passes.append(current)
        pending = rest
    return passes


def run_catch_up(proposer, common_attn_metadata, segments,
                 token_ids_cpu: np.ndarray) -> int:
    """Run the draft model over ``segments`` = [(batch row, start, end)] positions.

    Args:
        proposer: the vLLM ``DraftModelProposer`` (its model, buffers, KV layers).
        common_attn_metadata: this step's target metadata (block tables, rows
            in batch order); only its block table rows are reused.
        token_ids_cpu: [max_num_reqs, max_model_len] vLLM's committed token ids
            (``input_batch.token_ids_cpu``), rows in batch order.

    Returns the number of positions processed.
    """
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import set_forward_context

    cad = common_attn_metadata
    device = proposer.device
    block_size = proposer.block_size
    capacity = int(proposer.input_ids.shape[0])
    total = 0
    for segs in plan_catch_up_passes(segments, capacity):
        rows = torch.tensor([row for row, _, _ in segs], dtype=torch.long)
        query_lens = [end - start for _, start, end in segs]
        num_tokens = sum(query_lens)
        # [num_tokens]
        token_ids = torch.from_numpy(np.concatenate(
            [token_ids_cpu[row, start:end] for row, start, end in segs]).astype(np.int64))
        positions = torch.cat([torch.arange(start, end) for _, start, end in segs])
        query_start_loc_cpu = torch.zeros(len(segs) + 1, dtype=torch.int32)
        query_start_loc_cpu[1:] = torch.cumsum(torch.tensor(query_lens), 0)
        # [len(segs)] context length after the pass
        seq_lens = torch.tensor([end for _, _, end in segs], dtype=torch.int32)
        # [len(segs), max_blocks_per_req]
        block_table = cad.block_table_tensor[rows.to(cad.block_table_tensor.device)]
        # [num_tokens] request index of every token
        token_req = torch.repeat_interleave(torch.arange(len(segs)),
                                            torch.tensor(query_lens))
        blocks = block_table.cpu()[token_req, positions // block_size].long()
        slot_mapping = (blocks * block_size + positions % block_size).to(device)
        positions = positions.to(device)
        # a fresh metadata object: only what a causal prefill chunk needs (the
        # step's batch-sized optional fields and caches do not apply here)
        meta = type(cad)(
            query_start_loc=query_start_loc_cpu.to(device),
            query_start_loc_cpu=query_start_loc_cpu,
            seq_lens=seq_lens.to(device),
            num_reqs=len(segs),
            num_actual_tokens=num_tokens,
            max_query_len=max(query_lens),
            max_seq_len=int(seq_lens.max()),
            block_table_tensor=block_table,
            slot_mapping=slot_mapping,
            causal=True,
            positions=positions,
            seq_lens_cpu_upper_bound=seq_lens,
        )
        _, per_layer_attn_metadata = proposer.build_per_group_and_layer_attn_metadata(meta)
        proposer.input_ids[:num_tokens] = token_ids.to(device)
        proposer._set_positions(num_tokens, positions)
        with set_forward_context(
            per_layer_attn_metadata,
            proposer.vllm_config,
            num_tokens=num_tokens,
            num_tokens_across_dp=None,
            cudagraph_runtime_mode=CUDAGraphMode.NONE,
            slot_mapping=proposer._get_slot_mapping(num_tokens, slot_mapping),
        ):
            proposer.model(
                input_ids=proposer.input_ids[:num_tokens],
                positions=proposer._get_positions(num_tokens),
                inputs_embeds=None,
            )
        total += num_tokens
    return total
