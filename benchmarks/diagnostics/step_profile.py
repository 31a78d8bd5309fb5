"""Where an engine step's time goes: one batched generate under cProfile, in process.

    python -m benchmarks.diagnostics.step_profile no_spec  --out DIR
    python -m benchmarks.diagnostics.step_profile skip_only --out DIR
    python -m benchmarks.diagnostics.step_profile --compare DIR
    python -m benchmarks.diagnostics.step_profile adasd --batch-size 1 --out DIR     # any method
    python -m benchmarks.diagnostics.step_profile vllm_draft_model --k 5 --batch-size 1 --out DIR
    python -m benchmarks.diagnostics.step_profile --compare DIR --base vllm_draft_model \\
        --other adasd

A diagnostic: no published number uses it.

``skip_only`` is ``gammatune_cost`` with ``fixed_step_costs`` under which a
draft never pays: every step takes the skip path (no draft forward), so the
difference to ``no_spec`` is what an engine with speculation configured costs
per step when nobody drafts: vLLM's spec-decode bookkeeping (its rejection
sampler runs with zero draft tokens) plus the plugin's planning. The engine
core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so cProfile
sees the worker; ``--compare`` prints the per-function differences of the
step's phases, in seconds over the whole generate. Any other method of
``gammatune_tools.bench.methods.METHOD_NAMES`` profiles the same way (``--k``: its
initial or fixed length).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

from gammatune_tools.bench.methods import METHOD_NAMES, speculative_config
from gammatune_tools.bench.prompts import first_turns, load_prompts

STEP_PHASES = ("execute_model", "sample_tokens", "propose_draft_token_ids", "_model_forward",
               "schedule", "update_from_output", "process_outputs", "_prepare_inputs",
               "rejection_sample", "propose", "compute_logits")


def profile(name: str, out: Path, batch_size: int, max_tokens: int, k: int = 4) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from vllm import SamplingParams

    from gammatune_tools.bench.engine import start_llm, stop_llm
    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair()
    if name == "skip_only":
        spec = {"method": "gammatune_cost", "model": draft, "num_speculative_tokens": 8,
                "fixed_step_costs": {"target_step_s": 0.1, "target_token_s": 0.0,
                                     "draft_pass_s": 100.0, "draft_token_s": 0.0}}
    else:
        spec = speculative_config(name, draft, k, 16)
    llm = start_llm(target, spec, max_model_len=4096, dtype="bfloat16",
                    max_num_seqs=batch_size)
    conversations = first_turns(load_prompts("specbench", 2, "eval"))[:batch_size]
    llm.chat(conversations[:4], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
             use_tqdm=False)  # warm-up
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    llm.chat(conversations, params, use_tqdm=False)
    profiler.disable()
    print(f"{name}: {time.perf_counter() - started:.2f} s wall (under cProfile)")
    out.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(out / f"{name}.prof"))
    stop_llm(llm)


def cumulative_by_function(path: Path) -> dict[str, float]:
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    return {f"{short_path(file)}:{line}({func})": cumtime
            for (file, line, func), (_, _, _, cumtime, _) in stats.items()}


def short_path(file: str) -> str:
    """``vllm/...`` or ``vllm_gammatune/...`` whatever the checkout or site-packages."""
    for marker in ("site-packages/", "/vllm_gammatune/"):
        if marker in file:
            tail = file.split(marker)[-1]
            return tail if marker == "site-packages/" else f"vllm_gammatune/{tail}"
    return file


def compare(directory: Path, base: str = "no_spec", other: str = "skip_only") -> str:
    a = cumulative_by_function(directory / f"{base}.prof")
    b = cumulative_by_function(directory / f"{other}.prof")
    lines = [f"| function | {base} s | {other} s | difference s |", "|---|---|---|---|"]
    for key in sorted(set(a) | set(b)):
        if any(f"({phase})" in key for phase in STEP_PHASES) or "vllm_gammatune" in key:
            va, vb = a.get(key, 0.0), b.get(key, 0.0)
            if max(va, vb) >= 0.01:
                lines.append(f"| `{key}` | {va:.3f} | {vb:.3f} | {vb - va:+.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", nargs="?",
                        help="no_spec, skip_only, or a name of bench.methods.METHOD_NAMES")
    parser.add_argument("--k", type=int, default=4, help="the method's initial/fixed length")
    parser.add_argument("--base", default="no_spec", help="--compare: the reference profile")
    parser.add_argument("--other", default="skip_only", help="--compare: the profile compared")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/runs/profile"))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--compare", type=Path, help="a directory holding both .prof files")
    args = parser.parse_args()
    if args.compare:
        print(compare(args.compare, args.base, args.other))
    elif args.method:
        if args.method != "skip_only" and args.method not in METHOD_NAMES:
            sys.exit(f"method {args.method!r}: expected skip_only or one of "
                     f"{', '.join(METHOD_NAMES)}")
        profile(args.method, args.out, args.batch_size, args.max_tokens, args.k)
    else:
        sys.exit("give a method (no_spec, skip_only, ...) or --compare DIR")


if __name__ == "__main__":
    main()
