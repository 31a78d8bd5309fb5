"""``acceptance.sample_step``: which sampler a step goes to (no engine needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from vllm_gammatune.integration.sampling import sample_step  # noqa: E402
from vllm_gammatune.verify.adasd import _ACTIVE, AdaSDVerifier  # noqa: E402
from vllm_gammatune.policies import AdaSDPolicy  # noqa: E402


class _Recorder:
    """Stands in for vLLM's ``GPUModelRunner._sample``: records its arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, runner, logits, spec_decode_metadata):
        self.calls.append((logits, spec_decode_metadata, _ACTIVE.get()))
        return "sampled"


def _runner(plugin_drafter: bool, verifier=None):
    drafter = SimpleNamespace(adasd_verifier=verifier)
    if plugin_drafter:
        drafter.samples_draftless_steps_plainly = True
    return SimpleNamespace(drafter=drafter, input_batch=SimpleNamespace(req_ids=["a", "b"]))


def _metadata(max_spec_len: int):
    return SimpleNamespace(max_spec_len=max_spec_len)


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


def test_adasd_step_with_drafts_makes_req_ids_known():
    original = _Recorder()
    verifier = AdaSDVerifier(SimpleNamespace(policy=AdaSDPolicy(4, window=4, mode="both")))
    metadata = _metadata(2)
    sample_step(original, _runner(plugin_drafter=True, verifier=verifier), "logits", metadata)
    # the rejection sampler runs inside AdaSD's step, which knows the req_ids
    assert original.calls == [("logits", metadata, (verifier, ["a", "b"]))]
    assert _ACTIVE.get() is None  # reset after the call
