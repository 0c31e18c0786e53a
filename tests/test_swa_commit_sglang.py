"""DDTree's commit move (patches/kv_move.py SlotMover) on SGLang 0.5.15's own hybrid sliding-window
KV pool (SWAKVPool + SWATokenToKVPoolAllocator, CPU): the accepted nodes' KV lands on the path slots
in the full-attention layers and, through the allocator's full -> SWA slot map, in the sliding-window
layers; the rejected nodes' slots go back to both allocators. Runs in a subprocess with the cached
0.5.15 CPU venv (real SGLang on PYTHONPATH, DDTree's drop-ins under their installed package name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.release_probe import run_probe

pytestmark = pytest.mark.heavy  # runs SGLang 0.5.15's own code in its CPU venv, in a subprocess

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.5.15"

PROBE = r"""
import json, sys, types
from pathlib import Path
import torch
import sglang.srt.speculative  # noqa: F401
REPO = Path(sys.argv[1])
for name, folder in (("sglang.srt.speculative.ddtree", "patches"), ("sglang.srt.speculative.ddtree.kernels", "kernels")):
    module = types.ModuleType(name); module.__path__ = [str(REPO / folder)]; sys.modules[name] = module
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.speculative.ddtree.kv_move import SlotMover

SWA_LAYERS, FULL_LAYERS = [0, 2], [1, 3]
pool = SWAKVPool(size=64, size_swa=32, page_size=1, dtype=torch.float32, head_num=2, head_dim=8,
                 swa_attention_layer_ids=SWA_LAYERS, full_attention_layer_ids=FULL_LAYERS, device="cpu",
                 enable_kv_cache_copy=True)  # as SGLang builds it for speculative decoding
alloc = SWATokenToKVPoolAllocator(64, 32, 1, torch.float32, "cpu", pool, need_sort=False)
old = alloc.alloc(28)
alloc.free_swa(old[:26])  # slid out of the window (as SGLang evicts): full and SWA slot numbers now differ
free_before = (alloc.full_available_size(), alloc.swa_available_size())
tree = alloc.alloc(8)  # one request's 8 tree nodes
for layer in SWA_LAYERS + FULL_LAYERS:
    for buf in (pool.get_key_buffer(layer), pool.get_value_buffer(layer)):
        buf.copy_(torch.randn_like(buf))
before = {l: (pool.get_key_buffer(l).clone(), pool.get_value_buffer(l).clone()) for l in SWA_LAYERS + FULL_LAYERS}
swa = pool.translate_loc_from_full_to_swa
accepted = torch.tensor([0, 2, 5])  # the root, its second child, a grandchild: off the first-child chain
src, dst = tree[accepted], tree[:3]
mover = SlotMover(pool)
mover.move(dst[None], src[None])
out = {"direct": mover.direct, "maps_differ": not torch.equal(swa(tree), tree)}
for l in FULL_LAYERS:
    out[f"full{l}"] = bool(torch.equal(pool.get_key_buffer(l)[dst], before[l][0][src]) and
                           torch.equal(pool.get_value_buffer(l)[dst], before[l][1][src]))
for l in SWA_LAYERS:
    # get_key_buffer of a sliding-window layer is the SWA pool's buffer, indexed by SWA slot
    out[f"swa{l}"] = bool(torch.equal(pool.get_key_buffer(l)[swa(dst)], before[l][0][swa(src)]) and
                          torch.equal(pool.get_value_buffer(l)[swa(dst)], before[l][1][swa(src)]))
alloc.free(tree[3:])  # the rejected nodes' slots (the path now sits in the first 3)
out["freed"] = [alloc.full_available_size() - (free_before[0] - 3), alloc.swa_available_size() - (free_before[1] - 3)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(release_site) -> dict:
    return run_probe(VERSION, release_site, PROBE, str(REPO))


def test_the_swa_pool_takes_sglangs_own_move(probe: dict) -> None:
    assert probe["direct"] is False and probe["maps_differ"]


def test_accepted_kv_lands_on_the_path_slots_in_both_pools(probe: dict) -> None:
    assert probe["full1"] and probe["full3"]
    assert probe["swa0"] and probe["swa2"]


def test_rejected_slots_return_to_both_allocators(probe: dict) -> None:
    assert probe["freed"] == [0, 0]
