"""How numbers are written in the harness's Markdown tables."""

from __future__ import annotations

from gammatune_tools.bench.stats import mean_std


def fmt(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def pm(values: list[float], digits: int = 2, suffix: str = "") -> str:
    """"mean ± std" of the values (std over initial lengths), "-" if none."""
    mean, std = mean_std(values)
    if mean is None:
        return "-"
    return f"{mean:.{digits}f}{suffix} ± {std:.{digits}f}"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def format_interval(value: tuple[float, float | None, float | None] | None) -> str:
    """``stats.ratio_interval``'s result as ``mean [low, high]`` (``-`` for None)."""
    if value is None:
        return "-"
    mean, low, high = value
    return fmt(mean, 3) + ("" if low is None else f" [{low:.3f}, {high:.3f}]")


def label(row: dict) -> str:
    """A cell's method as tables name it: with its parameter variant, if any."""
    variant = row.get("variant") or {}
    if not variant or "method" in variant:  # a --spec config is named by its NAME
        return row["method"]
    return row["method"] + " (" + ", ".join(f"{k}={v}" for k, v in sorted(variant.items())) + ")"
