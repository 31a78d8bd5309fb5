"""Per category of prompts, an interleaved paired run (``paired.jsonl``):
one method (the subject) against each other one over the batches that hold
only that category's prompts, or only a group's.

Why: a drafter can pay on some kinds of prompt and cost on others (an
n-gram lookup finds its drafts where the answer repeats the prompt:
summarization, RAG, code editing), and the whole set's ratio mixes them.

Batches: at batch size B, batch b holds the prompts [b*B, (b+1)*B) of the
prompt list in ``load_prompts`` order (``benchmarks.run_paired`` slices the
list so; the last batch may be shorter). ``load_prompts`` keeps a
category's prompts together, so at batch 1 every category has batches of
its own. A batch's wall time cannot be split between its prompts, so at a
larger size a category (or group) is reported only where no batch mixes its
prompts with another's; the others are listed as left out.

Per round and method: tokens/s over the selection's batches (their tokens
over their wall time); the subject's over each baseline's in the same
round; mean and 95% t-interval over rounds (one round: the ratio alone).
``paired.summarize`` does that arithmetic on the selection's rows, so the
numbers mean what ``paired.md``'s do. Beside them the hardware-independent
counts over all rounds: target passes and draft forwards per generated
token, accepted length and, where the rows have the plugin's n-gram
counters, the n-gram lookup's share of the verified draft tokens and their
acceptance rate.
"""

from __future__ import annotations

import json
from pathlib import Path

from gammatune_tools.bench.paired import (ROWS_FILE, baseline_first, complete_rounds,
                                          num_batches, summarize)
from gammatune_tools.bench.prompts import parse_category_sets
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.tables import fmt, format_interval, percent

#: the group of the categories no named group holds (``with_rest``)
REST = "other"


def parse_groups(text: str | None) -> dict[str, list[str]]:
    """``--category-groups``: ``NAME=CAT+CAT,NAME=CAT`` -> {name: [category]}
    ({} for none)."""
    return parse_category_sets(text, "--category-groups", "GROUP") if text else {}


def with_rest(groups: dict[str, list[str]], categories: list[str]) -> dict[str, list[str]]:
    """``groups`` and ``REST``, the categories none of them holds (when there
    are groups, such categories and no group of that name already)."""
    named = {c for members in groups.values() for c in members}
    rest = [c for c in dict.fromkeys(categories) if c not in named]
    if not groups or not rest or REST in groups:
        return dict(groups)
    return {**groups, REST: rest}


def selection_batches(categories: list[str], size: int, selection: set[str]) -> list[int] | None:
    """The batches at ``size`` holding the selection's prompts (``categories``:
    each prompt's, in order); None when one of them holds another category's too."""
    batches = [set(categories[i:i + size]) for i in range(0, len(categories), size)]
    held = [b for b, inside in enumerate(batches) if inside & selection]
    return held if all(batches[b] <= selection for b in held) else None


def ngram_counts(rows: list[dict]) -> tuple[float | None, float | None]:
    """The n-gram lookup's share of the verified draft tokens and the share
    of its draft tokens accepted (None: no n-gram counters in the rows,
    nothing drafted)."""
    if not any("ngram_draft_tokens" in row for row in rows):
        return None, None
    ngram = sum(row.get("ngram_draft_tokens", 0) for row in rows)
    drafted = sum(row.get("draft_tokens", 0) for row in rows)
    accepted = sum(row.get("ngram_accepted_tokens", 0) for row in rows)
    return (ngram / drafted if drafted else None, accepted / ngram if ngram else None)


def _method_counts(summary_row: dict, rows: list[dict]) -> dict:
    """One method's tok/s per round and counts over a selection's ``rows``."""
    ngram_share, ngram_acceptance = ngram_counts(
        [row for row in rows if row["method"] == summary_row["method"]])
    return {"tokens_per_second": summary_row["tokens_per_second"],
            "target_passes_per_token": summary_row["target_passes_per_token"],
            "draft_forwards_per_token": summary_row["draft_forwards_per_token"],
            "accepted_length": summary_row["accepted_length"],
            "ngram_draft_share": ngram_share, "ngram_acceptance": ngram_acceptance}


def selection_entry(rows: list[dict], categories: list[str], size: int, batches: list[int],
                    subject: str, baselines: list[str]) -> dict:
    """Ratios and counts over ``batches`` (at ``size``) of complete rounds' ``rows``."""
    # the selection's batches numbered 0.. so that summarize sees a whole prompt set
    renumber = {b: i for i, b in enumerate(batches)}
    mine = [{**row, "batch": renumber[row["batch"]]} for row in rows
            if row["batch_size"] == size and row["batch"] in renumber]
    prompts = sum(len(categories[b * size:(b + 1) * size]) for b in batches)
    methods, ratios = {}, {}
    for baseline in baselines:
        base, subj = summarize(mine, [baseline, subject], prompts)
        methods[baseline] = _method_counts(base, mine)
        methods[subject] = _method_counts(subj, mine)
        ratios[baseline] = {"per_round": subj["ratios"], "mean_interval": subj["ratio"]}
    return {"batch_size": size, "prompts": prompts, "batches": batches,
            "rounds": subj["rounds"],
            "methods": {m: methods[m] for m in [subject, *baselines]}, "ratios": ratios}


def category_summary(rows: list[dict], categories: list[str], subject: str,
                     baselines: list[str], groups: dict[str, list[str]] | None = None) -> dict:
    """Per batch size of complete rounds, per category and per group whose
    prompts have batches of their own: the subject against each baseline.

    ``categories``: each prompt's category in the run's order (``load_prompts``);
    ``groups``: name -> categories, pooled like one category. JSON-able:
    ``entries`` [{name, kind ("category"/"group"), categories, batch_size,
    prompts, batches, rounds, methods: {method: tok/s per round and counts},
    ratios: {baseline: {per_round, mean_interval}}}], ``left_out``
    [{batch_size, name, kind}], ``not_in_prompts``: group members this run
    did not have.
    """
    groups = groups or {}
    methods = [*baselines, subject]
    present = list(dict.fromkeys(categories))
    for row in rows:
        if row["batch"] >= num_batches(len(categories), row["batch_size"]):
            raise ValueError(
                f"paired.jsonl has batch {row['batch']} at batch size {row['batch_size']}, "
                f"more than {len(categories)} prompts make: not this run's prompt list")
    selections = [(c, "category", [c]) for c in present] + [
        (name, "group", [c for c in members if c in present])
        for name, members in groups.items()]
    done = complete_rounds(rows, methods, len(categories))
    kept = [r for r in rows if r["round"] in done.get(r["batch_size"], set())]
    entries, left_out = [], []
    for size in sorted(done):
        for name, kind, members in selections:
            if not members:  # a group of categories this run did not have
                continue
            batches = selection_batches(categories, size, set(members))
            if batches is None:
                left_out.append({"batch_size": size, "name": name, "kind": kind})
                continue
            entries.append({"name": name, "kind": kind, "categories": members,
                            **selection_entry(kept, categories, size, batches, subject,
                                              baselines)})
    named = [c for members in groups.values() for c in members]
    return {"subject": subject, "baselines": baselines, "groups": groups,
            "not_in_prompts": [c for c in dict.fromkeys(named) if c not in present],
            "entries": entries, "left_out": left_out}


def category_report(summary: dict, title: str) -> str:
    """``category_summary`` as Markdown: a row per (selection, method)."""
    subject = summary["subject"]
    lines = [f"# Per category: `{subject}` against "
             f"{', '.join(f'`{b}`' for b in summary['baselines'])} ({title})", "",
             "Over the batches that hold only the category's (group's) prompts: at batch 1 "
             "every category, at a larger size only those no batch mixes with another. "
             f"Ratio: `{subject}`'s tok/s over the method's in the same round; mean and 95% "
             "t-interval over rounds (one round: no interval). Counts over all rounds; "
             "accepted length: 1 + accepted tokens per verification that had drafts; "
             "n-gram: the n-gram lookup's share of the verified draft tokens, and the share "
             "of them accepted.", ""]
    if summary["groups"]:
        lines += ["Groups: " + "; ".join(f"{name}: {', '.join(members)}"
                                          for name, members in summary["groups"].items())
                  + ".", ""]
    if summary["not_in_prompts"]:
        lines += [f"Named in a group but not in this run's prompts: "
                  f"{', '.join(summary['not_in_prompts'])}.", ""]
    lines += [f"| batch | category | prompts | rounds | method | tok/s per round | "
              f"`{subject}` / method per round | mean [95% t-interval] | target passes/tok | "
              "draft fwd/tok | accepted length | n-gram share of drafts | "
              "n-gram acceptance |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for entry in summary["entries"]:
        name = entry["name"] + (" (group)" if entry["kind"] == "group" else "")
        for method, counts in entry["methods"].items():
            ratio = entry["ratios"].get(method)
            lines.append(
                f"| {entry['batch_size']} | {name} | {entry['prompts']} | {entry['rounds']} | "
                f"{method} | {', '.join(fmt(v) for v in counts['tokens_per_second'])} | "
                f"{'-' if ratio is None else ', '.join(fmt(v, 3) for v in ratio['per_round'])}"
                f" | {format_interval(None if ratio is None else ratio['mean_interval'])} | "
                f"{fmt(counts['target_passes_per_token'])} | "
                f"{fmt(counts['draft_forwards_per_token'])} | "
                f"{fmt(counts['accepted_length'])} | {percent(counts['ngram_draft_share'])} | "
                f"{percent(counts['ngram_acceptance'])} |")
    if summary["left_out"]:
        by_size: dict[int, list[str]] = {}
        for left in summary["left_out"]:
            by_size.setdefault(left["batch_size"], []).append(left["name"])
        lines += ["", "Left out (a batch holds their prompts and another category's): "
                  + "; ".join(f"batch {size}: {', '.join(names)}"
                              for size, names in by_size.items()) + "."]
    return "\n".join(lines + [""])


def write_category_summary(out: Path, methods: list[str], categories: list[str],
                           baseline: str | None = None,
                           groups: dict[str, list[str]] | None = None) -> Path | None:
    """``paired_categories.md`` and ``.json`` beside ``paired.md``: the last
    method of ``paired.md``'s order (``baseline_first``) against every other,
    groups completed by ``with_rest``. None, writing nothing, with one
    method or when no category has batches of its own in a complete round."""
    ordered = baseline_first(methods, baseline)
    if len(ordered) < 2:
        return None
    rows = read_jsonl(out / ROWS_FILE)
    summary = category_summary(rows, categories, ordered[-1], ordered[:-1],
                               with_rest(groups or {}, categories))
    if not summary["entries"]:
        return None
    (out / "paired_categories.json").write_text(json.dumps(summary, indent=1))
    path = out / "paired_categories.md"
    path.write_text(category_report(summary, out.name))
    return path
