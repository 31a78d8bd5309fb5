"""A run's context: versions, models, machine, thread binding, date, source
revision and arguments, kept beside its rows (``context.json``)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from gammatune_tools.bench.records import append_row, read_jsonl

#: every run that added cells to a folder, one row each (a resumed run adds one)
CONTEXTS_FILE = "contexts.jsonl"

#: the checkout the harness runs from (its revision goes into every context);
#: this file is tools/gammatune_tools/bench/context.py in it
REPO = Path(__file__).resolve().parents[3]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: the instruction-set extensions that decide which CPU kernels vLLM and oneDNN use
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_isa() -> list[str]:
    """The CPU's vector extensions among ``ISA_FLAGS`` (from /proc/cpuinfo's flags)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                return [flag for flag in ISA_FLAGS if flag in flags]
    except OSError:
        pass
    return []


def git_commit() -> str | None:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty.strip() else "")) or None


#: the plugin's package, whose committed tree names the code a number is of
PLUGIN = "vllm_gammatune"


def git(*args: str, repo: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


def plugin_tree(repo: Path = REPO) -> str:
    """The committed tree of the plugin's code: it changes with the plugin
    and with nothing else (docs, harness, results)."""
    return git("rev-parse", f"HEAD:{PLUGIN}", repo=repo)


def plugin_changed(repo: Path = REPO) -> list[str]:
    """The plugin's files that differ from HEAD (the tree would not name them)."""
    return git("status", "--porcelain", "--", PLUGIN, repo=repo).splitlines()


def run_context(args, target: str, draft: str) -> dict:
    """Versions, models, machine, thread binding, date, git commit, arguments."""
    import torch
    import vllm

    import vllm_gammatune

    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "vllm": vllm.__version__,
        "vllm_gammatune": vllm_gammatune.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "target": target,
        "draft": draft,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "cpu_count": os.cpu_count(),
        "omp_threads_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(("VLLM_CPU_", "OMP_", "LD_PRELOAD", "VLLM_GAMMATUNE_"))},
        "args": vars(args),
    }


def write_context(out: Path, context: dict) -> None:
    """``context.json`` (this run) and ``contexts.jsonl`` (every run that added cells)."""
    (out / "context.json").write_text(json.dumps(context, indent=2))
    append_row(out / CONTEXTS_FILE, context)


def read_contexts(directory: Path) -> list[dict]:
    """Every run that added cells to a folder (``contexts.jsonl``; [] when none)."""
    return read_jsonl(directory / CONTEXTS_FILE)


def read_context(directory: Path) -> dict:
    """A run folder's ``context.json`` ({} when there is none)."""
    path = directory / "context.json"
    return json.loads(path.read_text()) if path.exists() else {}
