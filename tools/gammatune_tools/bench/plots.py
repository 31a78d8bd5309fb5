"""The harness's plots (matplotlib, the tools' ``plots`` extra; drawn off-screen)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from gammatune_tools.bench.report import group_key, throughput_by_batch
from gammatune_tools.bench.stats import mean_std
from gammatune_tools.bench.tables import label


def pyplot():
    """matplotlib.pyplot on the Agg backend (ImportError without matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_throughput(rows: list[dict], path: Path) -> None:
    """Mean tok/s per method across initial lengths (± std), a panel per group."""
    plt = pyplot()
    groups = sorted({group_key(r) for r in rows})
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4), squeeze=False)
    for ax, group in zip(axes[0], groups):
        methods = defaultdict(list)
        for r in rows:
            if group_key(r) == group:
                methods[label(r)].append(r["tokens_per_second"])
        names = sorted(methods)
        stats = [mean_std(methods[m]) for m in names]
        ax.bar(names, [m for m, _ in stats], yerr=[s for _, s in stats], capsize=4,
               color="#4c72b0")
        ax.set_title(f"batch {group[0]}, T={group[1]}: mean tok/s across initial "
                     "lengths (± std)", fontsize=9)
        ax.set_ylabel("output tokens / s")
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_by_batch(rows: list[dict], path: Path) -> bool:
    """Methods as lines over the batch size; False (nothing drawn) with one size."""
    series = throughput_by_batch(rows)
    if not any(len(points) > 1 for s in series.values() for points in s.values()):
        return False  # one batch size only
    plt = pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(6 * len(series), 4), squeeze=False)
    for ax, ((temperature, turns), methods) in zip(axes[0], sorted(series.items())):
        for name, points in sorted(methods.items()):
            ax.errorbar([p[0] for p in points], [p[1] for p in points],
                        yerr=[p[2] for p in points], marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({p[0] for pts in methods.values() for p in pts}))
        ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
        ax.set_xlabel("batch size")
        ax.set_ylabel("output tokens / s (mean ± std across k)")
        ax.set_title(f"temperature {temperature}" + (f", {turns} turns" if turns != 1 else ""))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_trace(steps: list[dict], title: str, path: Path) -> None:
    """Draft length (line) and accepted tokens (bars) per step of one request."""
    plt = pyplot()
    x = [s["step"] for s in steps]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(x, [s["num_accepted_tokens"] for s in steps], color="#55a868", alpha=0.7,
           label="accepted tokens")
    ax.step(x, [s["num_draft_tokens"] for s in steps], where="mid", color="#c44e52",
            label="draft length")
    ax.set_xlabel("verification step")
    ax.set_ylabel("tokens")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pool(pooled: list[dict], path: Path, served: bool) -> None:
    """Each method's pooled ratio against the batch size (or concurrency),
    with its 95% interval, over all rounds and without first rounds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    methods = sorted({row["method"] for row in pooled})
    for offset, method in enumerate(methods):
        rows = sorted((r for r in pooled if r["method"] == method),
                      key=lambda r: r["batch_size"])
        for key, style, suffix in (("ratio", "o-", "all rounds"),
                                   ("ratio_after_first", "s--", "without first rounds")):
            points = [(r["batch_size"], r[key]) for r in rows if r[key] is not None]
            if not points:
                continue
            shift = 1.0 + 0.04 * (2 * offset + (key != "ratio"))  # keep bars apart
            xs = [size * shift for size, _ in points]
            means = [interval[0] for _, interval in points]
            errors = [[m - interval[1] for m, (_, interval) in zip(means, points)],
                      [interval[2] - m for m, (_, interval) in zip(means, points)]]
            ax.errorbar(xs, means, yerr=errors, fmt=style, capsize=3,
                        label=f"{method}, {suffix}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["batch_size"] for r in pooled}))
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.set_xlabel("concurrency (served)" if served else "batch size (offline)")
    ax.set_ylabel(f"tok/s over {pooled[0]['baseline']}'s, same round (95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: the README's figure: each cell's bars (label, engine or None for the
#: cell's best fixed K, colour), in order
README_BARS = (("best fixed K", None, "#8c8c8c"),
               ("gammatune_cost", "gammatune_cost", "#4c72b0"),
               ("gammatune_cost, n-gram lookup + draft model", "gammatune_cost_ngram_model",
                "#55a868"))


def plot_readme(manifest: dict, path: Path) -> None:
    """The README's figure from its manifest: per cell, the tokens/s over no
    speculation of the best fixed K (named on its bar), ``gammatune_cost``
    and, where it ran, the n-gram lookup ahead of the draft model, each with
    the manifest's 95% interval."""
    from gammatune_tools.bench.methods import NO_SPECULATION
    from gammatune_tools.bench.readme_cells import k_label

    plt = pyplot()
    names = [c["name"] for c in manifest["design"]["cells"] if c["name"] in manifest["cells"]]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(README_BARS)
    for offset, (label, engine, colour) in enumerate(README_BARS):
        bars = []  # (x, ratio, low, high, text)
        for i, name in enumerate(names):
            cell = manifest["cells"][name]
            wanted = cell["best_fixed"] if engine is None else engine
            found = [c for c in cell["comparisons"]
                     if c["method"] == wanted and c["against"] == NO_SPECULATION]
            if found:
                c = found[0]
                bars.append((i + (offset - (len(README_BARS) - 1) / 2) * width, c["ratio"],
                             c["low"], c["high"], k_label(wanted) if engine is None else ""))
        if not bars:
            continue
        xs, ratios, lows, highs, texts = zip(*bars)
        ax.bar(xs, ratios, width, color=colour, label=label,
               yerr=[[r - lo for r, lo in zip(ratios, lows)],
                     [hi - r for r, hi in zip(ratios, highs)]], capsize=3)
        for x, high, text in zip(xs, highs, texts):
            if text:
                ax.text(x, high + 0.02, text, ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("tokens/s over no speculation", fontsize=8)
    ax.set_title("Same rounds, 95% intervals (bootstrap over prompts and rounds)", fontsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
              frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
