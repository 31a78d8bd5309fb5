"""The GPU table: throughput on one NVIDIA GPU against vLLM's own draft model on both runners.

    python -m benchmarks.gpu_suite --out benchmarks/runs/gpu --target DIR --draft DIR \\
        --methods no_spec,vllm_draft_model,gammatune,gammatune_cost@4 \\
        --vllm-runners v1,v2,v2_adaptive --k 4 --batch-sizes 1,8,32
    python -m benchmarks.gpu_suite --out DIR ... --dry-run     # the cells, no GPU needed

(``python -m benchmarks.reproduce gpu`` runs the published design.)

``--target`` and ``--draft`` name models already on disk (directories with a
config.json; nothing is downloaded), checked before anything starts. Engines,
one after another, each in its own process (a fresh CUDA context whose memory
is freed when it exits, and the environment variables that choose vLLM's
model runner read afresh; this process never opens one):

- ``no_spec``: the target alone, as vLLM builds it by default;
- ``vllm_draft_model[v1]``: vLLM's ``draft_model`` on the V1 runner
  (``VLLM_USE_V2_MODEL_RUNNER=0``), the runner the plugin's methods get;
- ``vllm_draft_model[v2]``: on Model Runner V2 (``VLLM_USE_V2_MODEL_RUNNER=1``;
  vLLM's default on CUDA, async scheduling on by vLLM's own default);
- ``vllm_draft_model[v2_adaptive]``: V2 with ``enable_adaptive_verification``,
  where the installed vLLM's ``SpeculativeConfig`` has that field (otherwise
  its cells are listed as skipped);
- the plugin's methods (``gammatune``, ``gammatune_cost``...): the V1 runner,
  which vLLM picks for them, with the CUDA hot path (the plugin's default on
  CUDA).

Every engine runs with CUDA graphs (vLLM's default, unlike the CPU tables'
eager engines) and ``cudagraph_metrics``, so each cell also counts the engine
steps whose target forward ran a FULL, PIECEWISE or no CUDA graph (vLLM's
``SchedulerStats.cudagraph_stats``; the cell's one warm-up request included).
Per cell: tok/s with the counts beside it (``records.Measurement``: accepted
length, target passes and draft tokens per generated token), the runner and
async scheduling vLLM resolved, and the graph modes. Rows go to
``cells.jsonl`` (resumable: cells already there are skipped), engines that
failed to start to ``errors.jsonl``, the table to ``report.md``, the GPU,
vLLM version and models to ``context.json``. ``--dry-run`` also prints the
plan's time budget on one H100 (``gammatune_tools.bench.gpu_budget``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from gammatune_tools.bench.methods import (NO_SPECULATION, VLLM_FIXED_K, check_method_names,
                                           engine_environment, engine_k, method_name,
                                           speculative_config)
from gammatune_tools.bench.records import (append_row, cell_key, done_keys, read_jsonl,
                                           trace_path)
from gammatune_tools.bench.specs import add_common_args, parse_floats, parse_spec_options
from gammatune_tools.bench.tables import fmt, percent

#: vLLM's draft_model on each runner: environment and speculative_config additions
VLLM_RUNNERS = {
    "v1": ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, {}),
    "v2": ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, {}),
    "v2_adaptive": ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, {"enable_adaptive_verification": True}),
}

#: the target's CUDA graph modes as vLLM's cudagraph metrics name them
GRAPH_MODES = ("FULL", "PIECEWISE", "NONE")


@dataclasses.dataclass(frozen=True)
class Engine:
    """One engine of the table: its name in the cell keys, its draft length,
    its speculative_config (None: no speculation), its environment, and why
    its cells are skipped (None: they run)."""

    name: str
    k: int
    spec: dict | None
    env: dict
    skipped: str | None = None


def has_adaptive_verification() -> bool:
    """Whether the installed vLLM's SpeculativeConfig has ``enable_adaptive_verification``."""
    from vllm.config import SpeculativeConfig

    return any(field.name == "enable_adaptive_verification"
               for field in dataclasses.fields(SpeculativeConfig))


def plan_engines(methods: list[str], runners: list[str], draft: str, k: int, cap: int,
                 adaptive_verification: bool, custom: dict[str, dict] | None = None
                 ) -> list[Engine]:
    """The engines of ``--methods`` (``NAME@K``: NAME at its own length;
    ``NAME+host``: a plugin method on the host path, ``+hot`` on the CUDA hot
    path, the default on CUDA), vLLM's fixed-K drafter once per runner of
    ``--vllm-runners``, then each ``--spec`` config (``custom``) on the runner
    vLLM picks for it."""
    check_method_names(methods, name_of=method_name)
    unknown = [runner for runner in runners if runner not in VLLM_RUNNERS]
    if unknown:
        raise ValueError(f"--vllm-runners: unknown {unknown}; allowed: {', '.join(VLLM_RUNNERS)}")
    engines = []
    for entry in methods:
        method, length, path = method_name(entry), engine_k(entry, k), engine_environment(entry)
        if method == NO_SPECULATION:
            engines.append(Engine(method, 0, None, {}))
            continue
        spec = speculative_config(method, draft, length, cap)
        if method not in VLLM_FIXED_K:
            engines.append(Engine(entry, length, spec, dict(path)))
            continue
        for runner in runners:
            env, extra = VLLM_RUNNERS[runner]
            skipped = None if adaptive_verification or not extra else (
                "the installed vLLM's SpeculativeConfig has no enable_adaptive_verification")
            engines.append(Engine(f"{entry}[{runner}]", length, {**spec, **extra}, env, skipped))
    return engines + [Engine(name, 0, spec, {}) for name, spec in (custom or {}).items()]


def cells(engines: list[Engine], batch_sizes: list[int],
          temperatures: list[float]) -> list[tuple[Engine, int, float, str]]:
    """(engine, batch size, temperature, cell key), engine by engine."""
    return [(engine, size, temperature, cell_key(engine.name, engine.k, size, temperature))
            for engine in engines for temperature in temperatures for size in batch_sizes]


def cell_line(engine: Engine, size: int, temperature: float) -> str:
    env = " ".join(f"{key}={value}" for key, value in engine.env.items())
    what = "skipped: " + engine.skipped if engine.skipped else json.dumps(engine.spec)
    return f"{engine.name:32} k={engine.k:<2} b={size:<3} t={temperature:<4} {env:32} {what}"


class CudaGraphModes:
    """Engine steps by the CUDA graph mode the target's forward ran in, counted
    where the engine hands each step's ``SchedulerStats`` to its stat loggers
    (``cudagraph_stats`` is set when the engine has ``cudagraph_metrics=True``)."""

    def __init__(self, llm):
        self.steps: Counter = Counter()
        manager = llm.llm_engine.logger_manager
        record = manager.record

        def counting(scheduler_stats, *args, **kwargs):
            stat = getattr(scheduler_stats, "cudagraph_stats", None)
            if stat is not None:
                self.steps[stat.runtime_mode] += 1
            return record(scheduler_stats, *args, **kwargs)

        manager.record = counting

    def snapshot(self) -> dict[str, int]:
        return dict(self.steps)

    @staticmethod
    def difference(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        return {mode: after.get(mode, 0) - before.get(mode, 0) for mode in after}


def gpu_context() -> dict:
    """The GPUs and torch's CUDA version, beside the harness's context. Read
    through NVML, not torch.cuda: a CUDA context opened here would hold GPU
    memory for the whole run, beside every engine's process."""
    import torch

    names = []
    try:
        from vllm.third_party import pynvml

        pynvml.nvmlInit()
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
                names.append(name.decode() if isinstance(name, bytes) else name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVIDIA driver (or no NVML) here: no GPU to name
        names = []
    return {"gpu": names[0] if names else None, "gpu_count": len(names),
            "torch_cuda": torch.version.cuda}


def model_dirs(args) -> tuple[str, str]:
    """``--target`` and ``--draft``: directories already on disk holding a
    config.json; SystemExit naming the flag and the path otherwise."""
    dirs = []
    for flag, path in (("--target", args.target), ("--draft", args.draft)):
        if not path:
            sys.exit(f"{flag}: required: the directory of a model already on disk (a "
                     f"Hugging Face model directory; this suite downloads nothing)")
        if not Path(path).expanduser().is_dir():
            sys.exit(f"{flag} {path}: no such directory")
        if not (Path(path).expanduser() / "config.json").is_file():
            sys.exit(f"{flag} {path}: not a Hugging Face model directory (no config.json)")
        dirs.append(str(Path(path).expanduser().resolve()))
    return dirs[0], dirs[1]


def plan_budget(args, engines: list[Engine]):
    """The plan's pessimistic time on one H100: every engine that runs, counted
    cold, and its cells' engine steps (``gammatune_tools.bench.gpu_budget``)."""
    from gammatune_tools.bench.gpu_budget import suite_budget
    from gammatune_tools.bench.prompts import load_prompts

    prompts = len(load_prompts(args.dataset, args.per_category, args.split, args.limit))
    # one engine runs every batch size at every temperature, one cell each
    cells = [int(b) for b in args.batch_sizes.split(",")] * len(parse_floats(args.temperature))
    return suite_budget(sum(not engine.skipped for engine in engines), cells, prompts,
                        args.max_tokens)


def run_engine(args, engine: Engine, todo: list[tuple[int, float, str]], out: Path) -> None:
    """One engine's cells, in this process (``--engine``)."""
    if not todo:
        return
    from gammatune_tools.bench.engine import measure, start_llm, stop_llm
    from gammatune_tools.bench.prompts import first_turns, load_prompts
    from vllm import SamplingParams

    conversations = first_turns(load_prompts(args.dataset, args.per_category, args.split,
                                             args.limit))
    try:
        llm = start_llm(args.target, engine.spec, enforce_eager=args.enforce_eager,
                        cudagraph_metrics=True,
                        max_model_len=args.max_model_len, dtype=args.dtype,
                        max_num_seqs=max(size for size, _, _ in todo),
                        gpu_memory_utilization=args.gpu_memory_utilization)
    except Exception as error:  # the engine refused this configuration: say why
        append_row(out / "errors.jsonl", {"engine": engine.name, "spec": engine.spec,
                                          "env": engine.env, "error": repr(error)})
        raise
    modes = CudaGraphModes(llm)
    config = llm.llm_engine.vllm_config
    try:
        for size, temperature, key in todo:
            params = SamplingParams(temperature=temperature, max_tokens=args.max_tokens,
                                    ignore_eos=True, seed=0)
            before, started = modes.snapshot(), time.time()
            result = measure(llm, engine.name, engine.k, conversations, params, size)
            row = {"key": key, "engine": engine.name, "env": engine.env,
                   "speculative_config": engine.spec, "temperature": temperature,
                   "max_tokens": args.max_tokens, "started": started,
                   "v2_model_runner": config.use_v2_model_runner,
                   "async_scheduling": config.scheduler_config.async_scheduling,
                   "cudagraph_mode": str(config.compilation_config.cudagraph_mode),
                   "cudagraph_steps": CudaGraphModes.difference(before, modes.snapshot()),
                   **result.to_dict()}
            append_row(out / "cells.jsonl", row)
            print(f"{key}: {result.tokens_per_second:.1f} tok/s", file=sys.stderr, flush=True)
    finally:
        stop_llm(llm)


def write_report(out: Path, context: dict) -> Path:
    """``report.md``: per batch size, every engine's tok/s and ratio to no speculation,
    its counts and its target's CUDA graph modes."""
    rows = read_jsonl(out / "cells.jsonl")
    lines = [f"# GPU table: {context.get('gpu')}", "",
             f"vLLM {context.get('vllm')}, torch {context.get('torch')} (CUDA "
             f"{context.get('torch_cuda')}), target `{context.get('target')}`, draft "
             f"`{context.get('draft')}`, {context.get('date')}.", ""]
    header = ("| engine | runner | async | tok/s | x no_spec | tokens | accepted length | "
              "target passes/token | draft tokens/token | FULL | PIECEWISE | steps |")
    for size in sorted({row["batch_size"] for row in rows}):
        at_size = [row for row in rows if row["batch_size"] == size]
        base = next((row["tokens_per_second"] for row in at_size
                     if row["engine"] == NO_SPECULATION), None)
        lines += [f"## Batch {size}", "", header, "|" + "---|" * (header.count("|") - 1)]
        for row in at_size:
            steps = row.get("cudagraph_steps") or {}
            total = sum(steps.values())
            share = {mode: steps.get(mode, 0) / total if total else None for mode in GRAPH_MODES}
            ratio = row["tokens_per_second"] / base if base else None
            lines.append(
                f"| {row['engine']} | {'V2' if row['v2_model_runner'] else 'V1'} | "
                f"{'on' if row['async_scheduling'] else 'off'} | "
                f"{fmt(row['tokens_per_second'], 1)} | {fmt(ratio, 3)} | {row['output_tokens']} | "
                f"{fmt(row['mean_accepted_length'])} | {fmt(row['target_passes_per_token'], 3)} | "
                f"{fmt(row['draft_tokens_per_token'])} | {percent(share['FULL'])} | "
                f"{percent(share['PIECEWISE'])} | {total} |")
        lines.append("")
    measured = {row["engine"] for row in rows}
    errors = {error["engine"]: " ".join(error["error"].split())
              for error in read_jsonl(out / "errors.jsonl") if error["engine"] not in measured}
    if errors:
        lines += ["## Engines that did not start", ""]
        lines += [f"- `{engine}`: {error}" for engine, error in errors.items()]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_suite",
                                     description=__doc__.splitlines()[0])
    add_common_args(parser, methods_default="no_spec,vllm_draft_model,gammatune,gammatune_cost@4",
                    k_default="4")
    parser.add_argument("--vllm-runners", default=",".join(VLLM_RUNNERS),
                        help="vLLM's draft_model once per runner: " + ", ".join(VLLM_RUNNERS))
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--enforce-eager", action="store_true",
                        help="CUDA graphs off (default: on, as vLLM runs by default)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the cells (and the skipped ones) and exit; no GPU needed")
    parser.add_argument("--engine", help="run this engine's cells in this process "
                        "(the suite starts one such process per engine)")
    args = parser.parse_args(argv)
    if "," in args.k:
        parser.error("--k: one length (NAME@K sets another for one method)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if not args.dry_run or args.target or args.draft:  # first: a wrong path fails in seconds
        args.target, args.draft = model_dirs(args)
    draft = args.draft or "{draft}"
    try:
        engines = plan_engines(args.methods.split(","), args.vllm_runners.split(","), draft,
                               int(args.k), args.cap, has_adaptive_verification(),
                               parse_spec_options(args.spec, draft))
    except ValueError as error:
        sys.exit(str(error))
    planned = cells(engines, [int(b) for b in args.batch_sizes.split(",")],
                    parse_floats(args.temperature))
    if args.dry_run:
        for engine, size, temperature, _ in planned:
            print(cell_line(engine, size, temperature))
        print(f"# budget on one H100: {plan_budget(args, engines).line()}")
        return 0
    if args.engine:
        by_name = {e.name: e for e in engines}
        if args.engine not in by_name:
            sys.exit(f"--engine: unknown {args.engine!r}; allowed: {', '.join(by_name)}")
        engine = by_name[args.engine]
        done = done_keys(out / "cells.jsonl")
        run_engine(args, engine, [(size, t, key) for e, size, t, key in planned
                                  if e is engine and key not in done], out)
        return 0
    return run_suite(args, argv if argv is not None else sys.argv[1:], engines, planned, out)


def run_suite(args, argv: list[str], engines: list[Engine], planned: list, out: Path) -> int:
    """Every engine with cells still to run, each in its own process; then the report."""
    from gammatune_tools.bench.context import run_context, write_context
    from gammatune_tools.model_prep.vocab import check_same_vocab

    target, draft = args.target, args.draft  # checked by model_dirs
    check_same_vocab(target, draft)
    out.mkdir(parents=True, exist_ok=True)
    context = {**run_context(args, target, draft), **gpu_context()}
    write_context(out, context)
    done = done_keys(out / "cells.jsonl")
    failed = 0
    for engine in engines:
        if engine.skipped or all(key in done for e, _, _, key in planned if e is engine):
            continue
        command = [sys.executable, "-m", "benchmarks.gpu_suite", *argv, "--target", target,
                   "--draft", draft, "--engine", engine.name]
        print("+ " + " ".join(f"{k}={v}" for k, v in engine.env.items()) + " " + engine.name,
              file=sys.stderr, flush=True)
        trace = {"VLLM_GAMMATUNE_TRACE": str(trace_path(out, engine.name))} if args.trace else {}
        code = subprocess.call(command, env={**os.environ, **engine.env, **trace})
        failed += code != 0
    print(f"report: {write_report(out, context)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
