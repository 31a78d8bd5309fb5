"""The method registry is consistent: every method's parameters have a
default and a validation, every policy factory builds, and the config reads
the registry alone."""

import pytest

from vllm_gammatune.methods import settings as config

from vllm_gammatune.methods import registry as methods
from vllm_gammatune.methods.registry import METHODS, PARAMETERS, GammaTuneConfigError
from vllm_gammatune.policies import DraftLengthPolicy

VLLM_KEYS = frozenset({"model", "num_speculative_tokens", "method"})


def test_every_method_parameter_is_a_known_parameter():
    for method in METHODS.values():
        assert method.parameters, method.name
        assert set(method.parameters) <= set(PARAMETERS), method.name
        assert set(method.defaults) <= set(method.parameters), method.name
    # and every parameter is taken by some method
    assert set(PARAMETERS) == methods.ALL_PLUGIN_KEYS


def test_every_method_has_a_one_line_description_and_a_cap():
    for method in METHODS.values():
        assert method.description and "\n" not in method.description
        assert method.num_speculative_tokens >= 1


@pytest.mark.parametrize("name", list(METHODS))
def test_defaults_validate_and_the_factory_builds(name):
    method = METHODS[name]
    settings, draft = config.split_speculative_config(
        {"method": name, "model": "d"}, VLLM_KEYS)
    assert settings.num_speculative_tokens == method.num_speculative_tokens
    for key in method.parameters:
        parameter = PARAMETERS[key]
        resolved = {"num_speculative_tokens": settings.num_speculative_tokens,
                    **settings.to_dict()}
        # the default is what the settings hold, and validation keeps it
        assert getattr(settings, key) == parameter.default_for(method, resolved)
        assert parameter.validate(getattr(settings, key), resolved) == getattr(settings, key)
    # keys no method of this kind takes are None, unless every method carries them
    for key, parameter in PARAMETERS.items():
        if key not in method.parameters and not parameter.every_method:
            assert getattr(settings, key) is None, (name, key)
    policy = method.make_policy(settings)
    assert isinstance(policy, DraftLengthPolicy)
    assert policy.max_num_draft_tokens == settings.num_speculative_tokens
    assert type(settings.make_policy()) is type(policy)
    assert draft == {"method": "draft_model", "model": "d",
                     "num_speculative_tokens": settings.num_speculative_tokens}


@pytest.mark.parametrize("key", list(PARAMETERS))
def test_every_parameter_refuses_a_bad_value_naming_itself(key):
    name = next(m for m in METHODS if key in METHODS[m].parameters)
    with pytest.raises(GammaTuneConfigError, match=rf"\['{key}'\]"):
        config.split_speculative_config(
            {"method": name, "model": "d", key: "not a value"}, VLLM_KEYS)


def test_lossy_methods_and_names_come_from_the_registry():
    assert config.LOSSY_METHODS == ("adasd",)
    assert config.PLUGIN_METHODS == tuple(METHODS)
    assert all(config.is_plugin_method(m) for m in METHODS)
    assert not config.is_plugin_method("draft_model")
    # the AdaSD window of 20 (the paper's W) is its default cap and window
    adasd, _ = config.split_speculative_config({"method": "adasd", "model": "d"}, VLLM_KEYS)
    assert adasd.num_speculative_tokens == adasd.adasd_window == 20
    assert config.DEFAULT_ADASD_NUM_SPECULATIVE_TOKENS == 20


def test_markdown_table_lists_every_method_once_with_its_defaults():
    table = methods.markdown_table()
    lines = table.splitlines()
    assert len(lines) == 2 + len(METHODS)
    for name, line in zip(METHODS, lines[2:]):
        assert line.startswith(f"| `{name}` |")
        assert METHODS[name].description in line
    assert "| `adasd` | no (lossy) | 20 | `adasd_mode='both'`, `adasd_window=20` |" in table
    assert "`confidence_threshold=0.4`" in lines[2 + list(METHODS).index("assistant_threshold")]


def test_the_docs_read_the_registry():
    """docs/methods.md is the registry's table; the README's methods table
    names exactly the registry's methods, the lossy one marked."""
    import re
    from pathlib import Path

    from vllm_gammatune.methods import registry as methods

    root = Path(__file__).resolve().parents[2]
    assert methods.markdown_table() in (root / "docs" / "methods.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Methods"):readme.index("## Metrics")]
    listed = re.findall(r"^\| `([a-z_]+)`( \(\*\*lossy\*\*\))? \|", section, flags=re.M)
    assert sorted(name for name, _ in listed) == sorted(methods.PLUGIN_METHODS)
    assert {name for name, lossy in listed if lossy} == set(methods.LOSSY_METHODS)
