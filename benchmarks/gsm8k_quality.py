"""GSM8K quality of a run_bench.py run: exact-match accuracy per method.

    python benchmarks/run_bench.py --out benchmarks/results/gsm8k --dataset gsm8k \\
        --limit 20 --methods no_spec,vllm_draft_model,gammatune,adasd --k 5 \\
        --max-tokens 320 --stop-at-eos
    python benchmarks/gsm8k_quality.py benchmarks/results/gsm8k

Accuracy: the last number in the output against GSM8K's ``#### N``, with a
Wilson 95% interval. Token difference: the share of generated positions whose
token differs from the target alone (``no_spec``, greedy), counting length
differences as differing positions. Writes ``quality.md`` beside the cells.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from bench_common import SHARED_DATA

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> float | None:
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
               for line in (SHARED_DATA / "gsm8k_test.jsonl").open()]
    reference = next((r for r in rows if r["method"] == "no_spec"), None)
    lines = ["# GSM8K quality", "",
             "| method | k | n | correct | accuracy | 95% interval | tok/s | "
             "tokens differing from target |", "|---|---|---|---|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: (r["method"], r["k"])):
        texts = row["texts"]
        correct = sum(final_number(t) == a for t, a in zip(texts, answers))
        low, high = wilson_interval(correct, len(texts))
        diff = (differing_share(reference["token_ids"], row["token_ids"])
                if reference and "token_ids" in row else None)
        lines.append(
            f"| {row['method']} | {row['k'] or '-'} | {len(texts)} | {correct} | "
            f"{correct / len(texts):.1%} | [{low:.1%}, {high:.1%}] | "
            f"{row['tokens_per_second']:.2f} | "
            f"{'-' if diff is None else f'{diff:.1%}'} |")
    (directory / "quality.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
