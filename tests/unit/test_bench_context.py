"""gammatune_tools.bench.context: what a run keeps of its machine and source."""

import argparse
import json

from gammatune_tools.bench import context


def test_the_machine_and_the_source_revision_are_read():
    assert context.cpu_model()
    assert set(context.cpu_isa()) <= set(context.ISA_FLAGS)
    commit = context.git_commit()
    assert commit is None or len(commit.removesuffix("-dirty")) == 40


def test_a_context_is_kept_once_per_run_and_read_back(tmp_path):
    assert context.read_context(tmp_path) == {}
    context.write_context(tmp_path, {"date": "d1", "args": {"k": "2"}})
    context.write_context(tmp_path, {"date": "d2", "args": {"k": "4"}})
    assert context.read_context(tmp_path) == {"date": "d2", "args": {"k": "4"}}
    lines = (tmp_path / "contexts.jsonl").read_text().splitlines()
    assert [json.loads(line)["date"] for line in lines] == ["d1", "d2"]


def test_run_context_names_versions_models_and_arguments(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-1")
    found = context.run_context(argparse.Namespace(k="3"), "/target", "/draft")
    assert (found["target"], found["draft"], found["args"]) == ("/target", "/draft", {"k": "3"})
    assert found["omp_threads_bind"] == "0-1"
    assert found["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert found["vllm"] and found["torch"] and found["vllm_gammatune"]
