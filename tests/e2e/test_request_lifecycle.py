"""Per-request state is dropped when requests finish or are aborted."""

from __future__ import annotations

import random

from llm_helpers import metrics_by_name, running_llm

MAX_NUM_SEQS = 16


def tracked(llm) -> int:
    return int(metrics_by_name(llm)["vllm:gammatune_tracked_requests"].value)


def test_state_stays_flat_over_1000_requests_with_aborts(tiny):
    from vllm import SamplingParams

    rng = random.Random(0)
    spec = {"method": "gammatune_plus", "model": tiny["draft"], "num_speculative_tokens": 6}
    with running_llm(tiny["target"], spec) as llm:
        engine = llm.llm_engine
        next_id, finished, aborted, peak = 0, 0, 0, 0
        in_flight: set[str] = set()
        while next_id < 1000 or engine.has_unfinished_requests():
            while next_id < 1000 and len(in_flight) < 24:
                req_id = f"r{next_id}"
                words = " ".join(rng.choice(["def", "x", "fox", "1", "hello"])
                                 for _ in range(rng.randint(1, 40)))
                params = SamplingParams(temperature=rng.choice([0.0, 0.8]),
                                        max_tokens=rng.randint(1, 12), seed=next_id)
                engine.add_request(req_id, words, params)
                in_flight.add(req_id)
                next_id += 1
            if rng.random() < 0.3 and in_flight:
                victims = rng.sample(sorted(in_flight), k=min(3, len(in_flight)))
                engine.abort_request(victims)
                in_flight.difference_update(victims)
                aborted += len(victims)
            for out in engine.step():
                if out.finished and out.request_id in in_flight:
                    in_flight.discard(out.request_id)
                    finished += 1
            peak = max(peak, tracked(llm))
        assert aborted >= 100 and finished + aborted == 1000
        # never more state than requests the engine can run at once
        assert 0 < peak <= MAX_NUM_SEQS
        metrics = metrics_by_name(llm)
        drafted = metrics["vllm:spec_decode_num_draft_tokens"].value
        accepted = metrics["vllm:spec_decode_num_accepted_tokens"].value
        assert 0 < accepted <= drafted

        # One more request: the step that runs it drops every finished request.
        out = llm.generate(["def add(a, b):"],
                           SamplingParams(temperature=0, max_tokens=8))
        assert len(out[0].outputs[0].token_ids) == 8
        assert tracked(llm) <= 1
