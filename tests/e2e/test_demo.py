"""The README's main command: ``examples/demo.py``, run on the tiny models.

The demo is what a new user runs first; these tests keep it working (it is
otherwise only run by hand on the real pair): every method's row at every
batch size, greedy text equal to no speculation's in fp32, and arguments
refused by name before any engine starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "demo.py")


def run_demo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, DEMO, *args], capture_output=True, text=True,
                          timeout=timeout)


def table_rows(stdout: str) -> dict[int, dict[str, list[str]]]:
    """batch size -> method -> the row's cells after the method name."""
    tables: dict[int, dict[str, list[str]]] = {}
    current = None
    for line in stdout.splitlines():
        heading = re.fullmatch(r"batch (\d+)", line.strip())
        if heading:
            current = tables.setdefault(int(heading.group(1)), {})
        elif current is not None and line and not line.startswith(("method", "-")):
            cells = line.split()
            if len(cells) >= 7 and re.fullmatch(r"\d+/\d+", cells[-1]):
                current[cells[0]] = cells[1:]
            else:
                current = None
    return tables


def test_demo_compares_methods_at_each_batch_size(tiny):
    result = run_demo("--target", tiny["target"], "--draft", tiny["draft_identical"],
                      "--dtype", "float32", "--max-model-len", "1024", "--max-tokens", "8",
                      "--k", "2", "--methods", "no_spec,vllm_draft_model,gammatune_cost",
                      "--batch-sizes", "1,2")
    assert result.returncode == 0, result.stderr[-3000:]
    tables = table_rows(result.stdout)
    assert sorted(tables) == [1, 2], result.stdout
    for batch_size, rows in tables.items():
        assert sorted(rows) == ["gammatune_cost", "no_spec", "vllm_draft_model"], rows
        for method, cells in rows.items():
            # fp32 greedy: every method's text equals no speculation's
            assert cells[-1] == "4/4", (batch_size, method, result.stdout)
        # target passes per generated token: 1 without speculation; with a
        # draft equal to the target, K=2 is always accepted: 3 tokens a pass
        assert float(rows["no_spec"][-2]) == 1.0, rows["no_spec"]
        assert float(rows["vllm_draft_model"][-2]) < 0.5, rows["vllm_draft_model"]


def test_demo_refuses_unknown_method_before_starting_an_engine():
    result = run_demo("--methods", "no_spec,gamatune", timeout=120)
    assert result.returncode == 2
    assert "--methods" in result.stderr and "gamatune" in result.stderr
    assert "gammatune_cost" in result.stderr  # the allowed values are listed


def test_demo_refuses_bad_batch_sizes():
    for value in ("0", "1,x", ""):
        result = run_demo("--batch-sizes", value, timeout=120)
        assert result.returncode == 2, value
        assert "--batch-sizes" in result.stderr, result.stderr
