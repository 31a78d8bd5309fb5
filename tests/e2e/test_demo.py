"""The README's main command: ``examples/demo.py``, run on the tiny models.

The demo is what a new user runs first; these tests keep it working (it is
otherwise only run by hand on the real pair): the quick plan announced with
its duration, one progress bar and no vLLM logs, the machine's facts, one
table per batch size with its one-line verdict, ``--verbose`` bringing the
logs back, and arguments refused by name before any engine starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEMO = os.path.join(ROOT, "examples", "demo.py")

#: a vLLM log line at INFO level, e.g. "(EngineCore pid=1) INFO 11-24 19:27:01 [core.py:97] ..."
VLLM_INFO = re.compile(r"\bINFO \d\d-\d\d \d\d:\d\d:\d\d ")


def run_demo(*args: str, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    # this checkout's package, not another installed copy
    environ = {**os.environ, "PYTHONPATH": ROOT, **env}
    return subprocess.run([sys.executable, DEMO, *args], capture_output=True, text=True,
                          timeout=timeout, env=environ)


def tiny_args(tiny) -> list[str]:
    return ["--target", tiny["target"], "--draft", tiny["draft_identical"], "--dtype",
            "float32", "--max-model-len", "1024", "--max-tokens", "8"]


def table_rows(stdout: str) -> dict[int, dict[str, list[str]]]:
    """batch size -> method -> the row's five numbers (tok/s, ratio, target
    passes/tok, draft fwd/tok, accepted length)."""
    tables: dict[int, dict[str, list[str]]] = {}
    current = None
    row = re.compile(r"(\w+(?: K=\d+)?)\s+([\d.]+)\s+([\d.]+)x\s+([\d.]+)\s+([\d.-]+)\s+([\d.-]+)")
    for line in stdout.splitlines():
        heading = re.fullmatch(r"batch (\d+)", line.strip())
        if heading:
            current = tables.setdefault(int(heading.group(1)), {})
        elif current is not None and line and not line.startswith(("method", "-")):
            match = row.fullmatch(line.strip())
            if match:
                current[match.group(1)] = list(match.groups()[1:])
            else:
                current = None
    return tables


def verdicts(stdout: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0)
            for m in re.finditer(r"^Fastest at batch (\d+): .*\.$", stdout, re.MULTILINE)}


def test_quick_plan_is_quiet_and_ends_with_a_verdict(tiny):
    # the default plan (the engine core in the demo's process, as conftest
    # sets: vLLM's level is an environment variable either way)
    result = run_demo(*tiny_args(tiny))
    assert result.returncode == 0, result.stderr[-3000:]
    out, err = result.stdout, result.stderr
    first = out.splitlines()[0]
    assert first.startswith("4 engines (no_spec, vllm_draft_model, gammatune, gammatune_cost)")
    assert re.search(r"About \d+ minutes", first), first
    # quiet: no vLLM log at INFO level anywhere, no weight-loading bar; one
    # progress bar over the engines, which reaches its end
    assert not VLLM_INFO.search(out) and not VLLM_INFO.search(err), \
        [line for line in (out + err).splitlines() if VLLM_INFO.search(line)][:5]
    assert "Loading safetensors" not in err
    assert re.search(r"engines: 100%.*4/4", err), err[-2000:]
    # machine facts above the table
    facts = out.index("threads bound: VLLM_CPU_OMP_THREADS_BIND=0-1")
    assert facts < out.index("\nbatch 1\n")
    tables = table_rows(out)
    assert sorted(tables) == [1], out  # batch 1 only
    rows = tables[1]
    assert sorted(rows) == ["gammatune", "gammatune_cost", "no_spec", "vllm_draft_model K=2"], out
    tok_s, ratio, passes, forwards, accepted = rows["no_spec"]
    assert (ratio, passes, forwards, accepted) == ("1.00", "1.00", "0.00", "-")
    # a draft equal to the target: K=2 is always accepted, 3 tokens a pass;
    # counted exactly, a request of 8 tokens takes 4 passes (its prompt's 1
    # token, then 3, 3 and the 1 that max_tokens leaves: 4 tokens accepted
    # within it, in 3 verifications) and 2 draft forwards in each
    _, _, passes, forwards, accepted = rows["vllm_draft_model K=2"]
    assert (passes, forwards, accepted) == ("0.50", "1.00", "2.33"), rows
    # the verdict: one line under the table, naming the fastest row and
    # what gammatune_cost chose
    line = verdicts(out)[1]
    assert out.index(line) > out.index("vllm_draft_model K=2")
    fastest = max(rows, key=lambda m: float(rows[m][0]))
    assert line.startswith(f"Fastest at batch 1: {fastest} ({float(rows[fastest][1]):.2f}x")
    assert re.search(r"drafting paid|no draft length paid|drafting about broke even", line)
    assert "gammatune_cost d" in line  # "did not draft ..." or "drafted on ..."


def test_verbose_run_shows_logs_and_a_verdict_per_batch_size(tiny):
    result = run_demo(*tiny_args(tiny), "--methods", "no_spec,gammatune_cost",
                      "--batch-sizes", "1,2", "--verbose")
    assert result.returncode == 0, result.stderr[-3000:]
    # the quiet test's check finds vLLM's logs when they are on
    assert VLLM_INFO.search(result.stdout + result.stderr)
    tables = table_rows(result.stdout)
    assert sorted(tables) == [1, 2], result.stdout
    for batch_size, rows in tables.items():
        assert sorted(rows) == ["gammatune_cost", "no_spec"], rows
        assert rows["no_spec"][2] == "1.00"
    assert sorted(verdicts(result.stdout)) == [1, 2], result.stdout


def test_demo_refuses_unknown_method_before_starting_an_engine():
    result = run_demo("--methods", "no_spec,gamatune", timeout=120)
    assert result.returncode == 2
    assert "--methods" in result.stderr and "gamatune" in result.stderr
    assert "gammatune_cost" in result.stderr  # the allowed values are listed


def test_demo_refuses_bad_batch_sizes_and_token_counts():
    for value in ("0", "1,x", ""):
        result = run_demo("--batch-sizes", value, timeout=120)
        assert result.returncode == 2, value
        assert "--batch-sizes" in result.stderr, result.stderr
    result = run_demo("--max-tokens", "0", timeout=120)
    assert result.returncode == 2
    assert "--max-tokens" in result.stderr and "got 0" in result.stderr
