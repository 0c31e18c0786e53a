"""Pre-flight for a FlashInfer bundle (scripts/rig/flashinfer.py) on the GPU: the wrappers SGLang's
flashinfer attention backend uses, on its module settings (bf16, head dims 64 and 128), against
plain-torch attention. Seconds instead of an engine's minute, so a broken bundle fails before the
matrix starts.

usage (GPU machine, bundle installed): python -m scripts.gpu.flashinfer_smoke [HEAD_DIM ...]  (default 64 128;
only the head dims whose modules the bundle holds)
Checks: ragged prefill, causal (backend auto -> fa3 on sm90); paged prefill with a custom mask
(fa2, the tree verify's path); paged decode (fa2; tensor cores at GQA group >= 4, as SGLang);
sgl_kernel's rmsnorm and fused_add_rmsnorm and top-k renorm, which call FlashInfer's once it imports
(the first H200 run with a FlashInfer bundle failed there, in every engine).
"""

from __future__ import annotations

import sys

import torch


def reference(q, k, v, mask):
    """q [n, H, D], k/v [m, Hkv, D], mask [n, m] bool -> [n, H, D] (fp32 math)."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1).float(), v.repeat_interleave(rep, 1).float()
    s = torch.einsum("nhd,mhd->hnm", q.float(), k) / q.shape[-1] ** 0.5
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("hnm,mhd->nhd", s.softmax(-1), v)


def kernel_delegates(dev: str) -> list[str]:
    """sgl_kernel ops that hand over to FlashInfer when it imports, against torch; failed names."""
    import sgl_kernel

    bad = []
    x = torch.randn(5, 256, device=dev, dtype=torch.bfloat16)
    w = torch.rand(256, device=dev, dtype=torch.bfloat16) + 0.5
    r = torch.randn_like(x)

    def rms(t):
        t = t.float()
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()

    got = sgl_kernel.rmsnorm(x, w, 1e-6)
    xs, rs = x.clone(), r.clone()
    sgl_kernel.fused_add_rmsnorm(xs, rs, w, 1e-6)
    probs = torch.softmax(torch.randn(3, 1000, device=dev), -1)
    kept = (sgl_kernel.top_k_renorm_prob(probs, torch.full((3,), 10, device=dev, dtype=torch.int32)) > 0).sum(-1)
    checks = {"rmsnorm": (got.float() - rms(x)).abs().max().item() < 5e-2,
              "fused_add_rmsnorm": (xs.float() - rms(x.float() + r.float())).abs().max().item() < 5e-2,
              "top_k_renorm_prob": bool((kept == 10).all())}
    for name, ok in checks.items():
        print(f"[flashinfer] sgl_kernel.{name}: {'ok' if ok else 'WRONG'}", flush=True)
        bad += [] if ok else [name]
    return bad


def main() -> int:
    import flashinfer

    dev, bf = "cuda", torch.bfloat16
    ws = torch.empty(128 << 20, dtype=torch.uint8, device=dev)
    bad = []
    dims = [int(x) for x in sys.argv[1:]] or [64, 128]
    for heads, kv_heads, dim in [s for s in ((4, 2, 64), (32, 8, 128)) if s[2] in dims]:
        torch.manual_seed(dim)
        n, m = 9, 23  # 9 queries over 23 keys (14 prefix + 9 new)
        q = torch.randn(n, heads, dim, device=dev, dtype=bf)
        k = torch.randn(m, kv_heads, dim, device=dev, dtype=bf)
        v = torch.randn(m, kv_heads, dim, device=dev, dtype=bf)
        qo = torch.tensor([0, n], dtype=torch.int32, device=dev)
        kvi = torch.tensor([0, m], dtype=torch.int32, device=dev)
        causal = torch.ones(n, m, dtype=torch.bool, device=dev).tril(m - n)
        cases = {}
        rag = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend="auto")
        rag.plan(qo, kvi, heads, kv_heads, dim, causal=True, q_data_type=bf, kv_data_type=bf)
        cases["ragged causal"] = (rag.run(q, k, v), causal)
        # paged, page size 1: page i holds token i
        kc, vc = k.unsqueeze(1), v.unsqueeze(1)
        idx = torch.arange(m, dtype=torch.int32, device=dev)
        last = torch.ones(1, dtype=torch.int32, device=dev)
        tree = causal.clone()
        tree[3, m - n + 1:m - n + 3] = False  # a node that does not see two of its elder siblings
        pag = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa2")
        pag.plan(qo, kvi, idx, last, heads, kv_heads, dim, 1, custom_mask=tree.flatten(),
                 q_data_type=bf, kv_data_type=bf)
        cases["paged custom mask"] = (pag.run(q, (kc, vc)), tree)
        dec = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", backend="fa2",
                                                            use_tensor_cores=heads // kv_heads >= 4)
        dec.plan(kvi, idx, last, heads, kv_heads, dim, 1, q_data_type=bf, kv_data_type=bf)
        cases["decode"] = (dec.run(q[-1:], (kc, vc)),
                           torch.ones(1, m, dtype=torch.bool, device=dev))
        for name, (out, mask) in cases.items():
            qq = q[-1:] if name == "decode" else q
            err = (out.float() - reference(qq, k, v, mask)).abs().max().item()
            ok = err < 3e-2
            bad += [] if ok else [f"{name} d{dim}"]
            print(f"[flashinfer] {name:18s} heads {heads}/{kv_heads} dim {dim}: max |err| {err:.4f} "
                  f"{'ok' if ok else 'WRONG'}", flush=True)
    bad += kernel_delegates(dev)
    print(f"[flashinfer] {flashinfer.__version__}: {'all ok' if not bad else 'FAILED ' + ', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
