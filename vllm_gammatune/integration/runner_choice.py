"""Which of vLLM's two model runners a plugin method gets, and the check that it got it.

vLLM 0.32 and 0.33 build one of two model runners (``VllmConfig.use_v2_model_runner``):
Model Runner V2 (``vllm.v1.worker.gpu.model_runner``) wherever Triton works,
which is every CUDA machine, unless something in the config is on V2's list
of unsupported features; the V1 runner (``vllm.v1.worker.gpu_model_runner``,
which the CPU runner subclasses) otherwise. The plugin's drafter lives in the
V1 runner only, so (``docs/cuda.md``, "vLLM's two model runners"):

- **vLLM's own mechanism picks V1 for a plugin method.** The plugin's method
  is named in V2's unsupported features
  (``VllmConfig._get_v2_model_runner_unsupported_features``), as vLLM names
  ``custom_class`` or ``suffix``; vLLM logs its usual line and builds V1
  for that engine alone (it reads the engine's own ``additional_config``);
  a plain ``draft_model`` config keeps V2.
- **Forcing V2 is refused at config time**, in the front end:
  ``VLLM_USE_V2_MODEL_RUNNER=1`` with a plugin method as soon as the plugin
  reads the method (``refuse_forced_v2``); anything else that makes vLLM
  choose V2 when it validates it (``VllmConfig._validate_v2_model_runner``).
- **Each worker confirms what it built** (``confirm_plugin_drafter``), before
  the weights load: if the plugin's settings are present but the runner's
  drafter is not the plugin's, the engine fails at start; if it is, the
  worker logs a "vllm-gammatune active" line and sets
  ``vllm:gammatune_info`` on ``/metrics``.

Two parallel layouts the drafter cannot serve are refused in the front end,
before any engine process starts (``refuse_unsupported_parallelism``; the
reasons in vLLM's source: ``docs/cuda.md``, "Pipeline and data parallelism"):

- **Pipeline parallelism** > 1: vLLM builds a drafter on the last pipeline
  rank only, and the plugin's drafter and its start-up check assume every
  worker drafts.
- **Data parallelism** > 1 in lockstep (a mixture-of-experts target):
  vLLM's drafter all-reduces across the ranks in every draft pass, and the
  plugin plans each rank's passes from that rank's own requests, so the
  ranks would wait for each other forever. Each worker checks the same
  condition on the config it was built with
  (``refuse_coordinated_data_parallel``), so a path that bypasses the front
  end fails at start too.
"""

from __future__ import annotations

from typing import Any

from vllm.logger import init_logger
from vllm_gammatune.methods import GammaTuneConfigError, plugin_section

logger = init_logger(__name__)

#: The environment variable with which a user forces vLLM's runner choice.
USE_V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"


class DrafterNotActiveError(RuntimeError):
    """A worker was configured for a plugin method but built another drafter."""


def plugin_method_of(vllm_config: Any) -> str | None:
    """The plugin method an engine's config asks for, or None."""
    section = plugin_section(getattr(vllm_config, "additional_config", None))
    return (section.get("settings") or {}).get("method")


def v2_unsupported_features(original, vllm_config) -> list[str]:
    """``VllmConfig._get_v2_model_runner_unsupported_features`` naming the plugin's method."""
    unsupported = original(vllm_config)
    method = plugin_method_of(vllm_config)
    if method is not None:
        unsupported = [*unsupported, f"speculative method '{method}' (vllm-gammatune)"]
    return unsupported


def refuse_forced_v2(method: str) -> None:
    """Raise when ``VLLM_USE_V2_MODEL_RUNNER=1`` asks for V2 with a plugin method
    (called where the plugin first sees the method, before vLLM builds its config)."""
    import vllm.envs as envs

    if envs.VLLM_USE_V2_MODEL_RUNNER:
        raise _forced_v2_error(method, f"{USE_V2_ENV}=1 forces vLLM's Model Runner V2",
                               f"unset {USE_V2_ENV} (or set it to 0)")


def validate_v2_refusing_plugin_methods(original, vllm_config) -> None:
    """``VllmConfig._validate_v2_model_runner``: vLLM calls it when it chose V2;
    with a plugin method something else forced that choice, and it is refused."""
    method = plugin_method_of(vllm_config)
    if method is None:
        return original(vllm_config)
    refuse_forced_v2(method)
    raise _forced_v2_error(
        method, "this configuration requires vLLM's Model Runner V2 (HiSparse or "
        "watermarking)", "remove the feature that requires Model Runner V2")


def _forced_v2_error(method: str, cause: str, remedy: str) -> GammaTuneConfigError:
    return GammaTuneConfigError(
        f"{cause}, but speculative method {method!r} (vllm-gammatune) runs only on "
        f"vLLM's V1 model runner; {remedy}, or use method 'draft_model' for vLLM's "
        f"own fixed-K drafting on Model Runner V2"
    )


def refuse_unsupported_parallelism(method: str, target_model_config: Any,
                                   target_parallel_config: Any) -> None:
    """Raise for pipeline parallelism, and for data parallelism of an MoE target
    (module docstring), in the front end, before any engine process starts."""
    pipeline = target_parallel_config.pipeline_parallel_size
    if pipeline > 1:
        raise GammaTuneConfigError(
            f"pipeline_parallel_size={pipeline} is not allowed with speculative method "
            f"{method!r} (vllm-gammatune): vLLM builds the draft model on the last "
            f"pipeline rank only, and the plugin's drafter and its start-up check "
            f"assume that every worker drafts; allowed: pipeline_parallel_size=1 "
            f"(tensor parallelism is supported)")
    data = target_parallel_config.data_parallel_size
    if data > 1 and target_model_config.is_moe:
        raise _lockstep_data_parallel_error(
            method, f"data_parallel_size={data} with a mixture-of-experts target",
            "data_parallel_size=1 for a mixture-of-experts target (data parallelism "
            "of a dense target is allowed: its ranks are independent engines)")


def refuse_coordinated_data_parallel(method: str, vllm_config: Any) -> None:
    """Worker side: raise when this engine keeps ``data_parallel_size`` > 1, the
    condition under which vLLM's drafter synchronises the ranks in every draft pass."""
    data = vllm_config.parallel_config.data_parallel_size
    if data > 1:
        raise _lockstep_data_parallel_error(
            method, f"this engine runs data_parallel_size={data} ranks in lockstep",
            "data_parallel_size=1, or a dense target (its data-parallel ranks are "
            "independent engines)")


def _lockstep_data_parallel_error(method: str, cause: str, allowed: str) -> GammaTuneConfigError:
    return GammaTuneConfigError(
        f"{cause}, which is not allowed with speculative method {method!r} "
        f"(vllm-gammatune): vLLM's drafter synchronises the data-parallel ranks in "
        f"every draft pass (coordinate_batch_across_dp), and the plugin chooses each "
        f"rank's number of draft passes from its own requests, so the ranks would "
        f"wait for each other forever (vLLM turns its own dynamic speculative "
        f"decoding off under data parallelism for this reason); allowed: {allowed}, "
        f"or method 'draft_model' for vLLM's own fixed-K drafting")


def confirm_plugin_drafter(runner: Any, vllm_config: Any) -> str | None:
    """Raise unless ``runner`` built the plugin's drafter for a plugin method.

    Returns the confirmed method (None when the engine uses no plugin method).
    """
    method = plugin_method_of(vllm_config)
    if method is None:
        return None
    from vllm_gammatune.integration.runner_init import plugin_drafter_class

    settings = plugin_section(vllm_config.additional_config).get("settings") or {}
    expected = plugin_drafter_class(settings.get("drafter", "draft_model"))
    runner_name = f"{type(runner).__module__}.{type(runner).__qualname__}"
    drafter = getattr(runner, "drafter", None)
    if not isinstance(drafter, expected):
        built = "no drafter" if drafter is None else (
            f"drafter {type(drafter).__module__}.{type(drafter).__qualname__}")
        raise DrafterNotActiveError(
            f"vllm-gammatune: speculative method {method!r} is configured, but this "
            f"worker's model runner {runner_name} built {built}, not the plugin's "
            f"{expected.__name__}. The plugin's methods run only on vLLM's V1 "
            f"model runner (vllm.v1.worker.gpu_model_runner.GPUModelRunner and its "
            f"subclasses). Run `vllm-gammatune doctor` to see which runner this "
            f"machine gets and which vLLM internals differ."
        )
    logger.info(
        "vllm-gammatune active: speculative method %r (cap %d) on %s (vLLM's V1 "
        "model runner), drafter %s", method, drafter.settings.num_speculative_tokens,
        runner_name, type(drafter).__qualname__)
    if drafter.counters is not None:  # rank 0 only
        drafter.counters.mark_drafter_confirmed()
    return method


def load_model_confirming_drafter(original, worker, *args, **kwargs):
    """``Worker.load_model``: refuse lockstep data parallelism and confirm the
    drafter, before the weights load."""
    method = plugin_method_of(worker.vllm_config)
    if method is not None:
        refuse_coordinated_data_parallel(method, worker.vllm_config)
    confirm_plugin_drafter(getattr(worker, "model_runner", None), worker.vllm_config)
    return original(worker, *args, **kwargs)
