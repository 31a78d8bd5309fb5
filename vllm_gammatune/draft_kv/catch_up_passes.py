"""The draft's catch-up passes: running the draft model over the positions it missed.

Before a request with a hole in the draft's KV cache (``holes.DraftKVHoles``)
drafts again, ``run_catch_up`` runs the draft over its missed positions with
the committed token ids, in as few passes as the drafter's buffers allow
(``plan_catch_up_passes``: a chunked prefill of the draft). Each pass builds
a fresh causal attention metadata over the step's block table rows and runs
the draft model as vLLM's own draft loop does (``set_forward_context``).
"""

from __future__ import annotations

import numpy as np
import torch


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


def run_catch_up(proposer, common_attn_metadata, segments, token_ids_cpu: np.ndarray,
                 block_rows: np.ndarray) -> int:
    """Run the draft model over ``segments`` = [(input batch row, start, end)] positions.

    Args:
        proposer: the vLLM ``DraftModelProposer`` (its model, buffers, KV layers).
        common_attn_metadata: this step's target metadata (block tables, rows
            in batch order); only its block table rows are reused.
        token_ids_cpu: [max_num_reqs, max_model_len] vLLM's committed token ids
            (``input_batch.token_ids_cpu``), rows in batch order.
        block_rows: [num_reqs, max_num_blocks_per_req] the same block table
            on the host (``input_batch.block_table``), for the slot mapping.

    Everything is computed on the host from host data and copied to the
    device without waiting (no read of a device tensor). Returns the number
    of positions processed.
    """
    from vllm.config import CUDAGraphMode
    from vllm.forward_context import set_forward_context
    from vllm.utils.torch_utils import async_tensor_h2d

    cad = common_attn_metadata
    device = proposer.device
    block_size = proposer.block_size
    capacity = int(proposer.input_ids.shape[0])
    total = 0
    for segs in plan_catch_up_passes(segments, capacity):
        rows = np.array([row for row, _, _ in segs], dtype=np.int64)
        query_lens = np.array([end - start for _, start, end in segs], dtype=np.int32)
        num_tokens = int(query_lens.sum())
        # [num_tokens]
        token_ids = np.concatenate([token_ids_cpu[row, start:end]
                                    for row, start, end in segs]).astype(np.int64)
        positions = np.concatenate([np.arange(start, end) for _, start, end in segs])
        query_start_loc_cpu = np.zeros(len(segs) + 1, dtype=np.int32)
        query_start_loc_cpu[1:] = np.cumsum(query_lens)
        # [num_reqs] (the pass's requests) context length after the pass
        seq_lens = np.array([end for _, _, end in segs], dtype=np.int32)
        # [num_tokens] the KV slot of every position, from the host block table
        token_rows = np.repeat(rows, query_lens)
        blocks = block_rows[token_rows, positions // block_size].astype(np.int64)
        slot_mapping = async_tensor_h2d(blocks * block_size + positions % block_size,
                                        device=device)
        positions = async_tensor_h2d(positions, device=device)
        # [num_reqs, max_num_blocks_per_req]
        block_table = cad.block_table_tensor[
            async_tensor_h2d(rows, device=cad.block_table_tensor.device)]
        # a fresh metadata object: only what a causal prefill chunk needs (the
        # step's batch-sized optional fields and caches do not apply here)
        meta = type(cad)(
            query_start_loc=async_tensor_h2d(query_start_loc_cpu, device=device),
            query_start_loc_cpu=torch.from_numpy(query_start_loc_cpu),
            seq_lens=async_tensor_h2d(seq_lens, device=device),
            num_reqs=len(segs),
            num_actual_tokens=num_tokens,
            max_query_len=int(query_lens.max()),
            max_seq_len=int(seq_lens.max()),
            block_table_tensor=block_table,
            slot_mapping=slot_mapping,
            causal=True,
            positions=positions,
            seq_lens_cpu_upper_bound=torch.from_numpy(seq_lens),
        )
        _, per_layer_attn_metadata = proposer.build_per_group_and_layer_attn_metadata(meta)
        proposer.input_ids[:num_tokens] = async_tensor_h2d(token_ids, device=device)
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
