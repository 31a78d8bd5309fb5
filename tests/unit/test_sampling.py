"""integration.sampling: which sampler a step goes to, and the hand-off of the
step's req_ids to AdaSD's verification (no engine needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from vllm_gammatune.drafter.contract import PluginDrafter  # noqa: E402
from vllm_gammatune.integration.sampling import (  # noqa: E402
    STEP_BEING_VERIFIED,
    StepVerification,
    rejection_sample_step,
    sample_step,
)


class _Recorder:
    """Stands in for vLLM's ``GPUModelRunner._sample``: records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, runner, logits, spec_decode_metadata):
        self.calls.append((logits, spec_decode_metadata, STEP_BEING_VERIFIED.get()))
        return "sampled"


class _Verifier:
    """Stands in for ``AdaSDVerifier`` on the host: records the req_ids it is given."""

    on_device = False

    def __init__(self):
        self.calls = []

    def rejection_sample(self, req_ids, original, *args, greedy=None, **kwargs):
        self.calls.append((req_ids, args, kwargs))
        return "verified"


class _PluginDrafter(PluginDrafter):
    """Stands in for one of the plugin's drafters."""

    counters = None

    def __init__(self, verifier):
        self.adasd_verifier = verifier

    def forget_finished(self, live_req_ids):
        pass


def _runner(plugin_drafter: bool, verifier=None):
    drafter = (_PluginDrafter(verifier) if plugin_drafter
               else SimpleNamespace(adasd_verifier=verifier))  # vLLM's own drafter
    return SimpleNamespace(drafter=drafter, input_batch=SimpleNamespace(req_ids=["a", "b"]))


def _metadata(max_spec_len: int):
    return SimpleNamespace(max_spec_len=max_spec_len, num_draft_tokens=[max_spec_len, 0])


def test_step_without_drafts_goes_to_the_plain_sampler():
    original = _Recorder()
    assert sample_step(original, _runner(plugin_drafter=True), "logits", _metadata(0)) == "sampled"
    assert original.calls == [("logits", None, None)]


def test_step_with_drafts_keeps_the_rejection_sampler():
    original = _Recorder()
    metadata = _metadata(3)
    sample_step(original, _runner(plugin_drafter=True), "logits", metadata)
    assert original.calls == [("logits", metadata, None)]


def test_vllm_own_drafter_is_left_alone_even_without_drafts():
    original = _Recorder()
    metadata = _metadata(0)
    sample_step(original, _runner(plugin_drafter=False), "logits", metadata)
    assert original.calls == [("logits", metadata, None)]


def test_no_speculation_passes_through():
    original = _Recorder()
    sample_step(original, SimpleNamespace(), "logits", None)
    assert original.calls == [("logits", None, None)]


def test_adasd_step_hands_its_req_ids_over_for_the_call_only():
    original = _Recorder()
    verifier = _Verifier()
    metadata = _metadata(2)
    sample_step(original, _runner(plugin_drafter=True, verifier=verifier), "logits", metadata)
    # the rejection sampler runs inside the step, which knows its req_ids
    assert original.calls == [("logits", metadata, StepVerification(verifier, ["a", "b"]))]
    assert STEP_BEING_VERIFIED.get() is None  # reset after the call


def test_hand_off_is_reset_when_sampling_raises():
    def failing(runner, logits, spec_decode_metadata):
        raise RuntimeError("sampling failed")

    with pytest.raises(RuntimeError, match="sampling failed"):
        sample_step(failing, _runner(plugin_drafter=True, verifier=_Verifier()), "logits",
                    _metadata(2))
    assert STEP_BEING_VERIFIED.get() is None


def test_rejection_sample_is_vllms_outside_a_handed_over_step():
    assert rejection_sample_step(lambda *a, **kw: ("original", a, kw), 1, x=2) == (
        "original", (1,), {"x": 2})


def test_rejection_sample_inside_a_step_goes_to_the_verifier_with_the_req_ids():
    verifier = _Verifier()

    def original_sample(runner, logits, spec_decode_metadata):
        # what vLLM's RejectionSampler.forward does inside _sample
        return rejection_sample_step(lambda *a, **kw: "original", "draft_ids", [2, 0],
                                     use_fp64_gumbel=False)

    runner = _runner(plugin_drafter=True, verifier=verifier)
    assert sample_step(original_sample, runner, "logits", _metadata(2)) == "verified"
    assert verifier.calls == [(["a", "b"], ("draft_ids", [2, 0]), {"use_fp64_gumbel": False})]
