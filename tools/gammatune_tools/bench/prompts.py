"""The prompts the benchmarks send: Spec-Bench, GSM8K or any JSONL file.

The data ship with the repository, in ``benchmarks/data/`` (with their
licences: ``benchmarks/data/README.md``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.context import REPO

DATA = REPO / "benchmarks" / "data"
SPEC_BENCH = DATA / "spec_bench_question.jsonl"
GSM8K = DATA / "gsm8k_test.jsonl"


def load_prompts(dataset: str, per_category: int | None = None, split: str = "all",
                 limit: int | None = None, turns: int = 1,
                 spec_bench_path: Path = SPEC_BENCH) -> list[tuple[str, list[str]]]:
    """[(category, [turn 1, turn 2, ...])], at most ``turns`` user turns each.

    ``dataset``: "specbench" (every category, ``per_category`` questions each,
    None for all; ``split`` "tune" keeps odd question ids, "eval" even ones),
    "specbench:CATEGORY[+CATEGORY...]" (those categories only, in file order),
    "gsm8k", or a JSONL path whose rows have ``prompt``/``question`` (one turn)
    or ``turns`` (a list) and optionally ``category``. Prompts stay grouped
    by category, in file order. ``per_category`` only applies to datasets
    whose rows name a category; a dataset without one (GSM8K) is taken in
    file order up to ``limit``.
    """
    wanted = None
    if dataset.startswith("specbench:"):
        dataset, _, names = dataset.partition(":")
        wanted = category_names(names)
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
    if wanted is not None:
        by_category = only_categories(by_category, wanted)
    if not any("category" in row for row in rows):
        per_category = None  # one category (GSM8K): only ``limit`` applies
    prompts = [(cat, texts) for cat, items in by_category.items()
               for texts in (items if per_category is None else items[:per_category])]
    return prompts[:limit] if limit else prompts


def category_names(text: str) -> list[str]:
    """``A+B`` -> ["A", "B"], blanks dropped: how every option names categories."""
    return [name.strip() for name in text.split("+") if name.strip()]


def only_categories(by_category: dict[str, list], wanted: list[str]) -> dict[str, list]:
    """The categories named in a "specbench:A+B" dataset, in file order; an
    unknown name is an error naming it and the categories there are."""
    unknown = [name for name in wanted if name not in by_category]
    if unknown or not wanted:
        raise ValueError(f"--dataset {'specbench:' + '+'.join(wanted)!r}: "
                         + (f"unknown category {', '.join(map(repr, unknown))}" if unknown
                            else "no category named")
                         + f"; allowed: {', '.join(sorted(by_category))}")
    return {name: items for name, items in by_category.items() if name in wanted}


def parse_category_sets(text: str, option: str, name: str) -> dict[str, list[str]]:
    """``NAME=CATEGORY[+CATEGORY...]``, comma separated -> {name: [categories]};
    ``option`` and ``name`` (e.g. "--kinds", "KIND") word the errors."""
    sets: dict[str, list[str]] = {}
    for entry in (part.strip() for part in text.split(",")):
        key, sep, categories = entry.partition("=")
        names = category_names(categories)
        if not sep or not key.strip() or not names:
            raise ValueError(f"{option}: {entry!r} is not {name}=CATEGORY[+CATEGORY...]")
        if key.strip() in sets:
            raise ValueError(f"{option}: {name.lower()} {key.strip()!r} given twice")
        sets[key.strip()] = names
    return sets


def first_turns(prompts: list[tuple[str, list[str]]]) -> list[list[dict]]:
    """Each prompt's first turn as a chat conversation (the chat template applies)."""
    return [[{"role": "user", "content": turns[0]}] for _, turns in prompts]


def sharegpt_rows(prompts: list[tuple[str, list[str]]], render) -> list[dict]:
    """vLLM's serving client's dataset: ShareGPT-format rows whose human turn
    is the first turn rendered by ``render`` (the target's chat template)."""
    return [{"id": f"{category}-{i}", "category": category,
             "conversations": [{"from": "human", "value": render(turns[0])},
                               {"from": "gpt", "value": ""}]}
            for i, (category, turns) in enumerate(prompts)]


def chat_renderer(target: str):
    """The target's chat template, as a function of one user turn's text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)

    def render(text: str) -> str:
        return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)

    return render


def draw_questions(count: int, seed: int, split: str = "all",
                   path: Path = SPEC_BENCH) -> list[dict]:
    """``count`` rows of a categorised JSONL (Spec-Bench), drawn with ``seed``
    so that every category is present: each category's rows shuffled, then
    taken one per category in turn, the categories in a shuffled order each
    pass. ``split`` as in ``load_prompts``. The rows are the file's
    (``question_id``, ``category``, ``turns``), in the order drawn."""
    import random

    keep = {"tune": 1, "eval": 0}.get(split)
    by_category: dict[str, list[dict]] = defaultdict(list)
    for line in Path(path).open():
        if line.strip():
            row = json.loads(line)
            if keep is None or row["question_id"] % 2 == keep:
                by_category[row["category"]].append(row)
    available = sum(len(rows) for rows in by_category.values())
    if not len(by_category) <= count <= available:
        raise ValueError(f"prompts: {count} questions; allowed: {len(by_category)} (one per "
                         f"category) to {available} ({Path(path).name}, split {split!r})")
    rng = random.Random(seed)
    names = sorted(by_category)
    for name in names:
        rng.shuffle(by_category[name])
    drawn: list[dict] = []
    while len(drawn) < count:
        rng.shuffle(names)
        drawn += [by_category[name].pop() for name in names if by_category[name]]
    return drawn[:count]
