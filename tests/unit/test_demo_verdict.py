"""gammatune_tools.demo: the demo's decisions without an engine: plans, time
estimate, machine facts, its table with the counts and its one-line verdict."""

from __future__ import annotations

import pytest

from gammatune_tools.bench.records import Measurement
from gammatune_tools.demo import (FULL_DEMO, QUICK_DEMO, estimate_seconds, instruction_set,
                                  machine_facts, table, verdict)


def row(method: str, tokens_per_second: float, *, k: int = 2, drafts: float = 0,
        draft_tokens: float = 0, accepted: float = 0, draft_forward_passes: float = 0,
        plugin_steps: float = 0, skipped_draft_steps: float = 0, engine_steps: float = 0,
        batches: list | None = None, output_tokens: int = 192) -> Measurement:
    return Measurement(method=method, k=k, batch_size=1, num_requests=4,
                       output_tokens=output_tokens,
                       wall_seconds=output_tokens / tokens_per_second, drafts=drafts,
                       draft_tokens=draft_tokens, accepted=accepted, confidence_stops=0,
                       draft_forward_passes=draft_forward_passes, relaxed_acceptances=0,
                       plugin_time_us=0, batches=batches or [],
                       skipped_draft_steps=skipped_draft_steps, plugin_steps=plugin_steps,
                       engine_steps=engine_steps, target_passes=output_tokens - accepted)


def batch(steps: float, forwards: float) -> dict:
    return {"plugin_steps": steps, "draft_forward_passes": forwards}


NO_SPEC = row("no_spec", 6.0, engine_steps=196)


def test_quick_plan_is_a_first_look_and_full_plan_the_whole_comparison():
    assert QUICK_DEMO.batch_sizes == (1,)
    assert set(QUICK_DEMO.methods) == {"no_spec", "vllm_draft_model", "gammatune",
                                       "gammatune_cost"}
    assert set(QUICK_DEMO.methods) < set(FULL_DEMO.methods)
    assert FULL_DEMO.batch_sizes == (1, 4)
    # the quick plan is about five minutes, the full one over twice that
    assert 4 * 60 <= estimate_seconds(QUICK_DEMO) <= 6 * 60
    assert estimate_seconds(FULL_DEMO) > 2 * estimate_seconds(QUICK_DEMO)


def test_instruction_set_names_the_widest_extension():
    assert instruction_set(["sse2", "avx", "avx2", "avx512f", "avx512_bf16"]) == \
        "AVX-512 with BF16"
    assert instruction_set(["avx2", "avx512f", "amx_bf16"]) == "AVX-512, AMX"
    assert instruction_set(["sse2", "avx", "avx2"]) == "AVX2 (no AVX-512)"
    assert instruction_set(["sse2"]) == "no AVX2"
    assert instruction_set([]) == "unknown"


def test_machine_facts_from_cpuinfo():
    cpuinfo = ("processor\t: 0\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f\n"
               "processor\t: 1\nmodel name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f\n")
    assert machine_facts(cpuinfo, "0-1", 2) == \
        "AMD EPYC 9R14, 2 cores, AVX-512; threads bound: VLLM_CPU_OMP_THREADS_BIND=0-1"
    assert "VLLM_CPU_OMP_THREADS_BIND unset" in machine_facts("", None, None)


def test_draft_forwards_per_token_for_every_kind_of_method():
    assert NO_SPEC.draft_forwards_per_token == 0.0
    # vLLM's fixed K runs K draft forwards in every engine step
    fixed = row("vllm_draft_model", 8.0, k=2, drafts=80, draft_tokens=160, accepted=112,
                engine_steps=84)
    assert fixed.draft_forwards_per_token == pytest.approx(2 * 84 / 192)
    plugin = row("gammatune", 8.0, drafts=60, draft_tokens=200, accepted=130,
                 draft_forward_passes=230, plugin_steps=64)
    assert plugin.draft_forwards_per_token == pytest.approx(230 / 192)
    idle = row("gammatune_cost", 6.0, plugin_steps=196, skipped_draft_steps=196)
    assert idle.draft_forwards_per_token == 0.0
    assert idle.drafted_step_share == 0.0


def test_verdict_when_drafting_pays():
    rows = [NO_SPEC,
            row("vllm_draft_model", 8.7, drafts=80, draft_tokens=160, accepted=112),
            row("gammatune", 8.0, drafts=60, draft_tokens=200, accepted=130,
                draft_forward_passes=230, plugin_steps=64),
            row("gammatune_cost", 8.5, drafts=70, draft_tokens=140, accepted=100,
                draft_forward_passes=150, plugin_steps=100, skipped_draft_steps=25,
                batches=[batch(50, 80), batch(50, 70)])]
    line = verdict(rows, 1)
    assert line.startswith("Fastest at batch 1: vllm_draft_model K=2 (1.45x no_spec)")
    assert "drafting paid on this machine at batch 1 (best: vllm_draft_model K=2, 1.45x)" in line
    assert "gammatune_cost drafted on 75% of steps, mean length 2.0" in line
    assert "stopped" not in line  # it drafted in its last batch
    assert "\n" not in line


def test_verdict_when_no_draft_length_pays_and_gammatune_cost_stops():
    rows = [NO_SPEC,
            row("vllm_draft_model", 4.4, drafts=80, draft_tokens=160, accepted=60),
            row("gammatune_cost", 5.9, drafts=10, draft_tokens=12, accepted=4,
                draft_forward_passes=14, plugin_steps=190, skipped_draft_steps=180,
                batches=[batch(50, 14), batch(40, 0), batch(50, 0), batch(50, 0)])]
    line = verdict(rows, 4)
    assert line.startswith("Fastest at batch 4: no_spec (1.00x no_spec)")
    assert "no draft length paid on this machine at batch 4" in line
    assert "gammatune_cost drafted on 5% of steps" in line
    assert "stopped drafting after 50 steps" in line


def test_verdict_when_gammatune_cost_never_drafts_and_differences_are_noise():
    rows = [NO_SPEC,
            row("vllm_draft_model", 6.3, drafts=80, draft_tokens=160, accepted=90),
            row("gammatune_cost", 5.7, plugin_steps=192, skipped_draft_steps=192,
                batches=[batch(96, 0), batch(96, 0)])]
    line = verdict(rows, 1)
    assert "drafting about broke even at batch 1" in line and "1.05x" in line
    assert "gammatune_cost did not draft in its 192 measured steps" in line
    assert "1.00 target passes per token" in line


def test_verdict_without_a_drafting_method_or_rows():
    assert "no method drafted" in verdict([NO_SPEC], 1)
    with pytest.raises(ValueError, match="no measurements"):
        verdict([], 1)


def test_table_rows_speed_against_no_spec_and_the_counts():
    fixed = row("vllm_draft_model", 9.0, k=2, drafts=80, draft_tokens=160, accepted=112,
                engine_steps=84)
    lines = table(1, [NO_SPEC, fixed]).splitlines()
    assert lines[:2] == ["", "batch 1"]
    assert lines[2].split() == ["method", "tok/s", "x", "no_spec", "target", "passes/tok",
                                "draft", "fwd/tok", "accepted", "len"]
    assert lines[3] == "-" * len(lines[2])
    assert lines[4].split() == ["no_spec", "6.00", "1.00x", "1.00", "0.00", "-"]
    # 2 forwards in each of 84 steps for 192 tokens; 1 + 112 / 80 accepted
    assert lines[5].split() == ["vllm_draft_model", "K=2", "9.00", "1.50x", "0.42", "0.88",
                                "2.40"]
