"""Gated DeltaNet target verify through SGLang's own hybrid linear-attention backend and Mamba pool
(0.5.14-0.5.23) on a CPU: `HybridLinearAttnBackend` over a real `GDNAttnBackend`, built on a real `HybridReqToTokenPool`
(its `MambaPool` with the verify caches), its target-verify metadata and `forward_extend` for one GDN
layer, fed DDTree's verify input for a tree wider than itself (padding rows), then SGLang's commit
(`update_mamba_state_after_mtp_verify`, its Triton scatter kernels). Each node's output is compared
with decoding its path alone, and the committed SSM state and conv window with the last accepted
node's (kernels/tree_recurrence_reference.py). Wired as DDTREE does for a GDN target
(patches/tree_recurrence.py: the backend and pool built for a tree, the tree's links in the verify
input, the commit's steps read as the accepted path's nodes) every node and the commit are exact;
unwired (DDTREE before: the chain path) outputs, state and window differ, and a commit at the
accepted length instead of the last node's row differs even after an exact verify.

Stand-ins: the short-convolution update (GPU-only Triton kernel; tests/gdn_conv_stand_in.py), the
model runner's and forward batch's fields, one rank (no batch padding), the full-attention backend (no
full-attention layer runs), the pool's verify caches allocated on the CPU (it names "cuda"), and the
scatter launchers' CUDA-device check (their kernels run interpreted). The server's arguments are
SGLang's own, from a tiny Qwen3-Next config, published as its config bags where the release has them.
The GDN recurrence is SGLang's own Triton kernel, interpreted.
"""

from __future__ import annotations

import pytest

from tests.cpu_serverargs.venv_builder import runtime_releases
from tests.release_probe import run_probe

pytestmark = pytest.mark.heavy  # runs SGLang's own code in its CPU venv, in a subprocess

# every spec-v2 release with a CPU venv recipe (0.5.17 has none); a release whose venv is not built is skipped
VERSIONS = runtime_releases(("0.5.14", "0.5.15", "0.5.16", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"))

PROBE = r"""
import json, sys
from pathlib import Path
import torchvision_stand_in
torchvision_stand_in.install(("uvicorn", "fastapi", "uvloop", "starlette"))  # 0.5.23 imports its HTTP server at load
from types import SimpleNamespace as NS
import torch
import torch.nn.functional as F
import sglang.srt.speculative  # noqa: F401
REPO = Path.cwd()
import importlib.util
for name, folder in (("sglang.srt.speculative.ddtree", "patches"), ("sglang.srt.speculative.ddtree.kernels", "kernels")):
    spec = importlib.util.spec_from_file_location(name, REPO / folder / "__init__.py",
                                                  submodule_search_locations=[str(REPO / folder)])
    module = importlib.util.module_from_spec(spec); sys.modules[name] = module; spec.loader.exec_module(module)
from sglang.srt.speculative.ddtree import tree_recurrence
from sglang.srt.speculative.ddtree.tree_verify import DDTreeVerifyInput, pad_tree
from kernels.tree_build import select_tree_torch
from kernels.vocab_topk import draft_topk_torch
from kernels.tree_recurrence_reference import tree_gated_delta, tree_causal_conv, committed_state
from tests import gdn_conv_stand_in

WIRED = sys.argv[1] == "wired"
if WIRED:
    tree_recurrence.install()  # as the worker does, before the target's pool and backends are built
from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape
from sglang.srt.layers.attention import hybrid_linear_attn_backend as hlab
from sglang.srt.layers.attention.linear import gdn_backend
from sglang.srt.mem_cache import memory_pool
from sglang.srt.model_executor.forward_batch_info import ForwardMode

gdn_backend.causal_conv1d_update = gdn_conv_stand_in.causal_conv1d_update  # the GPU-only kernel (module doc)
# the server's arguments, from a tiny Qwen3-Next config; 0.5.18+ publish them as config bags, which 0.5.23's
# backends read
import tempfile
from scripts.gpu import make_arch_models
from sglang.srt.server_args import ServerArgs
folder = Path(tempfile.mkdtemp()) / "target_gdn"
folder.mkdir()
(folder / "config.json").write_text(json.dumps(dict(make_arch_models.CONFIGS["gdn"], eos_token_id=1, pad_token_id=0)))
args = ServerArgs(model_path=str(folder), device="cpu", attention_backend="triton", linear_attn_backend="triton",
                  disable_radix_cache=True)
try:
    from sglang.srt.runtime_context import publish
except ImportError:
    pass
else:
    publish(args, role="test")
from contextlib import contextmanager, nullcontext

@contextmanager
def allocated_on_cpu():  # the pool allocates its verify caches on "cuda" by name
    zeros = torch.zeros
    torch.zeros = lambda *a, **kw: zeros(*a, **{**kw, "device": "cpu"} if kw.get("device") == "cuda" else kw)
    try:
        yield
    finally:
        torch.zeros = zeros

@contextmanager
def cuda_named():  # the commit's scatter launchers accept only CUDA tensors; their Triton kernels run interpreted
    torch.Tensor.is_cuda = property(lambda t: True)
    try:
        yield
    finally:
        del torch.Tensor.is_cuda

torch.manual_seed(0)
bs, H, HV, K, V, WIDTH = 2, 1, 2, 16, 8, 4
lp, tok = draft_topk_torch(torch.randn(bs, 4, 64) * 3, 9)
tree = select_tree_torch(lp, tok, 9)
n = tree.parent.shape[1]
verify_width = n + 2  # wider than the tree: padding rows, as a budget below the block gives
slots = torch.tensor([3, 1])  # the requests' Mamba slots: not their batch rows
shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=HV * V, n_groups=H, num_heads=HV, head_dim=V,
                                state_size=K, conv_kernel=WIDTH)
params = Mamba2CacheParams(shape=shape, layers=[0], dtype=Mamba2StateDType(conv=torch.float32, temporal=torch.float32))
with allocated_on_cpu():
    pool = memory_pool.HybridReqToTokenPool(size=4, mamba_size=4, mamba_spec_state_size=4, max_context_len=64, device="cpu",
                                            enable_memory_saver=False, cache_params=params, mamba_layer_ids=[0],
                                            enable_mamba_extra_buffer=False, speculative_num_draft_tokens=verify_width,
                                            speculative_eagle_topk=None)
pool.req_index_to_mamba_index_mapping[:bs] = slots.to(pool.req_index_to_mamba_index_mapping.dtype)
cache = pool.mamba_pool.mamba_cache
conv_dim = shape.conv_dim
h0 = torch.randn(bs, HV, V, K)
history = torch.randn(bs, conv_dim, WIDTH - 1)
cache.temporal[0, slots] = h0
cache.conv[0][0, slots] = history

try:  # 0.5.18+: the runner carries its linear-attention kernel choice; one rank, no batch padding
    from sglang.srt.layers.attention.linear.utils import LinearAttnBackends, LinearAttnKernelBackend
    kernels = {"linear_attn_backends": LinearAttnBackends(*[LinearAttnKernelBackend.TRITON] * 3)}
    import sglang.srt.utils.common as common
    common.get_eager_max_batch_size = lambda *args: args[-1]  # (server_args,) size: no padding
except ImportError:
    kernels = {}
runner = NS(device="cpu", is_draft_worker=False, req_to_token_pool=pool, token_to_kv_pool=None, server_args=args,
            **kernels)
linear = gdn_backend.GDNAttnBackend(runner)
full = NS(token_to_kv_pool=None, req_to_token_pool=pool, needs_cpu_seq_lens=False, kv_index_translator=None,
          init_forward_metadata=lambda fb: None)
backend = hlab.HybridLinearAttnBackend(full, linear, full_attn_layers=[1])

prefix = torch.tensor([5, 9])
verify = DDTreeVerifyInput.from_tree(pad_tree(tree, verify_width), torch.tensor([7, 8]), prefix, int(prefix.sum()),
                                     recurrent_links=WIRED)
class Fields(NS):  # the forward batch's other fields (0.5.23 reads more of them) at their default, None
    def __getattr__(self, name):
        return None

batch = Fields(batch_size=bs, forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=torch.arange(bs),
           input_ids=verify.draft_token, spec_info=verify, seq_lens=prefix, seq_lens_cpu=prefix,
           mamba_track_indices=None, mamba_track_mask=None, _original_batch_size=None,
           logical_forward_mode=ForwardMode.TARGET_VERIFY)  # 0.5.23: the mode its metadata plans for
backend.init_forward_metadata(batch)
layer = NS(layer_id=0, conv_weights=torch.randn(conv_dim, WIDTH), bias=None, activation="silu", q_dim=H * K,
           k_dim=H * K, v_dim=HV * V, num_q_heads=H, num_k_heads=H, num_v_heads=HV, head_q_dim=K, head_k_dim=K,
           head_v_dim=V, A_log=torch.randn(HV), dt_bias=torch.randn(HV))
rows = bs * verify_width
mixed, a, b = torch.randn(rows, conv_dim), torch.randn(rows, HV), torch.randn(rows, HV)
o = backend.forward_extend(layer, batch, mixed_qkv=mixed, a=a, b=b).reshape(bs, verify_width, HV, V)[:, :n]

# reference: each node decoded along its own path from the committed state
parent = tree.parent
x = mixed.view(bs, verify_width, conv_dim)[:, :n]
conv = tree_causal_conv(history, x, layer.conv_weights, None, parent)
q, k, v = conv.split([H * K, H * K, HV * V], dim=-1)
norm = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)
heads = lambda t: t.reshape(bs, n, H, K).repeat_interleave(HV // H, dim=2)
g = (-torch.exp(layer.A_log) * F.softplus(a.view(bs, verify_width, HV)[:, :n] + layer.dt_bias))
beta = torch.sigmoid(b.view(bs, verify_width, HV)[:, :n])
ref_o, ref_states = tree_gated_delta(h0.transpose(-1, -2), heads(norm(q)), heads(norm(k)), v.reshape(bs, n, HV, V),
                                     g, beta, parent, K ** -0.5)
out = {"tree": bool((parent[:, 1:] != torch.arange(n - 1)).any()), "out_diff": (o - ref_o).abs().max().item()}

# the commit: accept the path to the last node of each tree (off the leading chain)
paths = []
for r in range(bs):
    p = [n - 1]
    while parent[r, p[-1]] >= 0:
        p.append(int(parent[r, p[-1]]))
    paths.append(p[::-1])
out["off_chain"] = all(p != list(range(len(p))) for p in paths)
depth = max(map(len, paths))
accepted_idx = torch.full((bs, depth + 1), -1, dtype=torch.int64)
for r, p in enumerate(paths):
    accepted_idx[r, :len(p)] = torch.tensor(p)
accept_len = torch.tensor([len(p) - 1 for p in paths])
want_state = committed_state(ref_states, accepted_idx, accept_len).transpose(-1, -2)
window = lambda r, p: torch.cat([history[r], x[r, p].T], dim=1)[:, -(WIDTH - 1):]
want_window = torch.stack([window(r, p) for r, p in enumerate(paths)])
# the prefix cache tracks one request's state at the first step whose node is off the chain into slot 0
# (the other request: none)
track_req, track_step = next((r, d) for r, p in enumerate(paths) for d in range(len(p)) if p[d] != d)
track_slots = torch.tensor([0, 2]) if track_req == 0 else torch.tensor([2, 0])
track_steps = torch.tensor([track_step if r == track_req else -1 for r in range(bs)])
tracked = paths[track_req][:track_step + 1]
want_tracked = (ref_states[track_req, tracked[-1]].transpose(-1, -2), window(track_req, tracked))
before = (cache.temporal.clone(), cache.conv[0].clone())

def commit(mapped):
    cache.temporal.copy_(before[0]); cache.conv[0].copy_(before[1])
    args = dict(last_correct_step_indices=accept_len.clone(), mamba_track_indices=track_slots,
                mamba_steps_to_track=track_steps.clone(), model=None)
    with cuda_named(), (tree_recurrence.steps_as_nodes(backend, accepted_idx) if mapped else nullcontext()):
        backend.update_mamba_state_after_mtp_verify(**args)
    return {"state": (cache.temporal[0, slots] - want_state).abs().max().item(),
            "window": (cache.conv[0][0, slots] - want_window).abs().max().item(),
            "tracked_state": (cache.temporal[0, 0] - want_tracked[0]).abs().max().item(),
            "tracked_window": (cache.conv[0][0, 0] - want_tracked[1]).abs().max().item(),
            "untracked": (cache.temporal[0, 2] - before[0][0, 2]).abs().max().item()}  # slot 2 is never written

out["commit"] = commit(WIRED)
out["step_commit"] = commit(False)
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=VERSIONS)
def errors(request, release_site) -> dict:
    return {mode: run_probe(request.param, release_site, PROBE, mode, repo_on_path=True)
            for mode in ("wired", "unwired")}


def test_the_probe_verifies_a_tree_and_accepts_a_path_off_its_leading_chain(errors: dict) -> None:
    assert all(e["tree"] and e["off_chain"] for e in errors.values())


def test_wired_every_node_equals_its_path_decoded_alone(errors: dict) -> None:
    assert errors["wired"]["out_diff"] < 1e-4


def test_wired_the_commit_keeps_the_last_accepted_nodes_state_and_window(errors: dict) -> None:
    commit = errors["wired"]["commit"]
    assert commit["state"] < 1e-4 and commit["window"] < 1e-5


def test_wired_the_prefix_cache_tracks_the_node_at_its_step(errors: dict) -> None:
    commit = errors["wired"]["commit"]
    assert commit["tracked_state"] < 1e-4 and commit["tracked_window"] < 1e-5 and commit["untracked"] == 0


def test_a_commit_at_the_accepted_length_keeps_another_nodes_state(errors: dict) -> None:
    step = errors["wired"]["step_commit"]
    assert min(step["state"], step["window"], step["tracked_state"], step["tracked_window"]) > 1e-2


def test_unwired_the_chain_verify_and_commit_differ(errors: dict) -> None:
    unwired = errors["unwired"]
    assert unwired["out_diff"] > 1e-2 and unwired["commit"]["state"] > 1e-2 and unwired["commit"]["window"] > 1e-2
