"""GSM8K quality of a run_bench run: exact-match accuracy per method.

    python -m benchmarks.run_bench --out benchmarks/runs/gsm8k --dataset gsm8k \\
        --limit 20 --methods no_spec,vllm_draft_model,gammatune,adasd --k 5 \\
        --max-tokens 320 --stop-at-eos
    python -m benchmarks.gsm8k_quality benchmarks/runs/gsm8k

Accuracy: the answer in the output (the last ``\\boxed{...}`` if there is
one, else the last number) against GSM8K's ``#### N``, with a Wilson 95%
interval. Every method is also compared *paired* with the target alone
(``no_spec``) on the same problems: problems only the method gets right, only
the target gets right, the accuracy difference with a Wald 95% interval for
paired proportions, and McNemar's exact two-sided p-value on the discordant
problems (a paired test is far tighter than two independent intervals). Token
difference: the share of generated positions whose token differs from the
target alone (greedy), counting length differences as differing positions.
Writes ``quality.md`` beside the cells.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from gammatune_tools.bench.prompts import GSM8K
from gammatune_tools.bench.stats import paired_difference, wilson_interval

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def final_number(text: str) -> float | None:
    boxed = _BOXED.findall(text)
    if boxed and _NUMBER.search(boxed[-1].replace("$", "")):
        text = boxed[-1]
    numbers = _NUMBER.findall(text.replace("$", ""))
    if not numbers:
        return None
    try:
        return float(numbers[-1].replace(",", "").rstrip("."))
    except ValueError:
        return None


def differing_share(reference: list[list[int]], outputs: list[list[int]]) -> float:
    differing = total = 0
    for ref, out in zip(reference, outputs):
        length = max(len(ref), len(out))
        total += length
        differing += sum(a != b for a, b in zip(ref, out)) + abs(len(ref) - len(out))
    return differing / total if total else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="a run_bench results folder (cells.jsonl)")
    directory = parser.parse_args().directory
    rows = [json.loads(line) for line in (directory / "cells.jsonl").open()]
    answers = [float(json.loads(line)["answer"].split("####")[-1].strip().replace(",", ""))
               for line in GSM8K.open()]
    reference = next((r for r in rows if r["method"] == "no_spec"), None)
    reference_correct = ([final_number(t) == a for t, a in zip(reference["texts"], answers)]
                         if reference else None)
    lines = ["# GSM8K quality", "",
             "| method | k | batch | n | correct | accuracy | 95% interval | "
             "vs target: only method / only target | difference (95%) | McNemar p | "
             "tok/s | mean output tokens | tokens differing from target |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["method"], r["k"], r["batch_size"])):
        texts = row["texts"]
        correct = [final_number(t) == a for t, a in zip(texts, answers)]
        low, high = wilson_interval(sum(correct), len(texts))
        paired = "- | - | -"
        if reference_correct is not None and row is not reference:
            pd = paired_difference(correct, reference_correct[:len(correct)])
            paired = (f"{pd['only_method']} / {pd['only_reference']} | "
                      f"{pd['difference']:+.1%} [{pd['low']:+.1%}, {pd['high']:+.1%}] | "
                      f"{pd['p']:.2f}")
        diff = (differing_share(reference["token_ids"], row["token_ids"])
                if reference and "token_ids" in row else None)
        mean_tokens = row["output_tokens"] / max(len(texts), 1)
        lines.append(
            f"| {row['method']} | {row['k'] or '-'} | {row['batch_size']} | {len(texts)} | "
            f"{sum(correct)} | {sum(correct) / len(texts):.1%} | [{low:.1%}, {high:.1%}] | "
            f"{paired} | {row['tokens_per_second']:.2f} | {mean_tokens:.0f} | "
            f"{'-' if diff is None else f'{diff:.1%}'} |")
    (directory / "quality.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
