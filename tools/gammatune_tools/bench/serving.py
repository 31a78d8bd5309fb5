"""Serving: a ``vllm-gammatune serve`` process and vLLM's own client
(``vllm-gammatune bench serve``) against it, with the server's memory
sampled while the client runs."""

from __future__ import annotations

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

from gammatune_tools.bench.specs import parse_ks

#: seconds a server may take to answer /health (loading and profiling both models)
STARTUP_TIMEOUT_S = 900


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


def cli_base() -> list[str]:
    """The plugin's command line: the console script, else ``python -m``."""
    exe = shutil.which("vllm-gammatune")
    return [exe] if exe else [sys.executable, "-m", "vllm_gammatune.cli"]


def add_server_args(parser) -> None:
    """The options ``serve_command``, ``client_command`` and ``server_env`` read
    (beside the engine options of ``specs.add_common_args``)."""
    parser.add_argument("--kv-cache-gib", type=int, default=4,
                        help="VLLM_CPU_KVCACHE_SPACE unless set in the environment")
    parser.add_argument("--no-enforce-eager", action="store_true")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra argument for vllm serve (repeat; use --server-arg=--flag)")
    parser.add_argument("--client-arg", action="append", default=[],
                        help="extra argument for vllm bench serve (repeat)")


def serve_command(args, target: str, spec: dict | None, port: int) -> list[str]:
    """``vllm-gammatune serve`` of the target with ``spec`` on ``port``."""
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
    """``vllm-gammatune bench serve``: every prompt of ``dataset`` (ShareGPT
    rows) at ``concurrency``, ``--max-tokens`` tokens each, EOS ignored; its
    result JSON as ``result_dir/result_name``."""
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


def server_env(args) -> dict:
    """The servers' environment: both cores bound, ``--kv-cache-gib`` of KV cache,
    unless the environment sets them."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    return env
