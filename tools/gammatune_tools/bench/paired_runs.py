"""The offline interleaved paired run behind ``benchmarks.run_paired`` (and
``benchmarks.idle_overhead``, which reads each engine's counts its own way):
its options, the engines (one per method started in one process, alive at
once; or with ``--fresh-engines`` one at a time, started afresh for each
method in each round, with an optional second prompt set), the rounds of
batches, the resumable rows and the summaries. The design and why it is
so: ``benchmarks/run_paired.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gammatune_tools.bench.context import read_context, run_context, write_context
from gammatune_tools.bench.counters import EngineCounts
from gammatune_tools.bench.engine import generate, start_llm, stop_llm
from gammatune_tools.bench.methods import (METHOD_NAMES, engine_k, method_name,
                                           speculative_config, started_with_environment)
from gammatune_tools.bench.paired import (ROWS_FILE, check_engines, complete_rounds,
                                          engine_order, shares_done, write_summary)
from gammatune_tools.bench.paired_categories import parse_groups, write_category_summary
from gammatune_tools.bench.plots import plot_pool
from gammatune_tools.bench.pooling import pool_directories, pool_report
from gammatune_tools.bench.prompts import first_turns, load_prompts
from gammatune_tools.bench.records import append_row, read_jsonl, trace_path
from gammatune_tools.bench.specs import add_common_args, parse_ks
from gammatune_tools.bench.sweep import write_sweep

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
    parser.add_argument("--fresh-engines", action="store_true",
                        help="one engine alive at a time: in each round every method's "
                             "engine is started afresh in turn (the first rotating), runs "
                             "every batch of every size and is stopped")
    parser.add_argument("--also-dataset", metavar="JSONL",
                        help="with --fresh-engines: a second prompt set (every row of the "
                             "file), run by the same fresh engines; rows in --also-out")
    parser.add_argument("--also-out", help="the second set's folder")
    parser.add_argument("--also-methods", help="the methods that run the second set "
                        "(their engines join the rotation)")
    parser.add_argument("--also-batch-sizes", default="1")
    parser.add_argument("--also-max-tokens", type=int,
                        help="the second set's tokens per prompt (default --max-tokens)")
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
    """``paired.md``, ``sweep.md`` where fixed choices ran beside others
    (``sweep``) and, where a category has batches of its own,
    ``paired_categories.md``: the paths written.

    The categories and groups are the run's (its ``context.json``), else
    this command's, so that a ``--summary-only`` with other prompt
    arguments cannot attribute batches to the wrong categories.
    """
    written = [write_summary(out, methods, num_prompts, args.baseline)]
    sweep = write_sweep(out, methods, num_prompts)
    written += [sweep] if sweep else []
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
    # a SIGTERM unwinds like Ctrl-C, so the engine's core process is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
    try:
        also = also_set(args, ks)
    except ValueError as error:
        sys.exit(str(error))
    max_num_seqs = max(batch_sizes + (also.batch_sizes if also is not None else []))
    if args.summary_only:
        print(*write_summaries(out, methods, len(conversations), args), sep="\n")
        return

    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import SamplingParams

    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    write_context(out, run_context(args, target, draft))
    params = SamplingParams(temperature=temperature, max_tokens=args.max_tokens,
                            ignore_eos=True, seed=0)
    warmup_params = SamplingParams(temperature=temperature,
                                   max_tokens=args.switch_warmup_tokens, ignore_eos=True, seed=0)

    def start(method: str, trace_name: str):
        return start_engine(args, method, target, draft, ks[0], max_num_seqs,
                            out if args.trace else None, trace_name)

    if args.fresh_engines:
        sets = [PromptSet(out, conversations, methods, batch_sizes, params)]
        if also is not None:
            also.params = SamplingParams(temperature=temperature,
                                         max_tokens=args.also_max_tokens or args.max_tokens,
                                         ignore_eos=True, seed=0)
            write_context(also.out, run_context(args, target, draft))
            sets.append(also)
        run_fresh_engines(args, sets, start, engine_counts)
        print(*write_summaries(out, methods, len(conversations), args), sep="\n")
        return
    engines, counts, last_engine = {}, {}, None
    results = out / ROWS_FILE
    try:
        for method in methods:
            engines[method] = start(method, method)
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
                        append_row(results, {
                            "batch_size": size, "round": round_index, "batch": batch_index,
                            "method": method, "position": position,
                            **timed_batch(llm, counts[method], batch, params)})
                print(f"b={size} round {round_index + 1}/{args.rounds} done "
                      f"({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
                write_summaries(out, methods, len(conversations), args)
    finally:
        for llm in engines.values():
            stop_llm(llm)
    print(*write_summaries(out, methods, len(conversations), args), sep="\n")


def also_set(args: argparse.Namespace, ks: list[int]) -> PromptSet | None:
    """``--also-dataset``: the second prompt set of a ``--fresh-engines`` run
    (sampling set once vLLM is imported); None without one."""
    if not args.also_dataset:
        return None
    if not (args.fresh_engines and args.also_out and args.also_methods):
        raise ValueError("--also-dataset: needs --fresh-engines, --also-out and --also-methods")
    methods = args.also_methods.split(",")
    check_engines(methods, ks, None, METHOD_NAMES)
    conversations = first_turns(load_prompts(args.also_dataset, None, "all", None))
    Path(args.also_out).mkdir(parents=True, exist_ok=True)
    return PromptSet(Path(args.also_out), conversations, methods,
                     [int(b) for b in args.also_batch_sizes.split(",")], None)


def start_engine(args: argparse.Namespace, method: str, target: str, draft: str, k: int,
                 max_num_seqs: int, trace_folder: Path | None, trace_name: str):
    """A started engine of one ``--methods`` entry (its ``@K``, ``+NAME``),
    its draft trace, with ``--trace``, under ``trace_name``."""
    spec = speculative_config(method_name(method), draft, engine_k(method, k), args.cap)
    if trace_folder is not None:  # the engine's processes read it when they start
        os.environ["VLLM_GAMMATUNE_TRACE"] = str(trace_path(trace_folder, trace_name))
    with started_with_environment(method):
        return start_llm(target, spec, max_model_len=args.max_model_len, dtype=args.dtype,
                         max_num_seqs=max_num_seqs)


def timed_batch(llm, counts: EngineCounts, batch: list, params) -> dict:
    """One batch generated and timed, with its tokens and the engine's count
    differences (read outside the timed span)."""
    before = counts.read()
    started = time.perf_counter()
    outputs = generate(llm, batch, params)
    seconds = time.perf_counter() - started
    after = counts.read()
    return {"time": time.time(), "wall_seconds": seconds,
            "output_tokens": sum(len(o.outputs[0].token_ids) for o in outputs),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
            **{k: after[k] - before[k] for k in after}}


@dataclass
class PromptSet:
    """Prompts measured on the same fresh engines as the run's own: its
    folder (rows, summary), conversations, the methods that run it, its
    batch sizes and sampling."""

    out: Path
    conversations: list
    methods: list[str]
    batch_sizes: list[int]
    params: object


def run_fresh_engines(args: argparse.Namespace, sets: list[PromptSet], start,
                      engine_counts: type[EngineCounts]) -> None:
    """``--fresh-engines``: one engine alive at a time. In each round every
    method's engine (of every set, in order of first mention) is started in
    turn, the first rotating by round (``engine_order``), warmed up on a
    prompt outside the sets, runs its share of the round (every batch of
    every size of every set it is in, in order) and is stopped. Its rows
    are appended per set once its share of that set is complete, so a share
    cut short runs again whole (``shares_done``)."""
    engines = list(dict.fromkeys(m for prompt_set in sets for m in prompt_set.methods))
    for round_index in range(args.rounds):
        todo = {}
        for prompt_set in sets:
            rows_file = prompt_set.out / ROWS_FILE
            done = shares_done(read_jsonl(rows_file) if rows_file.exists() else [], round_index,
                               prompt_set.batch_sizes, len(prompt_set.conversations))
            todo[id(prompt_set)] = set(prompt_set.methods) - done
        for position, method in enumerate(engine_order(engines, round_index, 0)):
            mine = [s for s in sets if method in todo[id(s)]]
            if not mine:
                continue
            started = time.perf_counter()
            llm = start(method, f"{method}_r{round_index}")
            try:
                counts = engine_counts(llm)
                generate(llm, SWITCH_WARMUP_PROMPT, sets[0].params)  # untimed, outside the sets
                for prompt_set in mine:
                    rows = [{"batch_size": size, "round": round_index, "batch": batch_index,
                             "method": method, "position": position,
                             **timed_batch(llm, counts,
                                           prompt_set.conversations[first:first + size],
                                           prompt_set.params)}
                            for size in prompt_set.batch_sizes
                            for batch_index, first in enumerate(
                                range(0, len(prompt_set.conversations), size))]
                    for row in rows:
                        append_row(prompt_set.out / ROWS_FILE, row)
            finally:
                stop_llm(llm)
                llm = None  # the engine's memory goes with its last reference
            print(f"round {round_index + 1}/{args.rounds}: {method} "
                  f"{time.perf_counter() - started:.0f} s with its start "
                  f"({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
        for prompt_set in sets[1:]:
            write_summary(prompt_set.out, prompt_set.methods, len(prompt_set.conversations))
        write_summaries(sets[0].out, sets[0].methods, len(sets[0].conversations), args)
