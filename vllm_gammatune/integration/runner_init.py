"""Building the adaptive drafter inside vLLM's model runner (worker process)."""

from __future__ import annotations

import contextlib

from vllm_gammatune.methods.settings import settings_from_additional_config


@contextlib.contextmanager
def _drafter_class(cls):
    """Make the runner's ``DraftModelProposer(...)`` construct ``cls``.

    The runner looks the class up in its module's globals; the rebinding lasts
    only for the runner's ``__init__``, so later ``isinstance`` checks see
    vLLM's class again (which ``cls`` subclasses).
    """
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.DraftModelProposer
    gpu_model_runner.DraftModelProposer = cls
    try:
        yield
    finally:
        gpu_model_runner.DraftModelProposer = original


def init_with_adaptive_drafter(original_init, runner, vllm_config, *args, **kwargs):
    """``GPUModelRunner.__init__`` that uses the plugin's drafter when asked."""
    if settings_from_additional_config(vllm_config.additional_config) is None:
        return original_init(runner, vllm_config, *args, **kwargs)
    from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer

    with _drafter_class(AdaptiveDraftModelProposer):
        return original_init(runner, vllm_config, *args, **kwargs)
