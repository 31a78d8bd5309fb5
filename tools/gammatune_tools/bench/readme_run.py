"""``python -m benchmarks.reproduce readme``: a table measured into a manifest.

A config with a ``readme`` entry runs its steps on drawn prompts to the
round its session has reached (``readme_plan``); the complete rounds, a
stopped run's included, pool into the manifest (``readme_manifest``);
``--write`` / ``--check`` put the README's table (``readme_table``) and the
results page's detail of it (``readme_details``) from it, or compare them.
``--dry-run`` prints the commands, the cells and the estimated wall time
(``readme_plan.estimate``). The config machinery (load, plan, run) is the
command's, handed in as a ``Planner``. The design, the sizes and how they
were estimated: benchmarks/README.md, "The README's table".
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gammatune_tools.bench import (
    context,
    plots,
    readme_details,
    readme_manifest,
    readme_plan,
    readme_table,
)
from gammatune_tools.bench.context import REPO
from gammatune_tools.bench.specs import DEFAULT_DTYPE


#: the README's figure, beside its manifest (``plots.plot_readme``)
FIGURE = "figure.png"


@dataclass(frozen=True)
class Planner:
    """What ``benchmarks.reproduce`` does with any config: load it, apply
    the quick sizes to a step, plan the command lines, print and run them;
    and where runs go."""

    load_config: Callable[[str], dict]
    step_args: Callable[[dict, dict | None], dict]
    plan: Callable[..., list[dict]]
    shell_line: Callable[[dict], str]
    run: Callable[[list[dict]], int]
    runs: Path


def paths(name: str, config: dict, quick: bool, out: Path | None,
          manifest: Path | None, runs: Path) -> tuple[Path, Path]:
    """The run folder and the manifest: a full run's manifest goes to the
    published folder (it is the result, pooled, never a resumable cell
    list), a quick one's beside its rows."""
    out = Path(out) if out else runs / (f"{name}-quick" if quick else name)
    if manifest is None:
        manifest = out / "manifest.json" if quick else REPO / config["results"] / "manifest.json"
    return out, Path(manifest)


def commands(planner: Planner, config: dict, args: argparse.Namespace, out: Path,
             tree: str) -> tuple[list[dict], dict, dict, dict[str, list[dict]], dict]:
    """(commands, manifest header, session, drawn prompts, step arguments) of
    a readme run: each step on its drawn prompts, to the round its session
    runs to."""
    quick_args = config.get("quick") if args.quick else None
    drawn = readme_plan.draw(config, args.quick)
    overrides = readme_plan.step_overrides(config, drawn, out)
    by_step = {step.get("subdir", ""): {**planner.step_args(step, quick_args),
                                        **overrides.get(step.get("subdir", ""), {})}
               for step in config["steps"]}
    design = readme_plan.design(config, drawn, by_step)
    done = readme_plan.rounds_done(readme_plan.collect(out, design, ""), design)
    session = readme_plan.session_state(
        out, tree, args.quick, {step: int(a["rounds"]) for step, a in by_step.items()}, done)
    for step, target in session["target_rounds"].items():
        overrides.setdefault(step, {})["rounds"] = target
    dtypes = {str(a.get("dtype", DEFAULT_DTYPE)) for a in by_step.values()}
    header = {"plugin_tree": tree, "quick": args.quick, "design": design,
              "machine": readme_manifest.machine(config.get("env")),
              "software": readme_manifest.software(),
              "models": readme_manifest.models(args.target, args.draft,
                                               ", ".join(sorted(dtypes)))}
    planned = planner.plan(args.name, args.quick, out, args.target, args.draft,
                           overrides=overrides)
    return planned, header, session, drawn, by_step


def page_layout(planner: Planner, config: dict, manifest: dict
                ) -> tuple[dict[str, list[str]], dict[str, int]]:
    """(unit names, planned rounds), each by cell name, from the config at
    the manifest's size: a served trace's phases in order (its units differ
    in kind, so the results page shows each), and the rounds each cell's
    step runs to in a session (a cell short of them is of a stopped run)."""
    quick_args = config.get("quick") if manifest["quick"] else None
    steps = {step.get("subdir", ""): step for step in config["steps"]}
    names, planned = {}, {}
    for cell in manifest["design"]["cells"]:
        if cell["step"] not in steps:  # a design the config no longer has: nothing planned
            continue
        args = planner.step_args(steps[cell["step"]], quick_args)
        planned[cell["name"]] = int(args["rounds"])
        if cell["harness"] == "run_traffic":
            names[cell["name"]] = [phase.split(":")[0] for phase in str(args["phases"]).split(",")]
    return names, planned


def page_problems(readme: str, page: str, manifest: dict, layout: tuple[dict, dict],
                  page_name: object = "the results page") -> list[str]:
    """The README-versus-manifest half of ``--check`` (no git needed): what
    differs in the README's table and in the results page's detail
    (``layout``: ``page_layout``'s)."""
    held = readme_table.block(page, readme_details.START, readme_details.END)
    details = readme_details.render(manifest, *layout)
    problems = [readme_table.check_readme(readme, manifest, layout[1])]
    if held != details:
        problems.append(
            f"{page_name}: the detail of the table differs from the manifest's (or its "
            f"markers {readme_details.START} ... {readme_details.END} are missing); write "
            "it with python -m benchmarks.reproduce readme --write")
    return [p for p in problems if p]


def table_command(planner: Planner, config: dict, args: argparse.Namespace,
                  manifest_path: Path) -> int:
    """``--write`` / ``--check``: the README's table and the results page's
    detail against the manifest."""
    manifest = readme_manifest.read(manifest_path)
    if manifest is None:
        print(f"reproduce: no manifest at {manifest_path}: measure it first "
              f"(python -m benchmarks.reproduce {args.name})", file=sys.stderr)
        return 2
    text, page = args.readme.read_text(), args.results_page.read_text()
    layout = page_layout(planner, config, manifest)
    figure = manifest_path.parent / FIGURE
    if args.write:
        args.readme.write_text(readme_table.replace(text, readme_table.render(manifest,
                                                                              layout[1])))
        args.results_page.write_text(readme_table.replace(
            page, readme_details.render(manifest, *layout), readme_details.START,
            readme_details.END))
        print(args.readme, args.results_page)
        try:
            plots.plot_readme(manifest, figure)
            print(figure)
        except ImportError:
            print(f"reproduce: {figure} not written: the figure needs matplotlib "
                  "(pip install -e 'tools[plots]')", file=sys.stderr)
        return 0
    problems = [*page_problems(text, page, manifest, layout, args.results_page),
                readme_table.check_tree(manifest, context.plugin_tree()),
                figure_problem(text, figure, args.readme)]
    problems = [p for p in problems if p]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def figure_problem(readme: str, figure: Path, readme_path: Path) -> str | None:
    """A README that shows the figure needs its file (``--write`` draws it
    from the manifest, with matplotlib)."""
    link = os.path.relpath(figure, readme_path.parent)
    if f"]({link})" in readme and not figure.exists():
        return (f"{readme_path} shows {link}, which is missing: write it with python -m "
                "benchmarks.reproduce readme --write (needs matplotlib)")
    return None


def dry_run(planner: Planner, config: dict, args: argparse.Namespace, planned: list[dict],
            header: dict, session: dict, by_step: dict, manifest_path: Path) -> int:
    for command in planned:
        print(planner.shell_line(command), flush=True)
    for cell in header["design"]["cells"]:
        print(f"# cell {cell['name']!r}: {cell['units']} units x {len(cell['methods'])} "
              f"methods ({', '.join(cell['methods'])}), rounds to "
              f"{session['target_rounds'][cell['step']]}", flush=True)
    seconds = readme_plan.estimate(config, by_step, header["design"])
    print(f"# estimate: {seconds / 3600:.2f} h ({seconds / 60:.0f} min) for "
          f"{'the quick size' if args.quick else 'one session'} on the machine of the "
          "config's readme.timing", flush=True)
    print(f"# manifest: {manifest_path} (plugin tree {header['plugin_tree']})", flush=True)
    return 0


def main(args: argparse.Namespace, argv: list[str] | None, planner: Planner) -> int:
    """Measure (resuming, pooling into the manifest), or ``--write`` /
    ``--check`` the README's table."""
    config = planner.load_config(args.name)
    out, manifest_path = paths(args.name, config, args.quick, args.out, args.manifest,
                               planner.runs)
    try:
        if args.write or args.check:
            return table_command(planner, config, args, manifest_path)
        tree = context.plugin_tree()
        planned, header, session, drawn, by_step = commands(planner, config, args, out, tree)
        header["command"] = "python -m benchmarks.reproduce " + " ".join(
            sys.argv[1:] if argv is None else argv)
        old = readme_manifest.read(manifest_path)
        refused = None
        try:
            if old is not None:
                readme_manifest.check_poolable(old, header, str(manifest_path))
        except readme_manifest.ManifestError as error:
            if not args.dry_run:
                raise
            refused = error  # a plan is still worth printing
    except (ValueError, OSError) as error:
        print(f"reproduce: {error}", file=sys.stderr)
        return 2
    if args.dry_run:
        code = dry_run(planner, config, args, planned, header, session, by_step, manifest_path)
        if refused is not None:
            print(f"# the manifest would refuse these rounds: {refused}", flush=True)
        return code
    changed = context.plugin_changed()
    if changed:
        print("reproduce: the plugin has uncommitted changes, so its tree would not name the "
              "code measured: " + "; ".join(changed), file=sys.stderr)
        return 2
    readme_plan.write_prompts(drawn, out)
    readme_plan.write_session(out, session)
    code = 1
    try:
        code = planner.run(planned)
    finally:  # a stopped run's complete rounds count
        rounds = readme_plan.collect(out, header["design"], session["session"])
        if rounds or manifest_path.exists():
            record = {"session": session["session"], "folder": str(out),
                      "command": header["command"], "date": readme_manifest.now()}
            readme_manifest.pool_into(manifest_path, header, record, rounds)
            print(manifest_path, file=sys.stderr)
    return code
