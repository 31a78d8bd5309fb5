"""What ``benchmarks.reproduce readme`` measures, from its config's
``readme`` entry: the prompts drawn (held by question id), the cells and
their methods (the design every pooled round must share), the rounds each
step runs to, the rounds a run folder has complete, and the wall time a
plan takes (``estimate``).

The config's ``readme`` entry::

    {"prompts": {"NAME": {"path": "...jsonl", "count": 24, "quick_count": 13,
                          "seed": 0, "split": "eval", "step": "SUBDIR",
                          "set": "also"}},
     "cells": [{"name": "batch 1", "step": "SUBDIR", "batch_size": 1,
                "set": "also"}, ...],
     "timing": {"engine_start_s": ..., "server_start_s": ...,
                "seconds_per_token": {"1": ..., "4": ..., "16": ...},
                "prefill_s": ..., "measured": "..."}}

A step (by its ``subdir``) that draws prompts runs on the drawn file
(``<out>/NAME_prompts.jsonl``: its ``--dataset``, every prompt kept; with
``"set": "also"`` its ``--also-dataset``, a ``run_paired`` step's second
set, whose rows go to the run folder's ``also_out``). A cell is one batch
size of a ``run_paired`` step's set, or a ``run_traffic`` step's trace
(its units: the phases).

Rounds: each step's ``rounds`` is what one session adds. A run folder's
``session.json`` holds the round each step runs to; a run finds it
unfinished (stopped) and resumes it, or finished and raises it by
``rounds`` again, so a rerun measures more rounds and pools them.
"""

from __future__ import annotations

import json
from pathlib import Path

from gammatune_tools.bench.context import REPO
from gammatune_tools.bench.paired import ROWS_FILE, num_batches
from gammatune_tools.bench.prompts import draw_questions
from gammatune_tools.bench.readme_cells import traffic_rows_as_batches
from gammatune_tools.bench.readme_manifest import now, round_entries
from gammatune_tools.bench.records import read_jsonl
from gammatune_tools.bench.traffic_report import ROWS_FILE as TRAFFIC_ROWS_FILE

SESSION_FILE = "session.json"
#: step arguments that may differ between pooled rounds (the drafted sets
#: are held by question id in the design instead)
UNPOOLED = ("rounds", "dataset", "also_dataset", "also_out", "logs", "target", "draft")
#: a cell or prompt entry's ``set`` naming a ``run_paired`` step's second set
ALSO = "also"
#: the harnesses a cell can come from
CELL_HARNESS = ("run_paired", "run_traffic")


def steps_by_subdir(config: dict) -> dict[str, dict]:
    return {step.get("subdir", ""): step for step in config["steps"]}


def check_readme_entry(config: dict, where: str) -> None:
    """The ``readme`` entry names steps that exist and cells they can give;
    ValueError naming the field, the value and what is allowed."""
    entry, steps = config["readme"], steps_by_subdir(config)
    for name, spec in entry.get("prompts", {}).items():
        for key in ("path", "count", "seed", "step"):
            if key not in spec:
                raise ValueError(f"{where}: readme.prompts.{name} needs {key!r}")
        if spec["step"] not in steps:
            raise ValueError(f"{where}: readme.prompts.{name}.step {spec['step']!r}; allowed: "
                             f"{', '.join(steps)}")
    if not entry.get("cells"):
        raise ValueError(f"{where}: readme.cells is empty")
    for i, cell in enumerate(entry["cells"]):
        step = steps.get(cell.get("step"))
        if step is None or step["harness"] not in CELL_HARNESS:
            raise ValueError(f"{where}: readme.cells[{i}].step {cell.get('step')!r}; allowed: "
                             + ", ".join(s for s, v in steps.items()
                                         if v["harness"] in CELL_HARNESS))
        also = cell.get("set")
        if also is not None and (also != ALSO or "also_out" not in step["args"]):
            raise ValueError(f"{where}: readme.cells[{i}].set {also!r}; allowed: {ALSO!r}, "
                             "on a run_paired step with args.also_out")
        sizes = str(step["args"].get("also_batch_sizes" if also else "batch_sizes",
                                     "1" if also else "")).split(",")
        if step["harness"] == "run_paired" and str(cell.get("batch_size")) not in sizes:
            raise ValueError(f"{where}: readme.cells[{i}].batch_size {cell.get('batch_size')!r};"
                             f" allowed: the step's batch sizes {', '.join(sizes)}")


def draw(config: dict, quick: bool) -> dict[str, list[dict]]:
    """name -> the drawn rows (``prompts.draw_questions``)."""
    drawn = {}
    for name, spec in config["readme"].get("prompts", {}).items():
        count = spec.get("quick_count", spec["count"]) if quick else spec["count"]
        drawn[name] = draw_questions(count, spec["seed"], spec.get("split", "all"),
                                     REPO / spec["path"])
    return drawn


def prompt_file(out: Path, name: str) -> Path:
    return out / f"{name}_prompts.jsonl"


def step_overrides(config: dict, drawn: dict[str, list[dict]], out: Path) -> dict[str, dict]:
    """subdir -> the arguments the run folder sets: the drawn prompts
    (dataset, and a per-category count that keeps every prompt; a second
    set's dataset and its folder) and a served step's logs."""
    steps = steps_by_subdir(config)
    # the servers' and clients' logs stay in the run folder, not in a temporary one
    overrides: dict[str, dict] = {subdir: {"logs": str(out / subdir / "logs")}
                                  for subdir, step in steps.items()
                                  if step["harness"] == "run_traffic"}
    for name, spec in config["readme"].get("prompts", {}).items():
        mine = overrides.setdefault(spec["step"], {})
        if spec.get("set") == ALSO:
            mine.update(also_dataset=str(prompt_file(out, name)),
                        also_out=str(out / steps[spec["step"]]["args"]["also_out"]))
        else:
            mine.update(dataset=str(prompt_file(out, name)), per_category=len(drawn[name]),
                        split="all", limit=None)
    return overrides


def write_prompts(drawn: dict[str, list[dict]], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in drawn.items():
        prompt_file(out, name).write_text("".join(json.dumps(row) + "\n" for row in rows))


def design(config: dict, drawn: dict[str, list[dict]], step_args: dict[str, dict]) -> dict:
    """The cells (name, step, folder, harness, batch size, methods, units)
    and the prompts by question id: what every pooled round must share.
    ``step_args``: subdir -> the step's arguments as run (quick applied)."""
    counts = {(spec["step"], spec.get("set")): len(drawn[name])
              for name, spec in config["readme"].get("prompts", {}).items()}
    steps = steps_by_subdir(config)
    cells = []
    for cell in config["readme"]["cells"]:
        args, harness = step_args[cell["step"]], steps[cell["step"]]["harness"]
        also = cell.get("set") == ALSO
        folder = steps[cell["step"]]["args"]["also_out"] if also else cell["step"]
        if harness == "run_traffic":
            size, units = 1, len(str(args["phases"]).split(","))
        else:
            size = int(cell["batch_size"])
            units = num_batches(counts[(cell["step"], cell.get("set"))], size)
        methods = args["also_methods"] if also else args["methods"]
        cells.append({"name": cell["name"], "step": cell["step"], "folder": folder,
                      "harness": harness, "batch_size": size, "units": units,
                      "methods": str(methods).split(",")})
    return {"cells": cells,
            "prompts": {name: {"seed": spec["seed"], "split": spec.get("split", "all"),
                               "path": spec["path"],
                               "question_ids": [row["question_id"] for row in drawn[name]]}
                        for name, spec in config["readme"].get("prompts", {}).items()},
            # every other argument too (the drawn datasets are held by id above)
            "steps": {step: {key: value for key, value in args.items() if key not in UNPOOLED}
                      for step, args in step_args.items()}}


def collect(out: Path, design_: dict, session: str) -> list[dict]:
    """The complete rounds in the run folder, every cell, as manifest entries."""
    entries = []
    for cell in design_["cells"]:
        folder = out / cell["folder"]
        if cell["harness"] == "run_traffic":
            rows = traffic_rows_as_batches(read_jsonl(folder / TRAFFIC_ROWS_FILE))
        else:
            rows = [r for r in read_jsonl(folder / ROWS_FILE)
                    if r["batch_size"] == cell["batch_size"]]
        entries += round_entries(session, cell["name"], rows, cell["methods"], cell["units"])
    return entries


def rounds_done(entries: list[dict], design_: dict) -> dict[str, int]:
    """step -> the complete rounds of its least complete cell."""
    per_cell = {c["name"]: 0 for c in design_["cells"]}
    for entry in entries:
        per_cell[entry["cell"]] += 1
    steps: dict[str, int] = {}
    for cell in design_["cells"]:
        steps[cell["step"]] = min(steps.get(cell["step"], per_cell[cell["name"]]),
                                  per_cell[cell["name"]])
    return steps


def session_state(out: Path, tree: str, quick: bool, increments: dict[str, int],
                  done: dict[str, int]) -> dict:
    """The folder's session with the round each step runs to: a new one, a
    stopped one resumed, or a finished one raised by ``increments``.
    ValueError when the folder measured another plugin tree or size."""
    path = out / SESSION_FILE
    state = json.loads(path.read_text()) if path.exists() else None
    if state is None:
        return {"session": now(), "plugin_tree": tree, "quick": quick,
                "target_rounds": dict(increments)}
    for key, value in (("plugin_tree", tree), ("quick", quick)):
        if state[key] != value:
            raise ValueError(f"{path}: {key} {state[key]!r} of its rounds differs from this "
                             f"run's {value!r}; rounds pool only at one {key}: measure into "
                             "another --out")
    targets = state["target_rounds"]
    if all(done.get(step, 0) >= targets.get(step, 0) for step in increments):
        targets = {step: done.get(step, 0) + n for step, n in increments.items()}
    return {**state, "target_rounds": targets}


def write_session(out: Path, state: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / SESSION_FILE).write_text(json.dumps(state, indent=1) + "\n")


def _per_token(timing: dict, size: int) -> float:
    """Seconds per generated token at ``size``: the measured size nearest
    below (a smaller batch spends more per token, so this errs long)."""
    measured = sorted(int(b) for b in timing["seconds_per_token"])
    below = [b for b in measured if b <= size] or measured[:1]
    return float(timing["seconds_per_token"][str(below[-1])])


def estimate(config: dict, step_args: dict[str, dict], design_: dict) -> float:
    """Seconds one session takes on the machine of ``readme.timing``.

    Per round of a ``run_paired --fresh-engines`` step, every engine once:
    its start and stop (``engine_start_s``), a warm-up of ``max_tokens``,
    then per set it runs, every prompt's prefill once (later sizes find it
    in the prefix cache) and at each batch size every prompt's tokens at
    that size's seconds per token. Per round of a ``run_traffic`` step,
    every choice once: a server's start, warm-up and stop, then per phase
    every request's prefill and tokens at the phase's concurrency. The
    seconds per token are a mean over the measured methods (a drafting
    choice may take longer than no speculation at batch 4 and 16)."""
    timing = config["readme"]["timing"]
    total = 0.0
    for step in config["steps"]:
        name, args = step.get("subdir", ""), step_args[step.get("subdir", "")]
        if step["harness"] == "run_traffic":
            phases = [p.split(":") for p in str(args["phases"]).split(",")]
            trace = sum(int(p[2]) * (timing["prefill_s"] + int(args["max_tokens"])
                                     * _per_token(timing, int(p[1]))) for p in phases)
            per_round = len(str(args["methods"]).split(",")) * (timing["server_start_s"] + trace)
        else:
            sets = [(args["methods"], args["batch_sizes"], args["max_tokens"], name)]
            if args.get("also_out"):
                sets.append((args["also_methods"], args.get("also_batch_sizes", "1"),
                             args.get("also_max_tokens") or args["max_tokens"],
                             steps_by_subdir(config)[name]["args"]["also_out"]))
            engines = {m for methods, *_ in sets for m in str(methods).split(",")}
            per_round = len(engines) * (timing["engine_start_s"] + int(args["max_tokens"])
                                        * _per_token(timing, 1))
            for methods, sizes, tokens, folder in sets:
                count = min(c["units"] * c["batch_size"] for c in design_["cells"]
                            if (c["step"], c["folder"]) == (name, folder))
                per_engine = count * timing["prefill_s"] + sum(
                    count * int(tokens) * _per_token(timing, int(b))
                    for b in str(sizes).split(","))
                per_round += len(str(methods).split(",")) * per_engine
        total += int(args["rounds"]) * per_round
    return total
