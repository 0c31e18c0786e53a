"""On the GPU: which tied tokens SGLang's pytorch sampler keeps at a top-k cut (the fact behind
`index_ties`, kernels/posterior.py).

1. `torch.sort(descending=True)` on CUDA, rows of bf16-valued probabilities (many exact ties) at
   several vocabulary sizes: are tied values left in ascending index order (a stable sort)?
2. SGLang's own `top_k_top_p_min_p_sampling_from_probs_torch` on a row with three tied tokens at a
   top-k 2 cut, 4096 draws: which tokens does it ever emit? (Lowest two indices = index order.)
3. Where FlashInfer imports (a bundle with a real one): its `top_k_top_p_sampling_from_probs`, which
   SGLang's flashinfer backend calls, on the same row: all three (a tie kept whole)?

usage (GPU machine, SGLang on the path): python -m scripts.investigations.tie_order
Prints one line per check and exits 1 if a sampler keeps other tokens than its order predicts.
"""

from __future__ import annotations

import inspect
import sys

import torch


def sort_is_stable(vocab: int, rows: int = 64) -> bool:
    gen = torch.Generator(device="cuda").manual_seed(vocab)
    x = (torch.randn(rows, vocab, device="cuda", generator=gen) * 0.3).to(torch.bfloat16).float()
    probs = torch.softmax(x, dim=-1)
    values, index = probs.sort(dim=-1, descending=True)
    same = values[:, 1:] == values[:, :-1]
    return bool((index[:, 1:] > index[:, :-1])[same].all()) and bool(same.any())


TIED = lambda vocab: [vocab // 3, vocab // 2, vocab - 1]  # noqa: E731


def _tied_probs(vocab: int, draws: int) -> torch.Tensor:
    row = torch.zeros(vocab, device="cuda")
    row[TIED(vocab)] = 6.0
    return torch.softmax(row, dim=-1).expand(draws, vocab).contiguous()


def flashinfer_kept(vocab: int, draws: int = 4096) -> set[int] | None:
    try:
        from flashinfer.sampling import top_k_top_p_sampling_from_probs
    except ImportError:
        return None
    out = top_k_top_p_sampling_from_probs(_tied_probs(vocab, draws), torch.full((draws,), 2, device="cuda",
                                          dtype=torch.int32), torch.ones(draws, device="cuda"),
                                          filter_apply_order="joint")
    return set(out.flatten().tolist())


def plain_kept(vocab: int, draws: int = 4096) -> set[int]:
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch as sample

    probs = _tied_probs(vocab, draws)
    args = dict(probs=probs, top_ks=torch.full((draws,), 2, device="cuda", dtype=torch.int32),
                top_ps=torch.ones(draws, device="cuda"), min_ps=torch.zeros(draws, device="cuda"),
                need_min_p_sampling=False, sampling_seed=None, positions=torch.zeros(draws, device="cuda",
                                                                                     dtype=torch.int64))
    names = inspect.signature(sample).parameters
    out = sample(**{k: v for k, v in args.items() if k in names})
    return set(out.flatten().tolist())


def main() -> int:
    for vocab in (512, 4096, 8192, 151936):
        print(f"torch.sort(descending) on CUDA, V={vocab}: ties in ascending index order: {sort_is_stable(vocab)}")
    ok = True
    for vocab in (8192, 151936):
        got = plain_kept(vocab)
        want = set(TIED(vocab)[:2])
        ok &= got == want
        print(f"SGLang pytorch sampler, V={vocab}, 3 tied tokens at a top-k 2 cut: emits {sorted(got)} "
              f"(lowest two indices {sorted(want)}: {got == want})")
        got = flashinfer_kept(vocab)
        if got is None:
            print("FlashInfer: not importable here")
            continue
        ok &= got == set(TIED(vocab))
        print(f"FlashInfer top_k_top_p_sampling_from_probs, V={vocab}, same row: emits {sorted(got)} "
              f"(the whole tie: {got == set(TIED(vocab))})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
