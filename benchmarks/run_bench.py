"""Benchmark harness: speculative methods x initial lengths x batch sizes x temperatures.

One engine per (method, k); every batch size and temperature of the cell
runs in it. Results are appended to a JSONL file one cell at a time, so a
killed run resumes where it stopped (cells already in the file are skipped).
``python -m benchmarks.write_report`` turns the file into Markdown tables and plots.

    python -m benchmarks.run_bench --out benchmarks/runs/quick \\
        --methods no_spec,vllm_draft_model,fixed_draft,gammatune --k quick \\
        --batch-sizes 1,4,16 --temperature 0,0.7 --dataset specbench --per-category 1

Methods: names of ``gammatune_tools.bench.methods.METHOD_NAMES`` and ``--spec
NAME=JSON`` custom speculative configs (``{draft}`` = the draft's path).
``--k``: "paper" (1-8, 12, 16, 20, 24), "quick" (2, 4, 8) or a list.

Prompts: Spec-Bench (``--dataset specbench``: every category,
``--per-category`` questions each; ``--turns 2`` sends each question's second
turn after the model's own answer to the first, as Spec-Bench does;
``--split tune`` keeps odd question ids, ``eval`` even ones), GSM8K
(``--dataset gsm8k``) or any JSONL with a ``prompt``/``question`` field (or
``turns``). The target's chat template is applied.

Progress: one line on stderr (tqdm) with the prompts done over the whole
run, the time left, and the current cell's progress. ``--trace`` writes each
engine's per-request draft lengths (``VLLM_GAMMATUNE_TRACE``) to
``<out>/traces/`` for ``benchmarks.write_report``'s Figure 2a-style plot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gammatune_tools.bench.context import run_context, write_context
from gammatune_tools.bench.methods import speculative_config
from gammatune_tools.bench.prompts import first_turns, load_prompts
from gammatune_tools.bench.records import (append_row, cell_key, done_keys, outputs_by_turn,
                                           per_category, trace_path)
from gammatune_tools.bench.specs import (add_common_args, parse_floats, parse_ks,
                                         parse_spec_options, plan_cells)


def cell_row(args, cell: tuple, spec: dict | None, result, collected: list[list],
             categories: list[str], started: float, run_date: str) -> dict:
    """One line of ``cells.jsonl``: the cell (method, k, batch size, temperature,
    variant), its measurement and counts, per-category sums, and every prompt's
    generated text and token ids (``collected``: the outputs of each of the
    measurement's batches)."""
    method, k, batch_size, temperature, variant = cell
    texts, token_ids = outputs_by_turn(result.batches, collected, len(categories), args.turns)
    row = {"key": cell_key(method, k, batch_size, temperature, variant, turns=args.turns),
           "variant": variant, "temperature": temperature,
           "max_tokens": args.max_tokens, "turns": args.turns,
           "dataset": args.dataset, "speculative_config": spec,
           "started": started, "run_date": run_date, **result.to_dict()}
    row["per_category"] = per_category(result.batches, categories)
    row["tokens_per_category"] = {c: v["output_tokens"] for c, v in row["per_category"].items()}
    row["categories"] = categories
    # turn 1 under "texts" and "token_ids" (gsm8k_quality reads these); later turns apart
    row["texts"], row["token_ids"] = texts[0], token_ids[0]
    if args.turns > 1:
        row["texts_later_turns"] = texts[1:]
        row["token_ids_later_turns"] = token_ids[1:]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument("--turns", type=int, default=1, choices=[1, 2],
                        help="Spec-Bench turns per question (2: turn 2 after the model's answer)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--stop-at-eos", action="store_true",
                        help="let requests end at EOS (quality runs); default: "
                             "ignore EOS so every method generates the same lengths")
    parser.add_argument("--method-args", default="{}",
                        help="JSON merged into every plugin method's speculative_config "
                             "(a parameter variant: part of each cell's key)")
    args = parser.parse_args()

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    from tqdm import tqdm

    from gammatune_tools.bench.engine import measure, start_llm, stop_llm
    from gammatune_tools.model_prep import prepare_pair
    from vllm_gammatune.methods import is_plugin_method

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "cells.jsonl"
    context = run_context(args, target, draft)

    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit,
                           turns=args.turns)
    conversations = first_turns(prompts)
    follow_ups = [turns[1:] for _, turns in prompts] if args.turns > 1 else None
    categories = [cat for cat, _ in prompts]
    units_per_cell = sum(len(turns) for _, turns in prompts)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    temperatures = parse_floats(args.temperature)
    ks = parse_ks(args.k)
    extra = json.loads(args.method_args)
    custom = parse_spec_options(args.spec, draft)

    from vllm import SamplingParams

    methods = args.methods.split(",")
    methods += [name for name in custom if name not in methods]
    try:
        plan = plan_cells(methods, ks, batch_sizes, temperatures, custom, done_keys(results),
                          turns=args.turns,
                          variant_of=lambda m: extra if is_plugin_method(m) else {})
    except ValueError as error:
        sys.exit(str(error))
    if not plan:
        print(f"every cell is already in {results}", file=sys.stderr)
        return
    write_context(out, context)
    num_cells = sum(len(todo) for _, _, todo, _ in plan)
    bar = tqdm(total=num_cells * units_per_cell, desc="run", unit="prompt", smoothing=0,
               dynamic_ncols=True, file=sys.stderr)
    cell_index = 0
    for method, k, todo, variant in plan:
        if method in custom:
            spec = custom[method]
        else:
            spec = speculative_config(method, draft, max(k, 1), args.cap)
            if spec is not None:
                spec = {**spec, **variant}
        if args.trace:
            os.environ["VLLM_GAMMATUNE_TRACE"] = str(trace_path(out, f"{method}_k{k}"))
        bar.set_description_str(f"starting {method} k={k}")
        llm = start_llm(target, spec, max_model_len=args.max_model_len, dtype=args.dtype,
                        max_num_seqs=max(batch_sizes))
        try:
            for batch_size, temperature in todo:
                cell_index += 1
                done_in_cell = [0]
                bar.set_description_str(f"cell {cell_index}/{num_cells} {method} k={k} "
                                        f"b={batch_size} t={temperature}")
                collected: list[list] = []

                def on_outputs(outputs, _seen=collected, _done=done_in_cell):
                    _seen.append(outputs)
                    _done[0] += len(outputs)
                    bar.set_postfix_str(f"cell {_done[0]}/{units_per_cell}")
                    bar.update(len(outputs))

                params = SamplingParams(temperature=temperature, max_tokens=args.max_tokens,
                                        ignore_eos=not args.stop_at_eos, seed=0)
                started = time.time()
                result = measure(llm, method, k, conversations, params, batch_size,
                                 on_outputs=on_outputs, follow_ups=follow_ups)
                row = cell_row(args, (method, k, batch_size, temperature, variant), spec,
                               result, collected, categories, started, context["date"])
                append_row(results, row)
                bar.write(f"{row['key']}: {result.tokens_per_second:.2f} tok/s", file=sys.stderr)
        finally:
            stop_llm(llm)
    bar.close()


if __name__ == "__main__":
    main()
