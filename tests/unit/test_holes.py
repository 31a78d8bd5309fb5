"""draft_kv.holes: where the draft's KV cache has holes, per request and per KV block."""

from __future__ import annotations

from vllm_gammatune.draft_kv.holes import DraftKVHoles


def test_holes_open_on_skip_close_on_catch_up_or_rewrite():
    holes = DraftKVHoles()
    holes.on_skipped(["a", "b"], [10, 20])
    holes.on_skipped(["a", "b"], [11, 21])  # still the first missed position
    assert holes.catch_up_tokens("a", 12) == 2
    assert holes.catch_up_tokens("c", 5) == 0
    # the draft runs: "a" caught up, "b" did not draft and stays behind
    holes.on_draft_pass(["a", "b"], [12, 22], caught_up={"a"})
    assert holes.hole_start("a") is None and holes.catch_up_tokens("b", 23) == 3
    # "b" is recomputed from position 5 (preemption): the pass rewrites its hole
    holes.on_draft_pass(["b"], [5], caught_up=set())
    assert holes.hole_start("b") is None
    holes.on_skipped(["x"], [3])
    holes.forget_missing({"y"})
    assert len(holes) == 0


def test_blocks_written_while_skipped_give_inheriting_requests_a_hole():
    """Prefix caching: a request whose first step starts after cached blocks
    the draft never wrote must catch up over them; valid blocks need nothing."""
    holes, size = DraftKVHoles(), 16
    # "a" writes positions 0-39 (blocks 7, 8, 9) while the draft skips
    holes.on_skipped(["a"], [0])
    holes.record_blocks("a", 0, 40, [7, 8, 9], size)
    assert all(holes.is_stale(b) for b in (7, 8, 9))
    # "b" shares a's first two blocks (32 cached positions) and starts at 32
    holes.inherit("b", 32, [7, 8, 12], size)
    assert holes.catch_up_tokens("b", 32) == 32  # the whole cached prefix
    holes.inherit("b", 32, [7, 8, 12], size)  # later steps change nothing
    assert holes.catch_up_tokens("b", 32) == 32
    # "b" catches up and drafts: the blocks it wrote hold draft KV again
    holes.on_draft_pass(["b"], [32], caught_up={"b"})
    holes.record_blocks("b", 0, 40, [7, 8, 12], size)
    assert not any(holes.is_stale(b) for b in (7, 8, 12))
    assert holes.is_stale(9)  # a's own block, still behind a's hole
    # "c" inherits the now valid blocks: no hole; a fresh request neither
    holes.inherit("c", 32, [7, 8, 13], size)
    holes.inherit("d", 0, [9], size)
    assert holes.catch_up_tokens("c", 32) == holes.catch_up_tokens("d", 0) == 0
    # a request without a hole that reuses a stale block rewrites it
    holes.record_blocks("d", 0, 5, [9], size)
    assert not holes.is_stale(9)
    # a request that drafts but keeps its hole leaves its blocks stale
    holes.on_skipped(["c"], [32])
    holes.on_draft_pass(["c"], [33], caught_up=set())
    holes.record_blocks("c", 33, 34, [7, 8, 13], size)
    assert holes.is_stale(13) and not holes.is_stale(8)
    holes.forget_missing({"a"})
    holes.inherit("b", 16, [9], size)  # forgotten: checked again as new
    assert holes.catch_up_tokens("b", 16) == 0


def test_a_step_seen_without_stale_blocks_marks_its_requests_checked():
    """``inherit_step``: with no stale block no request inherits a hole, and
    each is marked as checked, so a block that turns stale later gives none
    a hole mid-request; with stale blocks each request is checked as
    ``inherit`` checks it."""
    holes, size = DraftKVHoles(), 16
    assert holes.clear
    holes.inherit_step(["a", "b"], [32, 0], [[7, 8], [9]], size)
    assert holes.num_requests == 2
    holes.on_skipped(["x"], [0])
    holes.record_blocks("x", 0, 40, [7, 8, 9], size)
    assert not holes.clear
    holes.inherit_step(["a", "b", "c"], [48, 16, 32], [[7, 8], [9], [7, 8]], size)
    # "a" and "b" were checked at their first step; "c" inherits the stale blocks
    assert holes.catch_up_tokens("a", 48) == holes.catch_up_tokens("b", 16) == 0
    assert holes.catch_up_tokens("c", 32) == 32
