"""``vllm serve`` (through ``vllm-gammatune serve``) with the plugin, for real.

The server spawns vLLM's engine-core and worker processes, so this also shows
the plugin registering itself in every process through its entry point.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from llm_helpers import running_llm

STARTUP_TIMEOUT_S = 420


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_command(target: str, speculative_config: dict, port: int,
                  extra_args: tuple[str, ...] = ()) -> list[str]:
    exe = shutil.which("vllm-gammatune")
    base = [exe] if exe else [sys.executable, "-m", "vllm_gammatune.cli"]
    return base + [
        "serve", target, "--host", "127.0.0.1", "--port", str(port),
        "--speculative-config", json.dumps(speculative_config),
        "--max-model-len", "512", "--enforce-eager", "--dtype", "float32",
        "--max-num-seqs", "16", "--gpu-memory-utilization", "0.2", "--seed", "0",
        *extra_args,
    ]


def server_env() -> dict:
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the real, spawned layout
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def http(method: str, url: str, body: dict | None = None, timeout: float = 120):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        payload = response.read().decode()
        return response.status, payload


@contextlib.contextmanager
def running_server(target: str, speculative_config: dict, log_dir,
                   extra_args: tuple[str, ...] = ()):
    port = free_port()
    log = log_dir / "server.log"
    with open(log, "w") as log_file:
        proc = subprocess.Popen(serve_command(target, speculative_config, port, extra_args),
                                env=server_env(), stdout=log_file,
                                stderr=subprocess.STDOUT, cwd=str(log_dir))
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + STARTUP_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if http("GET", base + "/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                pytest.fail(f"server not healthy after {STARTUP_TIMEOUT_S}s:\n"
                            f"{log.read_text()[-4000:]}")
            time.sleep(2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def server(tiny, tmp_path_factory):
    spec = {"method": "gammatune_plus", "model": tiny["draft"],
            "num_speculative_tokens": 6, "confidence_threshold": 0.5}
    with running_server(tiny["target"], spec, tmp_path_factory.mktemp("server")) as base:
        yield base


PROMPT = "def add(a, b):"


def test_completion_greedy_equals_target_alone(tiny, server):
    from vllm import SamplingParams

    status, payload = http("POST", server + "/v1/completions", {
        "model": tiny["target"], "prompt": PROMPT, "max_tokens": 24, "temperature": 0})
    assert status == 200
    served = json.loads(payload)["choices"][0]["text"]
    with running_llm(tiny["target"]) as llm:
        offline = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=24))
    assert served == offline[0].outputs[0].text


def test_chat_completion(tiny, server):
    status, payload = http("POST", server + "/v1/chat/completions", {
        "model": tiny["target"], "max_tokens": 16, "temperature": 0,
        "messages": [{"role": "user", "content": "hello world"}]})
    assert status == 200
    body = json.loads(payload)
    assert body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] == 16


def metric_value(text: str, name: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name + "{") or line.startswith(name + " ")]
    assert values, f"{name} not on /metrics"
    return sum(values)


def test_metrics_page_has_plugin_and_vllm_counters(tiny, server):
    for _ in range(3):
        http("POST", server + "/v1/completions", {
            "model": tiny["target"], "prompt": "hello world " * 5, "max_tokens": 32,
            "temperature": 0})
    status, text = http("GET", server + "/metrics")
    assert status == 200
    drafts = metric_value(text, "vllm:spec_decode_num_drafts_total")
    draft_tokens = metric_value(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric_value(text, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and 0 <= accepted <= draft_tokens
    assert metric_value(text, "vllm:gammatune_draft_length_count") >= drafts
    assert metric_value(text, "vllm:gammatune_draft_length_sum") >= draft_tokens
    assert metric_value(text, "vllm:gammatune_planned_draft_tokens_total") >= draft_tokens
    assert metric_value(text, "vllm:gammatune_confidence_stops_total") >= 0
    assert 'le="6.0"' in text
    # the worker (another process) confirmed the drafter it built
    info = [line for line in text.splitlines() if line.startswith("vllm:gammatune_info{")]
    assert len(info) == 1 and info[0].endswith(" 1.0"), info
    assert 'method="gammatune_plus"' in info[0] and 'runner="v1"' in info[0]
    assert 'drafter="AdaptiveDraftModelProposer"' in info[0]


def test_bad_config_fails_server_start_with_named_field(tiny):
    port = free_port()
    spec = {"method": "gammatune", "model": tiny["draft"], "eta": 2}
    result = subprocess.run(serve_command(tiny["target"], spec, port), env=server_env(),
                            capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
    assert result.returncode != 0
    assert "speculative_config['eta']=2.0" in result.stdout + result.stderr


def test_adasd_server_healthy_under_mixed_concurrent_requests(tiny, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    spec = {"method": "adasd", "model": tiny["draft"], "num_speculative_tokens": 8}
    with running_server(tiny["target"], spec, tmp_path) as base:
        def one(i):
            body = {"model": tiny["target"], "max_tokens": 8 + 4 * (i % 5),
                    "temperature": [0.0, 0.7][i % 2], "seed": i}
            if i % 3 == 0:
                body["messages"] = [{"role": "user", "content": "hello " * (1 + i)}]
                return http("POST", base + "/v1/chat/completions", body)
            body["prompt"] = "def f(x):" * (1 + i % 4)
            return http("POST", base + "/v1/completions", body)

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(one, range(16)))
        assert [status for status, _ in results] == [200] * 16
        for i, (_, payload) in enumerate(results):
            usage = json.loads(payload)["usage"]
            assert usage["completion_tokens"] == 8 + 4 * (i % 5)
        assert http("GET", base + "/health")[0] == 200
        _, text = http("GET", base + "/metrics")
    drafted = metric_value(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric_value(text, "vllm:spec_decode_num_accepted_tokens_total")
    assert 0 < accepted <= drafted
    assert metric_value(text, "vllm:gammatune_adasd_relaxed_acceptances_total") >= 0
    assert metric_value(text, "vllm:gammatune_adasd_mean_verification_threshold") >= 0
