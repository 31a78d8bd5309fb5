"""vLLM's sampling step for the plugin's drafters (installed on
``GPUModelRunner._sample`` by ``patches.gpu_model_runner``)."""

from __future__ import annotations


def sample_step(original_sample, runner, logits, spec_decode_metadata):
    """``GPUModelRunner._sample`` for the plugin's drafters.

    - A step in which no request has a draft token (every request planned 0,
      or only prefills) is sampled by vLLM's plain sampler, as a step without
      speculation is: vLLM would run its rejection sampler over zero draft
      tokens (a bonus-token sampling plus empty rejection bookkeeping, about
      1.7 ms per step on this CPU at batch 16, measured with
      ``benchmarks/step_profile.py``). The output is the same: one token per
      request, sampled from the same logits with the same generators, and
      vLLM's bookkeeping already treats a one-column output as "no spec
      decode tokens". Only for the plugin's drafters, so vLLM's own
      ``draft_model`` baseline runs unchanged.
    - AdaSD: the step's req_ids are made known to its verification.
    """
    drafter = getattr(runner, "drafter", None)
    if (spec_decode_metadata is not None
            and getattr(drafter, "samples_draftless_steps_plainly", False)
            and spec_decode_metadata.max_spec_len == 0):
        return original_sample(runner, logits, None)
    verifier = getattr(drafter, "adasd_verifier", None)
    if verifier is None:
        return original_sample(runner, logits, spec_decode_metadata)
    with verifier.step(runner.input_batch.req_ids):
        return original_sample(runner, logits, spec_decode_metadata)
