"""Files as the benchmark harness leaves them, for the harness's unit tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def trace_line(req_id: str, step: int, drafted: int, accepted: int, probs=None,
               predicted=None) -> dict:
    """One verification line of a ``VLLM_GAMMATUNE_TRACE`` file."""
    row = {"req_id": req_id, "step": step, "num_draft_tokens": drafted,
           "num_accepted_tokens": accepted}
    if probs is not None:
        row["token_probs"] = probs
    if predicted is not None:
        row["predicted_acceptance"] = predicted
    return row


def run_folder(directory: Path, methods: str, baseline: str | None, rows: list[dict],
               file_name: str) -> Path:
    """A run's folder as the harness leaves it: its arguments and its rows."""
    directory.mkdir()
    (directory / "context.json").write_text(json.dumps(
        {"args": {"methods": methods, "baseline": baseline}}))
    (directory / file_name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return directory


def paired_row(size: int, round_index: int, batch: int, method: str, seconds: float,
               tokens: int = 8, accepted: float = 0.0, token_ids=None, **counts) -> dict:
    """One row of ``paired.jsonl``: one batch on one engine (its target passes,
    unless given, those of a batch whose accepted tokens all fit in it)."""
    return {"batch_size": size, "round": round_index, "batch": batch, "method": method,
            "wall_seconds": seconds, "output_tokens": tokens, "accepted": accepted,
            "target_passes": tokens - accepted, "token_ids": token_ids, **counts}
