"""Serving benchmark: each method behind ``vllm serve``, loaded by vLLM's own client.

For every method (and initial length k) one server is started with
``vllm-gammatune serve`` (vLLM's ``vllm serve`` with the CPU-install fix),
and vLLM's serving benchmark client, ``vllm-gammatune bench serve`` (= ``vllm
bench serve``), sends Spec-Bench prompts to it at each ``--concurrency``
(``--max-concurrency``, all requests queued at once). Every request generates
exactly ``--max-tokens`` tokens (``--ignore-eos``), so methods do the same
work. Per cell (method, k, concurrency, temperature), one JSONL line in
``serve_cells.jsonl``: the client's numbers (request throughput, output
tok/s, mean/median/p99 TPOT and TTFT, ...), vLLM's spec-decode counters and
the plugin's ``vllm:gammatune_*`` metrics as differences of ``/metrics``
scraped before and after the client run, and the peak RSS of the server's
process tree. A killed run resumes: cells already in the file are skipped.
The servers' and the client's logs, and the client's own result files, go
to ``--logs DIR`` (default: a new temporary folder, named on stderr), not
to ``--out``.

    VLLM_CPU_OMP_THREADS_BIND=0-1 python -m benchmarks.serve_bench \\
        --out benchmarks/runs/serve --methods no_spec,vllm_draft_model,gammatune \\
        --k 3 --concurrency 1,4,16 --per-category 2 --max-tokens 64 \\
        --spec 'cost={"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 16}'

Interleaved (``--rounds N``, one ``--k``): every method's server is started
at once, and each round runs the client at each concurrency against every
server in turn, the first rotating, so the machine's drift over minutes
cancels in the per-round ratios (``benchmarks.run_paired`` does the same offline).
Rows carry ``round`` and ``position``; ``serve_paired.md`` has the ratios to
the first method with a 95% t-interval over rounds. ``no_spec#2`` names a
second server of ``no_spec`` (A/A). ``--fresh-servers`` keeps one server
alive at a time instead, started afresh for each method in each round, so a
server instance's own speed varies between rounds (inside the interval) rather
than favouring one method for the whole run; ``--warmup-cell`` precedes each
measured cell by one unmeasured run of the same client (steady state).

    python -m benchmarks.serve_bench --out benchmarks/runs/served \\
        --methods no_spec,gammatune_cost --k 8 --concurrency 4,16 --rounds 4

Methods: any name of ``gammatune_tools.bench.methods.METHOD_NAMES`` (built from the
draft, k and ``--cap``; ``vllm_schedule`` is vLLM's batch-size schedule,
K=k at batch 1 and 0 above), plus ``--spec NAME=JSON`` for any
speculative_config (``{draft}`` is replaced by the draft's path), e.g. another
schedule: ``{"method": "draft_model", "model": "{draft}",
"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size":
[[1, 1, 3], [2, 4, 1], [5, 512, 0]]}``.

Prompts: the first turn of each question, rendered with the target's chat
template here and sent as text to ``/v1/completions`` (the client's
``sharegpt`` dataset, ``<out>/prompts_sharegpt.json``, in file order). vLLM's
``custom`` and ``spec_bench`` datasets would do the same but need pandas, which
``vllm-cpu`` does not install; the ShareGPT loader drops prompts over 1,024
tokens (no Spec-Bench prompt is that long with Qwen2.5's tokenizer), and a
cell's ``completed`` says how many requests ran.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from gammatune_tools.bench.context import run_context, write_context
from gammatune_tools.bench.methods import (METHOD_NAMES, engine_k, method_name,
                                           speculative_config)
from gammatune_tools.bench.paired import check_engines
from gammatune_tools.bench.prompts import chat_renderer, load_prompts, sharegpt_rows
from gammatune_tools.bench.records import cell_key, done_keys
from gammatune_tools.bench.serve_runs import (Cell, logs_folder, run_fresh_servers,
                                              run_interleaved, start_server)
from gammatune_tools.bench.serving import add_server_args, server_env
from gammatune_tools.bench.specs import (add_common_args, parse_floats, parse_ks,
                                         parse_spec_options, plan_cells)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, k_default="3")
    parser.add_argument("--logs", help="folder for the servers' and the client's logs and the "
                        "client's result files (default: a new temporary folder)")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--num-prompts", type=int,
                        help="requests per cell (default: every prompt once; vLLM's client "
                             "draws extra ones at random)")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="tokens per request (EOS ignored)")
    add_server_args(parser)
    parser.add_argument("--rounds", type=int,
                        help="interleaved: every method's server up at once, this many "
                             "rounds of every concurrency against each in turn (one --k; "
                             "NAME#2 is a second server of NAME); serve_paired.md")
    parser.add_argument("--baseline", help="--rounds: the method the others are compared "
                        "with (default: the first of --methods, which also starts first)")
    parser.add_argument("--fresh-servers", action="store_true",
                        help="--rounds: one server alive at a time, started afresh for each "
                             "method in each round (the order rotating), so a server "
                             "instance's own speed falls inside the interval over rounds")
    parser.add_argument("--warmup-cell", action="store_true",
                        help="before each measured cell, run the same client once more "
                             "unmeasured at that concurrency (steady state: warm caches, "
                             "the method's statistics and cost fit learned)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # a SIGTERM unwinds like Ctrl-C, so the server's process group is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "serve_cells.jsonl"
    custom = parse_spec_options(args.spec, draft)
    methods = args.methods.split(",")
    methods += [name for name in custom if name not in methods]
    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit)
    dataset = out / "prompts_sharegpt.json"
    dataset.write_text(json.dumps(sharegpt_rows(prompts, chat_renderer(target)), indent=1))
    num_prompts = args.num_prompts or len(prompts)
    concurrencies = parse_ks(args.concurrency)
    temperatures = parse_floats(args.temperature)
    try:
        if (args.fresh_servers or args.warmup_cell) and not args.rounds:
            raise ValueError("--fresh-servers and --warmup-cell need --rounds")
        if args.rounds:  # the cells are planned per round (run_interleaved)
            check_engines(methods, parse_ks(args.k), args.baseline, [*METHOD_NAMES, *custom])
        else:
            plan = plan_cells(methods, parse_ks(args.k), concurrencies, temperatures, custom,
                              done_keys(results), size_name="c")
    except ValueError as error:
        sys.exit(str(error))
    logs = logs_folder(args.logs)
    (logs / "client").mkdir(exist_ok=True)
    print(f"[serve_bench] logs: {logs}", file=sys.stderr)
    env = server_env(args)
    os.environ.update({k: env[k] for k in ("VLLM_CPU_OMP_THREADS_BIND",
                                           "VLLM_CPU_KVCACHE_SPACE")})
    context = run_context(args, target, draft)
    context["prompts"] = {"count": len(prompts), "requests_per_cell": num_prompts,
                          "categories": sorted({c for c, _ in prompts})}
    write_context(out, context)

    def spec_of(method: str, k: int) -> dict | None:
        name = method_name(method)
        return (custom[name] if name in custom
                else speculative_config(name, draft, max(engine_k(method, k), 1), args.cap))

    cell = Cell(args, target, dataset, num_prompts, env, results, logs, context["date"])
    if args.rounds:
        run = run_fresh_servers if args.fresh_servers else run_interleaved
        run(args, methods, spec_of, concurrencies, temperatures, cell, out)
        return
    run_plan(args, plan, spec_of, cell, out)


def run_plan(args, plan, spec_of, cell: Cell, out: Path) -> None:
    """One server per (method, k) of ``plan``, in turn, every cell it still lacks."""
    total = sum(len(todo) for _, _, todo, _ in plan)
    finished, started_all = 0, time.time()
    for method, k, todo, variant in plan:
        spec = spec_of(method, k)
        slug = f"{method}_k{k}"
        server = start_server(args, cell.target, spec, cell.env, out, cell.logs, slug)
        try:
            for concurrency, temperature in todo:
                key = cell_key(method, k, concurrency, temperature, variant, size_name="c")
                eta = ((time.time() - started_all) / finished * (total - finished)
                       if finished else None)
                print(f"[serve_bench] cell {finished + 1}/{total}: {key}"
                      + (f" (~{eta / 60:.1f} min left)" if eta else ""), file=sys.stderr)
                cell.run(server, key, method, k, concurrency, temperature, spec, variant,
                         f"{slug}_c{concurrency}_t{temperature}.json")
                finished += 1
        finally:
            server.stop()
    print(f"[serve_bench] {finished} cells in {(time.time() - started_all) / 60:.1f} min; "
          f"{cell.results}", file=sys.stderr)


if __name__ == "__main__":
    main()
