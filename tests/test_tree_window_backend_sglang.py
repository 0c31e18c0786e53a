"""Sliding-window target verify through SGLang's own Triton attention backend (0.5.14, 0.5.15) on a CPU
(interpreted): `TritonAttnBackend` built on a hybrid SWA KV pool (`SWAKVPool`, full and SWA slot
numbers apart), its target-verify metadata (`init_forward_metadata`: window KV lists and offsets,
`mask_indptr`, the verify width) and `forward_extend` for one sliding-window and one full-attention
layer, fed the tree mask as DDTree's round builds it for Triton (prefix columns unwritten). Each
node's output is compared with decoding its path alone. SGLang's own kernel hides prefix keys from
branch nodes; with DDTree's wrapper installed before the backend is built (as the spec-v2 worker
does) every node is exact. Stand-ins: the model runner's fields and the tensor-parallel group only.
"""

from __future__ import annotations

import pytest

from tests.release_probe import run_probe

pytestmark = pytest.mark.heavy  # runs SGLang 0.5.15's own code in its CPU venv, in a subprocess

# 0.5.14 (the first spec-v2 release) and 0.5.15; from 0.5.23 the backend reads a published runtime
# context and plans KV reads through a translator, which these stand-ins do not build
VERSIONS = ("0.5.14", "0.5.15")

PROBE = r"""
import json, sys, types
from pathlib import Path
from types import SimpleNamespace as NS
import torch
import sglang.srt.speculative  # noqa: F401
REPO = Path.cwd()
for name, folder in (("sglang.srt.speculative.ddtree", "patches"), ("sglang.srt.speculative.ddtree.kernels", "kernels")):
    module = types.ModuleType(name); module.__path__ = [str(REPO / folder)]; sys.modules[name] = module
from sglang.srt.speculative.ddtree import tree_window
from sglang.srt.speculative.ddtree.kernels.tree_mask import build_tree_mask_torch

INSTALL = sys.argv[1] == "installed"
if INSTALL:
    tree_window.install()  # as the worker does, before the backend binds the kernel
from sglang.srt.layers.attention import triton_backend as tb
from sglang.srt.configs.model_config import AttentionArch
from sglang.srt.layers.radix_attention import AttentionType
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from sglang.srt.model_executor.forward_batch_info import ForwardMode

torch.manual_seed(0)
H, KV, D, W, N = 4, 2, 32, 5, 8
tb.get_parallel = lambda: NS(attn_tp_size=1)  # stand-in: no process group on a CPU
SWA, FULL = 0, 1
PREFIX = [13, 3]
PARENTS = [[-1, 0, 0, 1, 1, 2, 0, 5], [-1, 0, 1, 0, 3, 0, 5, 2]]
bs = len(PREFIX)
import inspect
release_only = {"enable_kvcache_transpose": False}  # 0.5.14 asks for it
pool = SWAKVPool(size=128, size_swa=64, page_size=1, dtype=torch.float32, head_num=KV, head_dim=D,
                 swa_attention_layer_ids=[SWA], full_attention_layer_ids=[FULL], device="cpu", enable_kv_cache_copy=True,
                 **{k: v for k, v in release_only.items() if k in inspect.signature(SWAKVPool.__init__).parameters})
alloc = SWATokenToKVPoolAllocator(128, 64, 1, torch.float32, "cpu", pool, need_sort=False)
req_to_token = torch.zeros(4, 64, dtype=torch.int32)
layers = {lid: NS(layer_id=lid, sliding_window_size=W if lid == SWA else -1, tp_q_head_num=H, tp_k_head_num=KV,
                  tp_v_head_num=KV, qk_head_dim=D, v_head_dim=D, head_dim=D, scaling=D ** -0.5, logit_cap=0.0,
                  logit_capping_method="tanh", k_scale=None, v_scale=None, k_scale_float=None, v_scale_float=None,
                  is_cross_attention=False, attn_type=AttentionType.DECODER, xai_temperature_len=-1)
          for lid in (SWA, FULL)}
prefix_kv = {}
for b, L in enumerate(PREFIX):
    slots = alloc.alloc(L)
    req_to_token[b, :L] = slots.to(torch.int32)
    for lid, layer in layers.items():
        k, v = torch.randn(L, KV, D), torch.randn(L, KV, D)
        pool.set_kv_buffer(layer, KVWriteLoc(slots, pool.translate_loc_from_full_to_swa(slots)), k, v)
        prefix_kv[(b, lid)] = (k, v)
tree_slots = alloc.alloc(bs * N)
for b in range(bs):
    req_to_token[b, PREFIX[b]:PREFIX[b] + N] = tree_slots[b * N:(b + 1) * N].to(torch.int32)

server_args = NS(speculative_num_draft_tokens=N, speculative_num_steps=N - 1, speculative_eagle_topk=None,
                 triton_attention_num_kv_splits=8, chunked_prefill_size=8192, enable_deterministic_inference=False,
                 triton_attention_split_tile_size=None)
model_config = NS(attention_arch=AttentionArch.MHA, num_attention_heads=H, get_num_kv_heads=lambda tp: KV, v_head_dim=D,
                  swa_v_head_dim=D, context_len=64, is_encoder_decoder=False)
runner = NS(req_to_token_pool=NS(size=4, req_to_token=req_to_token), token_to_kv_pool=pool,
            token_to_kv_pool_allocator=alloc, sliding_window_size=W, page_size=1, server_args=server_args,
            model_config=model_config, hybrid_gdn_config=None, kimi_linear_config=None, linear_attn_model_spec=None,
            device="cpu", gpu_id=0)
backend = tb.TritonAttnBackend(runner)
lens = torch.tensor(PREFIX)
mask = build_tree_mask_torch(torch.tensor(PARENTS), lens, sum(PREFIX) + 5, prefix_ones=False)  # as the round builds it
batch = NS(batch_size=bs, forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=torch.arange(bs), seq_lens=lens,
           seq_lens_sum=sum(PREFIX), seq_lens_cpu=lens, out_cache_loc=tree_slots, positions=None,
           spec_info=NS(custom_mask=mask, draft_token_num=N), encoder_lens=None, mamba_track_mask=None)
backend.init_forward_metadata(batch)

def path(parent, i):
    out = [i]
    while parent[out[-1]] >= 0:
        out.append(parent[out[-1]])
    return out[::-1]

out = {}
for lid, layer in layers.items():
    q, k, v = torch.randn(bs * N, H * D), torch.randn(bs * N, KV, D), torch.randn(bs * N, KV, D)
    o = backend.forward_extend(q, k, v, layer, batch).view(bs * N, H, D)
    window = W if lid == SWA else 10**9
    err = 0.0
    for b, L in enumerate(PREFIX):
        pk, pv = prefix_kv[(b, lid)]
        tk, tv = k.view(bs, N, KV, D)[b], v.view(bs, N, KV, D)[b]
        for i in range(N):
            nodes = path(PARENTS[b], i)
            qpos = L + len(nodes) - 1
            keys = [(pk[p], pv[p], p) for p in range(L)] + [(tk[j], tv[j], L + d) for d, j in enumerate(nodes)]
            seen = [(kk, vv) for kk, vv, pos in keys if qpos - pos <= window]
            K, V = torch.stack([s[0] for s in seen]), torch.stack([s[1] for s in seen])
            for h in range(H):
                s = K[:, h // (H // KV)] @ q.view(bs * N, H, D)[b * N + i, h] * D ** -0.5
                ref = torch.softmax(s, 0) @ V[:, h // (H // KV)]
                err = max(err, (o[b * N + i, h] - ref).abs().max().item())
    out["swa" if lid == SWA else "full"] = err
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=VERSIONS)
def errors(request, release_site) -> dict:
    return {mode: run_probe(request.param, release_site, PROBE, mode, repo_on_path=True)
            for mode in ("sglang", "installed")}


def test_sglangs_backend_alone_hides_prefix_keys_from_branch_nodes(errors: dict) -> None:
    assert errors["sglang"]["swa"] > 0.05 and errors["sglang"]["full"] < 1e-5


def test_with_the_wrapper_installed_every_node_attends_its_path_exactly(errors: dict) -> None:
    assert errors["installed"]["swa"] < 1e-5 and errors["installed"]["full"] < 1e-5
