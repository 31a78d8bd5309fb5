"""The method registry is consistent: every method's parameters have a
default and a validation, every policy factory takes exactly its method's
parameters and builds, and the settings and the docs read the registry alone."""

import inspect

import pytest

from vllm_gammatune import methods
from vllm_gammatune.methods import (
    METHODS,
    PARAMETERS,
    GammaTuneConfigError,
    split_speculative_config,
)
from vllm_gammatune.methods.registry import ALL_PLUGIN_KEYS
from vllm_gammatune.policies import DraftLengthPolicy, FreeDraftPlanner

VLLM_KEYS = frozenset({"model", "num_speculative_tokens", "method"})


def test_every_method_parameter_is_a_known_parameter():
    for method in METHODS.values():
        assert method.parameters, method.name
        assert set(method.parameters) <= set(PARAMETERS), method.name
        assert set(method.defaults) <= set(method.parameters), method.name
    # and every parameter is taken by some method
    assert set(PARAMETERS) == ALL_PLUGIN_KEYS


def test_every_method_has_a_one_line_description_and_a_cap():
    for method in METHODS.values():
        assert method.description and "\n" not in method.description
        assert method.num_speculative_tokens >= 1


@pytest.mark.parametrize("name", list(METHODS))
def test_the_policy_factory_takes_exactly_the_methods_parameters(name):
    method = METHODS[name]
    cap, *keywords = inspect.signature(method.build_policy).parameters.values()
    required = {p.name for p in keywords if p.default is inspect.Parameter.empty}
    assert required <= set(method.parameters) <= {p.name for p in keywords}, name


@pytest.mark.parametrize("name", list(METHODS))
def test_defaults_validate_and_the_factory_builds(name):
    method = METHODS[name]
    settings, draft = split_speculative_config({"method": name, "model": "d"}, VLLM_KEYS)
    assert settings.num_speculative_tokens == method.num_speculative_tokens
    resolved = {"num_speculative_tokens": settings.num_speculative_tokens,
                "drafter": "draft_model", "draft_distributions": True}
    for key, parameter in PARAMETERS.items():
        default = parameter.default_for(method.defaults, resolved)
        resolved[key] = settings.parameters.get(key, default)
        if key in method.parameters:
            # the default is what the settings hold, and validation keeps it
            assert settings.parameters[key] == default
            assert parameter.validate(default, resolved) == default
    policy = settings.make_policy()
    assert isinstance(policy, DraftLengthPolicy)
    assert policy.max_num_draft_tokens == settings.num_speculative_tokens
    assert draft == {"method": "draft_model", "model": "d",
                     "num_speculative_tokens": settings.num_speculative_tokens}


@pytest.mark.parametrize("key", list(PARAMETERS))
def test_every_parameter_refuses_a_bad_value_naming_itself(key):
    name = next(m for m in METHODS if key in METHODS[m].parameters)
    with pytest.raises(GammaTuneConfigError, match=rf"\['{key}'\]"):
        split_speculative_config({"method": name, "model": "d", key: "not a value"},
                                 VLLM_KEYS)


def test_lossy_methods_and_names_come_from_the_registry():
    assert methods.LOSSY_METHODS == ("adasd",)
    assert methods.PLUGIN_METHODS == tuple(METHODS)
    assert all(methods.is_plugin_method(m) for m in METHODS)
    assert not methods.is_plugin_method("draft_model")
    # the AdaSD window of 20 (the paper's W) is its default cap and window
    adasd, _ = split_speculative_config({"method": "adasd", "model": "d"}, VLLM_KEYS)
    assert adasd.num_speculative_tokens == adasd.parameters["adasd_window"] == 20
    assert methods.DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS == 20
    assert adasd.is_lossy and not split_speculative_config(
        {"method": "gammatune", "model": "d"}, VLLM_KEYS)[0].is_lossy


def test_markdown_table_lists_every_method_once_with_its_defaults():
    table = methods.markdown_table()
    lines = table.splitlines()
    assert len(lines) == 2 + len(METHODS)
    for name, line in zip(METHODS, lines[2:]):
        assert line.startswith(f"| `{name}` |")
        assert METHODS[name].description in line
    assert ("| `adasd` | no (lossy) | `draft_model` | 20 | `adasd_mode='both'`, "
            "`adasd_window=20` |") in table
    assert ("| `gammatune_cost` | yes | `draft_model`, `ngram`, `ngram+draft_model` | "
            "8 (CUDA, draft model: 4) |" in table)
    assert "| `gammatune` | yes | `draft_model`, `ngram` |" in table
    assert "`confidence_threshold=0.4`" in lines[2 + list(METHODS).index("assistant_threshold")]


def test_the_docs_read_the_registry():
    """docs/methods.md is the registry's table; the README's methods table
    names exactly the registry's methods, the lossy one marked."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert methods.markdown_table() in (root / "docs" / "methods.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Methods"):readme.index("## Metrics")]
    listed = re.findall(r"^\| `([a-z_]+)`( \(\*\*lossy\*\*\))? \|", section, flags=re.M)
    assert sorted(name for name, _ in listed) == sorted(methods.PLUGIN_METHODS)
    assert {name for name, lossy in listed if lossy} == set(methods.LOSSY_METHODS)


def test_a_method_plans_free_drafts_exactly_when_its_policy_does():
    """The registry's flag (read at start, before any policy is built) says
    what the policy is (``policies.contracts.FreeDraftPlanner``)."""
    for method in METHODS.values():
        settings_policy = method.build_policy(method.num_speculative_tokens,
                                              **method.resolve({}, method.num_speculative_tokens))
        assert isinstance(settings_policy, FreeDraftPlanner) is method.plans_free_drafts, \
            method.name


def test_cuda_gets_a_short_default_cap_with_the_draft_model_only():
    """On CUDA the hot path verifies every drafting request's whole cap
    (docs/cuda.md, "Defaults on CUDA"), the lookup ahead of the draft model's
    too; a given cap is the user's; AdaSD and the n-gram drafter keep theirs."""
    def cap(config, on_cuda):
        return split_speculative_config(config, VLLM_KEYS, on_cuda=on_cuda)[0].num_speculative_tokens

    for name in ("gammatune", "gammatune_plus", "gammatune_cost"):
        assert cap({"method": name, "model": "d"}, on_cuda=True) == 4
        assert cap({"method": name, "model": "d"}, on_cuda=False) == \
            METHODS[name].num_speculative_tokens > 4
        assert cap({"method": name, "model": "d", "num_speculative_tokens": 12},
                   on_cuda=True) == 12
    assert cap({"method": "adasd", "model": "d"}, on_cuda=True) == 20
    assert cap({"method": "gammatune", "drafter": "ngram"}, on_cuda=True) == 16
    assert cap({"method": "gammatune_cost", "model": "d", "drafter": "ngram+draft_model"},
               on_cuda=True) == 4
