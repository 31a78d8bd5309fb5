"""One engine of the n-gram lookup ahead of the draft model on the CUDA hot
path (forced on the CPU), its host reads counted, in a process of its own.

``test_ngram_then_model`` runs this file as a child process: counting reads
needs the engine in the counting process, and vLLM's lookup loads numba,
which the test process must never load (``test_ngram_drafter``). The child
writes one JSON object: the greedy outputs, the reads per engine step, the
places of blocking copies and synchronisations, what each drafting step
handed vLLM and the plugin's counters.

    python tests/e2e/ngram_front_hot_path.py TARGET DRAFT SPEC_JSON OUT_JSON MAX_TOKENS
"""

from __future__ import annotations

import json
import os
import sys


def main(target: str, draft: str, spec: dict, out: str, max_tokens: int) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_GAMMATUNE_CUDA_HOT_PATH"] = "1"
    import torch
    from host_reads import count_host_reads, model_runner
    from llm_helpers import PROMPTS, drafter, metrics_by_name, running_llm
    from vllm import SamplingParams

    with running_llm(target, {"model": draft, **spec}) as llm:
        plugin_drafter = drafter(llm)
        handed = []  # per drafting step: (type, [num_reqs, K] or per-request lengths)
        propose = plugin_drafter.propose

        def recording(num_speculative_tokens, *args, **kwargs):
            drafts = propose(num_speculative_tokens, *args, **kwargs)
            if isinstance(drafts, torch.Tensor):
                handed.append(["tensor", num_speculative_tokens, list(drafts.shape)])
            elif any(drafts):
                handed.append(["list", num_speculative_tokens, [len(d) for d in drafts]])
            return drafts

        plugin_drafter.propose = recording
        with count_host_reads(model_runner(llm)) as log:
            outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=max_tokens),
                                use_tqdm=False)
        metrics = metrics_by_name(llm)
        result = {
            "hot_path": plugin_drafter.hot_path,
            "tokens": [list(o.outputs[0].token_ids) for o in outs],
            "max_reads_in_a_step": log.max_reads_in_a_step(),
            "reads": dict(log.where()),
            "copies": dict(log.where("copy")),
            "syncs": dict(log.where("sync")),
            "drafting_steps": sum(1 for s in log.steps() if any(e[0] == "pass" for e in s)),
            "handed": handed,
            "ngram_draft_tokens": metrics["vllm:gammatune_ngram_draft_tokens"].value,
            "ngram_accepted_tokens": metrics["vllm:gammatune_ngram_accepted_tokens"].value,
            "draft_forward_passes": metrics["vllm:gammatune_draft_forward_passes"].value,
        }
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
