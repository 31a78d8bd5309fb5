"""The plugin's host time per engine step on the CUDA hot path, forced on the CPU.

    python -m benchmarks.host_time --out DIR [--methods gammatune,gammatune_cost]
        [--batch-sizes 1,8,32] [--steps 40] [--target T --draft D]

Under synchronous scheduling on a GPU, the plugin's host time per step adds
to a GPU step of a few ms. Here the hot path runs on the CPU
(``VLLM_GAMMATUNE_CUDA_HOT_PATH=1``), in process, one engine per method and
batch size (``max_num_seqs`` = batch size, that many prompts, greedy,
``ignore_eos``, K = 8): ``--warmup`` steps (the prefill) are skipped, then
``--steps`` decode steps are timed one by one. Inside the plugin's entry
points each instant goes to one category (``gammatune_tools.bench.host_clock``),
and ``split_step`` turns a step's categories into:

- host time: the plugin's Python, host numpy, and the views and metadata
  reads of tensors it makes (host work on any device);
- ops: the torch calls it makes that run a kernel (on a GPU an asynchronous
  launch; counted, their CPU compute reported apart, and ``count x 5 us``
  reported as an ESTIMATE of the launches);
- excluded: the draft model's forward passes and logits (GPU work) and
  vLLM's own code the plugin wraps or extends.

Catching torch calls costs some us a call: ``--rounds`` passes with calls
caught alternate with passes without (fresh requests each), and the
difference per caught call is taken out (``in_engine_calibration``); the
passes without give host + ops uncaught. The clock is the thread's CPU time
(``--clock wall``), so a busy machine's descheduling does not count. A last
pass runs under cProfile (``.prof`` files beside the JSON). Not taken out:
the timers' own cost (~1 us at each of some 20 crossings a step).

The plugin's host code depends on the batch size and the vocabulary (the
draft probabilities it pads are device work), not on the model's size, so
the tiny test models (``tests/tiny_models.py``, vocabulary 768) stand for any
pair; ``--target/--draft`` run a real one. ``gammatune_cost`` plans from fixed
step costs under which drafting pays (a draft pass at 5 % of a target step,
as on a GPU); ``--step-costs measured`` reads the CPU's clock instead.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import json
import os
import platform
import pstats
import subprocess
import sys
import time
from pathlib import Path

from gammatune_tools.bench.host_clock import (FORWARD, META, OP, PLUGIN, VIEW, VLLM, Clock,
                                              calibrate, install_timers, op_site_lines,
                                              torch_calls_mode)

REPO = Path(__file__).resolve().parent.parent
#: callees of plugin frames that are vLLM's wrapped work or lead to it
FOREIGN_FILES = ("/vllm/", "torch/utils/_contextlib.py", "torch/nn/modules/module.py")
LAUNCH_ESTIMATE_US = 5.0
#: gammatune_cost's fixed costs: a draft pass at 5 % of a target step (drafting pays)
PAYS = {"target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 0.005,
        "draft_token_s": 0.0}
PROMPTS = ["def add(a, b):", "The quick brown fox jumps over the lazy dog. " * 3,
           "import os\nimport sys\n\nfor path in sys.argv:\n", "hello world " * 10,
           "class Foo:\n    def __init__(self):", "Once upon a time",
           "1 2 3 4 5 6 7 8 9 10 11 12", "speculative decoding verifies draft tokens"]
NOTE = ("host_ms: the plugin's Python, host numpy, views and metadata reads per step, "
        "the catching's cost taken out (calibration_in_engine_us); host_plus_op_ms_uncaught: "
        "exact, nothing caught (an upper bound of host_ms); op_cpu_ms: the CPU compute of the "
        "kernel ops it launches (not host time on a GPU); launch_estimate_ms: ops x 5 us, an "
        "ESTIMATE of their launches on a GPU; hotspots: under cProfile, per step (inflated: "
        "for ranking). The plugin's host code depends on the batch size and the vocabulary, "
        "not on the model's size.")


# -- the arithmetic (tests/unit/test_host_time.py) ----------------------------------------
def percentile(values, q: float) -> float | None:
    """The ``q``-quantile (0..1) of ``values``, linearly interpolated; None if empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def split_step(seconds: dict, counts: dict, calibration: dict) -> dict:
    """One step's exclusive seconds and counts per category -> its split, in ms.

    ``calibration``: per caught torch call, the seconds the catching adds
    ``outside`` the call's interval (charged to the plugin: taken from the
    host time) and ``inside`` it (taken from the call's own)."""
    outside, inside = calibration["outside"], calibration["inside"]
    calls = sum(counts.get(kind, 0) for kind in (OP, VIEW, META))

    def own(kind):
        return max(0.0, seconds.get(kind, 0.0) - counts.get(kind, 0) * inside)

    host = max(0.0, seconds.get(PLUGIN, 0.0) - calls * outside) + own(VIEW) + own(META)
    ops = counts.get(OP, 0)
    return {"host_ms": 1e3 * host, "op_cpu_ms": 1e3 * own(OP), "ops": ops,
            "views": counts.get(VIEW, 0), "metadata_reads": counts.get(META, 0),
            "launch_estimate_ms": ops * LAUNCH_ESTIMATE_US / 1e3,
            "forward_ms": 1e3 * seconds.get(FORWARD, 0.0),
            "vllm_ms": 1e3 * seconds.get(VLLM, 0.0),
            "entry_ms": 1e3 * sum(seconds.values()), "draft_passes": counts.get("passes", 0)}


def plugin_seconds(seconds: dict) -> float:
    """The plugin's own seconds of a step: its code and its torch calls."""
    return sum(seconds.get(kind, 0.0) for kind in (PLUGIN, OP, VIEW, META))


def in_engine_calibration(caught: list, plain: list, calibration: dict) -> dict:
    """``calibration`` with the catching's cost per call as measured in the
    engine: the median plugin seconds of the steps whose torch calls were
    caught (``caught``: (seconds, counts) per step) less those of the steps
    whose calls were not (``plain``), per caught call. That cost is charged
    outside the calls but for ``inside``, which the engine cannot tell apart;
    a loop's (``calibration``) is lower: there the handler's code is hot."""
    calls = percentile([sum(c.get(k, 0) for k in (OP, VIEW, META)) for _, c in caught], 0.5)
    if not calls or not plain:
        return {**calibration, "per_call": None}
    per_call = (percentile([plugin_seconds(s) for s, _ in caught], 0.5)
                - percentile([plugin_seconds(s) for s, _ in plain], 0.5)) / calls
    return {"outside": max(0.0, per_call - calibration["inside"]),
            "inside": calibration["inside"], "per_call": per_call}


def summarize(rows: list[dict]) -> dict:
    """Rows of ``split_step`` (one per step) -> median, p90 and mean of each;
    the host time of the steps that ran the draft model and of the others."""
    def stats(key, subset=rows):
        values = [row[key] for row in subset]
        return {"median": percentile(values, 0.5), "p90": percentile(values, 0.9),
                "mean": sum(values) / len(values) if values else None}

    drafting = [row for row in rows if row["draft_passes"]]
    keys = ("host_ms", "ops", "op_cpu_ms", "launch_estimate_ms", "views", "metadata_reads",
            "forward_ms", "vllm_ms", "entry_ms", "draft_passes", "step_ms")
    return {"steps": len(rows), "drafting_steps": len(drafting),
            **{key: stats(key) for key in keys},
            "host_ms_drafting_steps": stats("host_ms", drafting),
            "host_ms_other_steps": stats("host_ms", [r for r in rows if not r["draft_passes"]])}


# -- the profile pass ------------------------------------------------------------
def short_path(file: str) -> str:
    for marker in ("site-packages/", f"{REPO}/"):
        file = file.split(marker)[-1]
    return file


def short_name(key) -> str:
    file, line, func = key
    return f"{short_path(file)}:{line}({func})"


def hotspots(stats: dict, steps: int, top: int = 10) -> dict:
    """From ``pstats.Stats.stats``, per step: the plugin's functions by self
    time; what plugin frames call outside the plugin and vLLM's wrapped work."""
    def plugin(key):
        return "/vllm_gammatune/" in key[0]

    def per_step(value, scale=1e3):
        return round(value * scale / steps, 4)

    own = sorted((item for item in stats.items() if plugin(item[0])),
                 key=lambda item: -item[1][2])[:top]
    called = collections.defaultdict(lambda: [0, 0.0])
    for key, (*_, callers) in stats.items():
        if not plugin(key) and not any(part in key[0] for part in FOREIGN_FILES):
            for caller, edge in callers.items():
                if plugin(caller):
                    called[key][0] += edge[1]
                    called[key][1] += edge[3]
    calls = sorted(called.items(), key=lambda item: -item[1][1])[:top]
    return {"plugin_functions_by_self_time": [
                {"function": short_name(k), "self_ms": per_step(v[2]),
                 "cumulative_ms": per_step(v[3]), "calls": per_step(v[1], 1)}
                for k, v in own],
            "called_from_plugin_frames": [
                {"function": short_name(k), "ms": per_step(v[1]), "calls": per_step(v[0], 1)}
                for k, v in calls]}


# -- the engine ------------------------------------------------------------------
def run_steps(llm, batch_size: int, warmup: int, steps: int, params, on_step) -> int:
    """``batch_size`` fresh requests; ``on_step(engine.step)`` for each of
    ``steps`` steps after ``warmup``, while every request runs; then abort."""
    engine = llm.llm_engine
    ids = [f"host-time-{time.monotonic_ns()}-{i}" for i in range(batch_size)]
    for i, request_id in enumerate(ids):
        engine.add_request(request_id, PROMPTS[i % len(PROMPTS)], params)
    for _ in range(warmup):
        engine.step()
    done = 0
    while done < steps and engine.get_num_unfinished_requests() == batch_size:
        on_step(engine.step)
        done += 1
    engine.abort_request(ids)
    while engine.has_unfinished_requests():
        engine.step()
    return done


def timed_pass(llm, drafter, batch_size: int, steps: int, args, now, catching: bool,
               sites: collections.Counter) -> list[tuple[dict, dict]]:
    """(seconds, counts) per category of each of ``steps`` steps, torch calls
    caught or not; the kernel ops' call sites of the steps go to ``sites``."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    clock, raws = Clock(now), []

    def timed_step(step):
        clock.op_sites.clear()  # a warm-up step's ops are not a measured step's
        clock.take()
        started = now()
        step()
        raws.append((*clock.take(), now() - started))
        sites.update(clock.op_sites)
    undo = install_timers(clock, drafter)
    try:
        with torch_calls_mode(clock) if catching else contextlib.nullcontext():
            run_steps(llm, batch_size, args.warmup, steps, params, timed_step)
    finally:
        for restore in reversed(undo):
            restore()
    return raws


def measure_cell(llm, name: str, batch_size: int, args, now, calibration: dict) -> dict:
    """Rounds of a pass with torch calls caught and one without (the
    catching's cost in this engine), then a pass under cProfile."""
    from vllm import SamplingParams

    executor = llm.llm_engine.engine_core.engine_core.model_executor  # in process
    drafter = executor.driver_worker.worker.model_runner.drafter
    assert drafter.hot_path, "the drafter is not on the CUDA hot path"
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    run_steps(llm, batch_size, 2, 4, params, lambda step: step())  # first calls, caches
    caught, plain, sites = [], [], collections.Counter()
    per_round = -(-args.steps // args.rounds)
    for _ in range(args.rounds):
        caught += timed_pass(llm, drafter, batch_size, per_round, args, now, True, sites)
        plain += timed_pass(llm, drafter, batch_size, per_round, args, now, False, sites)
    in_engine = in_engine_calibration([r[:2] for r in caught], [r[:2] for r in plain],
                                      calibration)
    rows = [{**split_step(seconds, counts, in_engine), "step_ms": 1e3 * step}
            for seconds, counts, step in caught]
    uncaught = [1e3 * plugin_seconds(seconds) for seconds, _, _ in plain]
    timed_steps = max(1, len(rows))
    top_sites = [{"site": f"{short_path(file)}:{line} {op}", "calls": round(n / timed_steps, 2)}
                 for (file, line, op), n in op_site_lines(sites).most_common(15)]
    profiler = cProfile.Profile(now)

    def profiled_step(step):
        profiler.enable()
        step()
        profiler.disable()
    profiled = run_steps(llm, batch_size, args.warmup, args.steps, params, profiled_step)
    args.out.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(args.out / f"{name}_b{batch_size}.prof"))  # for pstats
    return {"batch_size": batch_size, **summarize(rows),
            "host_plus_op_ms_uncaught": {"median": percentile(uncaught, 0.5),
                                         "p90": percentile(uncaught, 0.9)},
            "calibration_in_engine_us": {k: v * 1e6 for k, v in in_engine.items()},
            "profiled_steps": profiled,
            "hotspots": hotspots(pstats.Stats(profiler).stats, max(1, profiled)),
            "ops_by_call_site": top_sites, "per_step": rows}


def speculative_config(method: str, draft: str, k: int, step_costs: str) -> dict:
    from vllm_gammatune.methods import METHODS

    if method not in METHODS:
        raise SystemExit(f"--methods: unknown {method!r}; allowed: {', '.join(METHODS)}")
    config = {"method": method, "model": draft, "num_speculative_tokens": k}
    if method == "gammatune_cost" and step_costs == "fixed":
        config["fixed_step_costs"] = PAYS
    return config


def models(args) -> tuple[str, str, dict]:
    """(target, draft, engine arguments): the pair given, else the tiny test
    models, built by ``tests/tiny_models.py`` in a child (``tests/`` on its path)."""
    if args.target and args.draft:
        return args.target, args.draft, {"dtype": "bfloat16", "max_model_len": 2048}
    code = ("import json, sys; from tiny_models import build_tiny_models; "
            "print(json.dumps(build_tiny_models(sys.argv[1])))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))}
    built = subprocess.run([sys.executable, "-c", code, args.tiny_models], env=env,
                           capture_output=True, text=True, check=True)
    paths = json.loads(built.stdout.strip().splitlines()[-1])
    return paths["target"], paths["draft"], {"dtype": "float32", "max_model_len": 1024,
                                             "gpu_memory_utilization": 0.2}


def machine() -> dict:
    import torch
    import vllm
    from gammatune_tools.bench.context import cpu_isa, cpu_model, plugin_changed, plugin_tree

    return {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "isa_flags": cpu_isa(),
            "loadavg_at_start": os.getloadavg(),
            "plugin_tree": plugin_tree(), "plugin_uncommitted": plugin_changed(),
            "python": platform.python_version(), "torch": torch.__version__,
            "vllm": vllm.__version__}


def table(cells: list[dict]) -> str:
    lines = ["| method | batch | steps (drafting) | host ms median | host ms p90 | host+ops "
             "uncaught ms | ops/step | launch est. ms | op CPU ms | views+meta/step |",
             "|---" * 10 + "|"]
    for c in cells:
        lines.append(
            f"| {c['method']} | {c['batch_size']} | {c['steps']} ({c['drafting_steps']}) "
            f"| {c['host_ms']['median']:.3f} | {c['host_ms']['p90']:.3f} "
            f"| {c['host_plus_op_ms_uncaught']['median']:.3f} "
            f"| {c['ops']['median']:.0f} | {c['launch_estimate_ms']['median']:.3f} "
            f"| {c['op_cpu_ms']['median']:.3f} "
            f"| {c['views']['median'] + c['metadata_reads']['median']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", type=Path, required=True)
    add("--methods", default="gammatune,gammatune_cost")
    add("--batch-sizes", default="1,8,32")
    add("--steps", type=int, default=40, help="decode steps timed per cell")
    add("--rounds", type=int, default=4, help="passes with and without catching")
    add("--warmup", type=int, default=3, help="steps skipped first (the prefill)")
    add("--k", type=int, default=8, help="num_speculative_tokens")
    add("--max-tokens", type=int, default=600)
    add("--step-costs", choices=("fixed", "measured"), default="fixed")
    add("--clock", choices=("cpu", "wall"), default="cpu")
    add("--target")
    add("--draft")
    add("--tiny-models", default=os.environ.get("VLLM_GAMMATUNE_TINY_MODELS",
                                                "/tmp/vllm_gammatune_tiny_models"))
    args = parser.parse_args(argv)
    os.environ["VLLM_GAMMATUNE_CUDA_HOT_PATH"] = "1"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this thread
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from gammatune_tools.bench.engine import start_llm, stop_llm

    target, draft, engine_kwargs = models(args)
    now = time.thread_time if args.clock == "cpu" else time.perf_counter
    info, calibration, cells = machine(), calibrate(Clock(now)), []
    for method in args.methods.split(","):
        spec = speculative_config(method, draft, args.k, args.step_costs)
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            llm = start_llm(target, spec, max_num_seqs=batch_size, **engine_kwargs)
            try:
                cells.append({"method": method,
                              **measure_cell(llm, method, batch_size, args, now,
                                             calibration)})
            finally:
                stop_llm(llm)
            print(f"{method} batch {batch_size}: host {cells[-1]['host_ms']['median']:.3f} "
                  f"ms median, {cells[-1]['ops']['median']:.0f} ops/step", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {"target": target, "draft": draft, "k": args.k, "steps": args.steps,
                "rounds": args.rounds,
                "warmup": args.warmup, "step_costs": args.step_costs, "clock": args.clock,
                "temperature": 0.0, "launch_estimate_us_per_op": LAUNCH_ESTIMATE_US}
    result = {"note": NOTE, "machine": {**info, "loadavg_at_end": os.getloadavg()},
              "calibration_in_a_loop_us": {k: 1e6 * v for k, v in calibration.items()},
              "settings": settings, "cells": cells}
    (args.out / "host_time.json").write_text(json.dumps(result, indent=1))
    (args.out / "host_time.md").write_text(table(cells) + "\n")
    print(table(cells))


if __name__ == "__main__":
    main()
