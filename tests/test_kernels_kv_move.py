"""KV slot move that skips identity and padding entries: Triton on raw buffer addresses vs torch."""

from __future__ import annotations

import pytest
import torch

from tests.kernels_env import DEVICES

from kernels.commit import MOVE_WORDS, move_slots_torch, move_slots_triton, move_word


def _pairs(bs: int, n: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Accepted-path moves as the worker makes them: request b owns slots b*n .. b*n+n-1 (node order),
    dst = the first `length` of them, src = the slot of the accepted node (strictly increasing node
    index >= depth, so a dst can be a later depth's src), -1 past the accepted length."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.arange(bs * n).view(bs, n)[:, :length].clone()
    src = torch.full((bs, length), -1, dtype=torch.int64)
    for b in range(bs):
        accepted = int(torch.randint(1, length + 1, (1,), generator=gen))
        nodes = torch.randperm(n - 1, generator=gen)[: accepted - 1].sort().values + 1
        path = torch.cat([torch.zeros(1, dtype=torch.int64), nodes])
        src[b, :accepted] = b * n + path
    return dst, src


SHAPES = {  # buffers of one pool (slot = first dimension): the widest word all their strides allow
    8: [((2, 24), torch.bfloat16), ((6,), torch.float32), ((8,), torch.uint8)],
    4: [((2, 24), torch.bfloat16), ((5,), torch.float32)],
    1: [((2, 24), torch.bfloat16), ((5,), torch.float32), ((3,), torch.uint8)],
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bs,n,length,tile,word", [(3, 9, 4, 16, 1), (4, 65, 16, 64, 1), (1, 2, 2, 512, 1),
                                                   (3, 9, 4, 16, 8), (4, 65, 16, 64, 4), (2, 9, 5, 8, 8)])
def test_move_equals_torch(device: str, bs: int, n: int, length: int, tile: int, word: int) -> None:
    """Words of 8 / 4 bytes (strides 48 / 20 and 24 bytes) and bytes, tiles smaller and larger than a slot."""
    dst, src = _pairs(bs, n, length, seed=bs * 100 + n)
    src[0, 0] = dst[0, 0]  # the root never moves; identity entries are skipped
    gen = torch.Generator().manual_seed(n)
    buffers = [(torch.randn((bs * n + 3, *shape), generator=gen) * 50).to(dtype) for shape, dtype in SHAPES[word]]
    expect = [b.clone() for b in buffers]
    live = (src >= 0) & (src != dst)
    for b in expect:  # dst slots get the pre-move source rows
        b[dst[live]] = b.clone()[src[live]]
    ref = [b.clone() for b in buffers]
    move_slots_torch(ref, dst, src)
    assert all(torch.equal(r, e) for r, e in zip(ref, expect))
    for skip_identity in (True, False):  # False: the copy-everything baseline of the benchmark
        got = [b.to(device, copy=True) for b in buffers]
        ptrs = torch.tensor([b.data_ptr() for b in got], dtype=torch.uint64, device=device)
        strides = torch.tensor([b.stride(0) * b.element_size() for b in got], device=device)
        assert move_word([b.data_ptr() for b in got], strides.tolist()) >= word
        move_slots_triton(ptrs, strides, max(b.stride(0) * b.element_size() for b in got), dst.to(device),
                          src.to(device), tile=tile, skip_identity=skip_identity, word=word)
        assert all(torch.equal(g.cpu(), e) for g, e in zip(got, expect))


def test_move_word() -> None:
    """The widest of 8, 4, 2, 1 bytes dividing every address and stride."""
    assert move_word([4096, 8192], [2048, 48]) == 8
    assert move_word([4096, 8192], [2048, 20]) == 4
    assert move_word([4096, 8194], [2048]) == 2
    assert move_word([4096], [2048, 5]) == 1
    assert MOVE_WORDS[0] == 8
    with pytest.raises(ValueError, match="word"):
        move_slots_triton(torch.zeros(1, dtype=torch.uint64), torch.ones(1, dtype=torch.int64), 8,
                          torch.zeros(1, 1, dtype=torch.int64), torch.zeros(1, 1, dtype=torch.int64), word=3)


def test_move_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="equal"):
        move_slots_torch([torch.zeros(4)], torch.zeros(2, 3, dtype=torch.int64), torch.zeros(3, 2, dtype=torch.int64))
