"""gammatune_tools.bench.serving: the server and client command lines, a server
process's lifetime and memory (a stand-in process, no vLLM server)."""

import argparse
import json
import os
import sys
import time

import pytest

from gammatune_tools.bench import serving


def args(**overrides):
    values = dict(max_model_len=1024, dtype="float32", concurrency="1,4", max_tokens=16,
                  no_enforce_eager=False, server_arg=["--x=1"], client_arg=["--y"])
    return argparse.Namespace(**{**values, **overrides})


def test_serve_command_carries_the_config_and_the_largest_concurrency():
    command = serving.serve_command(args(), "/t", {"method": "gammatune"}, 8000)
    assert command[-1] == "--x=1" and "--enforce-eager" in command
    assert command[command.index("--max-num-seqs") + 1] == "4"
    assert json.loads(command[command.index("--speculative-config") + 1]) == \
        {"method": "gammatune"}
    plain = serving.serve_command(args(no_enforce_eager=True), "/t", None, 8000)
    assert "--speculative-config" not in plain and "--enforce-eager" not in plain


def test_client_command_sends_every_prompt_at_one_concurrency(tmp_path):
    command = serving.client_command(args(), "/t", 8000, tmp_path / "p.json", 26, 4, 0.7,
                                     tmp_path / "client", "r.json")
    option = {name: command[command.index(name) + 1]
              for name in ("--num-prompts", "--max-concurrency", "--temperature",
                           "--sharegpt-output-len", "--result-dir", "--result-filename")}
    assert option == {"--num-prompts": "26", "--max-concurrency": "4", "--temperature": "0.7",
                      "--sharegpt-output-len": "16", "--result-dir": str(tmp_path / "client"),
                      "--result-filename": "r.json"}
    assert "--ignore-eos" in command and command[-1] == "--y"


def test_a_server_process_is_logged_stopped_and_its_exit_reported(tmp_path):
    log = tmp_path / "server.log"
    server = serving.Server([sys.executable, "-c", "print('up', flush=True); "
                             "import time; time.sleep(60)"], dict(os.environ), log,
                            serving.free_port())
    try:
        with serving.PeakRss(server.proc.pid, interval=0.05) as rss:
            time.sleep(0.2)
        assert rss.peak > 0
    finally:
        server.stop()
    assert server.proc.poll() is not None
    assert log.read_text().splitlines()[1] == "up"  # after the command line
    gone = serving.Server([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ),
                          tmp_path / "gone.log", serving.free_port())
    gone.proc.wait()
    with pytest.raises(RuntimeError, match="server exited 3"):
        gone.wait_healthy(gone.base, timeout=30)
    assert serving.tree_rss_bytes(gone.proc.pid) == 0
