"""The split posterior kernel (`kernels/posterior_split.py`), the one the runtime launches on CUDA.

Its draws must equal the reference's (`posterior_tokens_torch`), and so the per-node kernel's, to
the token: odd vocabularies and one-token last blocks, flat rows that take several check rounds,
any number of split rounds before the per-row tail, exact ties at block edges. On the CPU the
Triton code runs interpreted (slow: a few settings only); on CUDA (`-m gpu`) it is compiled, and
`test_split_equals_runtime_full_vocab` also compares it with the per-node kernel at V=151936. One
chi-square setting of tests/test_sampling_distribution.py (min-p) checks the split kernel's
distribution against SGLang's directly (the per-node kernel runs all of them there).
"""

from __future__ import annotations

import pytest
import torch

from tests.cuda_graph import capture_graph
from tests.kernels_env import DEVICES, INTERPRETED

from kernels.posterior import CUTS, POOL, POOL_FLAT, SPAN, TOP_K_CUTS, TOP_P_CUTS, UNIT, posterior_tokens_triton
from kernels.posterior_pool import pool_eligible_torch, pool_floor_torch
from kernels.posterior_reference import posterior_tokens_torch
from kernels.posterior_split import posterior_tokens_split
from tests.test_sampling_distribution import _check, _draw


def _mixed_case(bs: int, n: int, vocab: int, scale: float, seed: int):
    """Logits [bs, n, V] bf16 and per-request parameters covering greedy, each filter and joint ones."""
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(bs, n, vocab, generator=gen) * scale).to(torch.bfloat16)
    temp = torch.tensor([0.0, 0.7, 1.0, 1.3, 1.0, 0.5, 0.0, 2.0])[:bs]
    top_k = torch.tensor([0, 5, -1, 3, 400, 1, 7, 50])[:bs]
    top_p = torch.tensor([1.0, 0.9, 0.5, 1.0, 0.95, 1.0, 0.3, 0.8])[:bs]
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.3, 0.0, 0.5, 0.05])[:bs]
    seed = torch.randint(0, 2**60, (bs,), generator=gen)
    positions = torch.randint(0, 5000, (bs, n), generator=gen)
    return logits, temp, top_k, top_p, seed, min_p, positions


def _padded_blocks(logits: torch.Tensor, temp: torch.Tensor, block: int) -> torch.Tensor:
    """z = logits / T of [bs, n, V] logits as [bs * n, blocks, block], the last block padded with -inf
    (the layout `pool_floor_torch` ranks)."""
    bs, n, vocab = logits.shape
    nb = -(-vocab // block)
    return torch.nn.functional.pad(logits.reshape(bs * n, vocab) / temp.repeat_interleave(n)[:, None],
                                   (0, nb * block - vocab), value=float("-inf")).view(bs * n, nb, block)


def _same_as_reference(device: str, case, block: int, par_rounds: tuple[int, ...] = (3,), unit: int = UNIT,
                       blocks_per_program: int = 8, index_ties: bool = False, top_k_cuts: int = TOP_K_CUTS,
                       top_p_cuts: int = TOP_P_CUTS, **knobs) -> torch.Tensor:
    logits, temp, top_k, top_p, seed, min_p, positions = case
    ref = posterior_tokens_torch(logits, temp, top_k, top_p, seed, min_p=min_p, positions=positions, block=block,
                                 unit=unit, index_ties=index_ties, top_k_cuts=top_k_cuts, top_p_cuts=top_p_cuts)
    for rounds in par_rounds:
        got = posterior_tokens_split(*(t.to(device) for t in (logits, temp, top_k, top_p, seed)),
                                     min_p=min_p.to(device), positions=positions.to(device), block=block,
                                     par_rounds=rounds, unit=unit, blocks_per_program=blocks_per_program,
                                     index_ties=index_ties, top_k_cuts=top_k_cuts, top_p_cuts=top_p_cuts,
                                     **knobs)
        assert torch.equal(got.cpu(), ref), (block, rounds, unit, blocks_per_program, index_ties, top_k_cuts,
                                             top_p_cuts, knobs)
    greedy = (temp == 0) | (top_k == 1)
    assert torch.equal(ref[greedy], logits.float().argmax(-1)[greedy])
    return ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("vocab,block,scale", [
    (300, 64, 3.0),      # several blocks per row, the last one partial
    (300, 2048, 3.0),    # one block per row (the block shrinks to the vocabulary)
    (2049, 2048, 3.0),   # a last block of one token
    (8192, 2048, 0.3),   # flat rows over 4 full blocks: top-k / top-p take several rounds
])
def test_split_equals_torch(device: str, vocab: int, block: int, scale: float) -> None:
    _same_as_reference(device, _mixed_case(8, 9 if vocab <= 2049 else 3, vocab, scale, seed=vocab), block)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_split_rounds_equal_sequential_rounds(device: str) -> None:
    """Every row finished alone (0 split rounds), after 1 split round, or after the default 3: same draws."""
    _same_as_reference(device, _mixed_case(8, 6, 1000, 0.5, seed=5), 128, par_rounds=(0, 1, 3))


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("listed_from,check_programs", [(1, None), (1, 1), (2, 2), (3, None)])
def test_listed_rounds_equal_torch(device: str, listed_from: int, check_programs: int | None) -> None:
    """Check rounds over the list of rows still drawing (from round 1 or 2; 3: none listed), their
    items claimed by one program or a few: the reference's draws."""
    _same_as_reference(device, _mixed_case(8, 6, 1000, 0.5, seed=5), 128, listed_from=listed_from,
                       check_programs=check_programs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("knob", ["listed_from", "check_programs", "stats_bpp", "pool_bpp", "blocks_per_program"])
def test_bad_launch_knobs_refused(device: str, knob: str) -> None:
    case = _mixed_case(2, 2, 300, 0.5, seed=1)
    with pytest.raises(ValueError, match=knob):
        posterior_tokens_split(*(t.to(device) for t in case[:5]), block=128, **{knob: 0})


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("unit,blocks_per_program", [(16, 1), (64, 3), (128, 8)])
def test_units_and_programs_equal_torch(device: str, unit: int, blocks_per_program: int) -> None:
    """Units inside a block (the top-k floor ranks their maxima; the mass pass skips the spans
    below the floor, here whole blocks) or units that are the blocks give the reference's draws,
    split or in the per-row tail, whatever the blocks per mass / check / stats program (8 blocks per
    row: 1, 3 with a partial last group, all 8)."""
    _same_as_reference(device, _mixed_case(8, 6, 1000, 0.5, seed=9), 128, par_rounds=(0, 3), unit=unit,
                       blocks_per_program=blocks_per_program, stats_bpp=blocks_per_program)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("unit", [32, 64])
def test_spans_of_fine_units_equal_torch(device: str, unit: int) -> None:
    """Blocks of 1024 tokens hold 4 spans of SPAN tokens; with units of 32 or 64, a span is skipped
    only when none of its units reaches above the floor: the reference's draws on flat rows whose
    top-k (8-40) the floor serves, split (and in the per-row tail) and per node."""
    assert 1024 // SPAN == 4
    case = list(_mixed_case(8, 2, 3000, 0.3, seed=13))
    case[2] = torch.tensor([0, 8, -1, 20, 30, 1, 7, 40])
    ref = _same_as_reference(device, case, 1024, par_rounds=(0, 3), unit=unit)
    logits, temp, top_k, top_p, seed, min_p, positions = (t.to(device) for t in case)
    per_node = posterior_tokens_triton(logits, temp, top_k, top_p, seed, min_p=min_p, positions=positions, block=1024,
                                       unit=unit)
    assert torch.equal(per_node.cpu(), ref)


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("top_k_cuts,top_p_cuts,unit", [(CUTS, 1, UNIT), (CUTS, 3, UNIT), (1, 3, 16), (3, CUTS, 16),
                                                        (CUTS, CUTS, UNIT)])
def test_cut_counts_equal_torch(device: str, top_k_cuts: int, top_p_cuts: int, unit: int) -> None:
    """Other cut candidate counts on rows with top-k (with units of 16 tokens too: a tighter floor)
    or without (speed knobs): the reference's draws, split or in the per-row tail, and per node,
    with either tie order."""
    logits, temp, top_k, top_p, seed, min_p, positions = case = _mixed_case(8, 4, 1000, 0.5, seed=11)
    for index_ties in (False, True):
        ref = _same_as_reference(device, case, 128, par_rounds=(0, 3), unit=unit, index_ties=index_ties,
                                 top_k_cuts=top_k_cuts, top_p_cuts=top_p_cuts)
        per_node = posterior_tokens_triton(*(t.to(device) for t in (logits, temp, top_k, top_p, seed)),
                                           min_p=min_p.to(device), positions=positions.to(device), block=128, unit=unit,
                                           index_ties=index_ties, top_k_cuts=top_k_cuts, top_p_cuts=top_p_cuts)
        assert torch.equal(per_node.cpu(), ref), (index_ties, top_k_cuts, top_p_cuts)
    for knob in ("top_k_cuts", "top_p_cuts"):
        with pytest.raises(ValueError, match=knob):
            posterior_tokens_split(*(t.to(device) for t in case[:5]), block=128, **{knob: CUTS + 1})
        with pytest.raises(ValueError, match=knob):
            posterior_tokens_triton(*(t.to(device) for t in case[:5]), block=128, **{knob: 0})


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_index_ties_equal_torch(device: str) -> None:
    """Ties ordered by index (SGLang's pytorch sampler): bf16 rows with ties at their top-k / top-p
    cuts give the reference's draws, split (with and without split rounds) and per node, and
    differ from the value order's somewhere."""
    case = list(_mixed_case(8, 3, 8192, 0.3, seed=3))
    case[2] = torch.tensor([0, 20, -1, 24, 400, 1, 7, 50])  # top-k 20 / 24: ties at the cut on these rows
    ref = _same_as_reference(device, case, 2048, par_rounds=(0, 3), index_ties=True)
    logits, temp, top_k, top_p, seed, min_p, positions = case
    per_node = posterior_tokens_triton(*(t.to(device) for t in (logits, temp, top_k, top_p, seed)), min_p=min_p.to(device),
                                       positions=positions.to(device), index_ties=True)
    # the per-node kernel has no candidate pool (the top-k 50 row has one: 4 blocks of at most 64)
    assert torch.equal(per_node.cpu(), posterior_tokens_torch(logits, temp, top_k, top_p, seed, min_p=min_p,
                                                              positions=positions, index_ties=True, pool=0))
    assert not torch.equal(ref, posterior_tokens_torch(logits, temp, top_k, top_p, seed, min_p=min_p,
                                                       positions=positions))


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_pooled_rows_equal_torch(device: str) -> None:
    """Rows whose top-k (20-40) exceeds their floor units (12 here: blocks of 512, units of 256) draw from
    the candidate pool: the reference's draws (which differ from the unpooled ones: another first
    floor), split with and without split rounds, in both tie orders; a peaked request, and a row
    whose blocks hold more than POOL tokens above its floor (all logits tied), are not pooled and
    still draw as the reference, also with a pool pass of a program per block and a stats pass of 4
    blocks per program (speed knobs)."""
    case = list(_mixed_case(4, 3, 3000, 0.3, seed=21))
    case[1] = torch.tensor([1.0, 0.7, 1.0, 1.3])
    case[2] = torch.tensor([20, 40, 30, 36])
    case[3] = torch.tensor([1.0, 0.9, 1.0, 0.95])
    case[5] = torch.tensor([0.0, 0.0, 0.3, 0.0])
    case[0] = case[0].float()
    case[0][3, 2] = 0.5  # one row of equal logits: its floor sits just under all of them
    case[0][0] *= 6  # a peaked request (block maxima hold more than 1 / POOL_FLAT of their mass): not pooled
    zb = _padded_blocks(case[0], case[1], 512)
    flat = (torch.exp(zb - zb.amax(-1, keepdim=True)).sum(-1)[:, :5] >= POOL_FLAT).all(-1)  # 5 full blocks
    pooled = pool_floor_torch(zb, flat, case[2].repeat_interleave(3), POOL, 3000)[0]
    assert pooled.tolist() == [False] * 3 + [True] * 8 + [False]
    for index_ties, knobs in ((False, {}), (True, {}), (False, dict(pool_bpp=1)),
                              (False, dict(stats_bpp=4))):
        ref = _same_as_reference(device, case, 512, par_rounds=(0, 3), index_ties=index_ties, **knobs)
        logits, temp, top_k, top_p, seed, min_p, positions = case
        unpooled = posterior_tokens_torch(logits, temp, top_k, top_p, seed, min_p=min_p, positions=positions, block=512,
                                          index_ties=index_ties, pool=0)
        assert (ref != unpooled).sum() >= 5
        assert ref[3, 2] == unpooled[3, 2] and torch.equal(ref[0], unpooled[0])


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_pooled_row_with_a_peaked_last_block(device: str) -> None:
    """A row whose full blocks are flat but whose partial last block is peaked (one high logit there)
    is pooled (the floor ranks full blocks only), and its pool holds that block's tokens above the
    floor: the draws equal the reference's, and the high token is drawn. (A design timed on the H200
    on 2026-12-04 left such a block out of the pool pass and drew from uninitialised memory.)"""
    case = list(_mixed_case(2, 8, 3000, 0.3, seed=33))
    case[0] = case[0].float()
    case[0][:, :, 2700] += 3.0  # in the last block (2560-2999): it holds more than 1 / POOL_FLAT of its mass
    case[1] = torch.tensor([1.0, 0.8])
    case[2] = torch.tensor([30, 36])
    case[3] = torch.ones(2)
    case[5] = torch.zeros(2)
    zb = _padded_blocks(case[0], case[1], 512)
    sums = torch.exp(zb - zb.amax(-1, keepdim=True)).sum(-1)
    assert (sums[:, :5] >= POOL_FLAT).all() and (sums[:, 5] < POOL_FLAT).all()
    assert pool_floor_torch(zb, torch.ones(16, dtype=torch.bool), case[2].repeat_interleave(8), POOL, 3000)[0].all()
    ref = _same_as_reference(device, case, 512, par_rounds=(0, 3))
    assert (ref == 2700).sum() >= 2


def test_pool_floor_holds_the_top_k() -> None:
    """At V=151936 (74 full blocks of 2048 and a partial one), top-k 600-2300, peaked and flat rows: at
    least k tokens lie above the floor, at most ~2.3 k on flat rows (the pool stays small), no block
    holds more than POOL of them; a row with a block of tied logits is not pooled; the pool serves
    top-k 595 (above the 594 floor units) to 2368 (74 x 32)."""
    gen = torch.Generator().manual_seed(4)
    zb = torch.randn(6, 75, 2048, generator=gen) * torch.tensor([0.3, 0.3, 4.0, 4.0, 1.0, 1.0])[:, None, None]
    zb[:, -1, 151936 - 74 * 2048:] = float("-inf")
    zb[5, 7] = 2.0
    k = torch.tensor([2000, 600, 2300, 1000, 2000, 2000])
    pooled, floor = pool_floor_torch(zb, torch.ones(6, dtype=torch.bool), k, POOL, 151936)
    above = (zb > floor[:, None, None])
    assert pooled.tolist() == [True] * 5 + [False]
    assert (above.sum((-1, -2))[:5] >= k[:5]).all()
    assert (above.sum((-1, -2))[:2] <= 2.3 * k[:2]).all()
    assert (above.sum(-1)[:5] <= POOL).all()
    eligible = pool_eligible_torch(torch.ones(4, dtype=torch.bool), torch.tensor([594, 595, 2368, 2369]), 151936, 75,
                                   256, 2048)
    assert eligible.tolist() == [False, True, True, False]


@pytest.mark.heavy
@pytest.mark.parametrize("device", DEVICES)
def test_ties_and_block_boundaries(device: str) -> None:
    """Exact ties at the cut, wherever they sit (the last token of a block, the first of the next,
    the last partial block), are all kept in the value order and kept lowest index first in the
    index order (a draw's rank then counts its ties in earlier blocks). Greedy takes the lowest
    index of a tie across blocks."""
    vocab, block, rows = 300, 64, 60
    tied = [63, 64, 200, 299]
    row = torch.linspace(-2.0, 1.0, vocab)
    row[tied] = 4.0
    logits = row.expand(rows, 1, vocab).contiguous()
    ones = torch.ones(rows)
    seed = torch.arange(rows) * 131 + 7
    # each tied token holds ~24 % of the mass: top-p 0.1 keeps the first one in the index order
    cases = {"top_k=2": (2, 1.0, tied[:2]), "top_k=4,top_p=0.1": (4, 0.1, tied[:1]), "top_k=3": (3, 1.0, tied[:3])}
    for name, (k, p, by_index) in cases.items():
        args = (logits, ones, torch.full((rows,), k), p * ones, seed)
        for index_ties, want in ((False, tied), (True, by_index)):
            ref = posterior_tokens_torch(*args, block=block, index_ties=index_ties)
            got = posterior_tokens_split(*(t.to(device) for t in args), block=block, index_ties=index_ties)
            assert torch.equal(got.cpu(), ref), (name, index_ties)
            assert set(ref.flatten().tolist()) == set(want), (name, index_ties)
    greedy = posterior_tokens_split(*(t.to(device) for t in (logits[:2], 0 * ones[:2], -ones[:2].long(), ones[:2],
                                                              seed[:2])), block=block)
    assert greedy.cpu().flatten().tolist() == [63, 63]
    last = torch.zeros(1, 1, vocab)
    last[0, 0, -1] = 1.0
    assert int(posterior_tokens_split(last.to(device), *(t.to(device) for t in (ones[:1] * 0, -ones[:1].long(),
                                                                                ones[:1], seed[:1])), block=block)) == 299


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (compiled kernels, the real vocabulary)")
@pytest.mark.parametrize("scale", [4.0, 0.3])
def test_split_equals_runtime_full_vocab(scale: float) -> None:
    """Compiled, at Qwen's V=151936 (75 blocks of 2048) and fp32 logits: split == runtime == reference."""
    logits, temp, top_k, top_p, seed, min_p, positions = (
        t.cuda() for t in _mixed_case(8, 16, 151936, scale, seed=int(scale * 10)))
    logits = logits.float()
    args = (logits, temp, top_k, top_p, seed)
    ref = posterior_tokens_torch(*args, min_p=min_p, positions=positions)
    assert torch.equal(posterior_tokens_triton(*args, min_p=min_p, positions=positions), ref)
    assert torch.equal(posterior_tokens_split(*args, min_p=min_p, positions=positions), ref)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (compiled kernels, the real vocabulary)")
@pytest.mark.parametrize("scale", [4.0, 0.3])
def test_pooled_rows_full_vocab(scale: float) -> None:
    """Compiled, at V=151936: rows with top-k 600-2300 (above the 594 floor units) draw from their
    pools, split == reference. (The per-node kernel, which has no pool, left the reference without
    one at a CDF boundary on these flat rows, H200 2026-12-04: `test_split_equals_runtime_full_vocab`
    compares it.)"""
    logits, temp, top_k, top_p, seed, min_p, positions = (
        t.cuda() for t in _mixed_case(8, 16, 151936, scale, seed=int(scale * 10) + 1))
    logits = logits.float()
    temp = torch.tensor([1.0, 0.7, 1.0, 1.3, 1.0, 0.5, 1.0, 2.0], device="cuda")
    top_k = torch.tensor([2000, 1000, 2000, 2300, 600, 2000, 1500, 2000], device="cuda")
    args = (logits, temp, top_k, top_p, seed)
    zb = _padded_blocks(logits, temp, 2048)
    assert pool_floor_torch(zb, torch.ones(128, dtype=torch.bool, device="cuda"), top_k.repeat_interleave(16),
                            POOL, 151936)[0].sum() >= 100
    ref = posterior_tokens_torch(*args, min_p=min_p, positions=positions)
    for knobs in (dict(pool_bpp=1), {}, dict(stats_bpp=4)):
        assert torch.equal(posterior_tokens_split(*args, min_p=min_p, positions=positions, **knobs), ref), knobs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CUDA-graph capture)")
def test_split_graph_replay_matches_eager() -> None:
    """Its fixed launch sequence captured once in a CUDA graph, replayed on new logits and seeds:
    the same draws as eager calls (the runtime replays its round, posterior included, in graphs)."""
    logits, temp, top_k, top_p, seed, min_p, positions = (t.cuda() for t in _mixed_case(8, 16, 151936, 0.3, seed=5))
    logits = logits.float()
    gen = torch.Generator(device="cuda").manual_seed(1)

    def call() -> torch.Tensor:
        return posterior_tokens_split(logits, temp, top_k, top_p, seed, min_p=min_p, positions=positions)

    graph, static = capture_graph(call)
    for scale in (0.3, 4.0, 1.0):
        logits.copy_(torch.randn(logits.shape, generator=gen, device="cuda") * scale)
        seed.add_(17)
        graph.replay()
        assert torch.equal(static, call()), scale


# Interpreted, the split kernel's draws are slow: one setting only, min-p (its mass pass; 71 s on
# the shared 2-core machine). Flat top-k 2000 (1,000 draws, several check rounds) passed too but
# took 388 s; the equality tests cover flat multi-round rows against the reference instead.
SPLIT_CHI_SQUARE = {"min_p_0.2": 2000}


@pytest.mark.heavy
@pytest.mark.skipif(not INTERPRETED, reason="the CPU run interprets Triton; on CUDA the equality tests cover it")
@pytest.mark.parametrize("name", list(SPLIT_CHI_SQUARE))
def test_interpreted_split_matches_sglang(name: str) -> None:
    _check(name, _draw(name, SPLIT_CHI_SQUARE[name], posterior_tokens_split))
