"""``python -m gammatune_tools.model_prep``: prepares the pair, prints where it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from model_prep_fakes import write_tokenizer_dir

import gammatune_tools.model_prep as mp
from gammatune_tools.model_prep.__main__ import main
from gammatune_tools.model_prep.cache import FORMAT_VERSION, HF_DIR_NAME, MARKER_NAME
from gammatune_tools.model_prep.specs import DEFAULT_PAIR


def _prepared_cache(cache: Path, vocabs: list[dict[str, int]]) -> list[Path]:
    """A cache in which the default pair is already converted (marker and all)."""
    dirs = []
    for spec, vocab in zip(DEFAULT_PAIR, vocabs):
        work = cache / spec.key
        work.mkdir(parents=True)
        dirs.append(write_tokenizer_dir(work / HF_DIR_NAME, vocab))
        (work / MARKER_NAME).write_text(json.dumps({"format": FORMAT_VERSION, "sha256": spec.sha256}))
    return dirs


def test_main_prints_the_prepared_pair(tmp_path, capsys):
    target, draft = _prepared_cache(tmp_path, [{"a": 0}, {"a": 0}])
    assert main(["--cache-dir", str(tmp_path), "--no-progress"]) == 0
    assert capsys.readouterr().out == f"target: {target}\ndraft: {draft}\n"


def test_main_reports_a_preparation_error(tmp_path, capsys):
    _prepared_cache(tmp_path, [{"a": 0}, {"a": 1}])
    assert main(["--cache-dir", str(tmp_path), "--no-progress"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: tokenizers differ")


def test_the_module_runs_as_a_command(tmp_path):
    _prepared_cache(tmp_path, [{"a": 0}, {"a": 0}])
    root = Path(mp.__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "gammatune_tools.model_prep", "--cache-dir", str(tmp_path),
                           "--keep-gguf", "--no-progress"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"target: {tmp_path / DEFAULT_PAIR[0].key / HF_DIR_NAME}"
