"""The traffic run's plot (matplotlib, the tools' ``plots`` extra; drawn off-screen):
one round's trace of the subject's decisions beside the client's throughput."""

from __future__ import annotations

from pathlib import Path

from gammatune_tools.bench.plots import pyplot

#: seconds averaged for the client's throughput line
SMOOTHING_S = 5


def moving_mean(values: list[float], width: int) -> list[float]:
    """The mean of each value and the ``width - 1`` before it (fewer at the start)."""
    means, total = [], 0.0
    for i, value in enumerate(values):
        total += value - (values[i - width] if i >= width else 0.0)
        means.append(total / min(i + 1, width))
    return means


def throughput_line(phase_rows: list[dict]) -> tuple[list[float], list[float]]:
    """(seconds into the trace, output tokens/s) of one trace's phases, the
    idle gaps between phases left out as in the trace's time."""
    seconds, tokens = [], []
    for row in phase_rows:
        for i, count in enumerate(row["tokens_by_second"]):
            seconds.append(row["started_s"] + i)
            tokens.append(count)
    return seconds, moving_mean(tokens, SMOOTHING_S)


def plot_traffic(subject: str, plans_by_phase: list[list[dict]], traces: dict[str, list[dict]],
                 path: Path) -> None:
    """Left: per engine step of ``subject``'s trace, the longest draft a
    request was planned and the batch size, the phases marked. Right: the
    client's output tokens per second over the trace for each of ``traces``
    ({choice: its phase rows, same round}), the subject's phases marked."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.2))
    step, lengths, batch = 0, [], []
    for plans, row in zip(plans_by_phase, traces[subject]):
        left.axvline(step, color="grey", linewidth=0.8, linestyle=":")
        left.text(step, 0.98, f" {row['phase']}", transform=left.get_xaxis_transform(),
                  fontsize=8, va="top")
        lengths += [plan["max_num_draft_tokens"] for plan in plans]
        batch += [plan["batch_size"] for plan in plans]
        step += len(plans)
    left.step(range(len(lengths)), lengths, where="post", color="#c44e52",
              label="longest planned draft")
    left.set_xlabel("engine step")
    left.set_ylabel("draft tokens", color="#c44e52")
    sizes = left.twinx()
    sizes.step(range(len(batch)), batch, where="post", color="#4c72b0", alpha=0.6,
               label="batch size")
    sizes.set_ylabel("batch size", color="#4c72b0")
    left.set_title(f"{subject}: decisions per engine step", fontsize=9)
    for name, rows in traces.items():
        seconds, rate = throughput_line(rows)
        right.plot(seconds, rate, label=name, linewidth=1.2)
    for row in traces[subject]:
        right.axvline(row["started_s"], color="grey", linewidth=0.8, linestyle=":")
    right.set_xlabel(f"seconds of the trace ({subject}'s phases marked)")
    right.set_ylabel(f"output tokens/s (client, {SMOOTHING_S} s mean)")
    right.set_title("the client's throughput, same round", fontsize=9)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
