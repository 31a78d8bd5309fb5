"""One vLLM engine in this process: start, stop, generate, and measure a
prompt set on it with the counts beside the time (``records.Measurement``).

Imports vLLM lazily; nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

from gammatune_tools.bench.counters import read_counters
from gammatune_tools.bench.records import Measurement


def start_llm(target: str, speculative_config: dict | None, **engine_kwargs):
    from vllm import LLM

    kwargs = {"enforce_eager": True, "disable_log_stats": False, "seed": 0,
              **engine_kwargs}
    return LLM(model=target, speculative_config=speculative_config, **kwargs)


def stop_llm(llm) -> None:
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def generate(llm, prompts: Sequence, params):
    """``llm.chat`` for chat conversations (lists of messages), else ``llm.generate``."""
    if prompts and isinstance(prompts[0], list):  # chat conversations
        return llm.chat(list(prompts), params, use_tqdm=False)
    return llm.generate(list(prompts), params, use_tqdm=False)


def measure(
    llm,
    method: str,
    k: int,
    prompts: Sequence,
    params,
    batch_size: int = 1,
    on_outputs: Callable[[list], None] | None = None,
    follow_ups: Sequence[Sequence[str]] | None = None,
) -> Measurement:
    """Time ``prompts`` in batches of ``batch_size`` on a warmed-up engine.

    ``follow_ups`` (chat conversations only): per prompt, its further user
    turns. After a batch is answered, each conversation that has a next turn
    is extended with the model's own answer and that turn and generated again
    (Spec-Bench's multi-turn protocol); every turn is timed and counted.
    ``on_outputs`` gets the outputs of every generate call, in the order of
    ``Measurement.batches`` (which says the prompts' indices and turn).
    Counters are read between calls, outside the timed span.
    """
    generate(llm, prompts[:1], params)  # warm-up, not timed
    first = previous = read_counters(llm)
    output_tokens = 0
    wall = 0.0
    batches: list[dict[str, Any]] = []
    for i in range(0, len(prompts), batch_size):
        chunk = list(prompts[i : i + batch_size])
        indices = list(range(i, i + len(chunk)))
        turn = 1
        while chunk:
            start = time.perf_counter()
            outputs = generate(llm, chunk, params)
            seconds = time.perf_counter() - start
            wall += seconds
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            output_tokens += tokens
            now = read_counters(llm)
            batches.append({"indices": indices, "turn": turn, "wall_seconds": seconds,
                            "output_tokens": tokens,
                            **{key: now[key] - previous[key] for key in now}})
            previous = now
            if on_outputs is not None:
                on_outputs(outputs)
            if follow_ups is None:
                break
            keep = [j for j, idx in enumerate(indices) if len(follow_ups[idx]) >= turn]
            chunk = [[*chunk[j], {"role": "assistant", "content": outputs[j].outputs[0].text},
                      {"role": "user", "content": follow_ups[indices[j]][turn - 1]}]
                     for j in keep]
            indices = [indices[j] for j in keep]
            turn += 1
    delta = {key: previous[key] - first[key] for key in previous}
    return Measurement(method=method, k=k, batch_size=batch_size,
                       num_requests=sum(len(b["indices"]) for b in batches),
                       output_tokens=output_tokens, wall_seconds=wall, batches=batches,
                       **delta)
