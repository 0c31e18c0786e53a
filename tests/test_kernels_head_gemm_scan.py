"""`kernels/head_gemm_scan.py`: the draft head's GEMM with the top-K's scan in its epilogue.

Its top-K must be exactly the top-K of the logits it wrote (the reference: torch's stable sort and
LSE of those logits), and those logits the head's product up to the summation order. Interpreted on
the CPU (small tiles); on a GPU at the vocabulary of Qwen3 with the default (Hopper) tiles.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES, INTERPRETED

from kernels.head_gemm_scan import head_gemm_scan, head_gemm_topk, n_tiles_n
from kernels.vocab_topk import GROUP, SUPER, scan_stage, topk_parts_torch

interpreted = pytest.mark.skipif(not INTERPRETED, reason="Triton on CPU needs TRITON_INTERPRET=1")

SMALL = dict(block_m=16, block_n=64, block_k=32, group_m=2)  # interpreter-sized tiles


def _check(hidden: torch.Tensor, weight: torch.Tensor, k: int, **tiles) -> None:
    parts, logits = head_gemm_topk(hidden, weight, k, **tiles)
    x = hidden.reshape(-1, hidden.shape[-1]).to(weight.dtype).to(torch.float32)  # the head's input rounding
    want = x @ weight.to(torch.float32).T
    torch.testing.assert_close(logits.reshape(want.shape).float(), want, atol=1e-2, rtol=1e-2)  # output rounding
    ref = topk_parts_torch(logits, k)
    assert torch.equal(parts.tokens, ref.tokens)
    assert torch.equal(parts.values, ref.values)
    torch.testing.assert_close(parts.lse, ref.lse, atol=4e-6, rtol=0)


@pytest.mark.heavy
@interpreted
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("rows, vocab, hidden, k", [(6, 1000, 64, 8), (17, 2100, 96, 16), (1, 513, 40, 4)])
def test_interpreted_topk_equals_the_topk_of_the_written_logits(rows, vocab, hidden, k, tma):
    """Rows past a whole M tile, a vocabulary past whole N tiles and super-groups, a hidden size that is
    not a multiple of BLOCK_K (40: the descriptors' zero fill past K); bf16 like the runtime's head; the
    per-tile kernel and the persistent descriptor kernel."""
    g = torch.Generator().manual_seed(rows)
    h = torch.randn(1, rows, hidden, generator=g)
    w = (torch.randn(vocab, hidden, generator=g) / hidden**0.5 * 4).to(torch.bfloat16)
    _check(h, w, k, tma=tma, **SMALL)


@interpreted
def test_descriptor_kernel_writes_the_same_logits_and_parts():
    """Same tiles, same summation order: the persistent descriptor kernel's output equals the per-tile one's
    bit for bit; a row length TMA cannot describe is refused."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(21, 96, generator=g)
    w = (torch.randn(1500, 96, generator=g) / 10).to(torch.bfloat16)
    a, pa = head_gemm_scan(x, w, **SMALL)
    b, pb = head_gemm_scan(x, w, tma=True, **SMALL)
    assert torch.equal(a, b) and all(torch.equal(u, v) for u, v in zip(pa, pb))
    with pytest.raises(ValueError, match="H=95"):
        head_gemm_scan(x[:, :95], w[:, :95], tma=True, **SMALL)


@pytest.mark.parametrize("device", DEVICES)
def test_ties_rank_in_token_order(device):
    """Duplicated head rows give equal logits: the smaller token id first, as torch's stable sort."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(40, 32, generator=g).to(torch.bfloat16).repeat(25, 1).to(device)  # V = 1000, each logit 25 times
    h = torch.randn(2, 3, 32, generator=g).to(device)
    _check(h, w, 16, **(SMALL if device == "cpu" else {}))


@interpreted
def test_epilogue_parts_are_the_scans_maxima():
    """The group maxima equal the streaming scan's over the same logits (the padding past V is -inf),
    and the super-group maxima are their maxima; without the scan only the logits come back."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 64, generator=g)
    w = torch.randn(1100, 64, generator=g).to(torch.bfloat16)
    logits, parts = head_gemm_scan(x, w, **SMALL)
    groups = -(-1100 // GROUP)
    scan = scan_stage(logits)
    assert torch.equal(parts.gmax[:, :groups], scan.gmax[:, :groups])
    assert torch.all(parts.gmax[:, groups:] == float("-inf"))
    assert parts.smax.shape == (5, -(-groups // SUPER))
    assert torch.equal(parts.smax, parts.gmax.view(5, -1, SUPER).amax(dim=2))
    plain, none = head_gemm_scan(x, w, scan=False, **SMALL)
    assert none is None and torch.equal(plain, logits)


def test_bad_tiles_and_k_are_refused():
    with pytest.raises(ValueError, match="block_n=48"):
        n_tiles_n(1000, 48)
    with pytest.raises(ValueError, match="block_n=1024"):
        n_tiles_n(1000, 1024)
    with pytest.raises(ValueError, match="k=300"):
        head_gemm_topk(torch.zeros(1, 1, 8), torch.zeros(1000, 8), 300)
    with pytest.raises(ValueError, match="x \\[rows, H\\]"):
        head_gemm_scan(torch.zeros(2, 8), torch.zeros(100, 9))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("rows", [15, 120, 960])
def test_cuda_topk_equals_the_topk_of_the_written_logits(rows, tma):
    """Qwen3's vocabulary, the default (Hopper) tiles, batch 1 / 8 / 64 of a 15-deep draft, both kernels."""
    g = torch.Generator(device="cuda").manual_seed(rows)
    h = torch.randn(1, rows, 512, device="cuda", generator=g)
    w = (torch.randn(151936, 512, device="cuda", generator=g) / 512**0.5 * 4).to(torch.bfloat16)
    _check(h, w, 64, tma=tma)
