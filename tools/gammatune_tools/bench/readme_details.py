"""The results page's detail of the README's table, written from the same
manifest: per cell every engine of the sweep against no speculation, with
its counts, and where the units differ in kind (the served trace's phases)
each unit's ratios.

The README's table keeps one number a cell; this is where a reader finds
which fixed K came second, what each K accepted, and how a trace's busy
phase went. It sits on the results page between ``START`` and ``END``,
written by ``reproduce readme --write`` and held to the manifest by
``--check``, as the table is.

Every interval is the table's (``readme_cells.comparison``: a two-level
bootstrap over units and rounds together). A unit's own ratios are point
figures over the pooled rounds: one unit leaves nothing to resample but
the rounds, which would describe the clock and not the prompts.
"""

from __future__ import annotations

from gammatune_tools.bench.methods import NO_SPECULATION
from gammatune_tools.bench.readme_cells import SEED, arrays, comparison, is_fixed, k_label
from gammatune_tools.bench.readme_manifest import cell_rows
from gammatune_tools.bench.readme_table import counts_cell, ratio_cell, rounds_label

START = "<!-- readme-details:start -->"
END = "<!-- readme-details:end -->"


def engine_label(engine: str) -> str:
    """``vllm_draft_model@3`` -> "vLLM K=3"; plugin methods by name, in code."""
    if engine == NO_SPECULATION:
        return "no speculation"
    if is_fixed(engine):
        return "vLLM " + k_label(engine)
    return f"`{engine}`"


def sweep_table(cell: dict, summary: dict, tokens, seconds) -> list[str]:
    """Markdown rows: every engine's mean tokens/s over the rounds, its ratio
    to no speculation with the table's interval, and its counts. A ratio the
    manifest's ``summary`` holds is taken from it; the other fixed K's are
    bootstrapped here, as ``readme_cells.cell_summary`` would."""
    methods = cell["methods"]
    fixed = [i for i, m in enumerate(methods) if is_fixed(m)]
    stored = {c["method"]: c for c in summary["comparisons"] if c["against"] == NO_SPECULATION}
    lines = ["| engine | tok/s, mean of rounds | / no speculation | counts |",
             "|---|---|---|---|"]
    for engine in methods:
        numbers = summary["methods"][engine]
        rate = sum(numbers["tokens_per_second"]) / len(numbers["tokens_per_second"])
        if engine == NO_SPECULATION:
            ratio = "1"
        else:
            ratio = ratio_cell(stored.get(engine) or comparison(
                tokens, seconds, methods, engine, NO_SPECULATION, fixed, SEED))
        best = " (best fixed)" if engine == summary["best_fixed"] else ""
        lines.append(f"| {engine_label(engine)}{best} | {rate:.2f} | {ratio} | "
                     f"{counts_cell(numbers)} |")
    return lines


def unit_table(cell: dict, summary: dict, tokens, seconds,
               unit_names: list[str]) -> list[str]:
    """Markdown rows, one per unit (a trace's phase): each plugin method's
    tokens/s over no speculation's and over the cell's best fixed K's,
    pooled over the rounds."""
    methods = cell["methods"]
    rate = tokens.sum(1) / seconds.sum(1)  # [method, unit], pooled over the rounds
    subjects = [m for m in methods if m != NO_SPECULATION and not is_fixed(m)]
    best = methods.index(summary["best_fixed"])
    head = ["phase", "best fixed / no speculation",
            *(f"{engine_label(s)} / {against}" for s in subjects
              for against in ("no speculation", "best fixed"))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = methods.index(NO_SPECULATION)
    for unit, name in enumerate(unit_names):
        cells = [name, f"{rate[best, unit] / rate[base, unit]:.2f}"]
        for subject in subjects:
            i = methods.index(subject)
            cells += [f"{rate[i, unit] / rate[base, unit]:.2f}",
                      f"{rate[i, unit] / rate[best, unit]:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


#: an engine's round below this share of its own median tokens/s over the
#: rounds is flagged (kept: a slow engine instance is part of what a user
#: gets, and its round counts like any other)
SLOW_ROUND = 0.6


def slow_rounds(cell: dict, tokens, seconds) -> list[str]:
    """"vLLM K=4 in round 1 (0.52x its median)" for every engine's round
    whose tokens/s (over the round's units) is below ``SLOW_ROUND`` of that
    engine's median over the rounds."""
    import numpy

    rate = tokens.sum(2) / seconds.sum(2)  # [method, round]
    median = numpy.median(rate, axis=1)
    return [f"{engine_label(engine)} in round {r + 1} ({rate[i, r] / median[i]:.2f}x its "
            f"median)" for i, engine in enumerate(cell["methods"])
            for r in range(rate.shape[1]) if rate[i, r] < SLOW_ROUND * median[i]]


def render(manifest: dict, unit_names: dict[str, list[str]] | None = None,
           planned: dict[str, int] | None = None) -> str:
    """The block between the markers (markers excluded), ending in a newline.
    ``unit_names``: per cell whose units differ in kind, their names in
    order; ``planned``: the rounds each cell's step runs to."""
    unit_names, planned = unit_names or {}, planned or {}
    lines = []
    for cell in manifest["design"]["cells"]:
        summary = manifest["cells"].get(cell["name"])
        if summary is None:
            lines += [f"**{cell['name']}**: no complete round.", ""]
            continue
        units = f"{cell['units']} unit" + ("s" if cell["units"] != 1 else "")
        rounds = rounds_label(summary["rounds"], planned.get(cell["name"]))
        lines += [f"**{cell['name']}** ({rounds}, {units}; "
                  f"best fixed: {engine_label(summary['best_fixed'])})", ""]
        # [method, round, unit]: the cell's rows, built once for both tables
        tokens, seconds = arrays(cell_rows(manifest["rounds"], cell), cell["methods"],
                                 cell["units"])
        lines += sweep_table(cell, summary, tokens, seconds) + [""]
        slow = slow_rounds(cell, tokens, seconds)
        if slow:
            lines += [f"Rounds below {SLOW_ROUND}x the engine's own median tokens/s (kept "
                      f"in every figure above): {'; '.join(slow)}.", ""]
        if cell["name"] in unit_names:
            lines += [f"By phase ({cell['name']}), tokens/s ratios pooled over the rounds:",
                      ""]
            lines += unit_table(cell, summary, tokens, seconds,
                                unit_names[cell["name"]]) + [""]
    return "\n".join(lines)
