"""Load and faults through ``vllm serve`` (``vllm-gammatune serve``) with the plugin.

One server per method; 72 requests at concurrency 16 through the OpenAI
client: completions and chat, streaming and not, mixed prompt and output
lengths, clients that disconnect mid-stream, stop strings, ``max_tokens=1``,
``n=2``, seeds, logprobs, a JSON schema, and prompts longer than the context.
Afterwards: the server still answers, every greedy request's text equals the
target alone (GammaTune: lossless; AdaSD is lossy, so not compared), the
plugin holds no per-request state, and vLLM's counters add up.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from llm_helpers import running_llm
from test_server import http, metric_value, running_server

NUM_REQUESTS = 72
CONCURRENCY = 16
MAX_MODEL_LEN = 512  # serve_command's --max-model-len
WORDS = ["def", "x", "fox", "return", "hello", "1", "class", "(a, b):", "the", "\n"]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
          "required": ["answer"], "additionalProperties": False}
SPECS = {
    "gammatune": {"method": "gammatune", "num_speculative_tokens": 6},
    "adasd": {"method": "adasd", "num_speculative_tokens": 6},
}


def make_request(i: int) -> dict:
    """Request i of the mix: kind, streaming, sampling, and what it exercises."""
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(1 + (i * 13) % 60))
    req = {"i": i, "chat": i % 3 == 1, "stream": i % 2 == 0, "prompt": words,
           "params": {"max_tokens": [4, 12, 24, 40][i % 4], "temperature": 0.0},
           "feature": "plain"}
    params = req["params"]
    feature = i % 9
    if feature == 1:
        req["feature"], params["stop"] = "stop", ["e", "o"]
    elif feature == 2:
        req["feature"], params["max_tokens"] = "max_tokens_1", 1
    elif feature == 3:
        req["feature"], req["chat"] = "n2_seed", False
        params.update(n=2, temperature=0.8, seed=i)
    elif feature == 4 and not req["stream"]:
        req["feature"], req["chat"] = "logprobs", False
        params["logprobs"] = 2
    elif feature == 5:
        req["feature"], req["chat"], req["stream"] = "json_schema", True, False
        params["max_tokens"] = 48
        params["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "answer", "schema": SCHEMA}}
    elif feature == 6:
        req["feature"], req["stream"] = "disconnect", True
        params["max_tokens"] = 200
    elif feature == 7 and i % 2:
        req["feature"], req["chat"] = "too_long", False
        req["prompt"] = "hello world " * MAX_MODEL_LEN
    elif feature == 8:
        req["feature"], params["temperature"], params["seed"] = "seeded", 0.9, 1000 + i
    return req


REQUESTS = [make_request(i) for i in range(NUM_REQUESTS)]


def is_greedy(req) -> bool:
    return (req["params"]["temperature"] == 0 and req["feature"] not in
            ("disconnect", "too_long", "json_schema"))


def send(client, model: str, req: dict) -> dict:
    import openai

    params = dict(req["params"])
    fmt = params.pop("response_format", None)
    extra = {"response_format": fmt} if fmt else {}
    messages = [{"role": "user", "content": req["prompt"]}]
    try:
        if req["stream"]:
            create = client.chat.completions.create if req["chat"] else client.completions.create
            target = {"messages": messages} if req["chat"] else {"prompt": req["prompt"]}
            stream = create(model=model, stream=True, **target, **params,
                            stream_options={"include_usage": True})
            texts, chunks, usage = {}, 0, None
            for chunk in stream:
                chunks += 1
                if chunk.usage is not None:
                    usage = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    piece = (choice.delta.content if req["chat"] else choice.text) or ""
                    texts[choice.index] = texts.get(choice.index, "") + piece
                if req["feature"] == "disconnect" and chunks >= 3:
                    stream.close()  # the client goes away mid-stream
                    return {"status": "disconnected", "chunks": chunks}
            return {"status": 200, "texts": [texts.get(k, "") for k in sorted(texts)],
                    "usage": usage}
        if req["chat"]:
            out = client.chat.completions.create(model=model, messages=messages,
                                                 **params, **extra)
            return {"status": 200, "texts": [c.message.content for c in out.choices],
                    "usage": out.usage.completion_tokens}
        out = client.completions.create(model=model, prompt=req["prompt"], **params)
        result = {"status": 200, "texts": [c.text for c in out.choices],
                  "usage": out.usage.completion_tokens}
        if params.get("logprobs"):
            result["logprobs"] = out.choices[0].logprobs
        return result
    except openai.APIStatusError as exc:
        return {"status": exc.status_code, "message": str(exc)}


def reference_texts(target: str) -> dict[int, str]:
    """The target alone (no speculative decoding), greedy, per greedy request."""
    from vllm import SamplingParams

    greedy = [r for r in REQUESTS if is_greedy(r)]
    out = {}
    with running_llm(target, max_model_len=MAX_MODEL_LEN) as llm:
        for chat in (False, True):
            reqs = [r for r in greedy if r["chat"] == chat]
            params = [SamplingParams(temperature=0, max_tokens=r["params"]["max_tokens"],
                                     stop=r["params"].get("stop")) for r in reqs]
            if chat:
                results = llm.chat([[{"role": "user", "content": r["prompt"]}] for r in reqs],
                                   params, use_tqdm=False)
            else:
                results = llm.generate([r["prompt"] for r in reqs], params, use_tqdm=False)
            out.update((r["i"], res.outputs[0].text) for r, res in zip(reqs, results))
    return out


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_texts(tiny["target"])


@pytest.fixture(scope="module")
def load_run(request, tiny, tmp_path_factory):
    """Start a server for ``request.param``, send the whole mix, then inspect it."""
    import openai

    method = request.param
    spec = {**SPECS[method], "model": tiny["draft"]}
    model = tiny["target"]
    # without it xgrammar lets the tiny random model emit whitespace forever
    extra = ("--structured-outputs-config", json.dumps({"backend": "xgrammar",
                                                        "disable_any_whitespace": True}))
    with running_server(model, spec, tmp_path_factory.mktemp(method), extra) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0,
                               timeout=300)
        with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
            results = list(pool.map(lambda r: send(client, model, r), REQUESTS))
        # Let the engine process the aborts and the last finished requests.
        deadline = time.time() + 30
        while True:
            metrics = http("GET", base + "/metrics")[1]
            idle = (metric_value(metrics, "vllm:num_requests_running") == 0
                    and metric_value(metrics, "vllm:num_requests_waiting") == 0)
            if (idle and metric_value(metrics, "vllm:gammatune_tracked_requests") == 0) \
                    or time.time() > deadline:
                break
            time.sleep(0.5)
        after = client.completions.create(model=model, prompt="def add(a, b):",
                                          max_tokens=8, temperature=0)
        time.sleep(1.0)
        final_metrics = http("GET", base + "/metrics")[1]
        health = http("GET", base + "/health")[0]
    return {"method": method, "results": results, "metrics": metrics,
            "final_metrics": final_metrics, "after": after, "health": health}


BOTH = pytest.mark.parametrize("load_run", list(SPECS), indirect=True)


def test_mix_covers_the_issue():
    features = {r["feature"] for r in REQUESTS}
    assert {"stop", "max_tokens_1", "n2_seed", "logprobs", "json_schema", "disconnect",
            "too_long", "seeded"} <= features
    assert {(r["chat"], r["stream"]) for r in REQUESTS} == {(False, False), (False, True),
                                                            (True, False), (True, True)}
    assert len(REQUESTS) >= 64 and len({len(r["prompt"]) for r in REQUESTS}) > 20


@BOTH
def test_every_request_answered_as_expected(load_run):
    for req, res in zip(REQUESTS, load_run["results"]):
        feature = req["feature"]
        if feature == "too_long":
            assert res["status"] == 400, res
            assert "maximum context length" in res["message"], res["message"]
            continue
        if feature == "disconnect":
            assert res["status"] == "disconnected", res
            continue
        assert res["status"] == 200, (req, res)
        assert len(res["texts"]) == req["params"].get("n", 1)
        assert res["usage"] is not None
        if feature != "stop" and feature != "json_schema":
            assert res["usage"] == req["params"]["max_tokens"] * req["params"].get("n", 1)
        if feature == "max_tokens_1":
            assert res["usage"] == 1
        if feature == "json_schema":
            assert json.loads(res["texts"][0])["answer"] in ("yes", "no"), res["texts"][0]
        if feature == "logprobs":
            logprobs = res["logprobs"]
            assert len(logprobs.tokens) == req["params"]["max_tokens"]
            for token, top in zip(logprobs.tokens, logprobs.top_logprobs):
                assert len(top) >= 2 and token in top
                if load_run["method"] != "adasd":  # lossless: greedy = target's argmax
                    assert max(top.values()) == top[token]
        if feature == "stop":
            assert not any(s in res["texts"][0] for s in req["params"]["stop"])


@pytest.mark.parametrize("load_run", ["gammatune"], indirect=True)
def test_greedy_text_equals_target_alone(load_run, reference):
    compared = 0
    for req, res in zip(REQUESTS, load_run["results"]):
        if is_greedy(req):
            assert res["texts"][0] == reference[req["i"]], (req, res)
            compared += 1
    assert compared >= 30


@BOTH
def test_server_answers_and_plugin_state_drained(load_run):
    assert load_run["health"] == 200
    assert load_run["after"].usage.completion_tokens == 8
    # after the load (aborted streams included) the plugin holds no request state
    assert metric_value(load_run["metrics"], "vllm:gammatune_tracked_requests") == 0
    assert metric_value(load_run["final_metrics"], "vllm:gammatune_tracked_requests") == 0


@BOTH
def test_metrics_add_up(load_run):
    text = load_run["final_metrics"]
    drafts = metric_value(text, "vllm:spec_decode_num_drafts_total")
    drafted = metric_value(text, "vllm:spec_decode_num_draft_tokens_total")
    accepted = metric_value(text, "vllm:spec_decode_num_accepted_tokens_total")
    assert drafts > 0 and 0 < accepted <= drafted
    per_pos = metric_value(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert per_pos == accepted
    # the plugin counts every draft vLLM verified (aborted ones included)
    assert metric_value(text, "vllm:gammatune_draft_length_sum") >= drafted
    served = [r for r in REQUESTS if r["feature"] not in ("disconnect", "too_long")]
    finished = metric_value(text, "vllm:request_success_total")
    assert finished >= len(served) + 1  # + the request sent after the load
    assert labeled_value(text, "vllm:request_success_total", 'finished_reason="error"') == 0


@BOTH
def test_disconnected_streams_were_aborted(load_run):
    """The engine went idle, and the cut streams did not run to their max_tokens."""
    text = load_run["metrics"]
    assert metric_value(text, "vllm:num_requests_running") == 0
    assert metric_value(text, "vllm:num_requests_waiting") == 0
    cut = [r for r in REQUESTS if r["feature"] == "disconnect"]
    completed = sum(res["usage"] for res in load_run["results"] if res["status"] == 200)
    generated = metric_value(text, "vllm:generation_tokens_total")
    # had the server not aborted them, the cut streams would add 200 tokens each
    assert completed <= generated < completed + sum(r["params"]["max_tokens"] for r in cut)


def labeled_value(text: str, name: str, label: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and label in line)
