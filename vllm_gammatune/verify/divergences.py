"""Entropy and Jensen-Shannon distance of probability rows, in bits.

AdaSD (Section 2.2) measures a draft token's uncertainty by the entropy of the
draft distribution, H(q) = -sum_x q(x) log2 q(x) (2.2.1), and the
disagreement of draft and target by the Jensen-Shannon distance
d_JS(p || q) = sqrt(D_JS(p || q)) (2.2.5), where

    D_JS(p || q) = 1/2 KL(p || m) + 1/2 KL(q || m) = H(m) - (H(p) + H(q)) / 2,
    m = (p + q) / 2   (2.2.4),

which lies in [0, 1] in base 2.

Inputs are probability rows: the last dimension is the vocabulary, every
leading dimension is a batch dimension (``[..., vocab] -> [...]``). Rows are
used as given (no renormalisation). Zeros are exact: 0 log 0 = 0, so
one-hot rows have entropy exactly 0.

D_JS is summed from its KL form, one term per vocabulary entry,

    D_JS = 1/2 sum_x [ p(x) log2(2 p(x) / (p(x) + q(x)))
                     + q(x) log2(2 q(x) / (p(x) + q(x))) ],

not from the difference of entropies: each bracket is >= 0 (it equals
(p + q)(1 - h(p / (p + q))) with h the binary entropy), so nothing cancels
across the vocabulary, and where p(x) == q(x) the ratio is exactly 1, so
identical rows give exactly 0.0 with no epsilon. Disjoint rows give 1.0. The
result is clamped to [0, 1] against rounding (a bracket of nearly equal p and
q can round a hair below 0).

Precision: computed in float32, or in float64 when an input is float64; pass
``dtype=torch.float64`` to force it (a [rows, vocab] temporary costs twice the
memory). The result has the computation's dtype.
"""

from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype | None, *tensors: torch.Tensor) -> torch.dtype:
    if dtype is not None:
        return dtype
    if any(t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def _x_log2_ratio(x: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """x * log2(ratio), with 0 where x == 0 (whatever ratio is there)."""
    # [..., vocab]
    return torch.where(x > 0, x * torch.log2(ratio), torch.zeros_like(x))


def entropy_bits(probs: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """H(p) = -sum_x p(x) log2 p(x) of each row (Section 2.2.1).

    Args:
        probs: [..., vocab] probability rows.
    Returns:
        [...] entropies in bits, >= 0.
    """
    # [..., vocab]
    p = probs.to(_compute_dtype(dtype, probs))
    # [...]
    return (-_x_log2_ratio(p, p).sum(dim=-1)).clamp_min(0.0)


def js_divergence_bits(
    p: torch.Tensor, q: torch.Tensor, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """D_JS(p || q) of each pair of rows, base 2, in [0, 1] (Section 2.2.4).

    Args:
        p, q: [..., vocab] probability rows of the same shape.
    Returns:
        [...] divergences.
    """
    if p.shape != q.shape:
        raise ValueError(
            f"p and q must have the same shape [..., vocab], got {tuple(p.shape)} "
            f"and {tuple(q.shape)}"
        )
    compute = _compute_dtype(dtype, p, q)
    # [..., vocab]
    p = p.to(compute)
    q = q.to(compute)
    total = p + q  # 2 m
    # where p(x) = q(x) = 0 both terms are 0; avoid 0 / 0 there
    total = torch.where(total > 0, total, torch.ones_like(total))
    terms = _x_log2_ratio(p, 2.0 * p / total) + _x_log2_ratio(q, 2.0 * q / total)
    # [...]
    return (0.5 * terms.sum(dim=-1)).clamp(0.0, 1.0)


def js_distance(
    p: torch.Tensor, q: torch.Tensor, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """d_JS(p || q) = sqrt(D_JS(p || q)) of each pair of rows, in [0, 1]
    (Section 2.2.5).

    Args:
        p, q: [..., vocab] probability rows of the same shape.
    Returns:
        [...] distances.
    """
    # [...]
    return torch.sqrt(js_divergence_bits(p, q, dtype=dtype))
