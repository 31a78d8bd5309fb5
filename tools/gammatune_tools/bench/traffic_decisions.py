"""The plugin's decisions in each phase of a served trace, read from its
``VLLM_GAMMATUNE_TRACE`` file (``gammatune_tools.bench.traces`` describes
the lines): each phase is the byte range the harness recorded around it.

From the verification lines (every plugin method): how many drafts were
verified, their mean length and acceptance. From the plan lines, one per
engine step (a policy that records its decisions, ``gammatune_cost``): the
steps, their mean batch size, the share that drafted for their own sake
(probes and prompt-pricing drafts are not the policy's choice to draft),
the probes, the prompt positions caught up for the requests that drafted,
and how many steps into a phase the policy changed its mind after the load
changed.
"""

from __future__ import annotations

import json
from pathlib import Path

#: plan kinds that draft without the policy choosing to draft
NOT_CHOSEN = ("probe", "price")


def segment_lines(path: Path, start: int, end: int) -> list[dict]:
    """The JSON lines of ``path`` between byte offsets ``start`` and ``end``."""
    with path.open("rb") as trace:
        trace.seek(start)
        data = trace.read(end - start)
    rows = []
    for line in data.decode(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return rows


def plans_of(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line.get("event") == "plan"]


def drafts_by_choice(plan: dict) -> bool:
    """Whether a step drafted because the policy chose to (not a probe, not
    a prompt chunk drafted to price catch-ups)."""
    return plan["num_draft_tokens"] > 0 and plan["kind"] not in NOT_CHOSEN


def phase_decisions(lines: list[dict]) -> dict[str, int]:
    """One phase's counts (``decision_shares`` turns them into shares and
    means; counts of several rounds add up)."""
    plans = plans_of(lines)
    verifications = [line for line in lines
                     if "req_id" in line and "num_draft_tokens" in line]
    return {
        "plan_steps": len(plans),
        "drafted_steps": sum(map(drafts_by_choice, plans)),
        "probe_steps": sum(p["kind"] == "probe" for p in plans),
        "catch_up_tokens": sum(p["catch_up_tokens"] for p in plans),
        "batch_size_sum": sum(p["batch_size"] for p in plans),
        "verifications": len(verifications),
        "draft_tokens": sum(v["num_draft_tokens"] for v in verifications),
        "accepted_tokens": sum(min(v["num_accepted_tokens"], v["num_draft_tokens"])
                               for v in verifications),
    }


def decision_shares(counts: dict[str, int]) -> dict[str, float | None]:
    """Shares and means of ``phase_decisions``' counts (None where the
    counts are 0: no plan lines, or nothing verified)."""
    steps, verifications = counts["plan_steps"], counts["verifications"]
    return {
        "mean_batch_size": counts["batch_size_sum"] / steps if steps else None,
        "drafted_step_share": counts["drafted_steps"] / steps if steps else None,
        "mean_draft_length": counts["draft_tokens"] / verifications if verifications else None,
        "acceptance_rate":
            counts["accepted_tokens"] / counts["draft_tokens"] if counts["draft_tokens"]
            else None,
    }


def steps_to_change(previous: list[dict], current: list[dict]) -> int | None:
    """Steps of a phase up to and including its first step in the other
    regime than the previous phase's (drafting by choice or not, by the
    majority of the previous phase's steps): 1 if its first step already
    changed. None if it never changed, or either phase has no plan lines."""
    if not previous or not current:
        return None
    drafted_before = sum(map(drafts_by_choice, previous)) * 2 > len(previous)
    for count, plan in enumerate(current, start=1):
        if drafts_by_choice(plan) != drafted_before:
            return count
    return None


def trace_decisions(path: Path, phase_rows: list[dict]) -> list[dict]:
    """Per phase row (its ``trace_bytes``), the phase's decisions and, from
    the second phase on, ``steps_to_change`` against the previous phase."""
    decisions, previous = [], []
    for row in phase_rows:
        start, end = row["trace_bytes"]
        lines = segment_lines(path, start, end) if path.exists() else []
        plans = plans_of(lines)
        decisions.append({**phase_decisions(lines),
                          "steps_to_change":
                              steps_to_change(previous, plans) if row["phase_index"] else None})
        previous = plans
    return decisions


def plan_series(path: Path, phase_rows: list[dict]) -> list[list[dict]]:
    """[phase][step] the plan lines of each phase (for plots)."""
    return [plans_of(segment_lines(path, *row["trace_bytes"])) for row in phase_rows]
