"""The CUDA graph replayer (``tests/graph_shapes.py``) on hand-made decode
steps: vLLM's own dispatcher, configured as on CUDA, gives FULL only to a
batch whose every query is ``1 + K``. The engine test
(``tests/e2e/test_cuda_graph_shapes.py``) trusts these verdicts."""

from __future__ import annotations

import pytest
from graph_shapes import cuda_dispatcher, decode_shape, replay

MAX_NUM_SEQS = 16


@pytest.fixture(scope="module", params=[3, 8], ids=lambda k: f"K={k}")
def k_and_dispatcher(request):
    return request.param, cuda_dispatcher(MAX_NUM_SEQS, request.param)


def test_the_dispatcher_is_set_up_as_on_cuda(k_and_dispatcher):
    # FULL graphs for uniform decode, piecewise for the rest; the capture
    # sizes rounded to multiples of 1 + K (what resolve_cudagraph_mode_and_sizes
    # does on CUDA with spec decode), the largest covering a full decode batch
    k, dispatcher = k_and_dispatcher
    compilation = dispatcher.compilation_config
    assert compilation.cudagraph_mode.name == "FULL_AND_PIECEWISE"
    assert dispatcher.uniform_decode_query_len == 1 + k
    assert all(size % (1 + k) == 0 for size in compilation.cudagraph_capture_sizes)
    assert compilation.max_cudagraph_capture_size >= MAX_NUM_SEQS * (1 + k)


def test_every_query_one_plus_k_gets_the_full_graph(k_and_dispatcher):
    k, dispatcher = k_and_dispatcher
    for batch in range(1, MAX_NUM_SEQS + 1):
        assert replay(dispatcher, decode_shape([1 + k] * batch)).name == "FULL", batch


@pytest.mark.parametrize("query_lens", [
    # one request drafted fewer tokens than the cap: the adaptive case
    lambda k: [1 + k, 1 + k, k],
    # a request that skipped drafting next to one that drafted fully
    lambda k: [1 + k, 1],
    lambda k: [2, 3, 1 + k, 1],
], ids=["one_short", "one_skipped", "all_different"])
def test_mixed_query_lengths_run_piecewise(k_and_dispatcher, query_lens):
    k, dispatcher = k_and_dispatcher
    assert replay(dispatcher, decode_shape(query_lens(k))).name == "PIECEWISE"


def test_no_request_drafting_is_not_uniform_decode_when_k_is_set(k_and_dispatcher):
    # a step where every request skips drafting has the shape of a step
    # without speculation, which a dispatcher for 1 + K has no FULL graph for
    k, dispatcher = k_and_dispatcher
    for batch in (1, 4, MAX_NUM_SEQS):
        assert replay(dispatcher, decode_shape([1] * batch)).name == "PIECEWISE", batch


def test_a_batch_above_the_largest_capture_size_runs_eager(k_and_dispatcher):
    _, dispatcher = k_and_dispatcher
    too_many = dispatcher.compilation_config.max_cudagraph_capture_size + 1
    assert replay(dispatcher, decode_shape([too_many])).name == "NONE"
