"""What the demo (``examples/demo.py``) decides without an engine: its quick
and full plans, their time estimate, the prompts, the machine facts printed
above its table, the table and the one-line verdict below it."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gammatune_tools.bench.methods import VLLM_FIXED_K, drafts
from gammatune_tools.bench.records import Measurement
from gammatune_tools.bench.tables import fmt

#: four prompts of different kinds, answered greedily
PROMPTS = [
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("prose", "Explain why the sky is blue in one paragraph."),
    ("math", "A train travels 120 km in 1.5 hours. What is its average speed? "
             "Show your reasoning."),
    ("translation", "Translate into French: 'The weather is nice today, so we "
                    "will walk to the market.'"),
]


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
                              "gammatune_cost", "gammatune_cost_ngram_model"),
                     batch_sizes=(1, 4), max_tokens=96, num_prompts=4)

#: The time estimate's assumptions for the real pair on a 2-core CPU (bf16,
#: eager), kept on the slow side: seconds to start an engine (loading and
#: profiling the target, plus the draft for a speculative engine) ...
ENGINE_START_S = {False: 30.0, True: 45.0}
#: ... and generated tokens per second at batch 1; a batch of b requests is
#: taken as ~b**0.65 faster
BATCH1_TOKENS_PER_S = 7.0


def estimate_seconds(plan: DemoPlan) -> float:
    """The plan's wall time on a 2-core CPU with the models prepared: each
    engine's start, its untimed warm-up (one prompt) and its batches."""
    total = 0.0
    for method in plan.methods:
        total += ENGINE_START_S[drafts(method)]
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


#: the share by which one unpaired run's speed may differ from a rerun on a
#: 2-core CPU (drift over minutes, engine to engine); smaller differences say
#: nothing
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
                f"({fmt(row.target_passes_per_token)} target passes per token): it judged "
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


def table(batch_size: int, rows: Sequence[Measurement]) -> str:
    """One batch size's table: speed against no speculation, and the counts
    (printed after a blank line)."""
    base = next((r for r in rows if r.method == "no_spec"), rows[0])
    header = (f"{'method':<22}{'tok/s':>8}{f'x {base.method}':>12}{'target passes/tok':>19}"
              f"{'draft fwd/tok':>15}{'accepted len':>14}")
    lines = ["", f"batch {batch_size}", header, "-" * len(header)]
    for r in rows:
        lines.append(f"{method_label(r):<22}{r.tokens_per_second:>8.2f}"
                     f"{r.tokens_per_second / base.tokens_per_second:>11.2f}x"
                     f"{fmt(r.target_passes_per_token):>19}{fmt(r.draft_forwards_per_token):>15}"
                     f"{fmt(r.mean_accepted_length):>14}")
    return "\n".join(lines)
