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

It also holds what the demo (``examples/demo.py``) decides without an engine,
unit-tested: its quick and full plans, their time estimate, the machine
facts printed above its table and the one-line verdict below it.

Imports vLLM lazily; nothing here runs at import.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_gammatune.methods.registry import DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS as ADASD_WINDOW

#: name -> (draft path, initial/fixed length k, cap) -> speculative_config or None
MethodFactory = Callable[[str, int, int], "dict[str, Any] | None"]

METHODS: dict[str, MethodFactory] = {
    "no_spec": lambda draft, k, cap: None,
    "vllm_draft_model": lambda draft, k, cap: {
        "method": "draft_model", "model": draft, "num_speculative_tokens": k},
    # vLLM's own batch-size schedule (num_speculative_tokens_per_batch_size),
    # hand-tuned for a CPU where fixed K loses to no speculation in batches:
    # K=k alone, no speculation from batch 2 (docs/results.md, "batch")
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
    # AdaSD (lossy) ignores k: its window is the paper's W (the registry's cap).
    "adasd": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": ADASD_WINDOW},
    "adasd_gen": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": ADASD_WINDOW,
        "adasd_mode": "generation"},
    "adasd_verify": lambda draft, k, cap: {
        "method": "adasd", "model": draft, "num_speculative_tokens": ADASD_WINDOW,
        "adasd_mode": "verification"},
}


#: vLLM's own drafter at a fixed K (K draft forwards in every engine step)
VLLM_FIXED_K = ("vllm_draft_model",)


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
    "planned_draft_tokens": "vllm:gammatune_planned_draft_tokens",
    "stopped_draft_tokens": "vllm:gammatune_stopped_draft_tokens",
}


def read_gauge(llm, name: str) -> float | None:
    """A gauge's current value (None when the engine does not export it)."""
    return next((float(m.value) for m in llm.get_metrics() if m.name == name), None)


#: a histogram observed once per engine step: its count is the number of steps
_STEPS_HISTOGRAM = "vllm:iteration_tokens_total"


def read_counters(llm) -> dict[str, float]:
    values = dict.fromkeys(_COUNTERS, 0.0)
    by_name = {m.name: m for m in llm.get_metrics()}
    for key, name in _COUNTERS.items():
        if name in by_name:
            values[key] = float(by_name[name].value)
    steps = by_name.get(_STEPS_HISTOGRAM)
    values["engine_steps"] = float(getattr(steps, "count", 0) or 0)
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
    #: engine steps (vLLM's per-step histogram), every method
    engine_steps: float = 0.0
    #: draft tokens the policy planned, and those a per-token stop cut
    planned_draft_tokens: float = 0.0
    stopped_draft_tokens: float = 0.0

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

    @property
    def draft_forwards_per_token(self) -> float | None:
        """Batched draft forwards per generated token, for every method: the
        plugin's counter; 0 when nothing was drafted; vLLM's fixed-K drafter
        runs K forwards in every engine step (None when the steps are unknown)."""
        if self.draft_forward_passes:
            return self.draft_forward_passes / self.output_tokens
        if not self.draft_tokens:
            return 0.0
        if self.method in VLLM_FIXED_K and self.engine_steps:
            return self.k * self.engine_steps / self.output_tokens
        return None

    @property
    def stopped_share(self) -> float | None:
        """Share of the planned draft tokens a per-token stop cut."""
        if not self.planned_draft_tokens:
            return None
        return self.stopped_draft_tokens / self.planned_draft_tokens

    @property
    def drafted_step_share(self) -> float | None:
        """Share of the plugin's engine steps that ran the draft model."""
        if not self.plugin_steps:
            return None
        return 1 - self.skipped_draft_steps / self.plugin_steps

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("tokens_per_second", "mean_accepted_length", "acceptance_rate",
                     "mean_draft_length", "target_passes_per_token",
                     "draft_tokens_per_token", "draft_forward_passes_per_token",
                     "draft_forwards_per_token", "drafted_step_share",
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


# -- the demo: plans, time estimate, machine facts, verdict (pure) ------------


@dataclass(frozen=True)
class DemoPlan:
    """What ``examples/demo.py`` runs: one engine per method, in turn, each
    answering ``num_prompts`` prompts in batches of each size."""

    methods: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    max_tokens: int
    num_prompts: int


#: the default: a first look at batch 1, the methods a reader compares first
QUICK_DEMO = DemoPlan(methods=("no_spec", "vllm_draft_model", "gammatune", "gammatune_cost"),
                      batch_sizes=(1,), max_tokens=48, num_prompts=4)
#: ``--full``: every method, alone and as one batch, longer answers
FULL_DEMO = DemoPlan(methods=("no_spec", "vllm_draft_model", "gammatune", "gammatune_plus",
                              "gammatune_cost"),
                     batch_sizes=(1, 4), max_tokens=96, num_prompts=4)

#: Seconds to start an engine on the real pair, 2-core CPU (bf16, eager):
#: loading and profiling the target, plus the draft for a speculative engine.
ENGINE_START_S = {False: 30.0, True: 45.0}
#: generated tokens per second at batch 1 on that machine (no speculation
#: ~6-7, drafting methods ~7-10); a batch of b requests is ~b**0.65 faster
BATCH1_TOKENS_PER_S = 7.0


def estimate_seconds(plan: DemoPlan) -> float:
    """The plan's wall time on a 2-core CPU with the models prepared: each
    engine's start, its untimed warm-up (one prompt) and its batches."""
    total = 0.0
    for method in plan.methods:
        total += ENGINE_START_S[METHODS[method]("draft", 1, 1) is not None]
        total += plan.max_tokens / BATCH1_TOKENS_PER_S  # warm-up
        for size in plan.batch_sizes:
            rate = BATCH1_TOKENS_PER_S * min(size, plan.num_prompts) ** 0.65
            total += plan.num_prompts * plan.max_tokens / rate
    return total


def instruction_set(flags: Iterable[str]) -> str:
    """The widest x86 vector extension among the CPU's ``flags`` (what bf16
    matrix products run on), with bf16 and AMX support named."""
    flags = set(flags)
    if "avx512f" in flags:
        name = "AVX-512" + (" with BF16" if "avx512_bf16" in flags else "")
    elif "avx2" in flags:
        name = "AVX2 (no AVX-512)"
    elif flags:
        name = "no AVX2"
    else:
        return "unknown"
    return name + (", AMX" if "amx_bf16" in flags else "")


def machine_facts(cpuinfo: str, threads_bind: str | None, cpu_count: int | None) -> str:
    """One line: CPU model, instruction set, the cores vLLM's worker binds
    (``VLLM_CPU_OMP_THREADS_BIND``), from the text of ``/proc/cpuinfo``."""
    model, flags = "unknown CPU", []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key.strip() in ("flags", "Features") and not flags:
            flags = value.split()
    bind = (f"VLLM_CPU_OMP_THREADS_BIND={threads_bind}" if threads_bind else
            "VLLM_CPU_OMP_THREADS_BIND unset (vLLM's default: all cores but one)")
    return f"{model}, {cpu_count or '?'} cores, {instruction_set(flags)}; threads bound: {bind}"


def read_machine_facts() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
    except OSError:
        cpuinfo = ""
    return machine_facts(cpuinfo, os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), os.cpu_count())


#: a single run's speed differs by up to this share from a rerun on a 2-core
#: CPU (drift over minutes, engine to engine); smaller differences say nothing
DEMO_NOISE = 0.10


def method_label(row: Measurement) -> str:
    return row.method + (f" K={row.k}" if row.method in VLLM_FIXED_K else "")


def _stopped_after(row: Measurement) -> float | None:
    """Engine steps (from the start of the measurement) up to the end of the
    last batch that drafted, when the later batches did not draft; None when
    the last batch drafted."""
    steps = stopped = 0.0
    for batch in row.batches:
        steps += batch.get("plugin_steps", 0.0)
        if batch.get("draft_forward_passes", 0.0) > 0:
            stopped = steps
    last = row.batches[-1] if row.batches else {}
    return None if last.get("draft_forward_passes", 0.0) > 0 else stopped


def cost_aware_choice(row: Measurement) -> str:
    """What ``gammatune_cost`` chose over the measured steps, in words."""
    if not row.draft_forward_passes:
        return (f"gammatune_cost did not draft in its {int(row.plugin_steps)} measured steps "
                f"({row.target_passes_per_token:.2f} target passes per token): it judged "
                f"no draft length worth its cost after its warm-up")
    stopped = _stopped_after(row)
    share = row.drafted_step_share
    length = row.mean_draft_length
    chose = (f"gammatune_cost drafted on {share:.0%} of steps" if share is not None
             else "gammatune_cost drafted")
    if length is not None:
        chose += f", mean length {length:.1f}"
    if stopped is not None:
        chose += f", and stopped drafting after {int(stopped)} steps"
    return chose


def verdict(rows: Sequence[Measurement], batch_size: int, noise: float = DEMO_NOISE) -> str:
    """The demo's one line for one batch size: the fastest method, whether
    any draft length paid on this machine (a drafting method faster than no
    speculation by more than ``noise``), and what gammatune_cost chose.

    ``rows``: one measurement per method at ``batch_size``; the baseline is
    ``no_spec`` (else the first row).
    """
    if not rows:
        raise ValueError("verdict: no measurements")
    base = next((r for r in rows if r.method == "no_spec"), rows[0])
    fastest = max(rows, key=lambda r: r.tokens_per_second)
    parts = [f"fastest at batch {batch_size}: {method_label(fastest)} "
             f"({fastest.tokens_per_second / base.tokens_per_second:.2f}x {base.method})"]
    drafting = [r for r in rows if r.draft_tokens > 0]
    # Whether drafting paid: any drafting method clearly faster; whether it
    # did not: judged by the methods that drafted on most steps, not by one
    # that stopped drafting (its speed is no speculation's).
    mostly = [r for r in drafting
              if r.drafted_step_share is None or r.drafted_step_share >= 0.5] or drafting
    if drafting and base.method == "no_spec":
        best = max(drafting, key=lambda r: r.tokens_per_second)
        ratio = best.tokens_per_second / base.tokens_per_second
        if ratio < 1 + noise:
            best = max(mostly, key=lambda r: r.tokens_per_second)
            ratio = best.tokens_per_second / base.tokens_per_second
        if ratio >= 1 + noise:
            parts.append(f"drafting paid on this machine at batch {batch_size} "
                         f"(best: {method_label(best)}, {ratio:.2f}x)")
        elif ratio < 1 - noise:
            parts.append(f"no draft length paid on this machine at batch {batch_size} "
                         f"(best drafting method {method_label(best)}, {ratio:.2f}x)")
        else:
            parts.append(f"drafting about broke even at batch {batch_size} (best "
                         f"{method_label(best)}, {ratio:.2f}x: within the +-{noise:.0%} "
                         f"a single run can drift here)")
    elif base.method == "no_spec":
        parts.append("no method drafted, so nothing says whether drafting pays here")
    cost = next((r for r in rows if r.method == "gammatune_cost"), None)
    if cost is not None:
        parts.append(cost_aware_choice(cost))
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."
