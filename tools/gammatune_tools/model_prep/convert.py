"""Dequantise a verified GGUF into a bf16 Hugging Face checkpoint.

``torch`` and ``transformers`` (plus ``gguf`` and ``accelerate``) are imported only
when a conversion actually runs, so the rest of the package loads without them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from pathlib import Path

from .errors import ModelPrepError
from .progress import progress_bar
from .specs import ModelSpec

logger = logging.getLogger(__name__)


def convert_gguf_to_hf(gguf_path: Path, out_dir: Path, spec: ModelSpec | None = None, progress: bool = True) -> None:
    """Dequantise a GGUF into a bf16 Hugging Face checkpoint in ``out_dir``.

    Writes safetensors weights, config.json (without a quantization config, with a
    top-level ``rope_theta``), generation config, tokenizer files and the chat
    template.  Needs ``torch``, ``transformers``, ``accelerate`` and ``gguf``.
    """
    gguf_path = Path(gguf_path)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ModelPrepError(f"converting a GGUF needs torch and transformers: {exc}") from exc
    for dep in ("gguf", "accelerate"):
        try:
            __import__(dep)
        except ImportError as exc:
            raise ModelPrepError(
                f"converting a GGUF needs the '{dep}' package: pip install {dep}"
            ) from exc

    name = spec.name if spec else gguf_path.name
    role = spec.role if spec else "model"
    load_kwargs: dict = {"gguf_file": gguf_path.name}
    major_minor = tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    load_kwargs["dtype" if major_minor >= (4, 56) else "torch_dtype"] = torch.bfloat16
    try:
        from transformers import GgufConfig
    except ImportError:
        GgufConfig = None  # older transformers dequantise a gguf_file by default
    if GgufConfig is not None:
        try:
            load_kwargs["quantization_config"] = GgufConfig(dequantize=True)
        except TypeError:
            pass

    bar = progress_bar(progress, total=4, desc=f"convert {role}", unit="step")
    try:
        bar.set_postfix_str("load + dequantise")
        t0 = time.monotonic()
        model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), **load_kwargs)
        logger.info("%s: loaded and dequantised in %.1f s", name, time.monotonic() - t0)
        bar.update(1)

        # Drop every trace of the GGUF quantizer: the weights are plain bf16 now.
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer = None
        for attr in ("is_quantized", "quantization_method"):
            if getattr(model, attr, None):
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(model, attr, False if attr == "is_quantized" else None)
        if hasattr(model.config, "quantization_config"):
            with contextlib.suppress(AttributeError):
                delattr(model.config, "quantization_config")

        bar.set_postfix_str("save weights")
        model.save_pretrained(str(out_dir))
        del model
        bar.update(1)

        bar.set_postfix_str("tokenizer")
        tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        tok.save_pretrained(str(out_dir))
        chat_template = getattr(tok, "chat_template", None)
        bar.update(1)

        bar.set_postfix_str("fix configs")
        fix_configs(out_dir, spec, chat_template)
        bar.update(1)
    finally:
        bar.close()


def fix_configs(out_dir: Path, spec: ModelSpec | None, chat_template) -> None:
    """Make a saved checkpoint loadable as plain bf16 by vLLM and older transformers.

    config.json loses its quantization config and gains a top-level ``rope_theta``;
    a ``tokenizer_class`` of "TokenizersBackend" becomes the spec's; the chat
    template is written to chat_template.jinja when it was saved nowhere.
    """
    cfg_path = out_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("quantization_config", None)
    if "rope_theta" not in cfg:
        theta = (cfg.get("rope_parameters") or {}).get("rope_theta")
        if theta is None and spec is not None:
            theta = spec.rope_theta
        if theta is not None:
            cfg["rope_theta"] = theta
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

    tc_path = out_dir / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text()) if tc_path.is_file() else {}
    changed = False
    if spec is not None and spec.tokenizer_class and tc.get("tokenizer_class") == "TokenizersBackend":
        tc["tokenizer_class"] = spec.tokenizer_class
        changed = True
    if changed:
        tc_path.write_text(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")

    # save_pretrained normally writes the chat template (chat_template.jinja in
    # transformers>=4.50, tokenizer_config.json before); make sure it is saved somewhere.
    if isinstance(chat_template, str) and chat_template:
        jinja = out_dir / "chat_template.jinja"
        if not jinja.is_file() and "chat_template" not in tc:
            jinja.write_text(chat_template)
