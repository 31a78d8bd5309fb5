import torch

from vllm_gammatune.verify.cpu_sampling_fix import expand_batch_to_tokens


def never_called(*args):
    raise AssertionError("vLLM's kernel must not be used for CPU tensors")


def test_expand_repeats_each_request_value_for_its_tokens():
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float32)
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    out = expand_batch_to_tokens(never_called, x, cu, 6, replace_from=-1, replace_to=1)
    assert out.dtype == torch.float32
    assert out.tolist() == [0.5, 0.5, 1.0, 1.0, 1.0, 2.0]


def test_expand_int_values_and_requests_without_tokens():
    x = torch.tensor([5, 7, 9], dtype=torch.int32)
    cu = torch.tensor([0, 3, 4], dtype=torch.int32)  # first request drafted nothing
    out = expand_batch_to_tokens(never_called, x, cu, 4)
    assert out.dtype == torch.int32 and out.tolist() == [7, 7, 7, 9]
