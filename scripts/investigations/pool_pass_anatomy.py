"""Where the candidate pool's pass spends its time: its loop body with parts taken out (the stores,
the compaction, the division by the temperature, all but the count, all but the load), each timed
interleaved with CUDA events at batch 64 x 16 rows, V=151936, flat fp32 logits, top-k 2000. An
experiment on the GPU, not a test (the variants' outputs are not used); "full" is
`posterior_pool._pool_pass_kernel`'s loop without its row checks. Results: docs/kernels.md.

usage: python -m scripts.investigations.pool_pass_anatomy   (CUDA)
"""

from __future__ import annotations

import statistics

import torch
import triton
import triton.language as tl

from kernels.posterior import POOL
from kernels.posterior_pool import POOL_BPP, _compact, _row_floor, _scatter

VARIANTS = {0: "full", 1: "no stores", 2: "no compaction (stores at idx % POOL)", 3: "no division",
            4: "count only", 5: "load + max only"}


@triton.jit
def _variant(logits_ptr, temp_ptr, pu_ptr, pz_ptr, pi_ptr, pn_ptr, n, V, NB, BLOCK: tl.constexpr, NBP: tl.constexpr,
             POOL: tl.constexpr, BPP: tl.constexpr, MODE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    temp = tl.load(temp_ptr + row // n).to(tl.float32)
    floor, t = _row_floor(pu_ptr, row, V, NB, BLOCK, NBP)
    if t > float("-inf"):
        for j in range(BPP):
            bi = tl.program_id(1) * BPP + j
            idx = bi * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(logits_ptr + row * V + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
            z = x if MODE == 3 else x / temp
            if bi < NB:
                slot = row * NB + bi
                if MODE == 5:
                    tl.store(pn_ptr + slot, tl.max(z, axis=0).to(tl.int32))
                else:
                    kept = z > floor
                    if MODE == 4:
                        count = tl.sum(kept.to(tl.int32), axis=0)
                    elif MODE == 2:
                        count = tl.sum(kept.to(tl.int32), axis=0)
                        _scatter(pz_ptr + slot * POOL, pi_ptr + slot * POOL, idx & (POOL - 1), z, idx,
                                 kept & (count <= POOL), BLOCK)
                    else:
                        at, count = _compact(kept, BLOCK)
                        fits = kept & (count <= POOL)
                        if MODE == 1:
                            count += tl.sum(tl.where(fits, at, 0), axis=0)  # keeps the compaction alive
                        else:
                            _scatter(pz_ptr + slot * POOL, pi_ptr + slot * POOL, at, z, idx, fits, BLOCK)
                    tl.store(pn_ptr + slot, count)


def main() -> None:
    bs, n, vocab, block = 64, 16, 151936, 2048
    rows, nb, nf = bs * n, triton.cdiv(vocab, block), vocab // block
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, vocab, device="cuda", generator=gen) * 0.3
    temp = torch.ones(bs, device="cuda")
    ranks = torch.full((rows, nb), float("inf"), device="cuda")  # the stats pass's block ranks for k=2000
    unit_max = x[:, :nf * block].view(rows, nf, block // 32, 32).amax(-1)
    ranks[:, :nf] = unit_max.sort(-1, descending=True).values[..., -(-2000 // nf) - 1]
    pz = torch.empty(rows, nb, POOL, device="cuda")
    pi = torch.empty(rows, nb, POOL, dtype=torch.int32, device="cuda")
    pn = torch.empty(rows, nb, dtype=torch.int32, device="cuda")
    fns = {(mode, warps): (lambda mode=mode, warps=warps: _variant[(rows, triton.cdiv(nb, POOL_BPP))](
        x, temp, ranks, pz, pi, pn, n, vocab, nb, BLOCK=block, NBP=128, POOL=POOL, BPP=POOL_BPP, MODE=mode,
        num_warps=warps)) for mode in VARIANTS for warps in ((2, 4, 8) if mode == 0 else (4,))}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(15):
        for k, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                fn()
            end.record()
            torch.cuda.synchronize()
            times[k].append(start.elapsed_time(end) * 100)  # us per call
    print(f"# {torch.cuda.get_device_name()}: pool-pass variants, batch {bs} x {n} rows, V={vocab}, flat fp32 "
          "logits, top-k 2000; us per call, median [min-max] of 15 interleaved samples of 10 calls")
    for (mode, warps), t in times.items():
        print(f"{VARIANTS[mode]:40s} warps={warps}: {statistics.median(t):7.1f} [{min(t):.1f}-{max(t):.1f}]")


if __name__ == "__main__":
    main()
