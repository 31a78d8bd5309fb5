"""Markdown report and plot from a run_bench results directory.

    python -m benchmarks.write_report benchmarks/results/headline [--serve DIR] [--trace FILE]

Reads ``cells.jsonl`` (``benchmarks.run_bench``) and/or ``serve_cells.jsonl``
(``benchmarks.serve_bench``; from ``--serve DIR`` or the same directory) and
writes, beside them: ``report.md`` (per cell; per method mean ± std across
initial lengths, the GammaTune paper's Table 2 statistic; per category;
serving), ``results.json`` (the run's context and every cell),
``throughput.png`` (tok/s per method, error bars across initial lengths),
``throughput_vs_batch.png`` (methods as lines over batch size) and
``draft_trace.png`` (one request's draft length and accepted tokens per
step, like the GammaTune paper's Figure 2a, from a ``VLLM_GAMMATUNE_TRACE``
file: ``--trace`` or the longest request found in ``traces/*.jsonl``).

The tables and what their columns mean: ``gammatune_tools.bench.report``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gammatune_tools.bench.context import read_context, read_contexts
from gammatune_tools.bench.plots import plot_by_batch, plot_throughput, plot_trace
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.report import build_report
from gammatune_tools.bench.traces import load_trace, longest_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--serve", type=Path, help="a serve_bench results directory")
    parser.add_argument("--trace", type=Path, help="a VLLM_GAMMATUNE_TRACE file")
    parser.add_argument("--req-id", help="the request to plot (default: most steps)")
    args = parser.parse_args()
    directory = args.directory
    rows, context = read_jsonl(directory / "cells.jsonl"), read_context(directory)
    serve_dir = args.serve or directory
    serve_rows = read_jsonl(serve_dir / "serve_cells.jsonl")
    if not context:
        context = read_context(serve_dir)
    (directory / "report.md").write_text(build_report(rows, context, serve_rows))
    (directory / "results.json").write_text(json.dumps(
        {"context": context, "contexts": read_contexts(directory),
         "cells": rows, "serve_cells": serve_rows}, indent=1))
    try:
        if rows:
            plot_throughput(rows, directory / "throughput.png")
            plot_by_batch(rows, directory / "throughput_vs_batch.png")
        traces = [args.trace] if args.trace else sorted((directory / "traces").glob("*.jsonl"))
        if args.req_id and args.trace:
            steps = load_trace(args.trace).get(args.req_id)
            chosen = (args.trace, args.req_id, steps) if steps else None
        else:
            chosen = longest_trace(traces)
        if chosen:
            trace_file, req_id, steps = chosen
            plot_trace(steps, f"{trace_file.stem}: request {req_id}",
                       directory / "draft_trace.png")
    except ImportError:
        print("matplotlib not installed: no plots (pip install -e 'tools[plots]')")
    print(directory / "report.md")


if __name__ == "__main__":
    main()
