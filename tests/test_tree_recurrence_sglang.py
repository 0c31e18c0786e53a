"""SGLang 0.5.15's own GDN target-verify kernel (CPU, interpreted) on DDTree's trees, against the
per-node reference (kernels/tree_recurrence_reference.py): given each node's parent
(`retrieve_parent_token`, EAGLE-tree mode), it runs each node from its parent's cached state, so
every node's output and cached state are its path's. Without parents (how SGLang verifies when
speculative_eagle_topk <= 1, DFlash's chain) a tree's outputs differ. Runs in a subprocess with the
cached 0.5.15 CPU venv. (SGLang's short-convolution update, which derives those parents from the
first-child / next-sibling links, does not run under the Triton interpreter: see
tests/test_kernels_tree_recurrence.py for the derivation rule on DDTree's links.)"""

from __future__ import annotations

import pytest

from tests.release_probe import run_probe

pytestmark = pytest.mark.heavy  # runs SGLang 0.5.15's own code in its CPU venv, in a subprocess

VERSION = "0.5.15"

PROBE = r"""
import json
import torch
import torch.nn.functional as F
from sglang.srt.layers.attention.fla.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update
from kernels.tree_build import select_tree_torch
from kernels.vocab_topk import draft_topk_torch
from kernels.tree_recurrence_reference import tree_gated_delta

torch.manual_seed(0)
bs, H, HV, K, V = 2, 1, 2, 16, 8
lp, tok = draft_topk_torch(torch.randn(bs, 4, 64) * 3, 9)
tree = select_tree_torch(lp, tok, 9)
parent, n = tree.parent, tree.parent.shape[1]
cache = bs + 1  # slot 0 unused: the pool rows are not the batch rows
slots = torch.arange(1, bs + 1, dtype=torch.int32)
out = {"tree": bool((parent[:, 1:] != torch.arange(n - 1)).any())}

# the gated-delta verify with those parents
A_log, dt_bias = torch.randn(HV), torch.randn(HV)
q, k = torch.randn(1, bs * n, H, K), torch.randn(1, bs * n, H, K)
v = torch.randn(1, bs * n, HV, V)
a, b = torch.randn(bs * n, HV), torch.randn(bs * n, HV)
h0 = torch.randn(cache, HV, V, K)  # the kernel's state layout: [V, K] per head
cu = torch.arange(0, (bs + 1) * n, n, dtype=torch.int32)

def verify(links):
    inter = torch.zeros(cache, n, HV, V, K)
    o = fused_sigmoid_gating_delta_rule_update(A_log=A_log, a=a, dt_bias=dt_bias, softplus_beta=1.0,
        softplus_threshold=20.0, q=q, k=k, v=v, b=b, initial_state_source=h0.clone(), initial_state_indices=slots,
        cu_seqlens=cu, use_qk_l2norm_in_kernel=True, disable_state_update=True, intermediate_states_buffer=inter,
        intermediate_state_indices=slots, cache_steps=n, retrieve_parent_token=links)
    return o.view(bs, n, HV, V), inter[slots.long()]

g = (-torch.exp(A_log) * F.softplus(a + dt_bias)).view(bs, n, HV)
beta = torch.sigmoid(b).view(bs, n, HV)
norm = lambda t: t / torch.sqrt((t * t).sum(-1, keepdim=True) + 1e-6)
heads = lambda t: t.view(bs, n, H, K).repeat_interleave(HV // H, dim=2)
ref_o, ref_states = tree_gated_delta(h0[slots.long()].transpose(-1, -2), heads(norm(q)), heads(norm(k)),
                                     v.view(bs, n, HV, V), g, beta, parent, K ** -0.5)
links = parent.clamp(min=0).to(torch.int32)  # the root's entry is never read
o, states = verify(links)
out["out_diff"] = (o - ref_o).abs().max().item()
out["state_diff"] = (states.transpose(-1, -2) - ref_states).abs().max().item()
o_chain, _ = verify(None)
out["chain_diff"] = (o_chain - ref_o).abs().max().item()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(release_site) -> dict:
    return run_probe(VERSION, release_site, PROBE, repo_on_path=True)


def test_the_verify_kernel_runs_each_node_from_its_parents_state(probe: dict) -> None:
    assert probe["tree"]
    assert probe["out_diff"] < 1e-4 and probe["state_diff"] < 1e-4


def test_the_chain_verify_differs_on_a_tree(probe: dict) -> None:
    assert probe["chain_diff"] > 1e-2
