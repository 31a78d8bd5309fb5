"""Serving benchmark: each method behind ``vllm serve``, loaded by vLLM's own client.

For every method (and initial length k) one server is started with
``vllm-gammatune serve`` (vLLM's ``vllm serve`` with the CPU-install fix),
and vLLM's serving benchmark client, ``vllm-gammatune bench serve`` (= ``vllm
bench serve``), sends Spec-Bench prompts to it at each ``--concurrency``
(``--max-concurrency``, all requests queued at once). Every request generates
exactly ``--max-tokens`` tokens (``--ignore-eos``), so methods do the same
work. Per cell (method, k, concurrency, temperature), one JSONL line in
``serve_cells.jsonl``: the client's numbers (request throughput, output
tok/s, mean/median/p99 TPOT and TTFT, ...), vLLM's spec-decode counters and
the plugin's ``vllm:gammatune_*`` metrics as differences of ``/metrics``
scraped before and after the client run, and the peak RSS of the server's
process tree. A killed run resumes: cells already in the file are skipped.

    VLLM_CPU_OMP_THREADS_BIND=0-1 python benchmarks/serve_bench.py \\
        --out benchmarks/runs/serve --methods no_spec,vllm_draft_model,gammatune \\
        --k 3 --concurrency 1,4,16 --per-category 2 --max-tokens 64 \\
        --spec 'cost={"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 16}'

Interleaved (``--rounds N``, one ``--k``): every method's server is started
at once, and each round runs the client at each concurrency against every
server in turn, the first rotating, so the machine's drift over minutes
cancels in the per-round ratios (``paired.py`` does the same offline).
Rows carry ``round`` and ``position``; ``serve_paired.md`` has the ratios to
the first method with a 95% t-interval over rounds. ``no_spec#2`` names a
second server of ``no_spec`` (A/A). ``--fresh-servers`` keeps one server
alive at a time instead, started afresh for each method in each round, so a
server instance's own speed varies between rounds (inside the interval) rather
than favouring one method for the whole run; ``--warmup-cell`` precedes each
measured cell by one unmeasured run of the same client (steady state).

    python benchmarks/serve_bench.py --out benchmarks/runs/served \
        --methods no_spec,gammatune_cost --k 8 --concurrency 4,16 --rounds 4

Methods: any name of ``gammatune_tools.evaluation.METHODS`` (built from the
draft, k and ``--cap``; ``vllm_schedule`` is vLLM's batch-size schedule,
K=k at batch 1 and 0 above), plus ``--spec NAME=JSON`` for any
speculative_config (``{draft}`` is replaced by the draft's path), e.g. another
schedule: ``{"method": "draft_model", "model": "{draft}",
"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size":
[[1, 1, 3], [2, 4, 1], [5, 512, 0]]}``.

Prompts: the first turn of each question, rendered with the target's chat
template here and sent as text to ``/v1/completions`` (the client's
``sharegpt`` dataset, ``<out>/prompts_sharegpt.json``, in file order). vLLM's
``custom`` and ``spec_bench`` datasets would do the same but need pandas, which
``vllm-cpu`` does not install; the ShareGPT loader drops prompts over 1,024
tokens (no Spec-Bench prompt is that long with Qwen2.5's tokenizer), and a
cell's ``completed`` says how many requests ran.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from bench_common import (add_common_args, append_row, cell_key, done_keys, load_prompts,
                          parse_floats, parse_ks, parse_spec_options, plan_cells,
                          run_context, trace_path, write_context)
from paired import check_engines, engine_k, method_name

STARTUP_TIMEOUT_S = 900

#: /metrics names -> result keys (counters are summed over label sets)
SCRAPED = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:gammatune_draft_length_sum": "gammatune_draft_length_sum",
    "vllm:gammatune_draft_length_count": "gammatune_draft_length_count",
    "vllm:gammatune_planned_draft_tokens_total": "gammatune_planned_draft_tokens",
    "vllm:gammatune_confidence_stops_total": "gammatune_confidence_stops",
    "vllm:gammatune_draft_forward_passes_total": "gammatune_draft_forward_passes",
    "vllm:gammatune_plugin_time_us_total": "gammatune_plugin_time_us",
    "vllm:gammatune_adasd_entropy_stops_total": "gammatune_adasd_entropy_stops",
    "vllm:gammatune_adasd_relaxed_acceptances_total": "gammatune_adasd_relaxed_acceptances",
    "vllm:gammatune_skipped_draft_steps_total": "gammatune_skipped_draft_steps",
    "vllm:gammatune_catch_up_tokens_total": "gammatune_catch_up_tokens",
    "vllm:gammatune_steps_total": "gammatune_steps",
}

#: fields kept from ``vllm bench serve``'s result JSON
CLIENT_FIELDS = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms",
    "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
    "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
    "spec_decode_per_position_acceptance_rates",
)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {result key: value summed over label sets} for ``SCRAPED``."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in SCRAPED:
            key = SCRAPED[name]
            values[key] = values.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def metrics_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}


def derived(delta: dict[str, float], output_tokens: int) -> dict[str, float | None]:
    """The offline harness's hardware-independent counts, from /metrics differences."""
    drafts, draft_tokens = delta.get("drafts", 0.0), delta.get("draft_tokens", 0.0)
    accepted = delta.get("accepted", 0.0)
    forwards = delta.get("gammatune_draft_forward_passes", 0.0)
    return {
        "mean_accepted_length": 1 + accepted / drafts if drafts else None,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_draft_length": draft_tokens / drafts if drafts else None,
        "target_passes_per_token":
            (output_tokens - accepted) / output_tokens if output_tokens else None,
        "draft_forward_passes_per_token":
            forwards / output_tokens if forwards and output_tokens else None,
        "plugin_us_per_step":
            delta["gammatune_plugin_time_us"] / delta["gammatune_steps"]
            if delta.get("gammatune_plugin_time_us") and delta.get("gammatune_steps") else None,
        "plugin_time_us_per_token":  # None without the plugin's drafter
            delta["gammatune_plugin_time_us"] / output_tokens
            if delta.get("gammatune_plugin_time_us") and output_tokens else None,
    }


def cli_base() -> list[str]:
    exe = shutil.which("vllm-gammatune")
    return [exe] if exe else [sys.executable, "-m", "vllm_gammatune.cli"]


def serve_command(args, target: str, spec: dict | None, port: int) -> list[str]:
    command = cli_base() + [
        "serve", target, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(args.max_model_len), "--dtype", args.dtype,
        "--max-num-seqs", str(max(parse_ks(args.concurrency))), "--seed", "0",
    ]
    if not args.no_enforce_eager:
        command.append("--enforce-eager")
    if spec is not None:
        command += ["--speculative-config", json.dumps(spec)]
    return command + args.server_arg


def client_command(args, target: str, port: int, dataset: Path, num_prompts: int,
                   concurrency: int, temperature: float, result_dir: Path,
                   result_name: str) -> list[str]:
    return cli_base() + [
        "bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
        "--endpoint", "/v1/completions", "--model", target, "--tokenizer", target,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--sharegpt-output-len", str(args.max_tokens), "--ignore-eos",
        "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
        "--request-rate", "inf", "--temperature", str(temperature), "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", result_name,
    ] + args.client_arg


def http_get(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def http_post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_rss_bytes(pid: int) -> int:
    """Resident memory of a process and all its descendants (0 if gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


class PeakRss:
    """Samples the RSS of a process tree in a thread; ``peak`` in bytes."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class Server:
    """A ``vllm-gammatune serve`` process group, logged to a file."""

    def __init__(self, command: list[str], env: dict, log: Path, port: int):
        self.log = log
        self.port, self.base = port, f"http://127.0.0.1:{port}"
        with log.open("w") as log_file:
            log_file.write(" ".join(command) + "\n")
            log_file.flush()
            self.proc = subprocess.Popen(command, env=env, stdout=log_file,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, base: str, timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}; log {self.log}:\n"
                                   + self.log.read_text()[-3000:])
            try:
                http_get(base + "/health", timeout=5)
                return
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"server not healthy after {timeout:.0f}s; log {self.log}")
            time.sleep(2)

    def stop(self) -> None:
        """SIGTERM to the server's own process group, SIGKILL after 60 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass


def sharegpt_rows(prompts: list[tuple[str, list[str]]], render) -> list[dict]:
    """The client's dataset: ShareGPT-format rows whose human turn is the first
    turn rendered by ``render`` (the target's chat template)."""
    return [{"id": f"{category}-{i}", "category": category,
             "conversations": [{"from": "human", "value": render(turns[0])},
                               {"from": "gpt", "value": ""}]}
            for i, (category, turns) in enumerate(prompts)]


def chat_renderer(target: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)

    def render(text: str) -> str:
        return tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             add_generation_prompt=True, tokenize=False)

    return render


def server_env(args) -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, k_default="3")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--num-prompts", type=int,
                        help="requests per cell (default: every prompt once; vLLM's client "
                             "draws extra ones at random)")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="tokens per request (EOS ignored)")
    parser.add_argument("--kv-cache-gib", type=int, default=4,
                        help="VLLM_CPU_KVCACHE_SPACE unless set in the environment")
    parser.add_argument("--no-enforce-eager", action="store_true")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra argument for vllm serve (repeat; use --server-arg=--flag)")
    parser.add_argument("--client-arg", action="append", default=[],
                        help="extra argument for vllm bench serve (repeat)")
    parser.add_argument("--rounds", type=int,
                        help="interleaved: every method's server up at once, this many "
                             "rounds of every concurrency against each in turn (one --k; "
                             "NAME#2 is a second server of NAME); serve_paired.md")
    parser.add_argument("--baseline", help="--rounds: the method the others are compared "
                        "with (default: the first of --methods, which also starts first)")
    parser.add_argument("--fresh-servers", action="store_true",
                        help="--rounds: one server alive at a time, started afresh for each "
                             "method in each round (the order rotating), so a server "
                             "instance's own speed falls inside the interval over rounds")
    parser.add_argument("--warmup-cell", action="store_true",
                        help="before each measured cell, run the same client once more "
                             "unmeasured at that concurrency (steady state: warm caches, "
                             "the method's statistics and cost fit learned)")
    args = parser.parse_args()
    # a SIGTERM unwinds like Ctrl-C, so the server's process group is stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from gammatune_tools.model_prep import prepare_pair

    target, draft = prepare_pair(target_path=args.target, draft_path=args.draft)
    out = Path(args.out)
    (out / "client").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    results = out / "serve_cells.jsonl"
    custom = parse_spec_options(args.spec, draft)
    methods = args.methods.split(",")
    methods += [name for name in custom if name not in methods]
    prompts = load_prompts(args.dataset, args.per_category, args.split, args.limit)
    dataset = out / "prompts_sharegpt.json"
    dataset.write_text(json.dumps(sharegpt_rows(prompts, chat_renderer(target)), indent=1))
    num_prompts = args.num_prompts or len(prompts)
    concurrencies = parse_ks(args.concurrency)
    temperatures = parse_floats(args.temperature)
    from gammatune_tools.evaluation import METHODS

    try:
        if (args.fresh_servers or args.warmup_cell) and not args.rounds:
            raise ValueError("--fresh-servers and --warmup-cell need --rounds")
        if args.rounds:  # the cells are planned per round (run_interleaved)
            check_engines(methods, parse_ks(args.k), args.baseline, [*METHODS, *custom])
        else:
            plan = plan_cells(methods, parse_ks(args.k), concurrencies, temperatures, custom,
                              done_keys(results), size_name="c")
    except ValueError as error:
        sys.exit(str(error))
    env = server_env(args)
    os.environ.update({k: env[k] for k in ("VLLM_CPU_OMP_THREADS_BIND",
                                           "VLLM_CPU_KVCACHE_SPACE")})
    context = run_context(args, target, draft)
    context["prompts"] = {"count": len(prompts), "requests_per_cell": num_prompts,
                          "categories": sorted({c for c, _ in prompts})}
    write_context(out, context)

    def spec_of(method: str, k: int) -> dict | None:
        name = method_name(method)
        return (custom[name] if name in custom
                else METHODS[name](draft, max(engine_k(method, k), 1), args.cap))

    cell = Cell(args, target, dataset, num_prompts, env, results, out, context["date"])
    if args.rounds:
        run = run_fresh_servers if args.fresh_servers else run_interleaved
        run(args, methods, spec_of, concurrencies, temperatures, cell, out)
        return
    total = sum(len(todo) for _, _, todo, _ in plan)
    finished, started_all = 0, time.time()
    for method, k, todo, variant in plan:
        spec = spec_of(method, k)
        slug = f"{method}_k{k}"
        server = start_server(args, target, spec, env, out, slug)
        try:
            for concurrency, temperature in todo:
                key = cell_key(method, k, concurrency, temperature, variant, size_name="c")
                eta = ((time.time() - started_all) / finished * (total - finished)
                       if finished else None)
                print(f"[serve_bench] cell {finished + 1}/{total}: {key}"
                      + (f" (~{eta / 60:.1f} min left)" if eta else ""), file=sys.stderr)
                cell.run(server, key, method, k, concurrency, temperature, spec, variant,
                         f"{slug}_c{concurrency}_t{temperature}.json")
                finished += 1
        finally:
            server.stop()
    print(f"[serve_bench] {finished} cells in {(time.time() - started_all) / 60:.1f} min; "
          f"{results}", file=sys.stderr)


def start_server(args, target: str, spec: dict | None, env: dict, out: Path,
                 slug: str) -> Server:
    """A healthy, warmed-up server for one method (the warm-up request is not measured)."""
    server_env_ = dict(env)
    if args.trace:
        server_env_["VLLM_GAMMATUNE_TRACE"] = str(trace_path(out, slug))
    port = free_port()
    server = Server(serve_command(args, target, spec, port), server_env_,
                    out / "logs" / f"{slug}.log", port)
    try:
        server.wait_healthy(server.base)
        # warm-up outside the measured span (the first request compiles/allocates)
        http_post(server.base + "/v1/completions", {"model": target, "prompt": "Hello",
                                                    "max_tokens": 8, "temperature": 0})
    except BaseException:
        server.stop()
        raise
    return server


class Cell:
    """One client run against one server, recorded as a row of ``serve_cells.jsonl``."""

    def __init__(self, args, target, dataset, num_prompts, env, results, out, run_date):
        self.args, self.target, self.dataset = args, target, dataset
        self.num_prompts, self.env, self.results, self.out = num_prompts, env, results, out
        self.run_date = run_date

    def _client(self, server: Server, concurrency: int, temperature: float,
                result_name: str, what: str) -> None:
        """vLLM's client once against ``server``; its output in ``logs/``,
        its result in ``client/<result_name>``; RuntimeError if it fails."""
        run = subprocess.run(
            client_command(self.args, self.target, server.port, self.dataset, self.num_prompts,
                           concurrency, temperature, self.out / "client", result_name),
            env=self.env, capture_output=True, text=True)
        (self.out / "logs" / f"{result_name}.client.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            raise RuntimeError(f"{what} failed ({run.returncode}):\n"
                               + (run.stdout + run.stderr)[-3000:])

    def warm(self, server: Server, concurrency: int, temperature: float, name: str) -> None:
        """The client once, unmeasured (``--warmup-cell``): its result file is kept
        under ``client/`` for inspection but no row is written."""
        self._client(server, concurrency, temperature, "warmup_" + name,
                     "warm-up bench serve")

    def run_round(self, server: Server, method: str, k: int, concurrency: int,
                  temperature: float, spec, round_index: int, position: int,
                  note: str = "") -> dict:
        """One cell of an interleaved run (``--rounds``), after an unmeasured one
        with ``--warmup-cell``."""
        args = self.args
        key = round_cell_key(method, k, concurrency, temperature, round_index)
        name = f"{method.replace('#', '_')}_c{concurrency}_t{temperature}_r{round_index}.json"
        print(f"[serve_bench] round {round_index + 1}/{args.rounds}: {key}{note}"
              + (" (after a warm-up cell)" if args.warmup_cell else ""), file=sys.stderr)
        if args.warmup_cell:
            self.warm(server, concurrency, temperature, name)
        return self.run(server, key, method, k, concurrency, temperature, spec, {}, name,
                        round=round_index, position=position)

    def run(self, server: Server, key: str, method: str, k: int, concurrency: int,
            temperature: float, spec, variant, name: str, **extra) -> dict:
        args, out = self.args, self.out
        before = parse_metrics(http_get(server.base + "/metrics"))
        started = time.time()
        with PeakRss(server.proc.pid) as rss:
            self._client(server, concurrency, temperature, name, "bench serve")
        after = parse_metrics(http_get(server.base + "/metrics"))
        client = json.loads((out / "client" / name).read_text())
        delta = metrics_delta(before, after)
        output_tokens = int(client.get("total_output_tokens") or 0)
        row = {"key": key, "method": method, "k": k, "concurrency": concurrency,
               "temperature": temperature, "max_tokens": args.max_tokens,
               "num_requests": self.num_prompts, "dataset": args.dataset,
               "speculative_config": spec, "variant": variant,
               "started": started, "run_date": self.run_date,
               **{f: client.get(f) for f in CLIENT_FIELDS},
               "metrics_delta": delta, **derived(delta, output_tokens),
               "peak_rss_gib": rss.peak / 2**30, **extra}
        append_row(self.results, row)
        print(f"[serve_bench]   {row['output_throughput'] or 0:.2f} tok/s, "
              f"TPOT {row['median_tpot_ms'] or float('nan'):.1f} ms (median), "
              f"peak RSS {row['peak_rss_gib']:.2f} GiB", file=sys.stderr)
        return row


def round_cell_key(method: str, k: int, concurrency: int, temperature: float,
                   round_index: int) -> str:
    """A cell's key in an interleaved run (``--rounds``)."""
    return cell_key(method, k, concurrency, temperature, size_name="c") + f"|round={round_index}"


def run_interleaved(args, methods, spec_of, concurrencies, temperatures, cell: Cell,
                    out: Path) -> None:
    """``--rounds``: every method's server up at once; each round runs the client
    at each concurrency against every server in turn, the first rotating
    (``paired.engine_order``), so the machine's drift over minutes cancels in
    the per-round ratios; summary in ``serve_paired.md`` (``paired.report``)."""
    import paired

    k = parse_ks(args.k)[0]
    done = done_keys(cell.results)
    servers = {}
    try:
        for method in methods:
            servers[method] = start_server(args, cell.target, spec_of(method, k), cell.env,
                                           out, method.replace("#", "_"))
        for round_index in range(args.rounds):
            for ci, concurrency in enumerate(concurrencies):
                for temperature in temperatures:
                    order = paired.engine_order(methods, round_index, ci)
                    for position, method in enumerate(order):
                        if round_cell_key(method, k, concurrency, temperature,
                                          round_index) in done:
                            continue
                        cell.run_round(servers[method], method, k, concurrency, temperature,
                                       spec_of(method, k), round_index, position)
            write_served_summary(out, methods, args.baseline)
    finally:
        for server in servers.values():
            server.stop()
    print(write_served_summary(out, methods, args.baseline), file=sys.stderr)


def run_fresh_servers(args, methods, spec_of, concurrencies, temperatures, cell: Cell,
                      out: Path) -> None:
    """``--rounds`` with ``--fresh-servers``: one server alive at a time. Each round
    starts every method's server in turn (the first rotating by round,
    ``paired.engine_order``), runs every concurrency against it and stops it, so
    nothing of one server competes with the other for the two cores, and whatever
    a server instance's own speed is (where its memory landed) varies from round
    to round and is inside the interval instead of biasing one method for the
    whole run. Each server pays its start-up warm-up request; with
    ``--warmup-cell`` each measured cell follows an unmeasured run of the same
    client, as rounds after the first do with long-lived servers."""
    import paired

    k = parse_ks(args.k)[0]
    done = done_keys(cell.results)
    for round_index in range(args.rounds):
        for position, method in enumerate(paired.engine_order(methods, round_index, 0)):
            todo = [(concurrency, temperature)
                    for concurrency in concurrencies for temperature in temperatures
                    if round_cell_key(method, k, concurrency, temperature,
                                      round_index) not in done]
            if not todo:
                continue
            server = start_server(args, cell.target, spec_of(method, k), cell.env, out,
                                  f"{method.replace('#', '_')}_r{round_index}")
            try:
                for concurrency, temperature in todo:
                    cell.run_round(server, method, k, concurrency, temperature,
                                   spec_of(method, k), round_index, position,
                                   note=" (fresh server)")
            finally:
                server.stop()
        write_served_summary(out, methods, args.baseline)
    print(write_served_summary(out, methods, args.baseline), file=sys.stderr)


def served_rows_as_batches(rows: list[dict]) -> list[dict]:
    """Interleaved served rows in ``paired.summarize``'s shape: one batch per
    (round, concurrency, method), sized by the concurrency."""
    return [{"batch_size": r["concurrency"], "round": r["round"], "batch": 0,
             "method": r["method"], "position": r["position"],
             "wall_seconds": r["duration"], "output_tokens": r["total_output_tokens"],
             "accepted": r["metrics_delta"].get("accepted", 0.0),
             "draft_forward_passes":
                 r["metrics_delta"].get("gammatune_draft_forward_passes", 0.0),
             "skipped_draft_steps": r["metrics_delta"].get("gammatune_skipped_draft_steps", 0.0),
             "plugin_steps": r["metrics_delta"].get("gammatune_steps", 0.0),
             "catch_up_tokens": r["metrics_delta"].get("gammatune_catch_up_tokens", 0.0)}
            for r in rows if "round" in r]


def write_served_summary(out: Path, methods: list[str], baseline: str | None = None) -> Path:
    """``serve_paired.md``; ``methods`` in start order, ``baseline`` default the first."""
    import paired
    from report import read_jsonl

    rows = served_rows_as_batches(read_jsonl(out / "serve_cells.jsonl"))
    ordered = paired.baseline_first(methods, baseline)
    # one "batch" per round and concurrency: 1 prompt in batches of the concurrency
    summary = paired.summarize(rows, ordered, num_prompts=1)
    run_args = (json.loads((out / "context.json").read_text()).get("args", {})
                if (out / "context.json").exists() else {})
    if run_args.get("fresh_servers"):
        started, design = None, (
            "One server alive at a time (`--fresh-servers`): in each round every "
            "method's server is started afresh in turn, the first rotating by round, runs "
            "every concurrency and is stopped"
            + ("; each measured client run follows an unmeasured one of the same "
               "prompts (`--warmup-cell`)." if run_args.get("warmup_cell") else "."))
    else:
        started, design = methods, paired.ALIVE_AT_ONCE
    path = out / "serve_paired.md"
    path.write_text(paired.report(summary, ordered[0], out.name, started=started,
                                  design=design)
                    .replace("| batch |", "| concurrency |", 1))
    return path

if __name__ == "__main__":
    main()
