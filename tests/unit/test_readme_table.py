"""``python -m benchmarks.reproduce readme``: the bootstrap, the wording, the
prompt draw, the manifest's pooling, the table and its check (no engine)."""

from __future__ import annotations

import json
import random

import numpy
import pytest

from benchmarks import reproduce
from gammatune_tools.bench.context import REPO
from gammatune_tools.bench import (
    readme_details,
    readme_manifest,
    readme_plan,
    readme_run,
    readme_table,
)
from gammatune_tools.bench.prompts import SPEC_BENCH, draw_questions
from gammatune_tools.bench.readme_cells import ORACLE, ratio_statistic
from gammatune_tools.bench.stats import two_level_bootstrap, verdict

METHODS = ["no_spec", "vllm_draft_model@2", "vllm_draft_model@3", "gammatune@4",
           "gammatune_cost"]
#: each method's true speed-up over no speculation on the synthetic cell
SPEED = {"no_spec": 1.0, "vllm_draft_model@2": 1.3, "vllm_draft_model@3": 1.4,
         "gammatune@4": 1.35, "gammatune_cost": 1.5}


def synthetic_rows(rounds: int, units: int, seed: int, speed=SPEED, noise: float = 0.05,
                   slow_unit: tuple[str, int, float] | None = None) -> list[dict]:
    """Rows in ``summarize``'s shape: 32 tokens per unit, seconds from the
    method's speed, a unit's own difficulty and noise; ``slow_unit``
    (method, unit, factor) makes one unit that much slower for one method."""
    rng = random.Random(seed)
    difficulty = [rng.uniform(0.5, 2.0) for _ in range(units)]
    rows = []
    for r in range(rounds):
        for u in range(units):
            for position, method in enumerate(speed):
                seconds = difficulty[u] / speed[method] * rng.lognormvariate(0, noise)
                if slow_unit and (method, u) == slow_unit[:2]:
                    seconds *= slow_unit[2]
                rows.append({"batch_size": 1, "round": r, "batch": u, "method": method,
                             "position": position, "output_tokens": 32,
                             "wall_seconds": seconds, "accepted": 20.0, "drafts": 10.0,
                             "draft_forward_passes": 0.0})
    return rows


def interval(rows, subject, against, units, rounds):
    from gammatune_tools.bench.readme_cells import arrays

    methods = list(SPEED)
    tokens, seconds = arrays(rows, methods, units)
    fixed = [1, 2]
    target = against if against == ORACLE else methods.index(against)
    return two_level_bootstrap(ratio_statistic(tokens, seconds, methods.index(subject), target,
                                               fixed), rounds, units, resamples=500, seed=1)


def test_the_bootstrap_interval_holds_the_true_ratio():
    point, low, high = interval(synthetic_rows(5, 24, seed=3), "gammatune_cost", "no_spec",
                                24, 5)
    assert low < 1.5 < high and high - low < 0.2
    assert point == pytest.approx(1.5, abs=0.05)


def test_one_prompt_much_worse_widens_and_lowers_the_interval():
    clean = interval(synthetic_rows(5, 24, seed=3), "gammatune_cost", "no_spec", 24, 5)
    worse = interval(synthetic_rows(5, 24, seed=3, slow_unit=("gammatune_cost", 0, 20.0)),
                     "gammatune_cost", "no_spec", 24, 5)
    assert worse[0] < clean[0] - 0.05
    assert worse[1] < clean[1] - 0.05 and worse[2] - worse[1] > 2 * (clean[2] - clean[1])


def test_the_bootstrap_is_seeded_and_needs_data():
    def statistic(rounds, units):
        return float(numpy.mean(rounds) + numpy.mean(units))

    assert two_level_bootstrap(statistic, 4, 6, seed=2) == two_level_bootstrap(statistic, 4, 6,
                                                                              seed=2)
    with pytest.raises(ValueError, match="0 rounds"):
        two_level_bootstrap(statistic, 0, 6)


@pytest.mark.parametrize("low, high, words", [(1.02, 1.2, "faster"), (0.8, 0.97, "slower"),
                                              (0.97, 1.03, "at parity"), (1.0, 1.1, "at parity"),
                                              (None, None, "no interval")])
def test_the_words_are_as_strong_as_the_interval(low, high, words):
    assert verdict(low, high) == words


def test_one_round_of_one_batch_has_no_interval_and_no_words_beyond_it():
    point, low, high = two_level_bootstrap(lambda rounds, units: 1.03, 1, 1)
    assert (point, low, high) == (1.03, None, None)
    entry = {"ratio": point, "low": low, "high": high, "verdict": verdict(low, high)}
    assert readme_table.ratio_cell(entry, "K=1") == "1.03x vs K=1, no interval"


def test_the_draw_is_fixed_by_its_seed_and_holds_every_category():
    drawn = draw_questions(26, seed=0, split="eval")
    assert [r["question_id"] for r in drawn] == [r["question_id"]
                                                 for r in draw_questions(26, 0, "eval")]
    assert [r["question_id"] for r in drawn] != [r["question_id"]
                                                 for r in draw_questions(26, 1, "eval")]
    categories = {json.loads(line)["category"] for line in SPEC_BENCH.open()}
    assert len(drawn) >= 24 and {r["category"] for r in drawn} == categories
    assert all(r["question_id"] % 2 == 0 for r in drawn)
    assert len({r["question_id"] for r in drawn}) == 26


def test_the_draw_refuses_too_few_to_hold_every_category():
    with pytest.raises(ValueError, match="prompts: 5 questions; allowed: 13"):
        draw_questions(5, seed=0)


def test_the_readme_config_measures_where_decoding_dominates():
    """The table's plan: at least 16 questions at batch 1 and 128 tokens a
    request there and on the code edits, 64 in the batched cells and on the
    trace, the trace's prompts from the evaluation half, 3 rounds or more."""
    config = reproduce.load_config("readme")
    drawn = readme_plan.draw(config, quick=False)
    assert len(drawn["specbench"]) >= 16 and len(drawn["code_edit"]) >= 3
    steps = readme_plan.steps_by_subdir(config)
    for cell in config["readme"]["cells"]:
        args = steps[cell["step"]]["args"]
        tokens = args.get("also_max_tokens") if cell.get("set") else args["max_tokens"]
        assert tokens >= (128 if cell.get("batch_size") == 1 else 64), cell["name"]
        assert args["rounds"] >= 3, cell["name"]
    assert steps["traffic"]["args"]["split"] == "eval"


DESIGN = {"cells": [{"name": "batch 1", "step": "s", "harness": "run_paired", "batch_size": 1,
                     "units": 8, "methods": METHODS}],
          "prompts": {}, "steps": {}}


def header(tree: str = "a" * 40) -> dict:
    return {"plugin_tree": tree, "quick": False, "design": DESIGN,
            "machine": {"cpu_model": "Test CPU", "flags": ["avx2"], "threads": 2},
            "command": "python -m benchmarks.reproduce readme"}


def new_rounds(session: str, seed: int) -> list[dict]:
    return readme_manifest.round_entries(session, "batch 1", synthetic_rows(2, 8, seed),
                                         METHODS, 8)


def test_a_rerun_at_the_same_tree_pools_its_rounds_with_the_kept_ones(tmp_path):
    path = tmp_path / "manifest.json"
    first = readme_manifest.pool_into(path, header(), {"session": "s1"}, new_rounds("s1", 1))
    assert first["cells"]["batch 1"]["rounds"] == 2
    again = readme_manifest.pool_into(path, header(), {"session": "s2"}, new_rounds("s2", 2))
    assert again["cells"]["batch 1"]["rounds"] == 4
    assert [s["session"] for s in again["sessions"]] == ["s1", "s2"]
    read = readme_manifest.read(path)
    assert read["rounds"] == again["rounds"] and len(read["rounds"]) == 4
    # a resumed session reports its rounds again: kept once
    resumed = readme_manifest.pool_into(path, header(), {"session": "s2"}, new_rounds("s2", 2))
    assert resumed["cells"]["batch 1"]["rounds"] == 4


def test_rounds_of_another_plugin_tree_are_refused_naming_both(tmp_path):
    path = tmp_path / "manifest.json"
    readme_manifest.pool_into(path, header("a" * 40), {"session": "s1"}, new_rounds("s1", 1))
    with pytest.raises(readme_manifest.ManifestError) as error:
        readme_manifest.pool_into(path, header("b" * 40), {"session": "s2"},
                                  new_rounds("s2", 2))
    assert "a" * 40 in str(error.value) and "b" * 40 in str(error.value)
    assert len(readme_manifest.read(path)["rounds"]) == 2


def test_rounds_of_another_machine_are_refused_naming_both(tmp_path):
    path = tmp_path / "manifest.json"
    readme_manifest.pool_into(path, header(), {"session": "s1"}, new_rounds("s1", 1))
    other = {**header(), "machine": {"cpu_model": "Other CPU", "flags": ["avx2", "amx_bf16"],
                                     "threads": 2}}
    with pytest.raises(readme_manifest.ManifestError, match="machine") as error:
        readme_manifest.pool_into(path, other, {"session": "s2"}, new_rounds("s2", 2))
    assert "Test CPU" in str(error.value) and "Other CPU" in str(error.value)
    assert len(readme_manifest.read(path)["rounds"]) == 2


def test_a_finished_session_is_raised_and_a_stopped_one_resumed(tmp_path):
    state = readme_plan.session_state(tmp_path, "t", False, {"s": 5}, {})
    readme_plan.write_session(tmp_path, state)
    assert readme_plan.session_state(tmp_path, "t", False, {"s": 5}, {"s": 3}) == state
    raised = readme_plan.session_state(tmp_path, "t", False, {"s": 5}, {"s": 5})
    assert raised["target_rounds"] == {"s": 10} and raised["session"] == state["session"]
    with pytest.raises(ValueError, match="plugin_tree 't' of its rounds differs"):
        readme_plan.session_state(tmp_path, "u", False, {"s": 5}, {})


def manifest_fixture(tmp_path):
    path = tmp_path / "manifest.json"
    return readme_manifest.pool_into(path, header(), {"session": "s1"},
                                     new_rounds("s1", 1) + new_rounds("s2", 2))


def test_every_cell_of_the_table_fits_80_characters(tmp_path):
    manifest = manifest_fixture(tmp_path)
    rows = readme_table.table_rows(manifest)
    assert rows and all(len(cell) <= readme_table.MAX_CELL for row in rows for cell in row[1:])
    text = readme_table.render(manifest)
    assert "Test CPU (avx2; 2 threads)" in text.splitlines()[0]
    assert "vs K=3" in text and "x [" in text
    assert "| batch 1 (4 rounds) |" in text and "stopped short" not in text
    # a cell of the design without a complete round yet: dashes, and its header says so
    unmeasured = {**manifest, "design": {**manifest["design"], "cells": [
        *manifest["design"]["cells"], {**manifest["design"]["cells"][0], "name": "trace"}]}}
    empty = readme_table.render(unmeasured, {"batch 1": 4, "trace": 5})
    assert "| trace (0 of 5 rounds) |" in empty
    assert all(line.endswith("| - |") for line in empty.splitlines()[4:])
    short = readme_table.render(manifest, {"batch 1": 5})
    assert "| batch 1 (4 of 5 rounds) |" in short and "stopped short" in short.splitlines()[0]
    assert readme_table.check_readme(f"{readme_table.START}\n{text}{readme_table.END}",
                                     manifest, {"batch 1": 5}) is not None
    best = {row[0]: row[1] for row in rows}["best fixed K / no speculation"]
    assert best.startswith("K=3: 1.") and "vs" not in best


def test_the_check_passes_on_a_written_readme_and_fails_on_another_table(tmp_path):
    manifest = manifest_fixture(tmp_path)
    readme = (f"# Title\n\nintro\n\n{readme_table.START}\nold table\n{readme_table.END}\n\n"
              "after\n")
    assert "differs" in readme_table.check_readme(readme, manifest)
    written = readme_table.replace(readme, readme_table.render(manifest))
    assert readme_table.check_readme(written, manifest) is None
    assert written.startswith("# Title\n\nintro\n\n") and written.endswith("\n\nafter\n")
    assert "no table markers" in readme_table.check_readme("# Title\n", manifest)
    assert readme_table.check_tree(manifest, "a" * 40) is None
    assert "b" * 40 in readme_table.check_tree(manifest, "b" * 40)


def test_write_and_check_on_the_command_line(tmp_path, capsys):
    manifest_fixture(tmp_path)
    readme, page = tmp_path / "README.md", tmp_path / "results.md"
    readme.write_text(f"{readme_table.START}\n{readme_table.END}\n")
    page.write_text(f"# Results\n\n{readme_details.START}\n{readme_details.END}\n\nmore\n")
    options = ["--manifest", str(tmp_path / "manifest.json"), "--readme", str(readme),
               "--results-page", str(page)]
    assert reproduce.main(["readme", "--check", *options]) == 1
    assert "README" in capsys.readouterr().err
    assert reproduce.main(["readme", "--write", *options]) == 0
    assert "vLLM K=3" in page.read_text() and page.read_text().endswith("\n\nmore\n")
    # the table and the detail are the manifest's; the fixture's tree is not HEAD's
    assert reproduce.main(["readme", "--check", *options]) == 1
    err = capsys.readouterr().err
    assert "plugin_tree " + "a" * 40 in err and "README" not in err and "results.md" not in err
    page.write_text(page.read_text().replace("vLLM K=3", "vLLM K=4"))
    assert reproduce.main(["readme", "--check", *options]) == 1
    assert "results.md: the detail of the table differs" in capsys.readouterr().err


def test_the_detail_lists_every_engine_of_the_sweep_and_each_phase(tmp_path):
    design = {**DESIGN, "cells": [{**DESIGN["cells"][0], "name": "trace",
                                   "harness": "run_traffic", "units": 3}]}
    rows = synthetic_rows(3, 3, seed=4, slow_unit=("gammatune_cost", 1, 2.0))
    manifest = readme_manifest.pool_into(
        tmp_path / "manifest.json", {**header(), "design": design}, {"session": "s1"},
        readme_manifest.round_entries("s1", "trace", rows, METHODS, 3))
    text = readme_details.render(manifest, {"trace": ["quiet", "busy", "quiet_again"]},
                                 {"trace": 5})
    assert text.startswith("**trace** (3 of 5 rounds, 3 units; best fixed: vLLM K=3)")
    sweep = [line for line in text.splitlines() if line.startswith("| ")]
    assert sweep[0].startswith("| engine |")
    assert [line.split(" | ")[0] for line in sweep[1:6]] == [
        "| no speculation", "| vLLM K=2", "| vLLM K=3 (best fixed)", "| `gammatune@4`",
        "| `gammatune_cost`"]
    phases = {line.split(" | ")[0][2:]: line.split(" | ") for line in sweep[7:]}
    assert list(phases) == ["quiet", "busy", "quiet_again"]
    # the phase made twice as slow for gammatune_cost reads about half the others
    cost_vs_none = {name: float(cells[-2]) for name, cells in phases.items()}
    assert cost_vs_none["busy"] < 0.6 * cost_vs_none["quiet"]
    assert readme_details.render(manifest, {"trace": ["a", "b", "c"]}) != text


def test_the_dry_run_lists_every_step_and_cell_and_writes_nothing(tmp_path, capsys):
    assert reproduce.main(["readme", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.count("benchmarks.run_paired") == 2 and out.count("benchmarks.run_traffic") == 1
    for cell in ("batch 1", "batch 4", "batch 16", "served traffic", "code edits"):
        assert f"# cell {cell!r}" in out
    assert "--rounds 3" in out and "vllm_ngram@8" in out and "gammatune_cost_ngram_model" in out
    assert "vllm_draft_model@4" in out and "--max-tokens 128" in out and "--max-tokens 64" in out
    # one engine alive at a time; the code edits run on the same fresh engines
    assert "--fresh-engines" in out and f"--also-out {tmp_path / 'run' / 'code_edit'}" in out
    assert "# estimate: " in out
    assert not (tmp_path / "run").exists()


def test_the_code_edits_are_the_offline_steps_second_set(tmp_path):
    config = reproduce.load_config("readme")
    drawn = readme_plan.draw(config, quick=False)
    overrides = readme_plan.step_overrides(config, drawn, tmp_path)
    assert overrides["offline"]["also_out"] == str(tmp_path / "code_edit")
    assert overrides["offline"]["also_dataset"].endswith("code_edit_prompts.jsonl")
    args = {s["subdir"]: {**reproduce.step_args(s, None), **overrides.get(s["subdir"], {})}
            for s in config["steps"]}
    cells = {c["name"]: c for c in readme_plan.design(config, drawn, args)["cells"]}
    assert cells["code edits"]["folder"] == "code_edit" and cells["code edits"]["units"] == 3
    assert len(cells["code edits"]["methods"]) == 11 and len(cells["batch 1"]["methods"]) == 6
    assert cells["batch 1"]["folder"] == "offline" and cells["batch 16"]["units"] == 1
    # batch 4 and 16 are a step of their own, on the same questions at 64 tokens
    assert cells["batch 4"]["folder"] == "batched" and cells["batch 4"]["units"] == 4


def plan_estimate(quick: bool) -> float:
    config = reproduce.load_config("readme")
    drawn = readme_plan.draw(config, quick=quick)
    quick_args = config["quick"] if quick else None
    args = {s["subdir"]: {**reproduce.step_args(s, quick_args),
                          **readme_plan.step_overrides(config, drawn, REPO).get(s["subdir"], {})}
            for s in config["steps"]}
    return readme_plan.estimate(config, args, readme_plan.design(config, drawn, args))


def test_the_full_plan_fits_3_hours_and_the_quick_one_20_minutes():
    """On the figures measured on this project's machine (the config's
    readme.timing); benchmarks/README.md says how they were measured."""
    assert plan_estimate(quick=False) <= 3 * 3600
    assert plan_estimate(quick=True) <= 20 * 60


def test_the_estimate_counts_every_engine_start_and_token():
    config = {"readme": {"timing": {"engine_start_s": 10.0, "server_start_s": 50.0,
                                    "prefill_s": 1.0,
                                    "seconds_per_token": {"1": 0.1, "4": 0.05}}},
              "steps": [{"harness": "run_paired", "subdir": "s",
                         "args": {"also_out": "c"}},
                        {"harness": "run_traffic", "subdir": "t"}]}
    args = {"s": {"methods": "a,b", "batch_sizes": "1,4", "max_tokens": 10, "rounds": 2,
                  "also_out": "/run/c", "also_methods": "b,c", "also_max_tokens": 20},
            "t": {"methods": "a", "phases": "q:1:2,busy:8:4", "max_tokens": 10, "rounds": 1}}
    design = {"cells": [{"step": "s", "folder": "s", "units": 8, "batch_size": 1},
                        {"step": "s", "folder": "c", "units": 3, "batch_size": 1}]}
    # engines a, b, c: start + warm-up 10 x 0.1; set s on a and b: 8 prefills and
    # 8 x 10 tokens at 0.1 and at 0.05; set c on b and c: 3 prefills, 3 x 20 x 0.1
    offline = 3 * (10 + 1) + 2 * (8 + 8 + 4) + 2 * (3 + 6)
    # a server, then 2 requests at 1 (prefill + 10 x 0.1) and 4 at 8 (measured 4 below it)
    served = 50 + 2 * (1 + 1) + 4 * (1 + 0.5)
    assert readme_plan.estimate(config, args, design) == pytest.approx(2 * offline + served)



def test_the_readme_holds_the_table_of_the_published_manifest():
    """The README-versus-manifest half of ``reproduce readme --check`` on the
    repository itself (the plugin-tree half needs git and is the command's)."""
    config = reproduce.load_config("readme")
    path = REPO / config["results"] / "manifest.json"
    manifest = readme_manifest.read(path)
    assert manifest is not None, f"no manifest at {path}"
    assert not manifest["quick"], "the README's table is of a full-size run"
    layout = readme_run.page_layout(reproduce.readme_planner(), config, manifest)
    assert readme_run.page_problems((REPO / "README.md").read_text(),
                                    (REPO / "docs" / "results.md").read_text(), manifest,
                                    layout) == []


def test_the_caption_names_the_pair_and_the_software_and_slow_rounds_are_flagged(tmp_path):
    rows = synthetic_rows(3, 8, seed=5)
    for row in rows:  # one engine instance ran at a third of its speed in round 2
        if row["method"] == "vllm_draft_model@2" and row["round"] == 1:
            row["wall_seconds"] *= 3.0
    provenance = {"models": {"target": "T-1.5B", "draft": "D-0.5B", "dtype": "bfloat16"},
                  "software": {"vllm": "0.32.0", "torch": "2.13.0+cpu", "python": "3.11.7"}}
    manifest = readme_manifest.pool_into(
        tmp_path / "manifest.json", {**header(), **provenance}, {"session": "s1"},
        readme_manifest.round_entries("s1", "batch 1", rows, METHODS, 8))
    assert ("(avx2; 2 threads), T-1.5B with D-0.5B (bfloat16), vLLM 0.32.0, torch "
            "2.13.0+cpu, ") in readme_table.render(manifest)
    text = readme_details.render(manifest)
    flagged = [line for line in text.splitlines() if line.startswith("Rounds below 0.6x")]
    assert len(flagged) == 1 and "vLLM K=2 in round 2 (0.3" in flagged[0]
    assert "vLLM K=3" not in flagged[0]
    # the manifest's rounds pool only with the same pair and software
    with pytest.raises(readme_manifest.ManifestError, match="models"):
        readme_manifest.pool_into(
            tmp_path / "manifest.json",
            {**header(), **provenance, "models": {**provenance["models"], "dtype": "float32"}},
            {"session": "s2"}, [])
    assert readme_manifest.models(None, None, "bfloat16")["target"] == \
        "Qwen2.5-Coder-1.5B-Instruct"
    assert readme_manifest.software()["torch"]


def test_a_readme_that_shows_the_figure_needs_its_file(tmp_path):
    figure, readme = tmp_path / "results" / readme_run.FIGURE, tmp_path / "README.md"
    shown = f"![the table at a glance](results/{readme_run.FIGURE})"
    assert readme_run.figure_problem("no figure here", figure, readme) is None
    assert "missing" in readme_run.figure_problem(shown, figure, readme)
    figure.parent.mkdir()
    figure.write_bytes(b"png")
    assert readme_run.figure_problem(shown, figure, readme) is None


def test_the_figure_is_drawn_from_the_manifest(tmp_path):
    pytest.importorskip("matplotlib")
    from gammatune_tools.bench import plots

    manifest = readme_manifest.pool_into(
        tmp_path / "manifest.json", header(), {"session": "s1"}, new_rounds("s1", 3))
    plots.plot_readme(manifest, tmp_path / "figure.png")
    assert (tmp_path / "figure.png").read_bytes()[:4] == b"\x89PNG"
