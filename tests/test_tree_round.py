"""`tree_round`'s pieces by content: the draft's private server args, the accepted KV move
(in place, as SGLang's pool does it) and the accepted path's features."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tests.kernels_env import INTERPRETED  # noqa: E402  (before the drop-in's kernels are decorated)


@pytest.fixture(scope="module")
def tr(dropin):
    return dropin("tree_round")


class Args:
    def __init__(self) -> None:
        self.speculative_num_draft_tokens = 33
        self.max_speculative_num_draft_tokens = 33  # as a cached_property leaves it


class Recorded(Args):
    """0.5.17+: the resolved record refuses assignment; its base setter is the way in."""

    def __setattr__(self, name, value):
        raise AttributeError(f"{name} is read-only")


@pytest.mark.parametrize("cls", [Args, Recorded])
def test_draft_server_args_is_a_copy_with_the_block_width(tr, cls):
    args = cls.__new__(cls)
    object.__setattr__(args, "__dict__", Args().__dict__)
    draft = tr.draft_server_args(args, 8)
    assert draft is not args and type(draft) is cls
    assert draft.speculative_num_draft_tokens == 8
    assert "max_speculative_num_draft_tokens" not in draft.__dict__
    assert args.speculative_num_draft_tokens == 33 and args.max_speculative_num_draft_tokens == 33


class Pool:
    """SGLang's `move_kv_cache` contract: slot src[i]'s KV onto dst[i], in place, one pass."""

    def __init__(self, slots: int) -> None:
        self.kv = torch.arange(slots, dtype=torch.float32) * 10

    def move_kv_cache(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        self.kv[dst] = self.kv[src]


def test_accepted_kv_lands_at_the_path_positions(tr, dropin):
    pool = Pool(40)
    cache_loc = torch.tensor([[10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25]])
    accepted = torch.tensor([[0, 2, 4], [0, 1, -1]])
    slots = tr.move_accepted_kv(dropin("kv_move").SlotMover(pool), accepted, torch.tensor([2, 1]), cache_loc, 5)
    assert slots.tolist() == [[10, 11, 12], [20, 21, 22]]
    assert (pool.kv[10:16] / 10).tolist() == [10, 12, 14, 13, 14, 15]
    assert (pool.kv[20:26] / 10).tolist() == [20, 21, 22, 23, 24, 25]  # past accept_len: untouched


class MHATokenToKVPool:
    """The fields of SGLang's slot-major pool that `SlotMover`'s own kernel reads (its type name
    selects that path): K and V buffers per layer and their addresses and slot strides."""

    def __init__(self, slots: int, layers: int = 2) -> None:
        gen = torch.Generator().manual_seed(slots)
        self.layer_num = layers
        self.k_buffer = [torch.randn(slots, 2, 8, generator=gen).to(torch.bfloat16) for _ in range(layers)]
        self.v_buffer = [torch.randn(slots, 2, 8, generator=gen).to(torch.bfloat16) for _ in range(layers)]
        buffers = self.k_buffer + self.v_buffer
        self.data_ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
        self.data_strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers])


@pytest.mark.skipif(not INTERPRETED, reason="the move kernel on CPU tensors needs TRITON_INTERPRET=1")
def test_slot_mover_moves_words_of_a_slot_major_pool(tr, dropin):
    """The pool's 32-byte slots at allocator-aligned addresses move as 8-byte words; the accepted
    nodes' K and V land at the path positions, nothing else changes."""
    pool = MHATokenToKVPool(40)
    before = [b.clone() for b in pool.k_buffer + pool.v_buffer]
    mover = dropin("kv_move").SlotMover(pool)
    assert mover.direct and mover.word == 8 and mover.tile == 32  # the whole 32-byte slot per program
    cache_loc = torch.tensor([[10, 11, 12, 13, 14, 15], [20, 21, 22, 23, 24, 25]])
    accepted = torch.tensor([[0, 2, 4], [0, 1, -1]])
    tr.move_accepted_kv(mover, accepted, torch.tensor([2, 1]), cache_loc, 5)
    for old, new in zip(before, pool.k_buffer + pool.v_buffer):
        want = old.clone()
        want[[11, 12]] = old[[12, 14]]
        assert torch.equal(new, want)


def test_path_features_gathers_the_accepted_nodes(tr):
    bs, width, tree_size = 2, 4, 3
    hidden = torch.arange(bs * width, dtype=torch.float32)[:, None].repeat(1, 2)
    accepted = torch.tensor([[0, 2], [0, 1]])
    path = tr.path_features(hidden, accepted, width, tree_size)
    assert path[..., 0].tolist() == [[0, 2], [4, 5]]
    flat = tr.path_features(hidden, accepted, width, tree_size, lengths=torch.tensor([2, 1]))
    assert flat[:, 0].tolist() == [0, 2, 4]


@pytest.mark.parametrize("page_size, prefix, commit, kept", [
    (1, [10, 20], [3, 0], [3, 0]),  # page size 1: exactly the committed slots
    (4, [10, 12], [3, 0], [6, 0]),  # 13 -> the page ends at 16; 12 is a page boundary: all go back
    (4, [10, 9], [0, 9], [2, 9]),  # the prefix's own partial page stays; the width caps it
    (16, [5, 30], [1, 2], [9, 2]),  # 6 -> 16 (capped at the width 9); 32 is a page end
])
def test_paged_keep_slots_hold_the_last_committed_page(tr, page_size, prefix, commit, kept):
    got = tr.paged_keep_slots(torch.tensor(prefix), torch.tensor(commit, dtype=torch.int32), 9, page_size)
    assert got.tolist() == kept
