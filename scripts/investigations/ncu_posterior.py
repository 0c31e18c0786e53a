"""A workload for Nsight Compute: the split posterior on flat top-k 2000 rows (batch 64 x 16 rows,
V=151936, fp32 logits, the benchmark's flat case), one warm-up call, then one call per setting
given (`key=value` knobs of `posterior_tokens_split`; none: the defaults). Profile it with e.g.

    ncu --kernel-name regex:"_stats_kernel|_pool_pass_kernel" --launch-skip 2 \\
        --section SpeedOfLight --section WarpStateStats python3 -m scripts.investigations.ncu_posterior stats_bpp=8

(the warm-up's launches come first: skip them). Results: docs/kernels.md.
"""

from __future__ import annotations

import ast
import sys

import torch

from kernels.posterior_split import posterior_tokens_split


def main() -> None:
    settings = [{k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in arg.split(","))}
                for arg in sys.argv[1:]] or [{}]
    bs, n, vocab = 64, 16, 151936
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(bs, n, vocab, device="cuda", generator=gen) * 0.3
    temp, top_p = torch.ones(bs, device="cuda"), torch.ones(bs, device="cuda")
    top_k = torch.full((bs,), 2000, dtype=torch.int64, device="cuda")
    seed = torch.arange(bs, device="cuda")
    positions = torch.arange(n, device="cuda").expand(bs, n) + 1000
    for kw in [settings[0], *settings]:
        posterior_tokens_split(logits, temp, top_k, top_p, seed, positions=positions, **kw)
    torch.cuda.synchronize()
    print("settings:", settings)


if __name__ == "__main__":
    main()
