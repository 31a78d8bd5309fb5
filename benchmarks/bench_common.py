"""What run_bench.py and serve_bench.py share: prompts, methods, cells, context.

Pure helpers (no vLLM import at module level), unit-tested in
``tests/unit/test_bench_tools.py``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

#: the prompts the benchmarks use, with their licences (``data/README.md``)
DATA = Path(__file__).resolve().parent / "data"
SPEC_BENCH = DATA / "spec_bench_question.jsonl"
GSM8K = DATA / "gsm8k_test.jsonl"

#: the GammaTune paper's initial draft lengths, and a quick subset
PAPER_KS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24)
QUICK_KS = (2, 4, 8)


def parse_ks(text: str) -> list[int]:
    """``--k``: "paper", "quick" or a comma list of lengths."""
    named = {"paper": PAPER_KS, "quick": QUICK_KS}
    if text in named:
        return list(named[text])
    return [int(k) for k in text.split(",") if k.strip()]


def parse_floats(text: str) -> list[float]:
    return [float(t) for t in str(text).split(",") if t.strip()]


def load_prompts(dataset: str, per_category: int | None = None, split: str = "all",
                 limit: int | None = None, turns: int = 1,
                 spec_bench_path: Path = SPEC_BENCH) -> list[tuple[str, list[str]]]:
    """[(category, [turn 1, turn 2, ...])], at most ``turns`` user turns each.

    ``dataset``: "specbench" (every category, ``per_category`` questions each,
    None for all; ``split`` "tune" keeps odd question ids, "eval" even ones),
    "gsm8k", or a JSONL path whose rows have ``prompt``/``question`` (one turn)
    or ``turns`` (a list) and optionally ``category``. Prompts stay grouped
    by category, in file order. ``per_category`` only applies to datasets
    whose rows name a category; a dataset without one (GSM8K) is taken in
    file order up to ``limit``.
    """
    if dataset == "specbench":
        path, name = Path(spec_bench_path), "specbench"
    elif dataset == "gsm8k":
        path, name = GSM8K, "gsm8k"
    else:
        path = Path(dataset)
        name = path.stem
    rows = [json.loads(line) for line in path.open() if line.strip()]
    keep = {"tune": 1, "eval": 0}.get(split)
    by_category: dict[str, list[list[str]]] = defaultdict(list)
    for row in rows:
        if keep is not None and "question_id" in row and row["question_id"] % 2 != keep:
            continue
        texts = row.get("turns") or [row.get("prompt") or row["question"]]
        by_category[row.get("category", name)].append(list(texts[:turns]))
    if not any("category" in row for row in rows):
        per_category = None  # one category (GSM8K): only ``limit`` applies
    prompts = [(cat, texts) for cat, items in by_category.items()
               for texts in (items if per_category is None else items[:per_category])]
    return prompts[:limit] if limit else prompts


def parse_spec_options(options: list[str] | None, draft: str) -> dict[str, dict]:
    """``--spec NAME=JSON`` (repeatable) -> {name: speculative_config}.

    The string ``{draft}`` inside the JSON is replaced by the draft's path, so
    ``gammatune_cost={"method": "gammatune_cost", "model": "{draft}"}`` works
    for any pair. ``{k}`` is not substituted: a custom config is one cell.
    """
    specs: dict[str, dict] = {}
    for option in options or []:
        name, sep, text = option.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--spec {option!r}: expected NAME=JSON")
        config = json.loads(text.replace("{draft}", draft))
        if not isinstance(config, dict) or "method" not in config:
            raise ValueError(f"--spec {name}: a JSON object with a 'method' key is needed")
        specs[name.strip()] = config
    return specs


def add_common_args(parser, methods_default: str = "no_spec,vllm_draft_model,gammatune",
                    k_default: str = "2,4,8") -> None:
    """The arguments run_bench.py and serve_bench.py share."""
    parser.add_argument("--out", required=True, help="results directory")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--methods", default=methods_default,
                        help="names of gammatune_tools.evaluation.METHODS or of --spec")
    parser.add_argument("--spec", action="append", metavar="NAME=JSON",
                        help="a custom speculative_config under NAME ({draft} = draft path); "
                             "added to --methods; one cell per size/temperature (no k)")
    parser.add_argument("--k", default=k_default,
                        help="initial/fixed draft lengths: a list, 'quick' or 'paper'")
    parser.add_argument("--cap", type=int, default=16, help="adaptive methods' cap")
    parser.add_argument("--temperature", default="0", help="comma list, e.g. 0,0.7")
    parser.add_argument("--dataset", default="specbench")
    parser.add_argument("--split", default="all", choices=["all", "tune", "eval"])
    parser.add_argument("--per-category", type=int, default=2,
                        help="questions per category (datasets with categories, "
                             "e.g. Spec-Bench; GSM8K uses --limit)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--dtype", default="bfloat16", help="float32 for the tiny test models")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--trace", action="store_true",
                        help="per-request draft traces in <out>/traces/ (VLLM_GAMMATUNE_TRACE)")


def plan_cells(methods: list[str], ks: list[int], sizes: list[int],
               temperatures: list[float], custom: dict[str, dict], done: set[str],
               size_name: str = "b", turns: int = 1,
               variant_of=lambda method: None) -> list[tuple[str, int, list, dict]]:
    """[(method, k, [(size, temperature) still to run], variant)], one engine each.

    ``custom``: --spec configs by name (one k, 0; the config is the variant);
    ``variant_of(method)``: the parameter variant of a named method.
    """
    from gammatune_tools.evaluation import METHODS, check_method_names

    check_method_names(methods, [*METHODS, *custom])
    plan = []
    for method in methods:
        variant = custom.get(method) or variant_of(method) or {}
        for k in [0] if method == "no_spec" or method in custom else ks:
            todo = [(size, t) for t in temperatures for size in sizes
                    if cell_key(method, k, size, t, variant, size_name, turns) not in done]
            if todo:
                plan.append((method, k, todo, variant))
    return plan


def cell_key(method: str, k: int, size: int, temperature: float,
             variant: dict | None = None, size_name: str = "b", turns: int = 1) -> str:
    """One cell's identity in a results file (``size_name`` "b" batch, "c" concurrency)."""
    suffix = f"|{json.dumps(variant, sort_keys=True)}" if variant else ""
    turn = f"|turns={turns}" if turns != 1 else ""
    return f"{method}|k={k}|{size_name}={size}|t={temperature}{turn}{suffix}"


def done_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    keys = set()
    for line in path.open():
        try:
            keys.add(json.loads(line)["key"])
        except (ValueError, KeyError):
            continue  # a line cut short by a kill: that cell runs again
    return keys


def append_row(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: the instruction-set extensions that decide which CPU kernels vLLM and oneDNN use
_ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_isa() -> list[str]:
    """The CPU's vector extensions among ``_ISA_FLAGS`` (from /proc/cpuinfo's flags)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [flag for flag in _ISA_FLAGS if flag in flags]
    except OSError:
        pass
    return []


def git_commit() -> str | None:
    repo = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=repo, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty.strip() else "")) or None


def run_context(args, target: str, draft: str) -> dict:
    """Versions, models, machine, thread binding, date, git commit, arguments."""
    import torch
    import vllm

    import vllm_gammatune

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "vllm": vllm.__version__,
        "vllm_gammatune": vllm_gammatune.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "target": target,
        "draft": draft,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("VLLM_CPU_", "OMP_", "LD_PRELOAD", "VLLM_GAMMATUNE_"))},
        "args": vars(args),
    }


def write_context(out: Path, context: dict) -> None:
    """``context.json`` (this run) and ``contexts.jsonl`` (every run that added cells)."""
    (out / "context.json").write_text(json.dumps(context, indent=2))
    append_row(out / "contexts.jsonl", context)


def trace_path(out: Path, name: str) -> Path:
    """Where a cell's per-request draft trace goes (``VLLM_GAMMATUNE_TRACE``)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in name)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    return out / "traces" / f"{safe}.jsonl"
