"""Measuring speculative methods inside one vLLM engine (demo and benchmarks).

Every measurement reports wall-clock speed *and* counts that do not depend on
the hardware, read from vLLM's own counters and the plugin's:

- ``mean_accepted_length``: 1 + accepted / drafts (tokens per verification);
- ``acceptance_rate``: accepted / draft tokens;
- ``mean_draft_length``: draft tokens / drafts;
- ``target_passes_per_token``: request-level target verifications per
  generated token, (generated - accepted) / generated;
- ``draft_tokens_per_token``: draft tokens verified per generated token;
- ``draft_forward_passes_per_token``: batched draft forwards per generated
  token (plugin methods; vLLM's fixed-K drafter runs K per step).

Imports vLLM lazily; nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: name -> (draft path, initial/fixed length k, cap) -> speculative_config or None
MethodFactory = Callable[[str, int, int], "dict[str, Any] | None"]

METHODS: dict[str, MethodFactory] = {
    "no_spec": lambda draft, k, cap: None,
    "vllm_draft_model": lambda draft, k, cap: {
        "method": "draft_model", "model": draft, "num_speculative_tokens": k},
    # vLLM's own batch-size schedule (num_speculative_tokens_per_batch_size),
    # hand-tuned on this CPU: K=k alone, no speculation from batch 2 (fixed K
    # loses to none from batch 4 there; README, issue 6 results)
    "vllm_schedule": lambda draft, k, cap: {
        "method": "draft_model", "model": draft, "num_speculative_tokens": k,
        "num_speculative_tokens_per_batch_size": [[1, 1, k], [2, 1024, 0]]},
    "fixed_draft": lambda draft, k, cap: {
        "method": "fixed_draft", "model": draft, "num_speculative_tokens": k,
        "gamma_init": k},
    "hf_heuristic": lambda draft, k, cap: {
        "method": "hf_heuristic", "model": draft, "num_speculative_tokens": max(k, cap),
        "gamma_init": k},
    "assistant_threshold": lambda draft, k, cap: {
        "method": "assistant_threshold", "model": draft, "num_speculative_tokens": k,
        "gamma_init": k},
    "gammatune": lambda draft, k, cap: {
        "method": "gammatune", "model": draft, "num_speculative_tokens": max(k, cap),
        "gamma_init": k},
    "gammatune_plus": lambda draft, k, cap: {
        "method": "gammatune_plus", "model": draft, "num_speculative_tokens": max(k, cap),
        "gamma_init": k},
    # cost-aware: k is only the cap; lengths (0 allowed) come from measured costs
    "gammatune_cost": lambda draft, k, cap: {
        "method": "gammatune_cost", "model": draft, "num_speculative_tokens": max(k, 1)},
    # AdaSD (lossy) ignores k: its window is the paper's W = 20.
    "adasd": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": 20},
    "adasd_gen": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": 20,
        "adasd_mode": "generation"},
    "adasd_verify": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": 20,
        "adasd_mode": "verification"},
}

_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "confidence_stops": "vllm:gammatune_confidence_stops",
    "draft_forward_passes": "vllm:gammatune_draft_forward_passes",
    "relaxed_acceptances": "vllm:gammatune_adasd_relaxed_acceptances",
    "plugin_time_us": "vllm:gammatune_plugin_time_us",
    "skipped_draft_steps": "vllm:gammatune_skipped_draft_steps",
    "catch_up_tokens": "vllm:gammatune_catch_up_tokens",
}


def read_counters(llm) -> dict[str, float]:
    values = dict.fromkeys(_COUNTERS, 0.0)
    by_name = {m.name: m for m in llm.get_metrics()}
    for key, name in _COUNTERS.items():
        if name in by_name:
            values[key] = float(by_name[name].value)
    return values


@dataclass
class Measurement:
    method: str
    k: int
    batch_size: int
    num_requests: int
    output_tokens: int
    wall_seconds: float
    drafts: float
    draft_tokens: float
    accepted: float
    confidence_stops: float
    draft_forward_passes: float
    relaxed_acceptances: float
    plugin_time_us: float
    skipped_draft_steps: float = 0.0
    catch_up_tokens: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds

    @property
    def mean_accepted_length(self) -> float | None:
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts else None

    @property
    def target_passes_per_token(self) -> float:
        return (self.output_tokens - self.accepted) / self.output_tokens

    @property
    def draft_tokens_per_token(self) -> float:
        return self.draft_tokens / self.output_tokens

    @property
    def draft_forward_passes_per_token(self) -> float | None:
        if self.draft_forward_passes:
            return self.draft_forward_passes / self.output_tokens
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("tokens_per_second", "mean_accepted_length", "acceptance_rate",
                     "mean_draft_length", "target_passes_per_token",
                     "draft_tokens_per_token", "draft_forward_passes_per_token"):
            data[name] = getattr(self, name)
        return data


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


def _generate(llm, prompts: Sequence, params):
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
) -> Measurement:
    """Time ``prompts`` in batches of ``batch_size`` on a warmed-up engine."""
    _generate(llm, prompts[:1], params)  # warm-up, not timed
    before = read_counters(llm)
    output_tokens = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        outputs = _generate(llm, prompts[i : i + batch_size], params)
        output_tokens += sum(len(o.outputs[0].token_ids) for o in outputs)
        if on_outputs is not None:
            on_outputs(outputs)
    wall = time.perf_counter() - start
    after = read_counters(llm)
    delta = {key: after[key] - before[key] for key in after}
    return Measurement(method=method, k=k, batch_size=batch_size,
                       num_requests=len(prompts), output_tokens=output_tokens,
                       wall_seconds=wall, **delta)
