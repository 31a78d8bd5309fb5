"""The CUDA hot path, run on the CPU (``VLLM_GAMMATUNE_CUDA_HOT_PATH=1``).

On a GPU every read of a tensor's values on the host stalls the host
(``drafter/hot_path.py``), and so does a copy of host data to the device
made without ``non_blocking=True``, or a device synchronisation. Here these
cost nothing, so they are counted instead (``host_reads``): for every
method, the plugin's own code reads at most once per engine step, and never
before the step's first draft pass; it makes no blocking copy to the device
and never synchronises; and the lossless methods still give the target's
greedy output.
"""

from __future__ import annotations

import pytest
from host_reads import count_host_reads, model_runner
from llm_helpers import PROMPTS, drafter, metrics_by_name, running_llm
from record_behaviour import CONFIGS

MAX_TOKENS = 32


def _greedy(llm):
    from vllm import SamplingParams

    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                        use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


@pytest.fixture(scope="module")
def reference(tiny):
    with running_llm(tiny["target"]) as llm:
        return _greedy(llm)


def _spec(tiny, name: str) -> dict:
    return {"model": tiny["draft"], "num_speculative_tokens": 8, **CONFIGS[name]}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_read_per_step_after_the_draft_passes_and_nothing_else_waits(
        tiny, reference, name, monkeypatch):
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "1")
    with running_llm(tiny["target"], _spec(tiny, name)) as llm:
        assert drafter(llm).hot_path
        with count_host_reads(model_runner(llm)) as log:
            tokens = _greedy(llm)
    drafting_steps = [s for s in log.steps() if any(e[0] == "pass" for e in s)]
    assert drafting_steps, "the draft model should run on some steps"
    assert log.max_reads_in_a_step() <= 1, dict(log.where())
    assert log.reads_before_first_pass() == []
    config = CONFIGS[name]
    if config["method"] != "adasd" or config.get("adasd_mode") == "generation":
        assert tokens == reference  # lossless (AdaSD relaxes acceptance otherwise)
    # host data goes to the device through pinned memory, without waiting
    # (vLLM's ``async_tensor_h2d``); where the plugin copies: {place: calls}
    assert not log.where("copy"), dict(log.where("copy"))
    assert not log.where("sync"), dict(log.where("sync"))


def test_the_host_path_reads_after_each_pass_and_exits_early(tiny, reference, monkeypatch):
    """The counter sees reads where they are: the host path asks after every
    draft pass whether a request still drafts (free on the CPU)."""
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "0")
    with running_llm(tiny["target"], _spec(tiny, "gammatune_plus")) as llm:
        assert not drafter(llm).hot_path
        with count_host_reads(model_runner(llm)) as log:
            tokens = _greedy(llm)
    assert tokens == reference
    assert log.max_reads_in_a_step() > 1
    assert log.reads_before_first_pass()  # the last verification, before planning


@pytest.mark.parametrize("name", ["gammatune", "gammatune_cost"])
def test_the_hot_path_hands_vllm_k_drafts_and_keeps_every_verified_token(
        tiny, reference, name, monkeypatch):
    """The shape vLLM's CUDA graphs replay (``drafter/uniform_shape.py``): on
    the hot path every drafted step hands the scheduler K draft tokens per
    request, whatever each plan drafted; the rejection sampler keeps every
    token the draft passes produced (a request planned shorter than the
    step's longest plan keeps the tokens past its plan) and no filler, so
    the output is the target's and the accepted tokens never exceed the
    tokens drafted."""
    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "1")
    spec = _spec(tiny, name)
    with running_llm(tiny["target"], spec) as llm:
        plugin_drafter = drafter(llm)
        handed = []
        propose = plugin_drafter.propose

        def recording(num_speculative_tokens, *args, **kwargs):
            drafts = propose(num_speculative_tokens, *args, **kwargs)
            if isinstance(drafts, list) and any(drafts):
                handed.append((num_speculative_tokens, [len(d) for d in drafts]))
            return drafts

        plugin_drafter.propose = recording
        tokens = _greedy(llm)
        metrics = metrics_by_name(llm)
    assert tokens == reference
    assert handed, "some steps should draft"
    assert all(lengths == [k] * len(lengths) for k, lengths in handed), handed
    vllm_drafted = metrics["vllm:spec_decode_num_draft_tokens"].value
    accepted = metrics["vllm:spec_decode_num_accepted_tokens"].value
    drafted = metrics["vllm:gammatune_draft_length"].sum  # the tokens kept for verification
    planned = metrics["vllm:gammatune_planned_draft_tokens"].value
    assert 0 < accepted <= drafted <= vllm_drafted
    if name == "gammatune":  # per-request lengths: some plans shorter than the longest
        assert drafted > planned


def test_probabilistic_drafts_go_to_the_device_without_waiting(tiny, monkeypatch):
    """With vLLM's probabilistic drafting and sampled requests the hot path
    hands vLLM the draft's probabilities, widened to K with one-hot rows for
    the padded tokens (``uniform_shape``): the greedy runs above never build
    them, so this run looks for waits there."""
    from vllm import SamplingParams

    monkeypatch.setenv("VLLM_GAMMATUNE_CUDA_HOT_PATH", "1")
    spec = {**_spec(tiny, "gammatune"), "draft_sample_method": "probabilistic"}
    with running_llm(tiny["target"], spec) as llm:
        assert drafter(llm).hot_path
        with count_host_reads(model_runner(llm)) as log:
            llm.generate(PROMPTS, SamplingParams(temperature=0.8, seed=1, max_tokens=MAX_TOKENS),
                         use_tqdm=False)
    assert log.max_reads_in_a_step() <= 1, dict(log.where())
    assert log.reads_before_first_pass() == []
    assert not log.where("copy"), dict(log.where("copy"))
    assert not log.where("sync"), dict(log.where("sync"))
