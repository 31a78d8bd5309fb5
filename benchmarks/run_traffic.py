"""Served traffic: quiet, busy and quiet again, sent back to back to one fresh server per choice.

Every choice (``--methods``: no speculation, vLLM's ``draft_model`` at a
fixed K as ``vllm_draft_model@K``, its batch-size table as a ``--spec``, the
plugin's methods) gets the same fixed work: a trace of phases (``--phases``)
sent by vLLM's own client (``vllm bench serve``, run in this process once per
phase) to one ``vllm-gammatune serve`` that stays up for the whole trace,
so what it learnt in one phase is carried into the next. The prompts mix
kinds (``--kinds``: code, prose, math, long context from Spec-Bench's
categories), each used once in the trace, every request generating exactly
``--max-tokens`` tokens (EOS ignored).

Rounds are interleaved (``--rounds``): in each, every choice's server is
started afresh in turn, the first rotating by round, sent the whole trace
and stopped. Per phase and over the whole trace: output tokens/s, TPOT and
TTFT p50/p99 from the client, the counts, and the speed-up over
``--baseline`` and of ``--subject`` over every static choice with 95%
t-intervals over rounds; with ``--trace``, the plugin's decisions per phase
from its ``VLLM_GAMMATUNE_TRACE`` file (share of steps that drafted, draft
length, catch-up tokens, steps to change its mind after the load changed)
and a plot (with matplotlib). Results in ``--out``: ``traffic.jsonl`` (one
row per round, choice and phase), ``traffic_trace.json`` (the trace),
``prompts/`` (each phase's prompts as sent), ``traffic_summary.json``,
``traffic.md``, ``traffic.png``, ``traces/``, ``context.json``; the servers'
and the client's logs in ``--logs``. A killed run resumes: traces already
complete in ``traffic.jsonl`` are skipped (a trace cut short runs again
whole).

    VLLM_CPU_OMP_THREADS_BIND=0-1 python -m benchmarks.run_traffic \\
        --out benchmarks/runs/traffic --methods no_spec,vllm_draft_model@3,gammatune_cost@8 \\
        --phases quiet:1:6,busy:8:24:2:0.5,quiet_again:1:6 --rounds 4 --trace
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from gammatune_tools.bench.context import run_context, write_context
from gammatune_tools.bench.methods import (METHOD_NAMES, engine_k, method_name,
                                           speculative_config)
from gammatune_tools.bench.paired import check_engines, engine_order
from gammatune_tools.bench.records import append_row, read_jsonl, trace_path
from gammatune_tools.bench.serve_runs import logs_folder, start_server
from gammatune_tools.bench.serving import add_server_args, server_env
from gammatune_tools.bench.specs import add_common_args, parse_floats, parse_ks, parse_spec_options
from gammatune_tools.bench.traffic import (SHAREGPT_MAX_PROMPT_TOKENS, build_trace, parse_kinds,
                                           parse_phases, prompt_budget, prompt_pool, run_trace,
                                           trace_record, write_phase_datasets)
from gammatune_tools.bench.traffic_report import (ROWS_FILE, TRACE_FILE, complete_traces,
                                                  write_traffic_report)

DEFAULT_PHASES = "quiet:1:6,busy:8:24:2:0.5,quiet_again:1:6"
DEFAULT_KINDS = ("code=coding,prose=writing+roleplay,math=math+math_reasoning,"
                 "long=summarization+rag")
#: seconds to wait before a phase boundary is read in a trace file: a few of
#: the trace writer's flush periods (``vllm_gammatune.telemetry.trace.FLUSH_SECONDS``)
TRACE_FLUSH_WAIT_S = 1.5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, methods_default="no_spec,vllm_draft_model@3,gammatune_cost@8",
                    k_default="3")
    parser.set_defaults(per_category=None)  # the pool: every prompt of each category
    parser.add_argument("--phases", default=DEFAULT_PHASES,
                        help="NAME:CONCURRENCY:REQUESTS[:RATE[:BURSTINESS]], comma separated, "
                             "in order (RATE: requests/s, default all at once)")
    parser.add_argument("--kinds", default=DEFAULT_KINDS,
                        help="KIND=CATEGORY[+CATEGORY...], comma separated; request j of "
                             "each phase is of kind j mod the number of kinds")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="tokens per request (EOS ignored)")
    parser.add_argument("--max-prompt-tokens", type=int, default=SHAREGPT_MAX_PROMPT_TOKENS,
                        help="longest prompt kept (vLLM's ShareGPT loader drops longer ones)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline", help="the choice speed-ups are taken over "
                        "(default: the first of --methods)")
    parser.add_argument("--subject", help="the choice compared with every static one "
                        "(default: the first gammatune_cost entry)")
    add_server_args(parser)
    parser.add_argument("--logs", help="folder for the servers' and the client's logs "
                        "(default: a new temporary folder)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the rows in --out, measure nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # a SIGTERM unwinds like Ctrl-C, so the server's process group is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        phases, kinds = parse_phases(args.phases), parse_kinds(args.kinds)
        if len(parse_floats(args.temperature)) != 1:
            raise ValueError(f"--temperature: one value; got {args.temperature!r}")
    except ValueError as error:
        sys.exit(str(error))
    # serve_command sizes the servers' --max-num-seqs by the largest concurrency
    args.concurrency = str(max(phase.concurrency for phase in phases))

    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    custom = parse_spec_options(args.spec, draft)
    choices = args.methods.split(",")
    choices += [name for name in custom if name not in choices]
    subject = args.subject or next(
        (c for c in choices if method_name(c) == "gammatune_cost"), None)
    try:
        check_engines(choices, parse_ks(args.k), args.baseline, [*METHOD_NAMES, *custom])
        if subject is not None and subject not in choices:
            raise ValueError(f"--subject {subject!r}: not in --methods ({', '.join(choices)})")
    except ValueError as error:
        sys.exit(str(error))
    baseline = args.baseline or choices[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        pool = prompt_pool(target, args.dataset, args.split, args.per_category, args.limit)
        budget = prompt_budget(args.max_prompt_tokens, args.max_model_len, args.max_tokens)
        try:
            trace = build_trace(phases, kinds, pool, budget)
        except ValueError as error:
            sys.exit(str(error))
        datasets = write_phase_datasets(trace, phases, out / "prompts")
        (out / TRACE_FILE).write_text(json.dumps(trace_record(trace, phases), indent=1))

        def spec_of(choice: str) -> dict | None:
            name = method_name(choice)
            return (custom[name] if name in custom else speculative_config(
                name, draft, max(engine_k(choice, parse_ks(args.k)[0]), 1), args.cap))

        run_rounds(args, choices, spec_of, phases, datasets, target, draft, out, baseline,
                   subject)
    print(write_traffic_report(out, choices, [p.name for p in phases], baseline, subject),
          file=sys.stderr)


def run_rounds(args, choices, spec_of, phases, datasets, target, draft, out, baseline,
               subject) -> None:
    """``--rounds`` rounds; in each, every choice's server afresh in turn, the
    first rotating by round, the whole trace sent to it; its rows appended
    once the trace is complete, the report rewritten after every round."""
    logs = logs_folder(args.logs)
    print(f"[traffic] logs: {logs}", file=sys.stderr)
    env = server_env(args)
    os.environ.update({k: env[k] for k in ("VLLM_CPU_OMP_THREADS_BIND",
                                           "VLLM_CPU_KVCACHE_SPACE")})
    context = run_context(args, target, draft)
    context["command"] = "python -m benchmarks.run_traffic " + shlex.join(sys.argv[1:])
    write_context(out, context)
    rows_file = out / ROWS_FILE
    done = set(complete_traces(read_jsonl(rows_file), len(phases)))
    for round_index in range(args.rounds):
        for position, choice in enumerate(engine_order(choices, round_index, 0)):
            if (choice, round_index) in done:
                continue
            slug = f"{choice.replace('#', '_')}_r{round_index}"
            print(f"[traffic] round {round_index + 1}/{args.rounds}: {choice}", file=sys.stderr)
            spec = spec_of(choice)
            trace_file = trace_path(out, slug) if args.trace else None
            server = start_server(args, target, spec, env, out, logs, slug)
            try:
                rows = run_trace(server, args, target, datasets, phases, logs, slug,
                                 trace_file, TRACE_FLUSH_WAIT_S)
            finally:
                server.stop()
            for row in rows:
                append_row(rows_file, {
                    "choice": choice, "round": round_index, "position": position,
                    "speculative_config": spec,
                    "trace_file": str(trace_file.relative_to(out)) if trace_file else None,
                    **row})
            print(f"[traffic]   {sum(r['duration'] for r in rows):.1f} s: "
                  + ", ".join(f"{r['phase']} {r['duration']:.1f} s" for r in rows),
                  file=sys.stderr)
        write_traffic_report(out, choices, [p.name for p in phases], baseline, subject)


if __name__ == "__main__":
    main()
