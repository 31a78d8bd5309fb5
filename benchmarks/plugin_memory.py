"""Memory the plugin holds per active request, per method (host memory, bytes).

Measured with ``tracemalloc`` over 1,000 requests' entries as the drafter
keeps them: the request's record in ``RequestRecords`` with its policy state
(after one verification, so every field is set) and, for ``gammatune_cost``, a draft-KV
hole. AdaSD's relaxed verification also keeps the request's draft
distributions until they are verified: vocab x 2 bytes (bf16) per draft
token, printed separately (it is device memory, and depends on the vocabulary).

    python -m benchmarks.plugin_memory [--vocab 151936] [--window W]
"""

from __future__ import annotations

import argparse
import json
import tracemalloc

from vllm_gammatune.draft_kv.holes import DraftKVHoles
from vllm_gammatune.drafter.request_records import RequestRecords
from vllm_gammatune.methods import (DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS, PLUGIN_METHODS,
                                    split_speculative_config)
from vllm_gammatune.policies import Verification

NUM_REQUESTS = 1000


def bytes_per_request(method: str) -> float:
    settings, _ = split_speculative_config(
        {"method": method, "model": "draft"}, {"model", "num_speculative_tokens"})
    policy = settings.make_policy()
    # vLLM-like request ids, made before measuring: vLLM keeps them anyway
    req_ids = [f"cmpl-{i:032x}-0" for i in range(NUM_REQUESTS)]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    records = RequestRecords(policy)
    holes = DraftKVHoles()
    for i, req_id in enumerate(req_ids):
        state = records.policy_state(req_id)
        if hasattr(policy, "observe_verification"):  # AdaSD
            records.set_policy_state(req_id, state)
        else:
            verified = policy.observe(state, Verification(req_id, 0, 3, 2))
            records.set_policy_state(req_id, verified)
        if method == "gammatune_cost":
            holes.on_skipped([req_id], [100 + i])
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return used / NUM_REQUESTS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", type=int, default=151_936, help="Qwen2.5's vocabulary")
    parser.add_argument("--window", type=int, default=DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS,
                        help="AdaSD's W")
    args = parser.parse_args()
    rows = {m: round(bytes_per_request(m)) for m in PLUGIN_METHODS}
    rows["adasd_draft_distributions_per_draft_token"] = args.vocab * 2
    rows["adasd_draft_distributions_full_window"] = args.vocab * 2 * args.window
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
