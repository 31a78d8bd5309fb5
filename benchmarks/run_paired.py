"""Interleaved paired benchmark: every method's engine alive at once, batches alternating.

    python -m benchmarks.run_paired --out benchmarks/runs/paired \\
        --methods no_spec,gammatune_cost --k 8 --batch-sizes 4,16 --rounds 6 \\
        --max-tokens 64 --split eval --per-category 2
    python -m benchmarks.run_paired --out DIR --summary-only
    python -m benchmarks.run_paired --out DIR --pool RUN,RUN [--plot]

Why: on this CPU the machine's speed drifts by 10-15% over minutes, so
engine-per-run A-B-A series (``benchmarks.diagnostics.aba``) need many
rounds to say whether a method is within a few percent of its baseline.
Here one process starts one engine per method and, for each batch of
prompts, runs that batch on every engine back to back, rotating which goes
first: drift slower than one batch cancels in the ratio; faster noise only
averages out over rounds. An engine switch may cost the engine that runs
next, so each generates ``--switch-warmup-tokens`` untimed tokens for a
prompt outside the set first, and the report gives each method's batch
ratio when it ran first and second. ``no_spec,no_spec#2`` (an A/A run)
measures what the design itself leaves.

Each engine holds its weights and ``VLLM_CPU_KVCACHE_SPACE`` GiB (default
here 2) of KV cache, so a large comparison does not fit alive at once;
``--fresh-engines`` keeps one engine alive at a time instead: in each round
every method's engine is started afresh in turn, the first rotating by
round, runs every batch of every size and is stopped; ``--also-dataset``
gives the same engines a second prompt set (rows in ``--also-out``).

A round is the whole prompt set at one batch size, every engine. Per round
and method: tokens/s; the summary (``paired.md``) gives the ratio to the
baseline (first method) per round, their mean and a 95% t-interval over
rounds, beside target passes and draft forwards per generated token, the
share of steps that drafted and, at temperature 0, the share of requests
whose tokens equal the baseline's. ``paired_categories.md`` (``.json``)
splits it by prompt category and ``--category-groups``
(``gammatune_tools.bench.paired_categories``). Rows go to ``paired.jsonl``
(resumable: complete rounds are kept, a round cut short runs again). More:
benchmarks/README.md, "The commands".
"""

from gammatune_tools.bench import paired_runs


def main() -> None:
    paired_runs.main(description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main()
