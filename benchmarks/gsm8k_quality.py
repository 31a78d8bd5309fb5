"""GSM8K quality of a run_bench.py run: exact-match accuracy per method.

    python benchmarks/run_bench.py --out benchmarks/results/gsm8k --dataset gsm8k \\
        --limit 20 --methods no_spec,vllm_draft_model,gammatune,adasd --k 5 \\
        --max-tokens 320 --stop-at-eos
    python benchmarks/gsm8k_quality.py benchmarks/results/gsm8k

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

import json
import math
import re
import sys
from pathlib import Path

from bench_common import GSM8K

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


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    phat = successes / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference(method_correct: list[bool], reference_correct: list[bool]
                      ) -> dict[str, float]:
    """Paired accuracy difference (method - reference) on the same problems.

    ``only_method``/``only_reference``: discordant problems. ``low``/``high``:
    Wald 95% interval of the difference of paired proportions,
    d +- 1.96 sqrt((b + c - (b - c)^2 / n) / n^2). ``p``: McNemar's exact
    two-sided p-value, a binomial(b + c, 1/2) test on the discordant pairs.
    """
    n = len(method_correct)
    b = sum(m and not r for m, r in zip(method_correct, reference_correct))
    c = sum(r and not m for m, r in zip(method_correct, reference_correct))
    diff = (b - c) / n if n else 0.0
    half = 1.96 * math.sqrt(max(b + c - (b - c) ** 2 / n, 0.0)) / n if n else 0.0
    discordant = b + c
    tail = sum(math.comb(discordant, i) for i in range(min(b, c) + 1)) / 2 ** discordant
    return {"only_method": b, "only_reference": c, "difference": diff,
            "low": diff - half, "high": diff + half, "p": min(1.0, 2 * tail)}


def differing_share(reference: list[list[int]], outputs: list[list[int]]) -> float:
    differing = total = 0
    for ref, out in zip(reference, outputs):
        length = max(len(ref), len(out))
        total += length
        differing += sum(a != b for a, b in zip(ref, out)) + abs(len(ref) - len(out))
    return differing / total if total else 0.0


def main() -> None:
    directory = Path(sys.argv[1])
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
