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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
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
    # Diagnostic, not a method to use: gammatune_cost that never drafts after
    # its warm-up (a plan must double the predicted throughput, and probes
    # get no budget), so a run against no_spec measures the skip path alone.
    "gammatune_cost_never": lambda draft, k, cap: {
        "method": "gammatune_cost", "model": draft, "num_speculative_tokens": max(k, 1),
        "min_draft_gain": 0.999, "probe_budget": 1e-9},
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


def check_method_names(methods: Iterable[str], allowed: Iterable[str] = METHODS,
                       name_of: Callable[[str], str] = str) -> None:
    """Every ``--methods`` entry names an allowed method (``name_of``: the
    method an entry stands for, e.g. ``NAME#2`` -> ``NAME``); ValueError
    naming the field, the entry and the allowed values otherwise."""
    allowed = list(allowed)
    for method in methods:
        if name_of(method) not in allowed:
            raise ValueError(f"--methods: unknown {method!r}; allowed: {', '.join(allowed)}")


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
    "plugin_steps": "vllm:gammatune_steps",
}


def read_gauge(llm, name: str) -> float | None:
    """A gauge's current value (None when the engine does not export it)."""
    return next((float(m.value) for m in llm.get_metrics() if m.name == name), None)


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
    #: one record per generate call: prompt indices, turn, wall time, tokens, counters
    batches: list[dict[str, Any]] = field(default_factory=list)
    skipped_draft_steps: float = 0.0
    catch_up_tokens: float = 0.0
    #: gammatune_cost: vllm:gammatune_cost_drafting_scale at the end of the cell
    drafting_scale: float | None = None
    plugin_steps: float = 0.0

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
    def plugin_us_per_step(self) -> float | None:
        """The plugin's own time per engine step (not the draft model)."""
        return self.plugin_time_us / self.plugin_steps if self.plugin_steps else None

    @property
    def draft_forward_passes_per_token(self) -> float | None:
        if self.draft_forward_passes:
            return self.draft_forward_passes / self.output_tokens
        return None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("tokens_per_second", "mean_accepted_length", "acceptance_rate",
                     "mean_draft_length", "target_passes_per_token",
                     "draft_tokens_per_token", "draft_forward_passes_per_token",
                     "plugin_us_per_step"):
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
    _generate(llm, prompts[:1], params)  # warm-up, not timed
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
            outputs = _generate(llm, chunk, params)
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
                       drafting_scale=read_gauge(llm, "vllm:gammatune_cost_drafting_scale"),
                       **delta)
