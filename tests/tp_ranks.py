"""One tensor-parallel rank of tests/test_tp_topk.py: `python tests/tp_ranks.py RANK WORLD OUT_DIR`.

Run with PYTHONPATH = a site from `make_site` (the drop-in as SGLang loads it, and a stand-in
`sglang.srt.distributed.get_tp_group` over the default torch.distributed group), then the repo. Each
rank joins a gloo group, takes its vocab shard of every case (SGLang's layout, `shard_range`) and
saves what it computed to OUT_DIR/rank{RANK}.pt.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch

from tests.round_harness.stubs import bare_site

REPO = Path(__file__).resolve().parents[1]
PAD_TO = 64  # SGLang's DEFAULT_VOCAB_PADDING_SIZE

DISTRIBUTED_STUB = '''import torch.distributed as dist


class _TPGroup:
    """SGLang's GroupCoordinator as DFlash and DDTree use it: world_size, all_gather_into_tensor."""

    @property
    def world_size(self):
        return dist.get_world_size()

    def all_gather_into_tensor(self, output, input):
        dist.all_gather_into_tensor(output, input)


def get_tp_group():
    return _TPGroup()
'''


def make_site(site: Path, tp_group_stub: bool) -> Path:
    """A site holding only the sglang packages the drop-in needs, the drop-in itself and, optionally,
    the TP-group stand-in."""
    bare_site(site)
    if tp_group_stub:
        (site / "sglang/srt/distributed").mkdir(parents=True, exist_ok=True)
        (site / "sglang/srt/distributed/__init__.py").write_text(DISTRIBUTED_STUB)
    return site


def shard_range(vocab: int, rank: int, world: int) -> tuple[int, int]:
    """[start, end) of the original vocabulary on `rank`: SGLang's VocabParallelEmbedding._get_indices
    (vocab padded to PAD_TO, split evenly, then clipped to the real vocabulary)."""
    per = -(-vocab // PAD_TO) * PAD_TO // world
    return min(rank * per, vocab), min((rank + 1) * per, vocab)


def case_logits(name: str) -> tuple[torch.Tensor, int]:
    """(full draft logits [bs, D, V], K) of a named case."""
    gen = torch.Generator().manual_seed(7)
    if name == "random":
        return torch.randn(2, 3, 1000, generator=gen) * 4, 24
    if name == "ties_across_boundary":  # shards [0, 512) and [512, 1000)
        logits = torch.randint(-3, 3, (2, 3, 1000), generator=gen).float() * 0.5  # hundreds of ties at rank K
        logits[0, 0, 505:520] = 10.0  # the top-15 tie straddles the shard boundary
        logits[0, 1] = torch.where(torch.rand(1000, generator=gen) < 0.5, -0.0, 0.0)  # signed zeros only
        logits[1, 0, ::3] = float("-inf")
        logits[1, 2, 600:] = float("-inf")  # rank 1's shard mostly masked
        return logits, 24
    if name == "short_padded_shard":  # padded to 128: shards [0, 64) and [64, 70), 6 real logits < K
        logits = torch.randn(1, 2, 70, generator=gen)
        logits[..., 64:] += 20.0
        logits[0, 1, :67] = float("-inf")  # 3 finite logits: 13 masked tokens (rank 0's, in token order) fill K
        return logits, 16
    if name == "empty_shard":  # padded to 64: shards [0, 30) and [30, 30)
        return torch.randn(2, 2, 30, generator=gen) * 3, 8
    raise KeyError(name)


CASES = ("random", "ties_across_boundary", "short_padded_shard", "empty_shard")
TREE_CASES = ((1000, 40, 8), (70, 24, None), (30, 12, 4))  # (V, budget, topk): K 8; K 24 > rank 1's 6; rank 1 empty
HIDDEN = 16


def tree_case(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(draft features [bs, L, H], full lm_head weight [V, H]) for the lm_head-level check."""
    gen = torch.Generator().manual_seed(11)
    return torch.randn(3, 5, HIDDEN, generator=gen), torch.randn(vocab, HIDDEN, generator=gen)


def shard_head(weight: torch.Tensor, rank: int, world: int) -> types.SimpleNamespace:
    """A ParallelLMHead stand-in for `rank`: the shard's rows plus garbage padding rows (never read)."""
    vocab = weight.shape[0]
    start, end = shard_range(vocab, rank, world)
    per = -(-vocab // PAD_TO) * PAD_TO // world
    rows = torch.full((per, weight.shape[1]), 1e4)
    rows[: end - start] = weight[start:end]
    shard = types.SimpleNamespace(org_vocab_start_index=start, org_vocab_end_index=end, num_org_elements=end - start)
    return types.SimpleNamespace(weight=rows, shard_indices=shard, tp_size=world, org_vocab_size=vocab)


def main(rank: int, world: int, out_dir: Path) -> None:
    import torch.distributed as dist

    from sglang.srt.distributed import get_tp_group
    from sglang.srt.speculative.ddtree.kernels.tp_topk import sharded_topk
    from sglang.srt.speculative.ddtree.tp_draft import build_draft_tree
    from sglang.srt.speculative.ddtree.tree_round import draft_vocab_logits

    dist.init_process_group("gloo", init_method=f"file://{out_dir / 'rendezvous'}", rank=rank, world_size=world)
    result: dict = {}
    for name in CASES:
        logits, k = case_logits(name)
        start, end = shard_range(logits.shape[-1], rank, world)
        result[name] = sharded_topk(logits[..., start:end].contiguous(), k, start, logits.shape[-1], get_tp_group())
    for vocab, budget, topk in TREE_CASES:
        features, weight = tree_case(vocab)
        head = shard_head(weight, rank, world)
        result[f"tree_{vocab}"] = build_draft_tree(draft_vocab_logits(features, head), head, budget, topk)._asdict()
    dist.destroy_process_group()
    torch.save(result, out_dir / f"rank{rank}.pt")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
