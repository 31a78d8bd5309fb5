"""vLLM's sampling step for the plugin's drafters, and the hand-off to the
rejection sampler of what it needs of the step: the req_ids, for AdaSD's
verification, or each request's drafted length, for drafts padded to
the shape vLLM's CUDA graphs replay (``drafter.uniform_shape``).

Two patches meet here (``patches.gpu_model_runner`` installs ``sample_step``
on ``GPUModelRunner._sample``; ``patches.rejection_sampler`` installs
``rejection_sample_step`` on the module function
``rejection_sampler.rejection_sample``). vLLM calls the second from inside
the first (``_sample`` -> ``RejectionSampler.forward`` -> ``rejection_sample``)
with tensors and the ``SamplingMetadata`` only, not the step's req_ids, which
AdaSD's verification needs to find each request's kept draft and state.

How they cross: ``STEP_BEING_VERIFIED``, a context variable that
``sample_step`` sets for the duration of vLLM's ``_sample`` and that
``rejection_sample_step`` reads. It is the only channel that needs no vLLM
code copied and touches no vLLM object: the one object that reaches both
calls, the input batch's ``SamplingMetadata``, is vLLM's, is cached across
steps and would need a tag set and cleared on every path; rebinding
``RejectionSampler.forward`` instead would mean copying its body to pass one
more argument. The variable is set and reset around one call (also when the
call raises), and is read nowhere else.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

import torch

from vllm.utils.torch_utils import async_tensor_h2d
from vllm_gammatune.drafter.contract import plugin_drafter
from vllm_gammatune.drafter.uniform_shape import keep_verified
from vllm_gammatune.verify.adasd_verifier import AdaSDVerifier


@dataclass(frozen=True)
class StepVerification:
    """What the rejection sampler of the step being sampled needs of the
    plugin: AdaSD's verifier and the step's req_ids (batch order), or the
    draft lengths whose verification it keeps."""

    verifier: AdaSDVerifier | None
    req_ids: list[str]
    #: per request, from the input batch's host copy of the temperatures
    #: (vLLM stores 0 for a greedy request); None for the host verifier,
    #: which reads the temperatures itself
    greedy: list[bool] | None = None
    #: [num_reqs] on the device: the draft tokens the draft loop produced
    #: for each request, where its draft was padded to the step's K
    #: (``uniform_shape``)
    verified_lengths: torch.Tensor | None = None


#: Set by ``sample_step`` while vLLM's ``_sample`` runs a step of a drafter
#: with AdaSD's verification or padded drafts; read by ``rejection_sample_step``.
STEP_BEING_VERIFIED: contextvars.ContextVar[StepVerification | None] = (
    contextvars.ContextVar("vllm_gammatune_step_being_verified", default=None))


def sample_step(original_sample, runner, logits, spec_decode_metadata):
    """``GPUModelRunner._sample`` for the plugin's drafters.

    - A step in which no request has a draft token (every request planned 0,
      or only prefills) is sampled by vLLM's plain sampler, as a step without
      speculation is: vLLM would run its rejection sampler over zero draft
      tokens (a bonus-token sampling plus empty rejection bookkeeping, a
      cost ``benchmarks/diagnostics/step_profile.py`` shows per step). The
      output is the same:
      one token per request, sampled from the same logits with the same
      generators, and vLLM's bookkeeping already treats a one-column output
      as "no spec decode tokens". Only for the plugin's drafters, so vLLM's
      own ``draft_model`` baseline runs unchanged.
    - The drafter is handed each request's number of draft tokens being
      verified (``note_sampling``: vLLM does not tell the n-gram drafter).
    - AdaSD: the step's req_ids are handed to its verification
      (``STEP_BEING_VERIFIED``), and, for a verification on the device,
      which requests sample greedily (host data: it reads no tensor).
    - Drafts padded to the step's K (the CUDA hot path): each request's
      drafted length, copied to the device without waiting, so that the
      rejection sampler keeps no filler (``uniform_shape``).
    """
    drafter = plugin_drafter(runner)
    if drafter is None:
        return original_sample(runner, logits, spec_decode_metadata)
    if spec_decode_metadata is not None:
        if spec_decode_metadata.max_spec_len == 0:
            return original_sample(runner, logits, None)
        # host data (a list); the drafter learns from it next step
        drafter.note_sampling(list(spec_decode_metadata.num_draft_tokens))
    req_ids = list(runner.input_batch.req_ids)
    verifier = drafter.adasd_verifier
    verified = None
    if verifier is None and spec_decode_metadata is not None:
        lengths = drafter.verified_draft_lengths(req_ids,
                                                 list(spec_decode_metadata.num_draft_tokens))
        if lengths is not None:
            # [num_reqs]; host data, copied without waiting for the device
            verified = async_tensor_h2d(lengths, dtype=torch.int64, device=logits.device)
    if verifier is None and verified is None:
        return original_sample(runner, logits, spec_decode_metadata)
    greedy = None
    if verifier is not None and verifier.on_device:
        greedy = (runner.input_batch.temperature_cpu[:len(req_ids)] <= 0).tolist()
    token = STEP_BEING_VERIFIED.set(StepVerification(verifier, req_ids, greedy, verified))
    try:
        return original_sample(runner, logits, spec_decode_metadata)
    finally:
        STEP_BEING_VERIFIED.reset(token)


def rejection_sample_step(original, *args, **kwargs):
    """``rejection_sampler.rejection_sample``: AdaSD's verification inside a
    step that ``sample_step`` handed over; vLLM's original otherwise."""
    step = STEP_BEING_VERIFIED.get()
    if step is None:
        return original(*args, **kwargs)
    if step.verifier is None:  # padded drafts: the fillers' verification dropped
        return keep_verified(original(*args, **kwargs), step.verified_lengths)
    return step.verifier.rejection_sample(step.req_ids, original, *args, greedy=step.greedy,
                                          **kwargs)
