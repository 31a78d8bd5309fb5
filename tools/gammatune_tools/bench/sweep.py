"""``sweep.md``: a paired run's adaptive methods against the best fixed K
and the per-prompt oracle over the fixed choices that ran in the same rounds.

``paired.md`` compares every engine with one baseline; a run that sweeps
fixed K asks another question: does the adaptive method beat the fixed K a
user would have picked, knowing the results (the best fixed K over the
run), or even the best K for each prompt (the oracle)? Both are chosen on
the same rounds, again inside every bootstrap resample
(``readme_cells.cell_summary``), with the exact counts beside them.
"""

from __future__ import annotations

import json
from pathlib import Path

from gammatune_tools.bench.paired import ROWS_FILE, complete_rounds
from gammatune_tools.bench.readme_cells import BEST_FIXED, ORACLE, cell_summary, is_fixed
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.tables import fmt

SWEEP_FILE = "sweep.md"


def sweeps(rows: list[dict], methods: list[str], num_prompts: int) -> list[dict]:
    """One ``cell_summary`` per batch size with a complete round, with its
    batch size under ``batch_size``."""
    found = []
    for size in sorted(complete_rounds(rows, methods, num_prompts)):
        at_size = [row for row in rows if row["batch_size"] == size]
        units = -(-num_prompts // size)
        found.append({"batch_size": size, **cell_summary(at_size, methods, units)})
    return found


def interval(entry: dict | None) -> str:
    if entry is None:
        return "-"
    if entry["low"] is None:
        return f"{entry['ratio']:.3f}"
    return f"{entry['ratio']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}], {entry['verdict']}"


def sweep_report(cells: list[dict], title: str) -> str:
    lines = [f"# Against the best fixed K and the per-prompt oracle ({title})", "",
             "Tokens/s over the best fixed choice's (chosen over the rounds) and over the "
             "per-prompt oracle's (per prompt, or batch of prompts, the fixed choice fastest "
             "on it over the rounds), in the same round, averaged over rounds; 95% intervals "
             "from a bootstrap over prompts and rounds together, the choices made again in "
             "every resample. Counts per generated token are exact (target passes: steps "
             "that emitted a request's tokens; draft forwards: batched, every method).", ""]
    for cell in cells:
        versus = {(c["method"], c["against"]): c for c in cell["comparisons"]}
        lines += [f"## Batch {cell['batch_size']} ({cell['rounds']} rounds, {cell['units']} "
                  f"units; best fixed: {cell['best_fixed_label']})", "",
                  "| engine | tok/s (mean over rounds) | / best fixed | / per-prompt oracle | "
                  "target passes/token | draft forwards/token | accepted length |",
                  "|---|---|---|---|---|---|---|"]
        for method, entry in cell["methods"].items():
            rates = entry["tokens_per_second"]
            best = " (best fixed)" if method == cell["best_fixed"] else ""
            lines.append(
                f"| {method}{best} | {fmt(sum(rates) / len(rates))} | "
                f"{interval(versus.get((method, BEST_FIXED)))} | "
                f"{interval(versus.get((method, ORACLE)))} | "
                f"{fmt(entry['target_passes_per_token'])} | "
                f"{fmt(entry['draft_forwards_per_token'])} | {fmt(entry['accepted_length'])} |")
        lines.append("")
    return "\n".join(lines)


def write_sweep(out: Path, methods: list[str], num_prompts: int) -> Path | None:
    """``sweep.md`` and ``sweep.json`` of a run whose engines include fixed
    choices and others (None, nothing written, otherwise or before a
    complete round)."""
    if not any(is_fixed(m) for m in methods) or all(is_fixed(m) for m in methods):
        return None
    cells = sweeps(read_jsonl(out / ROWS_FILE), methods, num_prompts)
    if not cells:
        return None
    (out / "sweep.json").write_text(json.dumps(cells, indent=1))
    path = out / SWEEP_FILE
    path.write_text(sweep_report(cells, out.name))
    return path
