"""Turning a plugin method into the config of vLLM's method underneath (front-end process).

That method is ``draft_model``, or ``ngram`` for a method that drives the
n-gram drafter (``methods.drafters``).

Called in place of ``EngineArgs.create_speculative_config`` (see
``patches/arg_utils.py``), before vLLM builds ``SpeculativeConfig``, so a bad
value fails at ``LLM(...)`` / ``vllm serve`` start with an error naming the
field, and never inside the engine process.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vllm.logger import init_logger
from vllm_gammatune.compat import pin
from vllm_gammatune.methods import (
    ADDITIONAL_CONFIG_KEY,
    GammaTuneConfigError,
    is_plugin_method,
    split_speculative_config,
)
from vllm_gammatune.integration.runner_choice import (
    refuse_forced_v2,
    refuse_unsupported_parallelism,
)
from vllm_gammatune.telemetry.metrics import StepCounters
from vllm_gammatune.telemetry.prometheus import forget_engine_counters, register_engine_counters

logger = init_logger(__name__)

_CLI_SHORTHANDS = (
    ("--spec-method", "spec_method", "method"),
    ("--spec-model", "spec_model", "model"),
    ("--spec-tokens", "spec_tokens", "num_speculative_tokens"),
)


def requested_plugin_method(engine_args) -> str | None:
    spec = engine_args.speculative_config or {}
    method = spec.get("method", getattr(engine_args, "spec_method", None))
    return method if is_plugin_method(method) else None


def _merged_user_config(engine_args) -> dict[str, Any]:
    """The user's dict plus the --spec-* shorthands, as vLLM would merge them."""
    merged = dict(engine_args.speculative_config or {})
    for flag, attr, key in _CLI_SHORTHANDS:
        value = getattr(engine_args, attr, None)
        if value is None:
            continue
        if key in merged and merged[key] != value:
            raise GammaTuneConfigError(
                f"{flag} and --speculative-config['{key}'] are mutually exclusive"
            )
        merged[key] = value
    return merged


def _vllm_speculative_keys() -> frozenset[str]:
    from vllm.config import SpeculativeConfig

    return frozenset(
        f.name
        for f in dataclasses.fields(SpeculativeConfig)
        if f.init and f.name not in ("target_model_config", "target_parallel_config")
    )


def create_speculative_config(
    original, engine_args, target_model_config, target_parallel_config
):
    """``EngineArgs.create_speculative_config`` that understands plugin methods."""
    method = requested_plugin_method(engine_args)
    if method is None:
        forget_engine_counters()
        return original(engine_args, target_model_config, target_parallel_config)
    pin.check_vllm_version()
    refuse_forced_v2(method)
    refuse_unsupported_parallelism(method, target_model_config, target_parallel_config)

    user_config = engine_args.speculative_config
    user_shorthands = {a: getattr(engine_args, a, None) for _, a, _ in _CLI_SHORTHANDS}
    from vllm.platforms import current_platform

    settings, vllm_method_config = split_speculative_config(
        _merged_user_config(engine_args), _vllm_speculative_keys(),
        on_cuda=current_platform.is_cuda())

    if settings.is_lossy:
        # AdaSD's relaxed verification wraps vLLM's standard rejection sampler
        # only; vLLM's other verifiers (synthetic acceptance, block
        # verification, 0.33's lossy "fly") would bypass or contradict it.
        rejection_method = vllm_method_config.get("rejection_sample_method", "standard")
        if rejection_method != "standard":
            raise GammaTuneConfigError(
                f"speculative_config['rejection_sample_method']={rejection_method!r} "
                f"is not allowed with method {method!r}: its relaxed verification "
                f"replaces vLLM's standard rejection sampler; allowed: 'standard'"
            )
    if engine_args.async_scheduling:
        raise GammaTuneConfigError(
            f"async_scheduling=True is not allowed with speculative method "
            f"{method!r}: per-request draft lengths need synchronous scheduling "
            "in vLLM 0.32; leave async_scheduling unset or set it to False"
        )
    engine_args.async_scheduling = False

    counters = StepCounters.create(settings.num_speculative_tokens)
    register_engine_counters(counters, str(engine_args.served_model_name or engine_args.model),
                             method, settings.drafter)
    engine_args.additional_config = {
        **(engine_args.additional_config or {}),
        ADDITIONAL_CONFIG_KEY: {
            "settings": settings.to_dict(),
            "metrics_path": counters.path,
        },
    }

    engine_args.speculative_config = vllm_method_config
    for _, attr, _ in _CLI_SHORTHANDS:
        setattr(engine_args, attr, None)
    try:
        speculative_config = original(
            engine_args, target_model_config, target_parallel_config
        )
    except (ValueError, TypeError) as exc:
        raise GammaTuneConfigError(
            f"speculative_config for method {method!r} (drafter "
            f"{settings.drafter!r}, model={vllm_method_config.get('model')!r}) was "
            f"refused by vLLM: {exc}"
        ) from exc
    finally:
        # Leave the user's arguments as they were (EngineArgs may be reused).
        engine_args.speculative_config = user_config
        for attr, value in user_shorthands.items():
            setattr(engine_args, attr, value)

    if vllm_method_config["method"] == "draft_model":
        target_vocab = target_model_config.get_vocab_size()
        draft_vocab = speculative_config.draft_model_config.get_vocab_size()
        if target_vocab != draft_vocab:
            raise GammaTuneConfigError(
                f"speculative_config['model']={vllm_method_config.get('model')!r} has "
                f"vocabulary size {draft_vocab}; method {method!r} needs a draft with "
                f"the target's vocabulary (size {target_vocab})"
            )
    if settings.is_lossy:
        logger.warning_once(
            "vllm-gammatune: speculative method %r is LOSSY: it may accept draft "
            "tokens the target would not emit, so outputs may differ from the "
            "target model's.",
            method,
        )
    logger.info(
        "vllm-gammatune: speculative method %r configured on vLLM's %s "
        "machinery (cap %d, async scheduling off); each worker confirms its "
        "drafter at start ('vllm-gammatune active').",
        method,
        vllm_method_config["method"],
        settings.num_speculative_tokens,
    )
    return speculative_config
