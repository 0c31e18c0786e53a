"""The Triton steps of the path penalties (`kernels/path_penalties.py`): the one-pass dense step
and the walk to the root that lists each node's path tokens.

It must equal the torch ops bit for bit (the same fp32 operations in the same order, IEEE division,
no fused multiply-add), for each penalty alone and all together, with min-new-tokens stop rows that
differ per node, logit bias, bf16 or fp32 logits and a vocabulary that ends mid-block. On the CPU
the kernel runs interpreted; on CUDA (`-m gpu`) compiled, where a fused multiply-add or an
approximate division would show as a bit difference.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.path_penalties import (DENSE_BLOCK, Penalties, apply_path_penalties, dense_adjust_torch,
                                    dense_adjust_triton, path_tokens_torch, path_tokens_triton)

PARENT = torch.tensor([[-1, 0, 0, 1, 1, 3, 2, 5, 6], [-1, 0, 1, 2, 3, 0, 5, 1, 7]])


def _case(vocab: int, dtype: torch.dtype, device: str, **use: bool):
    """Logits [2, 9, V], tree tokens with repeats, and penalties with the fields `use` names."""
    gen = torch.Generator().manual_seed(vocab)
    bs, n = PARENT.shape
    logits = (torch.randn(bs, n, vocab, generator=gen) * 3).to(dtype)
    tokens = torch.randint(0, 6, (bs, n), generator=gen)
    counts = torch.randint(0, 3, (bs, vocab), generator=gen).float() * (torch.rand(bs, vocab, generator=gen) < 0.3)
    stop = torch.zeros(bs, vocab, dtype=torch.bool)
    stop[:, [1, vocab - 1]] = True
    per_req = {"frequency": torch.tensor([0.5, 0.1]), "presence": torch.tensor([0.3, -0.2]),
               "repetition": torch.tensor([1.3, 0.7])}
    fields = {k: v.to(device) for k, v in per_req.items() if use.get(k)}
    if use.get("stop"):
        fields.update(stop_tokens=stop.to(device), out_len=torch.tensor([3, 10], device=device),
                      min_new_tokens=torch.tensor([5, 4], device=device))
    pen = Penalties(counts=counts.to(device), **fields)
    bias = torch.randn(bs, vocab, generator=gen).to(device) if use.get("bias") else None
    return logits.to(device), tokens.to(device), PARENT.to(device), pen, bias


SETTINGS = {
    "frequency": dict(frequency=True),
    "presence": dict(presence=True),
    "repetition": dict(repetition=True),
    "stop": dict(stop=True),
    "bias": dict(bias=True),
    "all": dict(frequency=True, presence=True, repetition=True, stop=True, bias=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("vocab,dtype", [(300, torch.float32), (DENSE_BLOCK + 77, torch.bfloat16)])
def test_dense_step_equals_torch_bitwise(device: str, name: str, vocab: int, dtype: torch.dtype) -> None:
    logits, _, _, pen, bias = _case(vocab, dtype, device, **SETTINGS[name])
    short = torch.tensor([[1, 1, 0, 1, 0, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0, 0, 0, 1]], dtype=torch.bool, device=device)
    short = short if pen.stop_tokens is not None else None
    want = dense_adjust_torch(logits, pen, short, bias)
    got = dense_adjust_triton(logits, pen, short, bias)
    assert got.dtype == torch.float32 and got.data_ptr() != logits.data_ptr()
    assert torch.equal(got, want), (got - want).abs().max()
    if name == "stop":  # the stop tokens are -inf exactly on the short rows
        assert torch.isinf(got[short][:, 1]).all() and not torch.isinf(got[~short][:, 1]).any()


@pytest.mark.parametrize("device", DEVICES)
def test_path_penalties_same_with_either_dense_step(device: str) -> None:
    """The whole per-node adjustment (dense step, then each node's path tokens) is the same with the
    Triton dense step, and the caller's logits are never written."""
    logits, tokens, parent, pen, bias = _case(300, torch.float32, device, **SETTINGS["all"])
    before = logits.clone()
    want = apply_path_penalties(logits, tokens, parent, 4, pen, bias, dense=dense_adjust_torch)
    got = apply_path_penalties(logits, tokens, parent, 4, pen, bias, dense=dense_adjust_triton)
    assert torch.equal(got, want)
    assert torch.equal(logits, before)


def test_no_dense_adjustment_leaves_the_logits_alone() -> None:
    """Counts but no penalty value: the dense step returns its input, so the path step must copy."""
    logits, tokens, parent, _, _ = _case(64, torch.float32, "cpu")
    before = logits.clone()
    out = apply_path_penalties(logits, tokens, parent, 4, Penalties(counts=torch.ones(2, 64)), None)
    assert torch.equal(out, before) and torch.equal(logits, before)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_depth", [1, 3, 8])  # shorter than the deepest path, about it, longer
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_walk_equals_torch(device: str, max_depth: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(max_depth)
    bs, n = 3, 12
    parent = torch.full((bs, n), -1)
    for j in range(1, n):  # random trees: each node's parent any earlier node
        parent[:, j] = torch.randint(0, j, (bs,), generator=gen)
    tokens = torch.randint(0, 50_000, (bs, n), generator=gen)
    want = path_tokens_torch(tokens, parent, max_depth)
    got = path_tokens_triton(tokens.to(dtype).to(device), parent.to(dtype).to(device), max_depth)
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), want)
    assert (want[:, 0] == -1).all() and (want[:, 1:, 0] == tokens[:, 1:]).all()


@pytest.mark.parametrize("device", DEVICES)
def test_walk_empty_shapes(device: str) -> None:
    tokens, parent = torch.zeros(2, 1, dtype=torch.int64, device=device), torch.full((2, 1), -1, device=device)
    assert path_tokens_triton(tokens, parent, 0).shape == (2, 1, 0)
    assert torch.equal(path_tokens_triton(tokens, parent, 2).cpu(), torch.full((2, 1, 2), -1))
