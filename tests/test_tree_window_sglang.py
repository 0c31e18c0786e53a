"""patches/tree_window.py on SGLang 0.5.15's and 0.5.23's own Triton extend kernel (CPU, interpreted), called as
its Triton backend calls it for a sliding-window layer in target verify (the window KV list, its
offsets, the layer's window, the tree mask): SGLang's call hides prefix keys from a tree's branch
nodes (differs from decoding each path), the wrapped call gives each node the attention of its
path exactly, and a chain (where row = depth) is right either way. Runs in a subprocess with the
release's cached CPU venv (real SGLang on PYTHONPATH)."""

from __future__ import annotations

import pytest

from tests.release_probe import run_probe

pytestmark = pytest.mark.heavy  # runs SGLang 0.5.15's own code in its CPU venv, in a subprocess

VERSIONS = ("0.5.15", "0.5.23")  # the kernel moved to sglang.kernels.ops in 0.5.23

PROBE = r"""
import inspect, json, sys, types
from pathlib import Path
import torch
import sglang.srt.speculative  # noqa: F401
import importlib
for _name in ("sglang.srt.layers.attention.triton_ops.extend_attention", "sglang.kernels.ops.attention.extend_attention"):
    try:  # where the Triton extend kernel lives: 0.5.11-0.5.22, then 0.5.23+
        ea = importlib.import_module(_name)
        break
    except ImportError:
        pass
REPO = Path.cwd()
for name, folder in (("sglang.srt.speculative.ddtree", "patches"), ("sglang.srt.speculative.ddtree.kernels", "kernels")):
    module = types.ModuleType(name); module.__path__ = [str(REPO / folder)]; sys.modules[name] = module
from kernels.tree_mask import build_tree_mask_torch
from kernels.tree_window_reference import tree_window_mask
from sglang.srt.speculative.ddtree import tree_window
from sglang.srt.speculative.ddtree.tree_window import path_window_extend

torch.manual_seed(0)
H, KV, D, W = 4, 2, 32, 5
PREFIX = [13, 3]  # one longer than the window, one shorter
TREES = {"tree": [[-1, 0, 0, 1, 1, 2, 0, 5], [-1, 0, 1, 0, 3, 0, 5, 2]],
         "chain": [[-1, 0, 1, 2, 3, 4, 5, 6]] * 2}
N = 8
bs = len(PREFIX)
pool = sum(PREFIX) + bs * N
kb, vb = torch.randn(pool, KV, D), torch.randn(pool, KV, D)
q = torch.randn(bs * N, H, D)

def path(parent, i):
    out = [i]
    while parent[out[-1]] >= 0:
        out.append(parent[out[-1]])
    return out[::-1]

def reference(parents):
    # each node decoded alone: the prefix, then its path, keys within W of its position
    o = torch.empty_like(q)
    start = 0
    for b, L in enumerate(PREFIX):
        for i in range(N):
            nodes = path(parents[b], i)
            keys = [(start + p, p) for p in range(L)] + [(sum(PREFIX) + b * N + j, L + d) for d, j in enumerate(nodes)]
            qpos = L + len(nodes) - 1
            slots = torch.tensor([s for s, pos in keys if qpos - pos <= W])
            for h in range(H):
                s = (kb[slots, h // (H // KV)] @ q[b * N + i, h]) / D ** 0.5
                o[b * N + i, h] = torch.softmax(s, 0) @ vb[slots, h // (H // KV)]
        start += L
    return o

def backend_args(parents):
    # what TritonAttnBackend passes for a sliding-window layer in target verify (0.5.15)
    lens = torch.tensor(PREFIX)
    wl = lens.clamp(max=W)
    starts = torch.cumsum(lens, 0) - lens
    kvi = torch.cat([torch.arange(s + l - w, s + l) for s, l, w in zip(starts.tolist(), PREFIX, wl.tolist())])
    kvp = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(wl, 0)]).to(torch.int32)
    qo = torch.arange(0, (bs + 1) * N, N, dtype=torch.int32)
    mask_indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(N * (lens + N), 0)])
    parent = torch.tensor(parents)
    k = kb[sum(PREFIX):].clone(); v = vb[sum(PREFIX):].clone()
    return dict(q=q, k=k, v=v, kvp=kvp, kvi=kvi, qo=qo, mask_indptr=mask_indptr, offsets=lens - wl,
                tree_mask=build_tree_mask_torch(parent, lens, sum(PREFIX)),
                # as DDTree's round builds it for the Triton backend: prefix columns unwritten, a buffer's slack
                round_mask=build_tree_mask_torch(parent, lens, sum(PREFIX) + 5, prefix_ones=False),
                window_mask=tree_window_mask(parent, lens, W))

def call(fwd, a, mask="tree_mask"):
    o = torch.empty_like(q)
    fwd(a["q"], a["k"], a["v"], o, kb, vb, a["qo"], a["kvp"], a["kvi"], a[mask], False,
        a["mask_indptr"], N, 1.0, 1.0, D ** -0.5, logit_cap=0.0, sliding_window_size=W, sinks=None,
        window_kv_offsets=a["offsets"], xai_temperature_len=-1, page_size=1)
    return o

out = {}
for name, parents in TREES.items():
    a = backend_args(parents)
    ref = reference(parents)
    wrapped = path_window_extend(ea.extend_attention_fwd, lambda args, w, a=a: a["window_mask"] if w == W else None)
    out[name] = {"sglang": (call(ea.extend_attention_fwd, a) - ref).abs().max().item(),
                 "ddtree": (call(wrapped, a) - ref).abs().max().item()}
# installed as the worker installs it: the mask derived in the call from the round's own tree mask
original = ea.extend_attention_fwd
out["installed"] = tree_window.install() and tree_window.install() and ea.extend_attention_fwd is not original
out["installed_once"] = ea.extend_attention_fwd.__wrapped__ is original
for name, parents in TREES.items():
    a = backend_args(parents)
    out[name]["installed"] = (call(ea.extend_attention_fwd, a, "round_mask") - reference(parents)).abs().max().item()
# a call without a custom mask (prefill, decode) passes through unchanged
a = backend_args(TREES["tree"])
seen = []
def recorder(*args, **kw):
    seen.append(kw.get("custom_mask", args[9]))
recorder.__signature__ = inspect.signature(ea.extend_attention_fwd)
passthrough = path_window_extend(recorder, lambda args, w: 1 / 0)
passthrough(*[None] * 9, None, *[None] * 6, sliding_window_size=W)
out["unmasked_untouched"] = seen == [None]
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=VERSIONS)
def probe(request, release_site) -> dict:
    return run_probe(request.param, release_site, PROBE, repo_on_path=True)


def test_sglangs_window_hides_prefix_keys_from_branch_nodes(probe: dict) -> None:
    assert probe["tree"]["sglang"] > 0.05


def test_the_path_window_call_attends_each_path_exactly(probe: dict) -> None:
    assert probe["tree"]["ddtree"] < 1e-5


def test_on_a_chain_both_agree_with_the_reference(probe: dict) -> None:
    assert probe["chain"]["sglang"] < 1e-5 and probe["chain"]["ddtree"] < 1e-5


def test_installed_the_round_mask_gives_each_path_exactly(probe: dict) -> None:
    """The kernel as the worker installs it, fed the mask the round builds (prefix columns unwritten):
    each node attends its path's window, on a tree and on a chain; installing twice wraps once."""
    assert probe["installed"] and probe["installed_once"]
    assert probe["tree"]["installed"] < 1e-5 and probe["chain"]["installed"] < 1e-5


def test_calls_without_a_mask_pass_through(probe: dict) -> None:
    assert probe["unmasked_untouched"]
