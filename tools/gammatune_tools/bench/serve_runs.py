"""The cells of a served benchmark: one client run against one server,
recorded as a row of ``serve_cells.jsonl``, and the two interleaved
schedules of ``serve_bench --rounds`` (servers alive at once, or one fresh
server at a time).

A run's rows and traces go to its results folder; the servers' and the
client's logs and the client's own result files (``client/``) go to a
separate logs folder, since the rows keep what the results need.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gammatune_tools.bench.counters import derived, metrics_delta, parse_metrics
from gammatune_tools.bench.methods import engine_k, method_name
from gammatune_tools.bench.paired import engine_order, write_served_summary
from gammatune_tools.bench.records import append_row, cell_key, done_keys, trace_path
from gammatune_tools.bench.serving import (CLIENT_FIELDS, PeakRss, Server, client_command,
                                           free_port, http_get, http_post, serve_command)
from gammatune_tools.bench.specs import parse_ks


def start_server(args, target: str, spec: dict | None, env: dict, out: Path, logs: Path,
                 slug: str) -> Server:
    """A healthy, warmed-up server for one method (the warm-up request is not
    measured); its trace, with ``--trace``, in ``out``, its log in ``logs``."""
    server_env_ = dict(env)
    if args.trace:
        server_env_["VLLM_GAMMATUNE_TRACE"] = str(trace_path(out, slug))
    port = free_port()
    server = Server(serve_command(args, target, spec, port), server_env_,
                    logs / f"{slug}.log", port)
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

    def __init__(self, args, target, dataset, num_prompts, env, results, logs, run_date):
        self.args, self.target, self.dataset = args, target, dataset
        self.num_prompts, self.env, self.results, self.logs = num_prompts, env, results, logs
        self.run_date = run_date

    def _client(self, server: Server, concurrency: int, temperature: float,
                result_name: str, what: str) -> None:
        """vLLM's client once against ``server``; its output in the logs folder,
        its result in ``client/<result_name>`` there; RuntimeError if it fails."""
        run = subprocess.run(
            client_command(self.args, self.target, server.port, self.dataset, self.num_prompts,
                           concurrency, temperature, self.logs / "client", result_name),
            env=self.env, capture_output=True, text=True)
        (self.logs / f"{result_name}.client.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            raise RuntimeError(f"{what} failed ({run.returncode}):\n"
                               + (run.stdout + run.stderr)[-3000:])

    def warm(self, server: Server, concurrency: int, temperature: float, name: str) -> None:
        """The client once, unmeasured (``--warmup-cell``): its result file is kept
        under the logs folder's ``client/`` for inspection but no row is written."""
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
        args = self.args
        before = parse_metrics(http_get(server.base + "/metrics"))
        started = time.time()
        with PeakRss(server.proc.pid) as rss:
            self._client(server, concurrency, temperature, name, "bench serve")
        after = parse_metrics(http_get(server.base + "/metrics"))
        client = json.loads((self.logs / "client" / name).read_text())
        delta = metrics_delta(before, after)
        output_tokens = int(client.get("total_output_tokens") or 0)
        row = {"key": key, "method": method, "k": k, "concurrency": concurrency,
               "temperature": temperature, "max_tokens": args.max_tokens,
               "num_requests": self.num_prompts, "dataset": args.dataset,
               "speculative_config": spec, "variant": variant,
               "started": started, "run_date": self.run_date,
               **{f: client.get(f) for f in CLIENT_FIELDS},
               "metrics_delta": delta,
               **derived(delta, output_tokens, method_name(method), engine_k(method, k)),
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
    (``engine_order``), so the machine's drift over minutes cancels in
    the per-round ratios; summary in ``serve_paired.md`` (``paired_report``)."""
    k = parse_ks(args.k)[0]
    done = done_keys(cell.results)
    servers = {}
    try:
        for method in methods:
            servers[method] = start_server(args, cell.target, spec_of(method, k), cell.env,
                                           out, cell.logs, method.replace("#", "_"))
        for round_index in range(args.rounds):
            for ci, concurrency in enumerate(concurrencies):
                for temperature in temperatures:
                    order = engine_order(methods, round_index, ci)
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
    ``engine_order``), runs every concurrency against it and stops it, so
    nothing of one server competes with the other for the two cores, and whatever
    a server instance's own speed is (where its memory landed) varies from round
    to round and is inside the interval instead of biasing one method for the
    whole run. Each server pays its start-up warm-up request; with
    ``--warmup-cell`` each measured cell follows an unmeasured run of the same
    client, as rounds after the first do with long-lived servers."""
    k = parse_ks(args.k)[0]
    done = done_keys(cell.results)
    for round_index in range(args.rounds):
        for position, method in enumerate(engine_order(methods, round_index, 0)):
            todo = [(concurrency, temperature)
                    for concurrency in concurrencies for temperature in temperatures
                    if round_cell_key(method, k, concurrency, temperature,
                                      round_index) not in done]
            if not todo:
                continue
            server = start_server(args, cell.target, spec_of(method, k), cell.env, out,
                                  cell.logs, f"{method.replace('#', '_')}_r{round_index}")
            try:
                for concurrency, temperature in todo:
                    cell.run_round(server, method, k, concurrency, temperature,
                                   spec_of(method, k), round_index, position,
                                   note=" (fresh server)")
            finally:
                server.stop()
        write_served_summary(out, methods, args.baseline)
    print(write_served_summary(out, methods, args.baseline), file=sys.stderr)


def logs_folder(path: str | None) -> Path:
    """``--logs``, created; without it a new temporary folder, kept after the
    run (a failed server's log is read there)."""
    if path is None:
        return Path(tempfile.mkdtemp(prefix="serve_bench-logs-"))
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
