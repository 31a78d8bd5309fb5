"""``python -m benchmarks.reproduce``: names, the quick plan, and the stored configs (no engine)."""

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import reproduce
from gammatune_tools.bench.methods import METHOD_NAMES

REPO = Path(__file__).resolve().parents[2]

NAMES = reproduce.config_names()


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_unknown_name_names_the_value_and_the_allowed_names():
    with pytest.raises(reproduce.ConfigError) as error:
        reproduce.plan("headlines")
    message = str(error.value)
    assert "'headlines'" in message
    assert "headline" in message and "batch" in message and "serving" in message


def test_unknown_name_on_the_command_line_exits_with_the_message(capsys):
    with pytest.raises(SystemExit) as stop:
        reproduce.main(["nope", "--dry-run"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "unknown table 'nope'" in err and "allowed: " + ", ".join(NAMES) in err


def test_a_missing_name_lists_the_allowed_names(capsys):
    with pytest.raises(SystemExit):
        reproduce.main([])
    assert "NAME is required; allowed: " + ", ".join(NAMES) in capsys.readouterr().err


def test_the_quick_headline_plan_keeps_the_design_at_a_smaller_size():
    full = reproduce.plan("headline")
    quick = reproduce.plan("headline", quick=True)
    assert [len(c["argv"]) > 3 for c in quick] == [True, True]
    bench_full, bench_quick = full[0]["argv"], quick[0]["argv"]
    assert bench_quick[1:3] == ["-m", "benchmarks.run_bench"]
    assert _option(bench_full, "--methods") == _option(bench_quick, "--methods")
    assert _option(bench_full, "--batch-sizes") == _option(bench_quick, "--batch-sizes") == "1"
    assert (_option(bench_full, "--k"), _option(bench_quick, "--k")) == ("2,4,8", "4")
    assert (_option(bench_full, "--max-tokens"), _option(bench_quick, "--max-tokens")) == ("128", "32")
    assert _option(bench_full, "--limit") is None and _option(bench_quick, "--limit") == "4"
    assert _option(bench_quick, "--out").endswith("runs/headline-quick")
    assert _option(bench_full, "--out").endswith("runs/headline")
    assert quick[1]["argv"][1:3] == ["-m", "benchmarks.write_report"]
    assert quick[1]["argv"][3] == _option(bench_quick, "--out")


def test_a_quick_override_reaches_only_the_steps_that_take_it():
    methods, paired = reproduce.plan("serving", quick=True)
    assert _option(methods["argv"], "--rounds") is None  # one server per method, not paired
    assert _option(paired["argv"], "--rounds") == "2"
    assert "--fresh-servers" in paired["argv"] and "--warmup-cell" in paired["argv"]
    assert _option(methods["argv"], "--concurrency") == "1,4"
    assert _option(methods["argv"], "--out").endswith("serving-quick/methods")


def test_models_and_output_folder_pass_to_the_engine_steps_only(tmp_path):
    run, report = reproduce.plan("headline", out=tmp_path, target="/t", draft="/d")
    assert (_option(run["argv"], "--target"), _option(run["argv"], "--draft")) == ("/t", "/d")
    assert "--target" not in report["argv"] and report["argv"][3] == str(tmp_path)
    (memory,) = reproduce.plan("memory", out=tmp_path)
    assert memory["stdout"] == tmp_path / "bytes_per_request.json"


def test_arguments_become_options():
    argv = reproduce.to_argv({"per_category": 2, "trace": True, "stop_at_eos": False,
                              "spec": ["a={}", "b={}"], "limit": None})
    assert argv == ["--per-category", "2", "--trace", "--spec", "a={}", "--spec", "b={}"]


def test_a_config_with_an_unknown_harness_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(
        {"description": "x", "results": "r", "steps": [{"harness": "run_benchh", "args": {}}]}))
    with pytest.raises(reproduce.ConfigError, match=r"steps\[0\]\.harness 'run_benchh'"):
        reproduce.load_config("bad", tmp_path)


def test_an_engine_step_without_methods_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(
        {"description": "x", "results": "r", "steps": [{"harness": "run_paired", "args": {"k": 4}}]}))
    with pytest.raises(reproduce.ConfigError, match="needs args.methods"):
        reproduce.load_config("bad", tmp_path)


@functools.cache
def _help(module: str) -> str:
    return subprocess.run([sys.executable, "-m", module, "--help"],
                          capture_output=True, text=True, cwd=REPO, timeout=120).stdout


@pytest.mark.parametrize("name", NAMES)
def test_every_config_names_a_harness_its_methods_and_its_published_folder(name):
    config = reproduce.load_config(name)
    results = REPO / config["results"]
    assert results.is_dir(), f"{name}: results folder {config['results']} is missing"
    for step in config["steps"]:
        module = reproduce.module(step["harness"])
        assert (REPO / (module.replace(".", "/") + ".py")).is_file()
        # a readme table publishes its manifest alone; the rows stay in the run folder
        if step.get("subdir") and "readme" not in config:
            assert (results / step["subdir"]).is_dir(), f"{name}: {step['subdir']} missing"
        if step["harness"] in reproduce.ENGINE_HARNESS:
            for method in reproduce.method_names(step):
                assert method in METHOD_NAMES, f"{name}: unknown method {method!r}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("quick", [False, True])
def test_every_planned_option_is_one_the_harness_accepts(name, quick):
    for command in reproduce.plan(name, quick=quick):
        module = command["argv"][2]
        options = [part for part in command["argv"][3:] if part.startswith("--")]
        if module in ("benchmarks.write_report", "benchmarks.gsm8k_quality"):
            assert options == []
            continue
        text = _help(module)
        assert text, f"{module} --help printed nothing"
        for option in options:
            assert option in text, f"{name}: {module} has no option {option}"


def test_the_quick_plan_sets_its_environment_and_the_full_plan_none():
    quick = reproduce.plan("headline", quick=True)
    assert all(c["env"] == {"VLLM_CPU_KVCACHE_SPACE": "1"} for c in quick)
    assert reproduce.shell_line(quick[0]).startswith("VLLM_CPU_KVCACHE_SPACE=1 ")
    assert all(c["env"] == {} for c in reproduce.plan("headline"))


def test_a_config_with_an_unknown_key_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps(
        {"description": "x", "results": "r", "quik": {},
         "steps": [{"harness": "write_report"}]}))
    with pytest.raises(reproduce.ConfigError, match="unknown keys \\['quik'\\]"):
        reproduce.load_config("bad", tmp_path)


def test_a_step_marked_skip_quick_runs_in_the_full_plan_only(tmp_path):
    steps = [{"harness": "write_report", "subdir": "first"},
             {"harness": "write_report", "subdir": "again", "skip_quick": True}]
    (tmp_path / "two.json").write_text(json.dumps(
        {"description": "x", "results": "r", "steps": steps}))
    full = reproduce.plan("two", out=tmp_path / "out", configs=tmp_path)
    quick = reproduce.plan("two", quick=True, out=tmp_path / "out", configs=tmp_path)
    assert [c["argv"][-1] for c in full] == [str(tmp_path / "out" / "first"),
                                            str(tmp_path / "out" / "again")]
    assert [c["argv"][-1] for c in quick] == [str(tmp_path / "out" / "first")]


@pytest.mark.parametrize("steps, message", [
    ([{"harness": "write_report", "skip_quick": "yes"}], r"steps\[0\]\.skip_quick 'yes' must be"),
    ([{"harness": "write_report", "skip_quick": True}], "the quick plan would be empty"),
])
def test_a_bad_skip_quick_is_refused(tmp_path, steps, message):
    (tmp_path / "bad.json").write_text(json.dumps(
        {"description": "x", "results": "r", "steps": steps}))
    with pytest.raises(reproduce.ConfigError, match=message):
        reproduce.load_config("bad", tmp_path)
