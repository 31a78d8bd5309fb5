"""What a measurement records, and the JSON-lines files runs keep it in.

Every measurement reports wall-clock speed *and* counts that do not depend on
the hardware, read from vLLM's own counters and the plugin's, exact where
vLLM's acceptance totals are not (``counters.exact_counts``):

- ``mean_accepted_length``: 1 + the tokens accepted within ``max_tokens``
  per verification that had drafts;
- ``acceptance_rate``: accepted / draft tokens verified (vLLM's);
- ``mean_draft_length``: draft tokens / drafts;
- ``target_passes_per_token``: the engine steps that emitted tokens for a
  request, summed over requests, per generated token;
- ``draft_tokens_per_token``: draft tokens verified per generated token;
- ``draft_forwards_per_token``: batched draft forwards per generated token,
  one unit for every method (``counters.draft_forwards``).

A results file holds one JSON object a line, appended and flushed one cell
at a time, so a killed run resumes where it stopped (``done_keys``).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gammatune_tools.bench.counters import draft_forwards, exact_counts


@dataclass
class Measurement:
    method: str
    k: int
    batch_size: int
    num_requests: int
    output_tokens: int
    wall_seconds: float
    drafts: float
    draft_tokens: float
    accepted: float
    confidence_stops: float
    draft_forward_passes: float
    relaxed_acceptances: float
    plugin_time_us: float
    #: one record per generate call: prompt indices, turn, wall time, tokens, counters
    batches: list[dict[str, Any]] = field(default_factory=list)
    skipped_draft_steps: float = 0.0
    catch_up_tokens: float = 0.0
    plugin_steps: float = 0.0
    #: engine steps that emitted tokens (vLLM's per-step histogram), every method
    engine_steps: float = 0.0
    #: target passes: per request, the engine steps that emitted its tokens, summed
    target_passes: float = 0.0
    #: draft tokens the policy planned, and those a per-token stop cut
    planned_draft_tokens: float = 0.0
    stopped_draft_tokens: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds

    @property
    def exact(self) -> dict[str, float | None]:
        return exact_counts(self.output_tokens, self.target_passes, self.drafts,
                            draft_forwards(self.method, self.k, self.draft_forward_passes,
                                           self.engine_steps))

    @property
    def mean_accepted_length(self) -> float | None:
        return self.exact["accepted_length"]

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def mean_draft_length(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts else None

    @property
    def target_passes_per_token(self) -> float | None:
        return self.exact["target_passes_per_token"]

    @property
    def draft_tokens_per_token(self) -> float:
        return self.draft_tokens / self.output_tokens

    @property
    def plugin_us_per_step(self) -> float | None:
        """The plugin's own time per engine step (not the draft model)."""
        return self.plugin_time_us / self.plugin_steps if self.plugin_steps else None

    @property
    def draft_forwards_per_token(self) -> float | None:
        """Batched draft forwards per generated token, for every method
        (``counters.draft_forwards``)."""
        return self.exact["draft_forwards_per_token"]

    @property
    def stopped_share(self) -> float | None:
        """Share of the planned draft tokens a per-token stop cut."""
        if not self.planned_draft_tokens:
            return None
        return self.stopped_draft_tokens / self.planned_draft_tokens

    @property
    def drafted_step_share(self) -> float | None:
        """Share of the plugin's engine steps that ran the draft model."""
        if not self.plugin_steps:
            return None
        return 1 - self.skipped_draft_steps / self.plugin_steps

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in ("tokens_per_second", "mean_accepted_length", "acceptance_rate",
                     "mean_draft_length", "target_passes_per_token",
                     "draft_tokens_per_token", "draft_forwards_per_token", "drafted_step_share",
                     "plugin_us_per_step"):
            data[name] = getattr(self, name)
        return data


def per_category(batches: list[dict], categories: list[str]) -> dict[str, dict]:
    """Sum the batches whose prompts are all of one category, per category.

    Batches mixing categories are summed under "mixed" (no per-category time
    can be told apart inside one batch). Prompts are grouped by category, so
    at batch 1, and when ``per_category`` is a multiple of the batch size,
    nothing is mixed.
    """
    sums: dict[str, dict] = {}
    fields = ("wall_seconds", "output_tokens", "drafts", "draft_tokens", "accepted",
              "draft_forward_passes", "target_passes")
    for batch in batches:
        cats = {categories[i] for i in batch["indices"]}
        cat = cats.pop() if len(cats) == 1 else "mixed"
        entry = sums.setdefault(cat, {**dict.fromkeys(fields, 0.0), "requests": 0})
        for name in fields:
            entry[name] += batch.get(name, 0.0)
        entry["requests"] += len(batch["indices"])
    return sums


def outputs_by_turn(batches: list[dict], outputs: list[list], num_prompts: int,
                    turns: int) -> tuple[list[list], list[list]]:
    """(texts, token ids), each [turn][prompt], from a measurement's batches
    (their prompt indices and turn) and the outputs of each batch."""
    texts: list[list] = [[None] * num_prompts for _ in range(turns)]
    token_ids: list[list] = [[None] * num_prompts for _ in range(turns)]
    for batch, batch_outputs in zip(batches, outputs):
        for index, output in zip(batch["indices"], batch_outputs):
            texts[batch["turn"] - 1][index] = output.outputs[0].text
            token_ids[batch["turn"] - 1][index] = list(output.outputs[0].token_ids)
    return texts, token_ids


def cell_key(method: str, k: int, size: int, temperature: float,
             variant: dict | None = None, size_name: str = "b", turns: int = 1) -> str:
    """One cell's identity in a results file (``size_name`` "b" batch, "c" concurrency)."""
    suffix = f"|{json.dumps(variant, sort_keys=True)}" if variant else ""
    turn = f"|turns={turns}" if turns != 1 else ""
    return f"{method}|k={k}|{size_name}={size}|t={temperature}{turn}{suffix}"


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.open():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return rows


def done_keys(path: Path) -> set[str]:
    if not path.exists():
        return set()
    keys = set()
    for line in path.open():
        try:
            keys.add(json.loads(line)["key"])
        except (ValueError, KeyError):
            continue  # a line cut short by a kill: that cell runs again
    return keys


def append_row(path: Path, row: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def trace_path(out: Path, name: str) -> Path:
    """Where a cell's per-request draft trace goes (``VLLM_GAMMATUNE_TRACE``)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_.=" else "_" for ch in name)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    return out / "traces" / f"{safe}.jsonl"
