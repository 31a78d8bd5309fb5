"""A served trace of phases of different load (quiet, busy, quiet again),
sent back to back to one running server by vLLM's own client.

A phase is one run of ``vllm bench serve`` (its parser and its ``main``,
called in this process, so no client start-up separates the phases): a
fixed list of prompts at a maximum concurrency, all queued at once or
arriving at a request rate with vLLM's ``--burstiness``. The phases run one
after another against the same server, which is not restarted between
them: what the server learnt under one load (a policy's estimates, its
caches) is carried into the next, as under real traffic.

The prompts are of mixed kinds, each kind one or more categories of the
dataset (Spec-Bench: code, prose, math, long context). Within every phase
request ``j`` is of kind ``j mod (number of kinds)``, so phases of one size
hold the same mix; every prompt is used once in the whole trace (a prompt
seen again would be served from vLLM's prefix cache). A prompt is kept only
if its rendered text fits vLLM's ShareGPT loader (``max_prompt_tokens``,
1,024 tokens) and the context with its output.

Per phase the row keeps the client's numbers, the per-request TTFT and
TPOT, the output tokens of each second (for plots), the difference of the
server's ``/metrics`` across the phase and, with a ``VLLM_GAMMATUNE_TRACE``
file, the byte range of the phase's lines in it (the server is idle between
phases, and the trace is flushed before each boundary is read).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gammatune_tools.bench.counters import derived, metrics_delta, parse_metrics
from gammatune_tools.bench.prompts import load_prompts, parse_category_sets, sharegpt_rows
from gammatune_tools.bench.serving import CLIENT_FIELDS, client_command, http_get
from gammatune_tools.bench.traffic_decisions import trace_decisions

#: vLLM's ShareGPT loader drops prompts longer than this (``is_valid_sequence``)
SHAREGPT_MAX_PROMPT_TOKENS = 1024
#: ... and prompts whose tokens and output together exceed this
SHAREGPT_MAX_TOTAL_TOKENS = 2048


@dataclass(frozen=True)
class Phase:
    """One load of the trace: ``num_requests`` prompts at ``concurrency``
    (``--max-concurrency``), arriving at ``request_rate`` per second (inf:
    all queued at once) with vLLM's ``burstiness``."""

    name: str
    concurrency: int
    num_requests: int
    request_rate: float = math.inf
    burstiness: float = 1.0


def parse_phases(text: str) -> list[Phase]:
    """``--phases``: ``NAME:CONCURRENCY:REQUESTS[:RATE[:BURSTINESS]]``, comma
    separated, e.g. ``quiet:1:6,busy:8:24:2:0.5,quiet_again:1:6``; ValueError
    naming the entry otherwise."""
    phases = []
    for entry in (part.strip() for part in text.split(",")):
        fields = entry.split(":")
        if not 3 <= len(fields) <= 5 or not fields[0]:
            raise ValueError(f"--phases: {entry!r} is not NAME:CONCURRENCY:REQUESTS"
                             "[:RATE[:BURSTINESS]]")
        try:
            phase = Phase(fields[0], int(fields[1]), int(fields[2]),
                          *(float(field) for field in fields[3:]))
        except ValueError:
            raise ValueError(f"--phases: {entry!r}: concurrency and requests are integers, "
                             "rate and burstiness numbers") from None
        if phase.concurrency < 1 or phase.num_requests < 1 or phase.request_rate <= 0 \
                or phase.burstiness <= 0:
            raise ValueError(f"--phases: {entry!r}: every number must be positive")
        phases.append(phase)
    names = [phase.name for phase in phases]
    if len(set(names)) != len(names):
        raise ValueError(f"--phases: each phase needs its own name; got {', '.join(names)}")
    return phases


def parse_kinds(text: str) -> dict[str, list[str]]:
    """``--kinds``: ``KIND=CATEGORY[+CATEGORY...]``, comma separated, e.g.
    ``code=coding,long=summarization+rag`` -> {kind: [categories]}."""
    return parse_category_sets(text, "--kinds", "KIND")


@dataclass(frozen=True)
class TracePrompt:
    """One request of the trace: its kind, its source, the text as sent."""

    kind: str
    category: str
    #: the prompt's place among its category's prompts (dataset order)
    index: int
    text: str
    num_tokens: int


def kind_pool(categories: list[str], pool: dict[str, list[tuple[str, int]]],
              max_tokens: int, kind: str) -> list[TracePrompt]:
    """The prompts of a kind that fit ``max_tokens``, its categories taken in
    turn (first of each, then second of each, ...)."""
    missing = [c for c in categories if c not in pool]
    if missing:
        raise ValueError(f"--kinds: {kind}: no category {', '.join(missing)} in the dataset; "
                         f"there are {', '.join(sorted(pool))}")
    rows = []
    for index in range(max(len(pool[c]) for c in categories)):
        for category in categories:
            if index < len(pool[category]):
                text, num_tokens = pool[category][index]
                if num_tokens <= max_tokens:
                    rows.append(TracePrompt(kind, category, index, text, num_tokens))
    return rows


def build_trace(phases: list[Phase], kinds: dict[str, list[str]],
                pool: dict[str, list[tuple[str, int]]],
                max_prompt_tokens: int) -> list[list[TracePrompt]]:
    """[phase][request] of the trace. ``pool``: {category: [(rendered text,
    tokens)]} in dataset order. Request ``j`` of every phase is of kind
    ``j mod len(kinds)``; each kind's prompts are used in order, each once
    in the whole trace; ValueError when a kind runs out."""
    pools = {kind: kind_pool(categories, pool, max_prompt_tokens, kind)
             for kind, categories in kinds.items()}
    names = list(kinds)
    used = dict.fromkeys(names, 0)
    trace = []
    for phase in phases:
        prompts = []
        for j in range(phase.num_requests):
            kind = names[j % len(names)]
            if used[kind] == len(pools[kind]):
                raise ValueError(
                    f"kind {kind!r}: the trace needs {requests_of_kind(phases, kind, names)} "
                    f"prompts of it, the dataset has "
                    f"{len(pools[kind])} of at most {max_prompt_tokens} tokens "
                    f"({'+'.join(kinds[kind])})")
            prompts.append(pools[kind][used[kind]])
            used[kind] += 1
        trace.append(prompts)
    return trace


def requests_of_kind(phases: list[Phase], kind: str, kinds: list[str]) -> int:
    """How many requests of ``kind`` the trace sends (request ``j`` of a phase
    is of kind ``j mod len(kinds)``)."""
    place = kinds.index(kind)
    return sum(len(range(place, phase.num_requests, len(kinds))) for phase in phases)


def prompt_pool(target: str, dataset: str, split: str, per_category: int | None,
                limit: int | None) -> dict[str, list[tuple[str, int]]]:
    """{category: [(first turn rendered with the target's chat template, its
    tokens as vLLM's client counts them)]}, in dataset order
    (``prompts.load_prompts`` selects them)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    pool: dict[str, list[tuple[str, int]]] = {}
    for category, turns in load_prompts(dataset, per_category, split, limit):
        text = tokenizer.apply_chat_template([{"role": "user", "content": turns[0]}],
                                             add_generation_prompt=True, tokenize=False)
        pool.setdefault(category, []).append((text, len(tokenizer(text).input_ids)))
    return pool


def prompt_budget(max_prompt_tokens: int, max_model_len: int, max_tokens: int) -> int:
    """The longest prompt the trace may hold: vLLM's client keeps it and the
    server has room for its output."""
    return min(max_prompt_tokens, SHAREGPT_MAX_TOTAL_TOKENS - max_tokens,
               max_model_len - max_tokens)


def write_phase_datasets(trace: list[list[TracePrompt]], phases: list[Phase],
                         folder: Path) -> list[Path]:
    """One ShareGPT file per phase (vLLM's client's ``sharegpt`` dataset), the
    prompts as rendered, in trace order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, (phase, prompts) in enumerate(zip(phases, trace)):
        path = folder / f"phase{index}_{phase.name}.json"
        rows = sharegpt_rows([(p.category, [p.text]) for p in prompts], render=lambda t: t)
        path.write_text(json.dumps(rows, indent=1))
        paths.append(path)
    return paths


def trace_record(trace: list[list[TracePrompt]], phases: list[Phase]) -> list[dict]:
    """The trace as kept beside the results: each phase with its requests'
    kind, category, place and tokens (the texts are in the phase files)."""
    return [{**asdict(phase), "request_rate": str(phase.request_rate),
             "requests": [{"kind": p.kind, "category": p.category, "index": p.index,
                           "prompt_tokens": p.num_tokens} for p in prompts]}
            for phase, prompts in zip(phases, trace)]


def phase_client_argv(args, target: str, port: int, dataset: Path, phase: Phase,
                      temperature: float, result_dir: Path, result_name: str) -> list[str]:
    """``vllm bench serve``'s arguments for one phase (without the program):
    the harness's served client (``serving.client_command``: every prompt
    once, in file order, ``--max-tokens`` each, EOS ignored), with the
    phase's arrival process in place of its ``--request-rate inf`` (vLLM's
    parser warns of a repeated option) and the per-request details."""
    argv = client_command(args, target, port, dataset, phase.num_requests, phase.concurrency,
                          temperature, result_dir, result_name)
    argv = argv[argv.index("bench") + 2:]
    rate = argv.index("--request-rate")
    del argv[rate:rate + 2]
    return argv + ["--request-rate", str(phase.request_rate),
                   "--burstiness", str(phase.burstiness), "--save-detailed",
                   "--disable-tqdm"]


def run_vllm_client(argv: list[str], log: Path) -> dict:
    """``vllm bench serve`` with ``argv``, in this process: vLLM's own parser
    and ``main`` (what its command line runs); its output in ``log``."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    options = parser.parse_args(argv)
    with log.open("w") as sink, contextlib.redirect_stdout(sink):
        return main(options)


def per_request(result: dict) -> dict:
    """The client's per-request details, kept small: TTFT and TPOT in ms
    (TPOT as vLLM computes it: after the first token, per further token) of
    every request that completed, and the output tokens of each second of
    the phase from its first request's start."""
    ttft_ms, tpot_ms, emitted = [], [], []
    starts = [s for s, e in zip(result["start_times"], result["errors"]) if not e]
    origin = min(starts, default=0.0)
    for start, ttft, itls, latency, tokens, error in zip(
            result["start_times"], result["ttfts"], result["itls"], result["latencies"],
            result["output_lens"], result["errors"]):
        if error:
            continue
        ttft_ms.append(ttft * 1000)
        if tokens > 1:
            tpot_ms.append((latency - ttft) / (tokens - 1) * 1000)
        clock = start - origin + ttft
        emitted.append(clock)
        for gap in itls:
            clock += gap
            emitted.append(clock)
    seconds = [0] * (int(max(emitted, default=0.0)) + 1)
    for moment in emitted:
        seconds[int(moment)] += 1
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "tokens_by_second": seconds}


def trace_size(path: Path | None) -> int | None:
    """The trace file's size in bytes (0 before its first line; None untraced)."""
    if path is None:
        return None
    return path.stat().st_size if path.exists() else 0


def run_trace(server, args, target: str, datasets: list[Path], phases: list[Phase],
              logs: Path, slug: str, trace_file: Path | None,
              flush_wait: float) -> list[dict]:
    """Every phase against ``server``, back to back: one row per phase, with
    the plugin's decisions in it (``traffic_decisions``) when traced.

    ``trace_file``: the server's ``VLLM_GAMMATUNE_TRACE`` (None: untraced);
    before each boundary is read the harness waits ``flush_wait`` seconds,
    the trace writer's flush period and more, the server being idle."""
    rows, elapsed = [], 0.0
    (logs / "client").mkdir(parents=True, exist_ok=True)
    time.sleep(flush_wait if trace_file else 0.0)
    offset = trace_size(trace_file)
    for index, (phase, dataset) in enumerate(zip(phases, datasets)):
        name = f"{slug}_phase{index}_{phase.name}"
        before = parse_metrics(http_get(server.base + "/metrics"))
        argv = phase_client_argv(args, target, server.port, dataset, phase,
                                 float(args.temperature), logs / "client", name + ".json")
        result = run_vllm_client(argv, logs / f"{name}.client.log")
        if trace_file:
            time.sleep(flush_wait)
        after = parse_metrics(http_get(server.base + "/metrics"))
        end = trace_size(trace_file)
        delta = metrics_delta(before, after)
        rows.append({
            "phase_index": index, "phase": phase.name, "concurrency": phase.concurrency,
            "num_requests": phase.num_requests, "request_rate": str(phase.request_rate),
            "burstiness": phase.burstiness, "started_s": elapsed,
            **{field: result.get(field) for field in CLIENT_FIELDS},
            **per_request(result), "metrics_delta": delta,
            **derived(delta, int(result.get("total_output_tokens") or 0)),
            "trace_bytes": None if offset is None else [offset, end]})
        elapsed += result["duration"]
        offset = end
    decisions = (trace_decisions(trace_file, rows) if trace_file and trace_file.exists()
                 else [None] * len(rows))
    return [{**row, "decisions": decision} for row, decision in zip(rows, decisions)]
