"""Reading ``VLLM_GAMMATUNE_TRACE`` files: JSON lines, one per verification
of a request (``req_id``, ``step``, draft and accepted tokens, and where the
method records them the draft's token probabilities and its predicted
acceptance), and ``{"event": "plan"}`` lines, one per engine step."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gammatune_tools.bench.records import read_jsonl


def load_trace(path: Path) -> dict[str, list[dict]]:
    """A ``VLLM_GAMMATUNE_TRACE`` file -> {req_id: steps sorted by step}
    (engine-step lines, ``"event": "plan"``, are left out)."""
    by_request = defaultdict(list)
    for row in read_jsonl(path):
        if "req_id" in row:
            by_request[row["req_id"]].append(row)
    return {req: sorted(steps, key=lambda r: r["step"]) for req, steps in by_request.items()}


def longest_trace(paths: list[Path]) -> tuple[Path, str, list[dict]] | None:
    """(file, req_id, steps) of the request with the most steps in the files."""
    best = None
    for path in paths:
        for req_id, steps in load_trace(path).items():
            if best is None or len(steps) > len(best[2]):
                best = (path, req_id, steps)
    return best


@dataclass(frozen=True)
class Verification:
    """One verification line of a trace."""

    #: (file index, req_id, run): one request, see ``read_traces``
    request: tuple
    num_draft_tokens: int
    num_accepted_tokens: int
    token_probs: list[float] | None
    predicted_acceptance: list[float] | None


def read_traces(paths: list[Path]) -> list[Verification]:
    """The verification lines of the files, in order. A ``req_id`` whose
    ``step`` does not increase starts a new request (a later run's); lines
    without ``step`` continue the ``req_id``'s request."""
    verifications = []
    for file_index, path in enumerate(paths):
        last: dict[str, tuple[int, int | None]] = {}  # req_id -> (run, last step)
        for row in read_jsonl(path):
            if "event" in row or "num_draft_tokens" not in row:
                continue
            req_id = str(row["req_id"])
            step = row.get("step")
            run, last_step = last.get(req_id, (-1, None))
            if run < 0 or (step is not None and last_step is not None and step <= last_step):
                run += 1
            last[req_id] = (run, step)
            verifications.append(Verification(
                (file_index, req_id, run), row["num_draft_tokens"],
                row["num_accepted_tokens"], row.get("token_probs"),
                row.get("predicted_acceptance")))
    return verifications


def token_labels(num_draft_tokens: int, num_accepted_tokens: int) -> list[int | None]:
    """Per drafted token: 1 accepted, 0 the first rejected, None untested."""
    accepted = min(num_accepted_tokens, num_draft_tokens)
    labels: list[int | None] = [1] * accepted
    if accepted < num_draft_tokens:
        labels.append(0)
    return labels + [None] * (num_draft_tokens - len(labels))
