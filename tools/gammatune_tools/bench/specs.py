"""What a run measures: the options every engine command shares, draft
lengths, custom speculative configs, and the plan of cells still to run."""

from __future__ import annotations

import json

from gammatune_tools.bench.methods import METHOD_NAMES, NO_SPECULATION, check_method_names
from gammatune_tools.bench.records import cell_key

#: the models' dtype unless ``--dtype`` says otherwise
DEFAULT_DTYPE = "bfloat16"
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
    """The arguments run_bench, paired and serve_bench share."""
    parser.add_argument("--out", required=True, help="results directory")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--methods", default=methods_default,
                        help="names of gammatune_tools.bench.methods.METHOD_NAMES or of --spec")
    parser.add_argument("--spec", action="append", metavar="NAME=JSON",
                        help="a custom speculative_config under NAME ({draft} = draft path); "
                             "added to --methods; one cell per size/temperature (no k)")
    parser.add_argument("--k", default=k_default,
                        help="initial/fixed draft lengths: a list, 'quick' or 'paper'")
    parser.add_argument("--cap", type=int, default=16, help="adaptive methods' cap")
    parser.add_argument("--temperature", default="0", help="comma list, e.g. 0,0.7")
    parser.add_argument("--dataset", default="specbench",
                        help="specbench, specbench:CATEGORY[+CATEGORY...], gsm8k or a JSONL path")
    parser.add_argument("--split", default="all", choices=["all", "tune", "eval"])
    parser.add_argument("--per-category", type=int, default=2,
                        help="questions per category (datasets with categories, "
                             "e.g. Spec-Bench; GSM8K uses --limit)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--dtype", default=DEFAULT_DTYPE, help="float32 for the tiny test models")
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
    check_method_names(methods, [*METHOD_NAMES, *custom])
    plan = []
    for method in methods:
        variant = custom.get(method) or variant_of(method) or {}
        for k in [0] if method == NO_SPECULATION or method in custom else ks:
            todo = [(size, t) for t in temperatures for size in sizes
                    if cell_key(method, k, size, t, variant, size_name, turns) not in done]
            if todo:
                plan.append((method, k, todo, variant))
    return plan
