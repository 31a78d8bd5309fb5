"""A fake package index and a fake conversion, for the model_prep unit tests.

No network, no real model: the "parts" are tiny wheels built in a tmp dir, handed
to the code under test through its ``fetch_part`` and ``convert`` injection points.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

from gammatune_tools.model_prep.errors import PartDownloadError
from gammatune_tools.model_prep.specs import ModelSpec


def make_wheel(path: Path, dist_name: str, version: str, files: dict[str, bytes]) -> Path:
    """Write a minimal wheel whose import dir holds data/<name> for every entry of files."""
    imp = ModelSpec.import_dir(dist_name)
    whl = path / f"{imp}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{imp}/__init__.py", "")
        # Written in an order that is neither numeric nor lexical on purpose.
        for name in sorted(files, reverse=True):
            zf.writestr(f"{imp}/data/{name}", files[name])
        zf.writestr(f"{imp}-{version}.dist-info/METADATA", f"Name: {dist_name}\nVersion: {version}\n")
    return whl


class FakeIndex:
    """A fake package index: builds the part wheels and counts fetches."""

    def __init__(self, root: Path, prefix: str, contents: list[dict[str, bytes]], version: str = "1.0"):
        self.root = root
        self.version = version
        self.names = [f"{prefix}{i}" for i in range(1, len(contents) + 1)]
        self.contents = dict(zip(self.names, contents))
        self.calls: list[str] = []

    def fetch(self, dist_name: str, version: str, dest: Path) -> Path:
        assert version == self.version
        self.calls.append(dist_name)
        return make_wheel(dest, dist_name, version, self.contents[dist_name])

    def fetch_failing_on(self, failing: str):
        """A fetch that loses the network on part ``failing`` (and fetches the others)."""
        def fetch(dist_name: str, version: str, dest: Path) -> Path:
            if dist_name == failing:
                raise PartDownloadError("network went away")
            return self.fetch(dist_name, version, dest)
        return fetch

    def spec(self, name: str, role: str, sha256: str | None = None, size: int | None = None) -> ModelSpec:
        blob = self.expected_bytes()
        return ModelSpec(
            name=name,
            role=role,
            packages=tuple((n, self.version) for n in self.names),
            sha256=sha256 or hashlib.sha256(blob).hexdigest(),
            size=len(blob) if size is None else size,
        )

    def expected_bytes(self) -> bytes:
        out = b""
        for n in self.names:  # part 1..N, each part's files in numeric order
            files = self.contents[n]
            for fname in sorted(files, key=lambda f: int("".join(c for c in f if c.isdigit()))):
                out += files[fname]
        return out


def fake_convert(record: list | None = None):
    """A conversion that copies the GGUF's bytes into weights.bin and writes a tiny tokenizer."""
    def convert(gguf: Path, out_dir: Path, spec: ModelSpec, progress: bool) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        data = Path(gguf).read_bytes()
        (out_dir / "config.json").write_text(json.dumps({"model_type": "fake", "name": spec.name}))
        (out_dir / "weights.bin").write_bytes(data)
        (out_dir / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": []}))
        if record is not None:
            record.append(spec.name)
    return convert


def fake_pair(tmp_path: Path) -> tuple[FakeIndex, FakeIndex]:
    """A target index of 12 one-file parts and a draft index of 2 parts, one with 3 files."""
    # 12 parts so that lexical ordering (part1, part10, part11, part12, part2, ...) would differ.
    target_idx = FakeIndex(tmp_path / "idx_t", "fake-target-part", [
        {f"part{i:02d}.bin": f"T{i}|".encode() * 3} for i in range(1, 13)
    ])
    # Several data files in one part, named with unpadded numbers (2 < 10 numerically).
    draft_idx = FakeIndex(tmp_path / "idx_d", "fake-draft-part", [
        {"chunk2.bin": b"d1-b|", "chunk10.bin": b"d1-c|", "chunk1.bin": b"d1-a|"},
        {"chunk1.bin": b"d2-a|"},
    ])
    return target_idx, draft_idx


def write_tokenizer_dir(d: Path, vocab: dict[str, int], added: list[tuple[str, int]] = ()) -> Path:
    """A model directory holding a config.json and a tokenizer.json of this vocabulary."""
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": vocab},
        "added_tokens": [{"content": c, "id": i} for c, i in added],
    }))
    return d
