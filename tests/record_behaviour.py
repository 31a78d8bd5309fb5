"""Record what every plugin method does on the tiny models, to prove a refactor
changes no behaviour.

    python tests/record_behaviour.py record DIR      # one engine per method config
    python tests/record_behaviour.py compare DIR_A DIR_B

For each method configuration (every registered method and drafter, some also
on the CUDA hot path forced on the CPU; ``gammatune_cost`` with fixed step
costs, so that its plan does not read the clock), an in-process
engine on the tiny models generates a mixed batch greedily and a seeded
sampled batch, with ``VLLM_GAMMATUNE_TRACE`` on. The record is the outputs'
token ids, the trace (every verification: draft length, accepted count, the
draft's token probabilities, the policy's predictions; every plan of
``gammatune_cost``) and the plugin's counters. Fields that hold wall-clock
times are dropped; a metric only one record has (one added in between) is a
difference only if it is not zero. ``compare`` reports the first difference
of each configuration; identical records print ``identical``.

Not a test: float32 results of two CPUs may round differently, so records are
compared on one machine, before and after a change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

#: name -> speculative_config extras (model and cap are added)
#: costs under which drafting pays but each draft pass must earn its cost
#: (the per-token stop ends drafts mid-way), and under which it rarely pays
PAYS = {"target_step_s": 0.1, "target_token_s": 0.0, "draft_pass_s": 0.005,
        "draft_token_s": 0.0}
RARELY_PAYS = {**PAYS, "draft_pass_s": 0.06}
#: a draft pass costs 40% of a target step: the lookup's drafts win where
#: they are offered, the draft model drafts for the others
LOOKUP_PAYS = {**PAYS, "target_step_s": 0.01, "draft_pass_s": 0.004}
NGRAM = {"drafter": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3}
CONFIGS = {
    "gammatune": {"method": "gammatune", "gamma_init": 2},
    "gammatune_plus": {"method": "gammatune_plus", "gamma_init": 4,
                       "confidence_threshold": 0.6},
    "fixed_draft": {"method": "fixed_draft", "gamma_init": 3},
    "hf_heuristic": {"method": "hf_heuristic", "gamma_init": 1},
    "assistant_threshold": {"method": "assistant_threshold", "gamma_init": 5,
                            "confidence_threshold": 0.6},
    "adasd": {"method": "adasd"},
    "adasd_generation": {"method": "adasd", "adasd_mode": "generation"},
    "adasd_verification": {"method": "adasd", "adasd_mode": "verification"},
    "gammatune_cost": {"method": "gammatune_cost", "fixed_step_costs": PAYS},
    "gammatune_cost_no_token_stop": {"method": "gammatune_cost", "token_stop": False,
                                     "fixed_step_costs": PAYS},
    "gammatune_cost_probes": {"method": "gammatune_cost", "probe_interval": 2,
                              "probe_budget": 1.0, "fixed_step_costs": RARELY_PAYS},
}
#: vLLM's n-gram lookup, alone and ahead of the draft model
NGRAM_CONFIGS = {
    "gammatune_ngram": {"method": "gammatune", "gamma_init": 2, **NGRAM},
    "gammatune_cost_ngram": {"method": "gammatune_cost", "token_stop": False,
                             "fixed_step_costs": PAYS, **NGRAM},
    "gammatune_cost_ngram_model": {"method": "gammatune_cost", "fixed_step_costs": LOOKUP_PAYS,
                                   **NGRAM, "drafter": "ngram+draft_model"},
}
#: configurations run again on the CUDA hot path (forced on the CPU): one read
#: a step, each verification observed before the plan after next
HOT_PATH_CONFIGS = ("gammatune", "gammatune_plus", "adasd", "adasd_verification",
                    "gammatune_cost", "gammatune_cost_probes", "gammatune_cost_ngram_model")
HOT = "@hot_path"
ALL_CONFIGS = [*CONFIGS, *NGRAM_CONFIGS, *(name + HOT for name in HOT_PATH_CONFIGS)]
PROMPTS = [
    "def add(a, b):",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "x",
    "import os\nimport sys\n\nfor path in sys.argv:\n",
    "hello world " * 20,
    "class Foo:\n    def __init__(self):",
    "Once upon a time",
    "1 2 3 4 5 6 7 8 9 10 11 12",
]
TIME_WORDS = ("second", "_s", "time", "_us", "wall")


def _timeless(value):
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()
                if not any(w in k for w in TIME_WORDS)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _run_one(name: str, models: dict, out_dir: str) -> None:
    """In a fresh process: one engine, greedy then sampled, trace and outputs."""
    trace_path = os.path.join(out_dir, f"{name}.trace.jsonl")
    if os.path.exists(trace_path):
        os.remove(trace_path)
    os.environ["VLLM_GAMMATUNE_TRACE"] = trace_path
    base, hot = name.removesuffix(HOT), name.endswith(HOT)
    os.environ["VLLM_GAMMATUNE_CUDA_HOT_PATH"] = "1" if hot else "0"
    from vllm import LLM, SamplingParams

    config = {**CONFIGS, **NGRAM_CONFIGS}[base]
    spec = {"num_speculative_tokens": 8, **config}
    if config.get("drafter") != "ngram":
        spec["model"] = models["draft"]
    llm = LLM(model=models["target"], speculative_config=spec, enforce_eager=True,
              max_model_len=512, dtype="float32", seed=0, max_num_seqs=16,
              gpu_memory_utilization=0.2, disable_log_stats=False)
    greedy = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=40),
                          use_tqdm=False)
    sampled = llm.generate(PROMPTS, [SamplingParams(temperature=0.8, seed=i, max_tokens=32)
                                     for i in range(len(PROMPTS))], use_tqdm=False)
    metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics()
               if "gammatune" in m.name or "spec_decode" in m.name}
    record = {
        "greedy": [list(o.outputs[0].token_ids) for o in greedy],
        "sampled": [list(o.outputs[0].token_ids) for o in sampled],
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
    }
    llm.llm_engine.engine_core.shutdown()
    with open(os.path.join(out_dir, f"{name}.outputs.json"), "w") as f:
        json.dump(_timeless(record), f, indent=1, sort_keys=True)


def _normalised_trace(path: str) -> list:
    """Trace lines without times, request ids renamed in order of appearance."""
    names: dict[str, str] = {}
    lines = []
    if not os.path.exists(path):  # a method that writes no trace (AdaSD)
        return lines
    with open(path) as f:
        for raw in f:
            line = _timeless(json.loads(raw))
            if "req_id" in line:
                line["req_id"] = names.setdefault(line["req_id"], f"r{len(names)}")
            lines.append(line)
    return lines


def record(out_dir: str) -> None:
    from tiny_models import build_tiny_models

    os.makedirs(out_dir, exist_ok=True)
    root = os.environ.get("VLLM_GAMMATUNE_TINY_MODELS") or os.path.join(
        tempfile.gettempdir(), "gammatune_tiny_models")
    models = build_tiny_models(root)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    for name in ALL_CONFIGS:
        if os.path.exists(os.path.join(out_dir, f"{name}.outputs.json")):
            continue  # resumable
        subprocess.run([sys.executable, __file__, "_one", name, json.dumps(models), out_dir],
                       env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=open(os.path.join(out_dir, f"{name}.stderr"), "w"))
        print(name, "recorded", flush=True)


def _metrics_problem(metrics_a: dict, metrics_b: dict) -> str | None:
    """How two records' metrics differ, or None: a metric only one record
    has (a metric added between them) counts only if it is not zero."""
    changed = sorted(k for k in metrics_a.keys() & metrics_b.keys()
                     if metrics_a[k] != metrics_b[k])
    added = sorted(k for k in metrics_a.keys() ^ metrics_b.keys()
                   if {**metrics_a, **metrics_b}[k])
    return f"metrics differ: {', '.join(changed + added)}" if changed or added else None


def compare(dir_a: str, dir_b: str) -> int:
    differing = 0
    for name in ALL_CONFIGS:
        parts = {}
        for d in (dir_a, dir_b):
            with open(os.path.join(d, f"{name}.outputs.json")) as f:
                outputs = json.load(f)
            parts[d] = (outputs, _normalised_trace(os.path.join(d, f"{name}.trace.jsonl")))
        (out_a, trace_a), (out_b, trace_b) = parts[dir_a], parts[dir_b]
        problem = None
        for key in ("greedy", "sampled"):
            if out_a[key] != out_b[key]:
                problem = f"{key} differ"
                break
        if problem is None:
            problem = _metrics_problem(out_a["metrics"], out_b["metrics"])
        if problem is None and len(trace_a) != len(trace_b):
            problem = f"trace lengths {len(trace_a)} vs {len(trace_b)}"
        if problem is None:
            for i, (a, b) in enumerate(zip(trace_a, trace_b)):
                if a != b:
                    problem = f"trace line {i}: {a} != {b}"
                    break
        differing += problem is not None
        print(f"{name}: {'identical' if problem is None else problem} "
              f"({len(trace_a)} trace lines, {len(out_a['greedy'])} + "
              f"{len(out_a['sampled'])} outputs)")
    return 1 if differing else 0


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "record":
        record(sys.argv[2])
    elif command == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    elif command == "_one":
        _run_one(sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"unknown command {command!r}: record DIR | compare DIR_A DIR_B")
