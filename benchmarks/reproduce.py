"""Reproduce a published table by name: ``python -m benchmarks.reproduce NAME [--quick]``.

Each name is a file ``benchmarks/configs/NAME.json`` holding the exact
arguments the published run used. This module only turns that file into
command lines of the benchmark commands (``python -m benchmarks.X`` for
``run_bench``, ``run_paired``, ``oracle``, ``idle_overhead``, ``serve_bench``,
``write_report``, ``gsm8k_quality``, ``plugin_memory``, ``gpu_suite``,
``run_traffic``) and runs them one after another from the repository
root; the measuring is theirs.

    python -m benchmarks.reproduce --list
    python -m benchmarks.reproduce headline --quick      # a first look, a few minutes
    python -m benchmarks.reproduce headline              # the published size
    python -m benchmarks.reproduce batch --dry-run       # print the commands only

A config file::

    {"description": "...", "results": "benchmarks/results/FOLDER",
     "quick": {"per_category": 1, "limit": 4, "max_tokens": 32, ...},
     "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
     "quick_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
     "steps": [{"harness": "run_bench", "subdir": "", "args": {"methods": "...", ...}},
               {"harness": "write_report"}]}

``args`` keys are the harness's options with ``_`` for ``-``; ``true`` is a
flag, a list repeats the option. ``quick`` overrides the same keys in every
step that takes them, so the quick plan keeps the published run's design
(methods, batch sizes, comparison) at a smaller size; ``env`` sets
environment variables every run of the table needs (a smaller KV cache, so
that every engine of a paired run fits in memory) and ``quick_env`` those the
quick plan needs on top, each unless set already (a smaller KV cache, so a
first look fits beside other work). Output goes to
``benchmarks/runs/NAME`` (``NAME-quick`` with ``--quick``), never into the
published folder ``results`` names: the harness resumes, so an existing
folder's cells would be skipped rather than measured again. The harness
prepares the real Qwen pair on first use unless ``--target``/``--draft``
are given. A config with a ``readme`` entry is measured into a manifest
instead, its README table written or checked from it (``bench.readme_run``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gammatune_tools.bench import readme_plan

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
CONFIGS = BENCHMARKS / "configs"
RUNS = BENCHMARKS / "runs"

#: harness name (the command ``python -m benchmarks.NAME``) -> how its output
#: folder is passed: "--out", "positional" or not at all
HARNESS = {
    "run_bench": "--out",
    "run_paired": "--out",
    "oracle": "--out",
    "idle_overhead": "--out",
    "serve_bench": "--out",
    "write_report": "positional",
    "gsm8k_quality": "positional",
    "plugin_memory": None,
    "gpu_suite": "--out",
    "run_traffic": "--out",
}

#: harnesses that load models and accept --methods, --target and --draft
ENGINE_HARNESS = ("run_bench", "run_paired", "idle_overhead", "serve_bench", "gpu_suite",
                  "run_traffic")

#: harnesses whose own --dry-run lists the cells they would measure
LISTS_CELLS = ("gpu_suite",)

#: sizes every engine harness takes; a quick override of any other key applies
#: only to steps that set that key themselves (e.g. ``rounds``)
SIZE_KEYS = ("per_category", "limit", "max_tokens")

#: the keys a config may carry
CONFIG_KEYS = {"description", "results", "steps", "quick", "env", "quick_env", "readme"}

#: the keys a step may carry; ``"skip_quick": true`` leaves the step out of
#: the quick plan (a second run of choices the first step already measures);
#: ``"args_from": "NAME"`` starts from the arguments of config NAME's first
#: step of the same harness (the step's own ``args`` override them)
STEP_KEYS = {"harness", "subdir", "args", "stdout", "skip_quick", "args_from"}


class ConfigError(ValueError):
    """A config name or file that cannot be run; the message names the field and the value."""


def config_names(configs: Path = CONFIGS) -> list[str]:
    return sorted(path.stem for path in configs.glob("*.json"))


def load_config(name: str, configs: Path = CONFIGS) -> dict:
    """The config called ``name``, checked; ConfigError naming the value and the allowed names."""
    names = config_names(configs)
    if name not in names:
        raise ConfigError(f"NAME: unknown table {name!r}; allowed: {', '.join(names)}")
    path = configs / f"{name}.json"
    config = json.loads(path.read_text())
    check_config(config, path.name)
    return config


def check_config(config: dict, where: str) -> None:
    """Structure only: every step names a known harness with known keys (no vLLM import)."""
    for key in ("description", "results", "steps"):
        if key not in config:
            raise ConfigError(f"{where}: missing {key!r}")
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(CONFIG_KEYS)}")
    if not config["steps"]:
        raise ConfigError(f"{where}: 'steps' is empty")
    for i, step in enumerate(config["steps"]):
        harness = step.get("harness")
        if harness not in HARNESS:
            raise ConfigError(f"{where}: steps[{i}].harness {harness!r} is not one of "
                              f"{', '.join(HARNESS)}")
        unknown = set(step) - STEP_KEYS
        if unknown:
            raise ConfigError(f"{where}: steps[{i}] has unknown keys {sorted(unknown)}; "
                              f"allowed: {sorted(STEP_KEYS)}")
        if harness in ENGINE_HARNESS and "methods" not in step.get("args", {}):
            raise ConfigError(f"{where}: steps[{i}] ({harness}) needs args.methods")
        if not isinstance(step.get("skip_quick", False), bool):
            raise ConfigError(f"{where}: steps[{i}].skip_quick {step['skip_quick']!r} "
                              "must be true or false")
    if all(step.get("skip_quick") for step in config["steps"]):
        raise ConfigError(f"{where}: every step has skip_quick; the quick plan would be empty")
    for key in ("quick", "env", "quick_env", "readme"):
        if not isinstance(config.get(key, {}), dict):
            raise ConfigError(f"{where}: {key!r} must be an object")
    if "readme" in config:
        try:
            readme_plan.check_readme_entry(config, where)
        except ValueError as error:
            raise ConfigError(str(error)) from None


def inherited_args(step: dict, configs: Path = CONFIGS) -> dict:
    """The step's ``args`` over those of its ``args_from`` config's first
    step of the same harness."""
    if "args_from" not in step:
        return dict(step.get("args", {}))
    source = load_config(step["args_from"], configs)
    same = [s for s in source["steps"] if s["harness"] == step["harness"]]
    if not same:
        raise ConfigError(f"args_from {step['args_from']!r}: that config has no "
                          f"{step['harness']} step")
    return {**same[0].get("args", {}), **step.get("args", {})}


def method_names(step: dict) -> list[str]:
    """The methods a step measures, as the harness resolves them: ``NAME#2`` is a
    second engine of NAME, ``NAME@3`` is NAME at K = 3, ``NAME+hot`` is NAME on
    the CUDA hot path, and ``--spec NAME=JSON`` defines NAME."""
    spec_names = {option.partition("=")[0].strip() for option in step["args"].get("spec", [])}
    names = [m.strip().split("#", 1)[0].split("+", 1)[0].split("@", 1)[0]
             for m in step["args"]["methods"].split(",") if m.strip()]
    return [m for m in names if m not in spec_names]


def step_args(step: dict, quick: dict | None, configs: Path = CONFIGS) -> dict:
    """The step's arguments with the quick overrides applied: to the keys the
    step sets, and to ``SIZE_KEYS`` in every engine harness."""
    args = inherited_args(step, configs)
    for key, value in (quick or {}).items():
        if key in args or (key in SIZE_KEYS and step["harness"] in ENGINE_HARNESS):
            args[key] = value
    return args


def to_argv(args: dict) -> list[str]:
    argv: list[str] = []
    for key, value in args.items():
        option = "--" + key.replace("_", "-")
        if value is True:
            argv.append(option)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            for item in value:
                argv += [option, str(item)]
        else:
            argv += [option, str(value)]
    return argv


def plan(name: str, quick: bool = False, out: Path | None = None,
         target: str | None = None, draft: str | None = None,
         configs: Path = CONFIGS, overrides: dict[str, dict] | None = None) -> list[dict]:
    """[{"argv": [...], "stdout": path or None, "env": {...}}] for the named table, in order.

    ``overrides``: subdir -> arguments set over the step's (after ``quick``)."""
    config = load_config(name, configs)
    out = Path(out) if out else RUNS / (f"{name}-quick" if quick else name)
    commands = []
    for step in config["steps"]:
        if quick and step.get("skip_quick"):
            continue
        out_style = HARNESS[step["harness"]]
        folder = out / step["subdir"] if step.get("subdir") else out
        argv = [sys.executable, "-m", module(step["harness"])]
        if out_style == "positional":
            argv.append(str(folder))
        elif out_style == "--out":
            argv += ["--out", str(folder)]
        args = step_args(step, config.get("quick") if quick else None, configs)
        args.update((overrides or {}).get(step.get("subdir", ""), {}))
        if step["harness"] in ENGINE_HARNESS:
            args.update({key: value for key, value in (("target", target), ("draft", draft))
                         if value})
        argv += to_argv(args)
        stdout = folder / step["stdout"] if step.get("stdout") else None
        env = {**config.get("env", {}), **(config.get("quick_env", {}) if quick else {})}
        commands.append({"argv": argv, "stdout": stdout, "env": env})
    return commands


def module(harness: str) -> str:
    """The module a harness name runs as (``python -m``)."""
    return f"benchmarks.{harness}"


def shell_line(command: dict) -> str:
    import shlex

    env = " ".join(f"{key}={shlex.quote(str(value))}" for key, value in command["env"].items())
    line = " ".join(shlex.quote(part) for part in command["argv"])
    line = f"{env} {line}" if env else line
    return line + (f" > {shlex.quote(str(command['stdout']))}" if command["stdout"] else "")


#: seconds a stopped harness gets to stop its engines before it is killed
STOP_WAIT_S = 120


def call(argv: list[str], **kwargs) -> int:
    """``subprocess.call``, except that when this process is stopped the
    harness is stopped first and given time to stop its engines (their core
    processes would outlive it otherwise): Ctrl-C reaches it by itself,
    anything else (SIGTERM) is passed on."""
    child = subprocess.Popen(argv, **kwargs)
    try:
        return child.wait()
    except BaseException as error:
        if not isinstance(error, KeyboardInterrupt):
            child.terminate()
        try:
            child.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
        raise


def run(commands: list[dict]) -> int:
    # a SIGTERM unwinds like Ctrl-C: the harness is stopped cleanly (``call``)
    # and a readme run's complete rounds still go into its manifest
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    env = dict(os.environ)
    # The commands run from the repository root (this checkout's packages come
    # first for them); the servers and engine processes they start see it too.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    for command in commands:
        print("+ " + shell_line(command), file=sys.stderr, flush=True)
        step_env = {**{key: str(value) for key, value in command["env"].items()}, **env}
        if command["stdout"]:
            Path(command["stdout"]).parent.mkdir(parents=True, exist_ok=True)
            with open(command["stdout"], "w") as sink:
                code = call(command["argv"], cwd=REPO, env=step_env, stdout=sink)
        else:
            code = call(command["argv"], cwd=REPO, env=step_env)
        if code:
            print(f"reproduce: step failed with exit code {code}", file=sys.stderr)
            return code
    return 0


def readme_planner():
    """This command's config machinery, as ``readme_run`` takes it."""
    from gammatune_tools.bench import readme_run

    return readme_run.Planner(load_config, step_args, plan, shell_line, run, RUNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reproduce",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="a table: " + ", ".join(config_names()))
    parser.add_argument("--quick", action="store_true",
                        help="a first look: few prompts, few tokens, few rounds")
    parser.add_argument("--out", type=Path, help="output folder (default benchmarks/runs/NAME)")
    parser.add_argument("--target", help="target model path (default: the prepared Qwen pair)")
    parser.add_argument("--draft", help="draft model path")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--list", action="store_true", help="list the tables and exit")
    readme = parser.add_argument_group("readme (a table measured into a manifest)")
    readme.add_argument("--write", action="store_true",
                        help="write the README's table and the results page's detail of "
                             "it from the manifest; nothing runs")
    readme.add_argument("--check", action="store_true",
                        help="exit 1 when the README's table or the results page's detail "
                             "is not the manifest's, or the manifest's plugin tree not "
                             "HEAD's; nothing runs")
    readme.add_argument("--manifest", type=Path, help="default: the config's results folder "
                        "(--quick: the output folder), manifest.json")
    readme.add_argument("--readme", type=Path, default=REPO / "README.md",
                        help="the README --write and --check read")
    readme.add_argument("--results-page", type=Path, default=REPO / "docs" / "results.md",
                        help="the results page --write and --check read")
    args = parser.parse_args(argv)
    if args.list:
        for name in config_names():
            print(f"{name:16} {load_config(name)['description']}")
        return 0
    if not args.name:
        parser.error("NAME is required; allowed: " + ", ".join(config_names()))
    try:
        if "readme" in load_config(args.name):
            from gammatune_tools.bench import readme_run

            return readme_run.main(args, argv, readme_planner())
        if args.write or args.check or args.manifest:
            parser.error(f"--write, --check and --manifest: only for a table with a manifest "
                         f"({', '.join(n for n in config_names() if 'readme' in load_config(n))})")
        commands = plan(args.name, args.quick, args.out, args.target, args.draft)
    except ConfigError as error:
        parser.error(str(error))
    if args.dry_run:
        for command in commands:
            print(shell_line(command), flush=True)
            if command["argv"][2] in {module(harness) for harness in LISTS_CELLS}:
                subprocess.call([*command["argv"], "--dry-run"], cwd=REPO)
        return 0
    return run(commands)


if __name__ == "__main__":
    sys.exit(main())
