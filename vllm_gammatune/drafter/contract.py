"""The one contract between vLLM's side (``integration``, ``patches``) and the
plugin's drafters.

vLLM's runner holds its drafter as ``runner.drafter``. Where that is one of
the plugin's drafters (``plugin_drafter``), the plugin's wrappers of vLLM's
methods call it through this contract only, and leave vLLM's own drafters
(the ``draft_model`` baseline) untouched:

- ``attach_runner``: after the runner's ``__init__`` (``runner_init``);
- ``note_sampling``: the sampling step hands the drafter what it verifies
  (``sampling.sample_step``; host data);
- ``adasd_verifier``: AdaSD's verification at the rejection sampler, or None
  (``sampling.rejection_sample_step``);
- ``verified_draft_lengths``: where the drafter padded its drafts to the
  step's K (the CUDA hot path, ``uniform_shape``), the draft tokens whose
  verification the rejection sampler keeps (``sampling.sample_step``);
- ``skipped_this_step``: the step ran no drafter at all, so the engine core
  need not fetch draft tokens (``draft_handoff``);
- ``forget_finished``: the worker has heard of finished requests
  (``lifecycle``);
- ``settings`` and ``counters``: what the worker's check of the built
  drafter reports (``runner_choice.confirm_plugin_drafter``).

A step where no request has a draft token is sampled without vLLM's
rejection sampler for every plugin drafter (``sampling.sample_step``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm_gammatune.methods.settings import MethodSettings
    from vllm_gammatune.telemetry.metrics import StepCounters
    from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier


class PluginDrafter(ABC):
    """What vLLM's side may ask of a plugin drafter."""

    #: AdaSD's verification at the rejection sampler, or None
    adasd_verifier: AdaSDVerifier | None = None
    #: set when the step ran no drafter at all (no request has draft tokens)
    skipped_this_step: bool = False
    #: the method's settings (``methods.settings``)
    settings: MethodSettings

    @property
    @abstractmethod
    def counters(self) -> StepCounters | None:
        """The engine's metrics file (rank-0 worker only), or None."""

    def attach_runner(self, runner: Any) -> None:
        """The runner this drafter serves, once the runner is built."""

    def verified_draft_lengths(self, req_ids: list[str],
                               num_draft_tokens: list[int]) -> list[int] | None:
        """[num_reqs] the draft tokens the draft loop produced for each
        request among the ``num_draft_tokens`` being verified (the rest pad
        the step to the shape vLLM's CUDA graphs replay); None where nothing
        is padded."""
        return None

    def note_sampling(self, num_draft_tokens: list[int]) -> None:
        """The sampling step verifies these draft tokens per request (input
        batch order); their outcome reaches the drafter with the next
        proposal."""

    @abstractmethod
    def forget_finished(self, live_req_ids: Collection[str]) -> None:
        """Drop the records of requests that are not live."""


def plugin_drafter(runner: Any) -> PluginDrafter | None:
    """The runner's drafter if it is one of the plugin's, else None."""
    drafter = getattr(runner, "drafter", None)
    return drafter if isinstance(drafter, PluginDrafter) else None
