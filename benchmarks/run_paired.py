"""Interleaved paired benchmark: every method's engine alive at once, batches alternating.

    python -m benchmarks.run_paired --out benchmarks/runs/paired \\
        --methods no_spec,gammatune_cost --k 8 --batch-sizes 4,16 --rounds 6 \\
        --max-tokens 64 --split eval --per-category 2
    python -m benchmarks.run_paired --out DIR --summary-only
    python -m benchmarks.run_paired --out DIR --pool RUN,RUN [--plot]

Why: on this CPU the machine's speed drifts by 10-15% over minutes (fresh
engines of one configuration differ that much, and two runs minutes apart
too), so engine-per-run A-B-A series (``benchmarks.diagnostics.aba``) need
many rounds to say whether a method is within a few percent of its baseline. Here one process
starts one engine per method (each its own vLLM engine-core process, as
``LLM`` does) and, for each batch of prompts, runs that batch on every
engine back to back, rotating which engine goes first. Drift slower than
one batch (10-40 s at batch 4-16 on the real pair) cancels in the ratio;
faster noise does not (back-to-back batches at batch 4 differ by several
percent on a small CPU) and only averages out over rounds.

A round is the whole prompt set at one batch size, every engine. Per round
and method: tokens/s (its batches' tokens over their wall time); the summary
gives the ratio to the baseline (first method) per round, their mean and a
95% t-interval over rounds, beside the hardware-independent counts (target
passes and draft forwards per generated token, share of engine steps that
drafted) and, at temperature 0, the share of requests whose tokens equal
the baseline's (lossless methods: all of them, up to batch-dependent
floating-point ties).

An A/A run (``--methods no_spec,no_spec#2``: two engines of one method)
measures what the design itself leaves: differences between engine
instances, which interleaving does not cancel.

An engine switch might cost the engine that runs next (caches, threads
waking up). As a precaution each engine generates ``--switch-warmup-tokens``
(default 4) tokens for a short prompt outside the set (so no measured prompt
is in its prefix cache), untimed, before its first timed batch after a
switch; and the report gives each method's mean batch ratio when it ran
first and when it ran second, which differ only by an order effect.

Only one engine generates at a time; an idle engine's core process waits on
its input queue. Each engine holds its weights and ``VLLM_CPU_KVCACHE_SPACE``
GiB (default here 2) of KV cache. Rows go to ``paired.jsonl`` (resumable:
complete rounds are kept, a round cut short runs again) and the summary to
``paired.md``.

Per category: ``paired_categories.md`` (and ``.json``) gives the last
method of ``paired.md``'s order against every other one over each
category's own batches (every category at batch 1; at a larger size only a
category no batch mixes with another), and over the groups of
``--category-groups`` (``repeating=summarization+rag+code_editing``; the
categories in no group form ``other``), with the same counts
(``gammatune_tools.bench.paired_categories``). The categories are those of
the prompt arguments recorded with the run (``context.json``), so
``--summary-only`` rebuilds it as the run made it.
"""

from gammatune_tools.bench import paired_runs


def main() -> None:
    paired_runs.main(description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main()
