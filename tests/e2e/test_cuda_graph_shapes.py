"""Step shapes: which CUDA graph each target decode step would replay on CUDA.

vLLM's V1 runner replays a FULL CUDA graph for a decode step only when every
request's query is exactly ``1 + num_speculative_tokens``; any other decode
step runs PIECEWISE. Each target forward of an in-process engine on the tiny
models is recorded as the runner sees it and replayed through vLLM's own
dispatcher configured as on CUDA (``tests/graph_shapes.py``; docs/cuda.md,
"Step shapes"). The plugin's methods run on the CUDA hot path, forced.
"""

from __future__ import annotations

import pytest
from graph_shapes import cuda_dispatcher, decode_verdicts, record_target_steps
from host_reads import model_runner
from llm_helpers import PROMPTS, drafter, running_llm
from record_behaviour import CONFIGS

MAX_TOKENS = 32
#: several requests of different prompt lengths, decoding side by side
BATCH = PROMPTS[:6]
#: the plugin's cap, as in the hot path test and the behaviour record
PLUGIN_CAP = 8
SPECS = {
    "draft_model": {"method": "draft_model", "num_speculative_tokens": 3},
    "gammatune": {"num_speculative_tokens": PLUGIN_CAP, **CONFIGS["gammatune"]},
    # fixed step costs: the plan does not read the clock, so the shapes repeat;
    # a verified token costs nothing (a GPU at small batch): a skipped step
    # is padded to the FULL shape
    "gammatune_cost": {"num_speculative_tokens": PLUGIN_CAP, **CONFIGS["gammatune_cost"]},
    # each verified token costs a tenth of the step (the CPU) and a draft pass
    # more than half of it: steps skip, and a skip stays one token a request
    "gammatune_cost_dear_tokens": {
        "num_speculative_tokens": PLUGIN_CAP, "method": "gammatune_cost",
        "fixed_step_costs": {"target_step_s": 0.1, "target_token_s": 0.01,
                             "draft_pass_s": 0.06, "draft_token_s": 0.0}},
}


def _measure(tiny, name: str, monkeypatch) -> dict:
    from vllm import SamplingParams

    spec_name, _, path = name.partition("@")
    plugin = spec_name != "draft_model"
    hot_path = plugin and path != "host_path"
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "1" if hot_path else "0")
    with running_llm(tiny["target"], {"model": tiny["draft"], **SPECS[spec_name]}) as llm:
        runner = model_runner(llm)
        if plugin:
            assert drafter(llm).hot_path == hot_path
        with record_target_steps(runner) as recording:
            llm.generate(BATCH, SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                         use_tqdm=False)
        # the dispatcher the runner would hold on CUDA for this engine
        scheduler = runner.scheduler_config
        dispatcher = cuda_dispatcher(scheduler.max_num_seqs, runner.num_spec_tokens,
                                     scheduler.max_num_batched_tokens)
    # one record per target forward, each as the scheduler sized it: the draft
    # model's forwards are not among them
    steps = recording.steps
    assert [s.num_tokens for s in steps] == recording.forwards
    assert all(sum(s.query_lens) == s.num_tokens for s in steps)
    return {"k": runner.num_spec_tokens, "steps": steps, "dispatcher": dispatcher,
            "verdicts": decode_verdicts(dispatcher, steps),
            "capture": (scheduler.max_num_batched_tokens,
                        dispatcher.compilation_config.max_cudagraph_capture_size)}


@pytest.fixture(scope="module")
def measured(tiny):
    """name -> measurement, each engine started once for the module."""
    cache = {}

    def get(name):
        if name not in cache:
            with pytest.MonkeyPatch.context() as monkeypatch:
                cache[name] = _measure(tiny, name, monkeypatch)
        return cache[name]

    return get


def _show(capsys, name: str, result: dict) -> None:
    verdicts = result["verdicts"]
    decode = [s for s in result["steps"] if s.decode]
    query_lens = sorted({q for s in decode for q in s.query_lens})
    with capsys.disabled():
        print(f"\n{name} (K={result['k']}): {sum(verdicts.values())} decode steps of "
              f"{len(result['steps'])} target forwards: FULL {verdicts['FULL']}, "
              f"PIECEWISE {verdicts['PIECEWISE']}, NONE {verdicts['NONE']}; "
              f"query lengths seen {query_lens} (max_num_batched_tokens, largest "
              f"capture size: {result['capture']})")


def test_vllms_draft_model_gets_the_full_graph_on_every_decode_step(measured, capsys):
    """The control: vLLM's own method drafts K tokens for every request on
    every step, so each decode step has the uniform shape."""
    result = measured("draft_model")
    _show(capsys, "draft_model", result)
    verdicts = result["verdicts"]
    assert verdicts["FULL"] >= MAX_TOKENS // (1 + result["k"])
    assert verdicts["PIECEWISE"] == verdicts["NONE"] == 0


def test_the_hot_path_keeps_the_full_graph_shape_on_every_decode_step(measured, capsys):
    """On the CUDA path every request's draft is padded to K and its plan is
    kept by the rejection sampler (``drafter/uniform_shape.py``): every
    decode step of ``gammatune`` has the uniform shape; so has every one of
    ``gammatune_cost`` where verification costs next to nothing, its skipped
    steps padded with fillers that keep no token."""
    for name in ("gammatune", "gammatune_cost"):
        result = measured(name)
        _show(capsys, name, result)
        decode = [s for s in result["steps"] if s.decode]
        assert len(decode) >= 5, "the batch should decode for several steps"
        assert result["verdicts"] == {"FULL": len(decode), "PIECEWISE": 0, "NONE": 0}, name


def test_where_verification_is_dear_a_skip_stays_one_token_a_request(measured, capsys):
    """The CPU's costs: padding a skipped step would verify K tokens per
    request for nothing, so it keeps queries of one token (PIECEWISE on
    CUDA), and every drafted step is still FULL."""
    result = measured("gammatune_cost_dear_tokens")
    _show(capsys, "gammatune_cost, dear verification", result)
    decode = [s for s in result["steps"] if s.decode]
    skipped = [s for s in decode if max(s.query_lens) == 1]
    drafted = [s for s in decode if max(s.query_lens) > 1]
    assert skipped, "with these costs some steps should skip"
    assert decode_verdicts(result["dispatcher"], skipped)["PIECEWISE"] == len(skipped)
    assert decode_verdicts(result["dispatcher"], drafted) == {
        "FULL": len(drafted), "PIECEWISE": 0, "NONE": 0}


def test_variable_shapes_of_the_host_path_lose_the_full_graph(measured, capsys):
    """The control: the host path (the CPU's) drafts each request's own
    length, so the target's queries differ from ``1 + K`` and its decode
    steps would run PIECEWISE on CUDA."""
    result = measured("gammatune@host_path")
    _show(capsys, "gammatune on the host path", result)
    verdicts = result["verdicts"]
    assert sum(verdicts.values()) >= 5
    assert verdicts["PIECEWISE"] > 0 and verdicts["FULL"] < sum(verdicts.values())

