"""The README's first table, written from the manifest, and the check that
the README holds what the manifest gives.

The table sits between ``START`` and ``END`` (HTML comments, invisible on
the rendered page); everything between them is the writer's. A caption
line names the machine, the date and the design; then one column per cell
and, per plugin method, a row against each comparison and a row of its
counts (which do not depend on the machine). A cell holds one number and
its interval, at most ``MAX_CELL`` characters, and words no stronger than
the interval (``stats.verdict``).

The check has two halves: the README against the manifest (no git needed,
so it runs anywhere), and the manifest's plugin tree against HEAD's.
"""

from __future__ import annotations

from gammatune_tools.bench.methods import NO_SPECULATION, method_name
from gammatune_tools.bench.readme_cells import BEST_FIXED, ORACLE, k_label

START = "<!-- readme-table:start -->"
END = "<!-- readme-table:end -->"
MAX_CELL = 80

#: how a row names a method (by ``method_name``; others by their own name)
LABELS = {"gammatune_cost": "`gammatune_cost`",
          "gammatune_cost_ngram_model": "`gammatune_cost`, n-gram lookup + draft model",
          "gammatune": "`gammatune`"}
#: how a row names what a method is compared with
AGAINST = {BEST_FIXED: "the best fixed K", NO_SPECULATION: "no speculation",
           ORACLE: "the per-prompt oracle"}


class TableError(ValueError):
    """A README the table cannot be written into; the message says why."""


def ratio_cell(entry: dict, label: str | None = None) -> str:
    text = f"{entry['ratio']:.2f}x"
    if entry["low"] is not None:
        text += f" [{entry['low']:.2f}, {entry['high']:.2f}]"
    return text + (f" vs {label}" if label else "") + f", {entry['verdict']}"


def counts_cell(counts: dict) -> str:
    def number(value):
        return "-" if value is None else f"{value:.2f}"

    return (f"{number(counts['target_passes_per_token'])} target, "
            f"{number(counts['draft_forwards_per_token'])} draft passes/token; "
            f"accepts {number(counts['accepted_length'])}")


def _subjects(cells: dict) -> list[str]:
    """The plugin methods compared in any cell, by method name, in a fixed order."""
    names = {method_name(c["method"]) for cell in cells.values() for c in cell["comparisons"]}
    return [name for name in LABELS if name in names]


def table_rows(manifest: dict) -> list[list[str]]:
    """[row label, cell, cell, ...] for every row; "-" where a cell has no such number."""
    names = [c["name"] for c in manifest["design"]["cells"]]
    cells = manifest["cells"]
    rows = []
    for subject in _subjects(cells):
        for against in (BEST_FIXED, NO_SPECULATION, ORACLE):
            row = [f"{LABELS[subject]} / {AGAINST[against]}"]
            for name in names:
                found = [c for c in cells.get(name, {}).get("comparisons", [])
                         if method_name(c["method"]) == subject and c["against"] == against]
                label = (cells[name]["best_fixed_label"]
                         if found and against == BEST_FIXED else None)
                row.append(ratio_cell(found[0], label) if found else "-")
            rows.append(row)
        row = [f"{LABELS[subject]}: counts"]
        for name in names:
            engines = [m for m in cells.get(name, {}).get("methods", {})
                       if method_name(m) == subject]
            row.append(counts_cell(cells[name]["methods"][engines[0]]) if engines else "-")
        rows.append(row)
    best = ["best fixed K / no speculation"]
    best_counts = ["best fixed K: counts"]
    for name in names:
        cell = cells.get(name)
        found = [c for c in (cell or {}).get("comparisons", [])
                 if c["method"] == (cell or {}).get("best_fixed")
                 and c["against"] == NO_SPECULATION]
        best.append(f"{k_label(cell['best_fixed'])}: {ratio_cell(found[0])}" if found else "-")
        best_counts.append(counts_cell(cell["methods"][cell["best_fixed"]]) if cell else "-")
    return rows + [best, best_counts]


def provenance(manifest: dict) -> str:
    """The pair and the software, where the manifest records them."""
    models, software = manifest.get("models"), manifest.get("software")
    parts = []
    if models:
        parts.append(f"{models['target']} with {models['draft']} ({models['dtype']})")
    if software:
        parts.append(f"vLLM {software['vllm']}, torch {software['torch']}")
    return "".join(f", {part}" for part in parts)


def caption(manifest: dict) -> str:
    machine = manifest["machine"]
    flags = ", ".join(machine["flags"]) or "no AVX2"
    size = "the quick size" if manifest["quick"] else "the full size"
    return (f"Measured on {machine['cpu_model']} ({flags}; {machine['threads']} threads)"
            f"{provenance(manifest)}, "
            f"{manifest['date'][:10]}, {size}, by `python -m benchmarks.reproduce readme`: "
            "tokens/s over the comparison's in the same round, 95% intervals from a "
            "bootstrap over prompts (a batch or a phase counts once) and rounds together; "
            "counts per generated token do not depend on the machine.")


def rounds_label(rounds: int, planned: int | None) -> str:
    """"5 rounds"; "3 of 5 rounds" for a run stopped short of its plan."""
    if planned and rounds < planned:
        return f"{rounds} of {planned} rounds"
    return f"{rounds} round" + ("s" if rounds != 1 else "")


def render(manifest: dict, planned: dict[str, int] | None = None) -> str:
    """The block between the markers (markers excluded), ending in a newline.
    ``planned``: the rounds each cell's step runs to, by cell name; a cell
    short of them says so in its header."""
    planned = planned or {}
    rows = table_rows(manifest)
    too_wide = [cell for row in rows for cell in row[1:]
                if len(cell) > MAX_CELL]
    if too_wide:
        raise TableError(f"cells over {MAX_CELL} characters: {too_wide}")
    rounds = {c["name"]: manifest["cells"].get(c["name"], {}).get("rounds", 0)
              for c in manifest["design"]["cells"]}
    header = ["", *(f"{name} ({rounds_label(n, planned.get(name))})"
                    for name, n in rounds.items())]
    short = any(n < planned.get(name, 0) for name, n in rounds.items())
    lines = [caption(manifest) + (" A cell of fewer rounds than planned is of a run stopped "
                                  "short; the same command resumes it." if short else ""),
             "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def block(text: str, start: str = START, end: str = END) -> str | None:
    """What a page holds between the markers (None: no markers)."""
    if start not in text or end not in text:
        return None
    inside = text.split(start, 1)[1].split(end, 1)[0]
    return inside.removeprefix("\n")


def replace(text: str, new_block: str, start: str = START, end: str = END) -> str:
    """``text`` with the block between the markers replaced."""
    if block(text, start, end) is None:
        raise TableError(f"the page has no markers: put {start} and {end} on lines "
                         "of their own around what is written from the manifest")
    before, rest = text.split(start, 1)
    return before + start + "\n" + new_block + end + rest.split(end, 1)[1]


def check_readme(text: str, manifest: dict, planned: dict[str, int] | None = None
                 ) -> str | None:
    """The README half of the check: None when its table is the manifest's
    (``render``), else what differs."""
    held = block(text)
    if held is None:
        return f"README: no table markers ({START} ... {END})"
    if held != render(manifest, planned):
        return ("README: the table differs from the manifest's; write it with "
                "python -m benchmarks.reproduce readme --write")
    return None


def check_tree(manifest: dict, head_tree: str) -> str | None:
    """The revision half: None when the manifest measured HEAD's plugin tree."""
    if manifest["plugin_tree"] != head_tree:
        return (f"manifest: plugin_tree {manifest['plugin_tree']} is not HEAD's plugin tree "
                f"{head_tree}: the plugin changed since the table was measured")
    return None
