"""Entropy and Jensen-Shannon distance against scipy and hand values."""

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon
from scipy.stats import entropy as scipy_entropy

from vllm_gammatune.verify.divergences import entropy_bits, js_distance, js_divergence_bits


def random_rows(shape, zero_fraction, seed, dtype=torch.float64):
    """Probability rows with about ``zero_fraction`` exact zeros per row."""
    gen = torch.Generator().manual_seed(seed)
    raw = torch.rand(shape, generator=gen, dtype=torch.float64) ** 4
    raw[torch.rand(shape, generator=gen) < zero_fraction] = 0.0
    raw[..., 0] += 1e-3  # no all-zero row
    return (raw / raw.sum(dim=-1, keepdim=True)).to(dtype)


# -- entropy ------------------------------------------------------------------
def test_entropy_hand_values():
    probs = torch.tensor(
        [
            [0.25, 0.25, 0.25, 0.25],  # uniform over 4: 2 bits
            [0.0, 1.0, 0.0, 0.0],  # one-hot: 0
            [0.5, 0.5, 0.0, 0.0],  # 1 bit, zeros ignored
            [0.5, 0.25, 0.25, 0.0],  # 0.5*1 + 2*0.25*2 = 1.5 bits
        ],
        dtype=torch.float64,
    )
    assert entropy_bits(probs).tolist() == [2.0, 0.0, 1.0, 1.5]


def test_entropy_matches_scipy_on_rows_with_zeros():
    probs = random_rows((6, 50), zero_fraction=0.5, seed=0)
    expected = [scipy_entropy(row, base=2) for row in probs.numpy()]
    assert (probs == 0).any()
    assert entropy_bits(probs).numpy() == pytest.approx(expected, abs=1e-12)


def test_entropy_batched_shape_and_dtypes():
    probs = random_rows((2, 3, 40), zero_fraction=0.3, seed=1)
    out = entropy_bits(probs)
    assert out.shape == (2, 3) and out.dtype == torch.float64
    assert entropy_bits(probs.float()).dtype == torch.float32
    assert entropy_bits(probs.to(torch.bfloat16)).dtype == torch.float32
    assert entropy_bits(probs.float(), dtype=torch.float64).dtype == torch.float64
    flat = entropy_bits(probs.reshape(6, 40)).reshape(2, 3)
    assert torch.equal(out, flat)


# -- Jensen-Shannon -----------------------------------------------------------
def test_js_identical_rows_are_exactly_zero():
    for dtype in (torch.float32, torch.float64):
        p = random_rows((5, 64), zero_fraction=0.4, seed=2, dtype=dtype)
        assert js_divergence_bits(p, p.clone()).tolist() == [0.0] * 5
        assert js_distance(p, p.clone()).tolist() == [0.0] * 5
    one_hot = torch.tensor([[0.0, 1.0, 0.0]])
    assert js_distance(one_hot, one_hot).item() == 0.0


def test_js_disjoint_supports_are_distance_one():
    p = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.25, 0.75]], dtype=torch.float64)
    assert js_divergence_bits(p, q).tolist() == [1.0, 1.0]
    assert js_distance(p, q).tolist() == [1.0, 1.0]


def test_js_hand_value_from_the_entropy_form():
    # m = [0.75, 0.25]: D = H(m) - (H(p) + H(q))/2 = H(m) - (0 + 1)/2
    p = torch.tensor([1.0, 0.0], dtype=torch.float64)
    q = torch.tensor([0.5, 0.5], dtype=torch.float64)
    h_m = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert js_divergence_bits(p, q).item() == pytest.approx(h_m - 0.5, abs=1e-15)
    assert js_distance(p, q).item() == pytest.approx(math.sqrt(h_m - 0.5), abs=1e-15)


def test_js_distance_matches_scipy_on_rows_with_zeros():
    p = random_rows((8, 100), zero_fraction=0.5, seed=3)
    q = random_rows((8, 100), zero_fraction=0.5, seed=4)
    assert ((p == 0) & (q > 0)).any() and ((p == 0) & (q == 0)).any()
    expected = [jensenshannon(a, b, base=2) for a, b in zip(p.numpy(), q.numpy())]
    out = js_distance(p, q)
    assert not torch.isnan(out).any()
    assert out.numpy() == pytest.approx(expected, abs=1e-12)


def test_js_divergence_matches_the_papers_entropy_form():
    p = random_rows((4, 30), zero_fraction=0.3, seed=5)
    q = random_rows((4, 30), zero_fraction=0.3, seed=6)
    m = (p + q) / 2
    expected = entropy_bits(m) - (entropy_bits(p) + entropy_bits(q)) / 2
    assert js_divergence_bits(p, q).numpy() == pytest.approx(expected.numpy(), abs=1e-12)
    assert torch.allclose(js_distance(p, q) ** 2, js_divergence_bits(p, q), atol=1e-15)


def test_js_is_symmetric_bounded_and_batched():
    p = random_rows((3, 2, 20), zero_fraction=0.5, seed=7)
    q = random_rows((3, 2, 20), zero_fraction=0.5, seed=8)
    d = js_distance(p, q)
    assert d.shape == (3, 2)
    assert torch.equal(d, js_distance(q, p))
    assert bool(((d >= 0) & (d <= 1)).all())
    assert torch.equal(d.reshape(6), js_distance(p.reshape(6, 20), q.reshape(6, 20)))


def test_js_float32_is_close_to_float64_on_a_large_vocab():
    p = random_rows((4, 32000), zero_fraction=0.2, seed=9)
    q = random_rows((4, 32000), zero_fraction=0.2, seed=10)
    exact = js_divergence_bits(p, q)
    approx = js_divergence_bits(p.float(), q.float())
    assert approx.dtype == torch.float32
    assert np.abs(approx.double().numpy() - exact.numpy()).max() < 1e-5


def test_js_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"same shape.*\(2, 4\).*\(2, 5\)"):
        js_distance(torch.full((2, 4), 0.25), torch.full((2, 5), 0.2))
