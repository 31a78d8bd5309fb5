"""gammatune_tools.bench.serve_runs: served cells and the interleaved schedules,
with stand-in servers and a stand-in client."""

import argparse
import json
import os
import sys
from types import SimpleNamespace

from gammatune_tools.bench import serve_runs


def test_fresh_servers_keeps_one_server_alive_and_resumes(tmp_path, monkeypatch):
    """``serve_bench --fresh-servers``: one server at a time, the first rotating by
    round, a warm-up client run before each measured cell, done cells skipped."""
    events, alive = [], set()

    class FakeServer:
        def __init__(self, slug):
            self.slug = slug

        def stop(self):
            alive.discard(self.slug)
            events.append(("stop", self.slug))

    def fake_start(args, target, spec, env, out, logs, slug):
        assert not alive, f"{slug} started while {alive} still up"
        assert logs == tmp_path / "logs"
        alive.add(slug)
        events.append(("start", slug))
        return FakeServer(slug)

    run_args = argparse.Namespace(k="8", rounds=2, warmup_cell=True, baseline=None)

    class FakeCell(serve_runs.Cell):  # the real run_round; no client, no server
        target, env, args = "t", {}, run_args
        results, logs = tmp_path / "serve_cells.jsonl", tmp_path / "logs"

        def __init__(self):
            pass

        def warm(self, server, concurrency, temperature, name):
            events.append(("warm", server.slug, concurrency))

        def run(self, server, key, method, k, concurrency, temperature, spec, variant, name,
                **extra):
            events.append(("run", server.slug, concurrency))
            serve_runs.append_row(self.results, {"key": key, **extra})

    monkeypatch.setattr(serve_runs, "start_server", fake_start)
    monkeypatch.setattr(serve_runs, "write_served_summary",
                        lambda *a: tmp_path / "serve_paired.md")
    # round 0 of no_spec at concurrency 4 already measured (a resumed run)
    FakeCell.results.write_text(json.dumps(
        {"key": "no_spec|k=8|c=4|t=0.0|round=0"}) + "\n")
    serve_runs.run_fresh_servers(run_args, ["no_spec", "cost"], lambda m, k: None, [4, 16],
                                 [0.0], FakeCell(), tmp_path)
    assert events == [
        ("start", "no_spec_r0"), ("warm", "no_spec_r0", 16), ("run", "no_spec_r0", 16),
        ("stop", "no_spec_r0"),
        ("start", "cost_r0"), ("warm", "cost_r0", 4), ("run", "cost_r0", 4),
        ("warm", "cost_r0", 16), ("run", "cost_r0", 16), ("stop", "cost_r0"),
        ("start", "cost_r1"), ("warm", "cost_r1", 4), ("run", "cost_r1", 4),
        ("warm", "cost_r1", 16), ("run", "cost_r1", 16), ("stop", "cost_r1"),
        ("start", "no_spec_r1"), ("warm", "no_spec_r1", 4), ("run", "no_spec_r1", 4),
        ("warm", "no_spec_r1", 16), ("run", "no_spec_r1", 16), ("stop", "no_spec_r1"),
    ]
    rows = [json.loads(line) for line in FakeCell.results.read_text().splitlines()]
    assert [(r.get("round"), r.get("position")) for r in rows[1:]] == [
        (0, 0), (0, 1), (0, 1), (1, 0), (1, 0), (1, 1), (1, 1)]
    events.clear()  # everything done: nothing starts again
    serve_runs.run_fresh_servers(run_args, ["no_spec", "cost"], lambda m, k: None, [4, 16],
                                 [0.0], FakeCell(), tmp_path)
    assert events == []


def test_a_cell_keeps_its_row_in_the_results_and_the_client_files_in_the_logs(
        tmp_path, monkeypatch):
    """The client's output and result file go to the logs folder; the results
    folder gets the row, with the client's numbers and the /metrics difference."""
    out, logs = tmp_path / "out", serve_runs.logs_folder(str(tmp_path / "logs"))
    out.mkdir()
    (logs / "client").mkdir()
    pages = iter(["vllm:spec_decode_num_drafts_total 5.0\n",
                  "vllm:spec_decode_num_drafts_total 25.0\n"
                  "vllm:spec_decode_num_accepted_tokens_total 20.0\n"
                  "vllm:time_to_first_token_seconds_count 2.0\n"
                  "vllm:inter_token_latency_seconds_count 16.0\n"])
    monkeypatch.setattr(serve_runs, "http_get", lambda url: next(pages))

    def client(args, target, port, dataset, num_prompts, concurrency, temperature,
               result_dir, result_name):
        result = {"total_output_tokens": 40, "output_throughput": 4.0,
                  "median_tpot_ms": 12.5, "completed": 2}
        return [sys.executable, "-c",
                f"import pathlib; pathlib.Path({str(result_dir / result_name)!r})"
                f".write_text({json.dumps(result)!r}); print('client output')"]

    monkeypatch.setattr(serve_runs, "client_command", client)
    args = argparse.Namespace(max_tokens=20, dataset="specbench")
    cell = serve_runs.Cell(args, "t", out / "prompts.json", 2, dict(os.environ),
                           out / "serve_cells.jsonl", logs, "today")
    server = SimpleNamespace(base="http://x", port=1, proc=SimpleNamespace(pid=os.getpid()))
    row = cell.run(server, "key", "gammatune", 3, 4, 0.0, {"method": "gammatune"}, {},
                   "gammatune_c4.json")
    assert sorted(p.name for p in out.iterdir()) == ["serve_cells.jsonl"]
    assert (logs / "gammatune_c4.json.client.log").read_text().strip() == "client output"
    assert (logs / "client" / "gammatune_c4.json").exists()
    assert row["output_throughput"] == 4.0 and row["completed"] == 2
    assert row["metrics_delta"] == {"drafts": 20.0, "accepted": 20.0, "target_passes": 18.0}
    # 40 tokens in 18 passes: 22 accepted within max_tokens (vLLM counted 20 here)
    assert row["mean_accepted_length"] == 1 + 22 / 20
    assert row["target_passes_per_token"] == 18 / 40
    assert row["peak_rss_gib"] > 0


def test_without_logs_a_new_temporary_folder_is_used(tmp_path):
    first, second = serve_runs.logs_folder(None), serve_runs.logs_folder(None)
    try:
        assert first.is_dir() and second.is_dir() and first != second
    finally:
        first.rmdir()
        second.rmdir()
    nested = serve_runs.logs_folder(str(tmp_path / "a" / "b"))
    assert nested.is_dir()
