"""Benchmark harness: speculative methods x initial lengths x batch sizes.

One engine per (method, k); every batch size of the cell runs in it. Results
are appended to a JSONL file one cell at a time, so a killed run resumes where
it stopped (cells already in the file are skipped). ``report.py`` turns the
file into Markdown tables and plots.

    python benchmarks/run_bench.py --out benchmarks/results/quick \\
        --methods no_spec,vllm_draft_model,fixed_draft,gammatune --k 2,4,8 \\
        --dataset specbench --per-category 1 --max-tokens 64

Prompts: Spec-Bench (``--dataset specbench``: every category, ``--per-category``
questions each, first turn only; ``--split tune`` keeps odd question ids,
``eval`` even ones), GSM8K (``--dataset gsm8k``) or any JSONL with a
``prompt`` or ``question`` field. The target's chat template is applied.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def load_prompts(dataset: str, per_category: int, split: str, limit: int | None):
    """[(category, conversation)]: a user turn each."""
    if dataset == "specbench":
        path = SHARED_DATA / "spec_bench_question.jsonl"
        rows = [json.loads(line) for line in path.open()]
        keep = {"tune": 1, "eval": 0}.get(split)
        by_category = defaultdict(list)
        for row in rows:
            if keep is None or row["question_id"] % 2 == keep:
                by_category[row["category"]].append(row)
        prompts = [(cat, row["turns"][0]) for cat, items in by_category.items()
                   for row in items[:per_category]]
    else:
        path = SHARED_DATA / "gsm8k_test.jsonl" if dataset == "gsm8k" else Path(dataset)
        rows = [json.loads(line) for line in path.open()]
        name = "gsm8k" if dataset == "gsm8k" else path.stem
        prompts = [(row.get("category", name), row.get("prompt") or row["question"])
                   for row in rows]
    if limit:
        prompts = prompts[:limit]
    return [(cat, [{"role": "user", "content": text}]) for cat, text in prompts]


def cell_key(method: str, k: int, batch_size: int, temperature: float,
             variant: dict | None = None) -> str:
    suffix = f"|{json.dumps(variant, sort_keys=True)}" if variant else ""
    return f"{method}|k={k}|b={batch_size}|t={temperature}{suffix}"


def done_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {json.loads(line)["key"] for line in path.open() if line.strip()}


def context(args, target: str, draft: str) -> dict:
    import vllm

    import vllm_gammatune

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "vllm": vllm.__version__,
        "vllm_gammatune": vllm_gammatune.__version__,
        "target": target,
        "draft": draft,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "args": vars(args),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="results directory")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--methods", default="no_spec,vllm_draft_model,gammatune")
    parser.add_argument("--k", default="2,4,8", help="initial/fixed draft lengths")
    parser.add_argument("--cap", type=int, default=16, help="adaptive methods' cap")
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument("--dataset", default="specbench")
    parser.add_argument("--split", default="all", choices=["all", "tune", "eval"])
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
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

    from vllm_gammatune.config import is_plugin_method
    from vllm_gammatune.evaluation import METHODS, measure, start_llm, stop_llm
    from vllm_gammatune.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "cells.jsonl"
    (out / "context.json").write_text(json.dumps(context(args, target, draft), indent=2))

    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit)
    conversations = [conv for _, conv in prompts]
    categories = [cat for cat, _ in prompts]
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    ks = [int(k) for k in args.k.split(",")]
    extra = json.loads(args.method_args)

    from vllm import SamplingParams

    params = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                            ignore_eos=not args.stop_at_eos, seed=0)
    plan = []
    for method in args.methods.split(","):
        if method not in METHODS:
            sys.exit(f"--methods: unknown {method!r}; allowed: {', '.join(METHODS)}")
        variant = extra if is_plugin_method(method) else {}
        for k in [0] if method == "no_spec" else ks:
            todo = [b for b in batch_sizes
                    if cell_key(method, k, b, args.temperature, variant)
                    not in done_keys(results)]
            if todo:
                plan.append((method, k, todo, variant))
    total = sum(len(todo) for _, _, todo, _ in plan)
    bar = tqdm(total=total, desc="cells", unit="cell")
    for method, k, todo, variant in plan:
        spec = METHODS[method](draft, max(k, 1), args.cap)
        if spec is not None:
            spec = {**spec, **variant}
        llm = start_llm(target, spec, max_model_len=4096, dtype="bfloat16",
                        max_num_seqs=max(batch_sizes))
        try:
            for batch_size in todo:
                per_category = defaultdict(lambda: [0, 0.0])
                outputs_seen = []

                def on_outputs(outputs, _seen=outputs_seen):
                    _seen.extend(outputs)

                started = time.time()
                result = measure(llm, method, k, conversations, params, batch_size,
                                 on_outputs=on_outputs)
                row = {"key": cell_key(method, k, batch_size, args.temperature, variant),
                       "variant": variant, "temperature": args.temperature, "max_tokens": args.max_tokens,
                       "dataset": args.dataset, "speculative_config": spec,
                       "started": started, **result.to_dict()}
                for cat, output in zip(categories, outputs_seen):
                    per_category[cat][0] += len(output.outputs[0].token_ids)
                row["tokens_per_category"] = {c: v[0] for c, v in per_category.items()}
                row["texts"] = [o.outputs[0].text for o in outputs_seen]
                row["token_ids"] = [list(o.outputs[0].token_ids) for o in outputs_seen]
                with results.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                bar.set_postfix_str(f"{method} k={k} b={batch_size}: "
                                    f"{result.tokens_per_second:.2f} tok/s")
                bar.update(1)
        finally:
            stop_llm(llm)
    bar.close()


if __name__ == "__main__":
    main()
