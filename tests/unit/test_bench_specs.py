"""gammatune_tools.bench.specs: draft lengths, --spec options, the plan of cells."""

import pytest

from gammatune_tools.bench import specs
from gammatune_tools.bench.records import cell_key


def test_parse_ks_names_and_lists():
    assert specs.parse_ks("paper") == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
    assert specs.parse_ks("quick") == [2, 4, 8]
    assert specs.parse_ks("3, 5") == [3, 5]
    assert specs.parse_floats("0, 0.7") == [0.0, 0.7]


def test_parse_spec_options_substitutes_draft_and_refuses_bad_input():
    parsed = specs.parse_spec_options(
        ['cost={"method": "gammatune_cost", "model": "{draft}", "num_speculative_tokens": 16}'],
        "/models/draft")
    assert parsed == {"cost": {"method": "gammatune_cost", "model": "/models/draft",
                               "num_speculative_tokens": 16}}
    with pytest.raises(ValueError, match="NAME=JSON"):
        specs.parse_spec_options(['{"method": "x"}'], "d")
    with pytest.raises(ValueError, match="'method'"):
        specs.parse_spec_options(['x={"model": "d"}'], "d")


def test_plan_skips_done_cells_and_gives_custom_configs_one_k():
    custom = {"cost": {"method": "gammatune_cost", "model": "d"}}
    done = {cell_key("no_spec", 0, 1, 0.0, size_name="c")}
    plan = specs.plan_cells(["no_spec", "gammatune", "cost"], [2, 4], [1, 4], [0.0],
                            custom, done, size_name="c")
    assert [(m, k, todo) for m, k, todo, _ in plan] == [
        ("no_spec", 0, [(4, 0.0)]), ("gammatune", 2, [(1, 0.0), (4, 0.0)]),
        ("gammatune", 4, [(1, 0.0), (4, 0.0)]), ("cost", 0, [(1, 0.0), (4, 0.0)])]
    assert plan[3][3] == custom["cost"] and plan[1][3] == {}
    variant = specs.plan_cells(["gammatune"], [2], [1], [0.0], {}, set(),
                               variant_of=lambda m: {"eta": 0.3})
    assert variant[0][3] == {"eta": 0.3}
    with pytest.raises(ValueError, match="unknown 'nope'"):
        specs.plan_cells(["nope"], [2], [1], [0.0], {}, set())
