"""draft_kv.catch_up_passes: the catch-up passes over the positions the draft missed."""

from __future__ import annotations

import math

import pytest

from vllm_gammatune.draft_kv.catch_up_passes import plan_catch_up_passes


@pytest.mark.parametrize("capacity", [1, 3, 7, 100])
def test_catch_up_passes_cover_each_segment_once_in_order(capacity):
    segments = [(0, 10, 17), (3, 0, 5), (5, 4, 4), (7, 2, 3)]
    passes = plan_catch_up_passes(segments, capacity)
    for p in passes:
        assert sum(end - start for _, start, end in p) <= capacity
        assert len({row for row, _, _ in p}) == len(p)  # a request once per pass
    covered: dict[int, list[int]] = {}
    for p in passes:
        for row, start, end in p:
            covered.setdefault(row, []).extend(range(start, end))
    assert covered == {0: list(range(10, 17)), 3: list(range(5)), 7: [2]}
    assert len(passes) == math.ceil(13 / capacity) or capacity < 7
