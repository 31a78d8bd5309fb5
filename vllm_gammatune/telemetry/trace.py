"""Per-request draft trace for benchmarks (the GammaTune paper's Figure 2a).

When the environment variable ``VLLM_GAMMATUNE_TRACE=<path>`` is set in the
process that runs the drafter, ``record(req_id, drafted, accepted)`` appends
one JSON line per verified draft to ``<path>``::

    {"req_id": "...", "step": 3, "num_draft_tokens": 5, "num_accepted_tokens": 2,
     "token_probs": [0.98, 0.91, 0.55, 0.97, 0.4]}

``token_probs``: the draft's probability of each token it proposed (after
temperature), the feature of a per-token stop; a policy that estimates each
token's acceptance adds its estimates (``predicted_acceptance``, from
``verification_details``), the data of a reliability plot.

``step`` counts the request's verifications from 1; the count of a request
is dropped when the request leaves the engine (``forget_missing``, called
where the drafter drops the request's other state), so a long-running
server's trace writer holds the live requests only. For a policy that keeps
a record of its decisions (``gammatune_cost``) the proposer also appends one
line per engine step with what the policy decided (``record_step``:
``{"event": "plan", ...}``, the fields of ``CostAwarePolicy``'s
``StepDecision``), so a trace shows why a step drafted. Lines are buffered in
memory and appended to the file every ``FLUSH_SECONDS`` by a daemon thread
(vLLM may SIGKILL an idle worker at shutdown, which skips ``atexit``), when
``FLUSH_EVERY`` lines are waiting, and at process exit. Without the
variable, ``record`` is a no-op (one global check).
Several processes may append to one path (each writes whole lines).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import threading
import time

from vllm.logger import init_logger

import vllm_gammatune.envs as envs

FLUSH_EVERY = 512
FLUSH_SECONDS = 0.5

logger = init_logger(__name__)


class TraceWriter:
    """Buffered JSON-lines writer of per-request verification counts."""

    def __init__(self, path: str, background: bool = True):
        self.path = path
        self._lines: list[str] = []
        self._steps: dict[str, int] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # keeps flushed batches in order
        if background:
            threading.Thread(target=self._flush_periodically, daemon=True,
                             name="gammatune-trace").start()

    def _flush_periodically(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()

    def record(self, req_id: str, num_draft_tokens: int, num_accepted_tokens: int,
               details: dict | None = None) -> None:
        with self._lock:
            step = self._steps.get(req_id, 0) + 1
            self._steps[req_id] = step
        self._append({"req_id": req_id, "step": step,
                      "num_draft_tokens": int(num_draft_tokens),
                      "num_accepted_tokens": int(num_accepted_tokens), **(details or {})})

    def record_step(self, fields: dict) -> None:
        self._append({"event": "plan", **fields})

    def _append(self, line: dict) -> None:
        with self._lock:
            self._lines.append(json.dumps(line))
            due = len(self._lines) >= FLUSH_EVERY
        if due:
            self.flush()

    def forget(self, req_id: str) -> None:
        """Drop a finished request's step counter (its lines stay in the file)."""
        with self._lock:
            self._steps.pop(req_id, None)

    def forget_missing(self, live_req_ids) -> None:
        """``forget`` every request that is not live."""
        with self._lock:
            gone = [req_id for req_id in self._steps if req_id not in live_req_ids]
        for req_id in gone:
            self.forget(req_id)

    @property
    def num_requests(self) -> int:
        """Requests with a step counter."""
        with self._lock:
            return len(self._steps)

    def flush(self) -> None:
        with self._write_lock:
            with self._lock:
                lines, self._lines = self._lines, []
            if not lines:
                return
            try:
                with open(self.path, "a") as f:
                    f.write("\n".join(lines) + "\n")
            except OSError as error:
                logger.warning("vllm-gammatune trace: cannot write %s: %s", self.path, error)


_writer: TraceWriter | None = None
_resolved = False


def writer() -> TraceWriter | None:
    """This process's writer, or None when ``VLLM_GAMMATUNE_TRACE`` is unset."""
    global _writer, _resolved
    if not _resolved:
        _resolved = True
        path = envs.trace_path()
        if path:
            _writer = TraceWriter(path)
            atexit.register(_writer.flush)
            logger.info("vllm-gammatune: tracing draft lengths to %s", path)
    return _writer


def record(req_id: str, num_draft_tokens: int, num_accepted_tokens: int,
           details: dict | None = None) -> None:
    """Append one verification of ``req_id`` to the trace (no-op when off);
    ``details``: further fields of the line."""
    if _resolved and _writer is None:
        return
    trace = writer()
    if trace is not None:
        trace.record(req_id, num_draft_tokens, num_accepted_tokens, details)


def forget_missing(live_req_ids) -> None:
    """Drop the step counters of requests that are not live (no-op when off)."""
    if _writer is not None:
        _writer.forget_missing(live_req_ids)


def record_step(decision) -> None:
    """Append one engine step's decision (a dataclass) to the trace (no-op
    when off)."""
    trace = writer()
    if trace is not None:
        trace.record_step(dataclasses.asdict(decision))


def _reset_for_tests() -> None:
    global _writer, _resolved
    if _writer is not None:
        _writer.flush()
    _writer, _resolved = None, False
