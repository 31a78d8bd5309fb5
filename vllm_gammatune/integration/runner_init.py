"""Building the adaptive drafter inside vLLM's model runner (worker process)."""

from __future__ import annotations

import contextlib
import importlib

from vllm_gammatune.drafter.contract import plugin_drafter
from vllm_gammatune.methods.settings import settings_from_additional_config

#: per drafter (``methods.drafters``): the module whose class the runner
#: constructs, and that class's name there
_VLLM_DRAFTER_CLASSES = {
    "draft_model": ("vllm.v1.worker.gpu_model_runner", "DraftModelProposer"),
    "ngram": ("vllm.v1.spec_decode.ngram_proposer", "NgramProposer"),
    # the n-gram lookup ahead of the draft model: vLLM builds its draft-model
    # drafter, the plugin's composes the lookup (``drafter.ngram_front``)
    "ngram+draft_model": ("vllm.v1.worker.gpu_model_runner", "DraftModelProposer"),
}


@contextlib.contextmanager
def _drafter_class(drafter: str, cls):
    """Make the runner's construction of vLLM's drafter construct ``cls``.

    The runner looks ``DraftModelProposer`` up in its module's globals, and
    imports ``NgramProposer`` from its module inside ``__init__``; either way
    the name is read from a module at construction time. The rebinding lasts
    only for the runner's ``__init__``, so later ``isinstance`` checks see
    vLLM's class again (which ``cls`` subclasses).
    """
    module_name, name = _VLLM_DRAFTER_CLASSES[drafter]
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    setattr(module, name, cls)
    try:
        yield
    finally:
        setattr(module, name, original)


def plugin_drafter_class(drafter: str) -> type:
    """The plugin's drafter class for a drafter name (``methods.drafters``).
    Imported only where that drafter is configured: the n-gram module loads
    numba, which a later in-process engine start on the CPU cannot survive
    (docs/methods.md#drafters)."""
    if drafter == "ngram":
        from vllm_gammatune.drafter.ngram_proposer import AdaptiveNgramProposer
        return AdaptiveNgramProposer
    from vllm_gammatune.drafter.proposer import AdaptiveDraftModelProposer
    return AdaptiveDraftModelProposer


def init_with_adaptive_drafter(original_init, runner, vllm_config, *args, **kwargs):
    """``GPUModelRunner.__init__`` that uses the plugin's drafter when asked."""
    settings = settings_from_additional_config(vllm_config.additional_config)
    if settings is None:
        return original_init(runner, vllm_config, *args, **kwargs)
    with _drafter_class(settings.drafter, plugin_drafter_class(settings.drafter)):
        result = original_init(runner, vllm_config, *args, **kwargs)
    drafter = plugin_drafter(runner)
    if drafter is not None:  # vLLM builds the n-gram drafter without the runner
        drafter.attach_runner(runner)
    return result
