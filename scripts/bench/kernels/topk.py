"""Sections topk and topk-tune: the draft's vocab top-K + log-sum-exp.

- topk: torch.topk + Triton LSE (old) vs the streaming kernel (new).
- topk-tune: the streaming kernel's launch settings (scan warps x super-groups per tile x programs
  per SM) at the largest batch, fastest first (the defaults are 4 warps, 8 super-groups, 8
  programs per SM); then the scan alone and the select sorting every key (`select_cap=0`) or at
  most 2 x KP or 4 x KP keys side by side.
"""

from __future__ import annotations

import argparse

import torch

from kernels.vocab_topk import SELECT_CAP_PER_KP, draft_topk_radix, draft_topk_stream, scan_stage
from scripts.bench.kernels.timing import Timer, _cell, _table


def _draft_logits(bs: int, depth: int, vocab: int, device: str, seed: int) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(bs, depth, vocab, generator=gen, device=device) * 4).to(torch.bfloat16)


def bench_topk(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Old torch.topk path vs the streaming kernel; also checks they select the same values."""
    out, rows = [], []
    for bs in args.batch:
        draft = _draft_logits(bs, args.depth, args.vocab, args.device, seed=bs)
        for k in args.topk_k:
            old_lp, _ = draft_topk_radix(draft, k)
            new_lp, new_tok = draft_topk_stream(draft, k)
            same = bool(torch.equal(draft.gather(-1, new_tok), torch.topk(draft, k, dim=-1).values)
                        and torch.allclose(new_lp, old_lp, rtol=0, atol=1e-5))
            t = timer.measure({"old": lambda: draft_topk_radix(draft, k), "new": lambda: draft_topk_stream(draft, k)})
            ratio = t["old"]["median"] / t["new"]["median"]
            gbps = draft.numel() * draft.element_size() / (t["new"]["median"] * 1e3)
            out.append({"batch": bs, "k": k, "old_us": t["old"], "new_us": t["new"], "ratio": ratio,
                        "new_read_GBps": gbps, "same_values": same})
            rows.append([str(bs), str(k), _cell(t["old"]), _cell(t["new"]), f"{ratio:.2f}x", f"{gbps:.0f}",
                         "yes" if same else "NO"])
    _table(f"Vocab top-K + LSE, V={args.vocab}, D={args.depth}, bf16: us median [p10-p90]",
           ["batch", "K", "torch.topk + LSE", "streaming", "old/new", "streaming GB/s", "same values"], rows)
    return out


def bench_topk_tune(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Streaming top-K launch settings at the largest batch and first K: scan warps x super-groups
    per tile (1, 2, 4 per warp) x programs per SM."""
    bs, k = max(args.batch), args.topk_k[0]
    draft = _draft_logits(bs, args.depth, args.vocab, args.device, seed=bs)
    configs = {f"warps={w} supers={w * m} programs/SM={p}": (w, w * m, p)
               for w in (4, 8, 16) for m in (1, 2, 4) for p in (2, 4, 8, 16)}
    t = timer.measure({name: (lambda w=w, sp=sp, p=p: draft_topk_stream(draft, k, scan_warps=w, programs_per_sm=p,
                                                                           scan_supers=sp))
                       for name, (w, sp, p) in configs.items()})
    out = [{"batch": bs, "k": k, "scan_warps": w, "scan_supers": sp, "programs_per_sm": p, "us": t[name]}
           for name, (w, sp, p) in configs.items()]
    _table(f"Streaming top-K settings, batch {bs}, K={k}: us median [p10-p90]", ["setting", "us"],
           [[name, _cell(t[name])] for name in sorted(configs, key=lambda n: t[n]["median"])])
    rows = draft.view(-1, args.vocab)
    kp = max(2, 1 << (k - 1).bit_length())
    want = draft_topk_stream(draft, k, select_cap=0)[1]
    caps = [0, 2 * kp] + ([4 * kp] if 4 * kp <= 1024 else [])
    capped = {f"scan + select, {f'cap {c}' if c else 'every key'}{' (default)' if c == SELECT_CAP_PER_KP * kp else ''}": c
              for c in caps}
    same = {name: bool(torch.equal(draft_topk_stream(draft, k, select_cap=c)[1], want)) for name, c in capped.items()}
    stages = timer.measure({"scan only": lambda: scan_stage(rows),
                            **{name: (lambda c=c: draft_topk_stream(draft, k, select_cap=c))
                               for name, c in capped.items()}})
    out.append({"batch": bs, "k": k, "stages_us": stages, "capped_same_tokens": same})
    scan = stages["scan only"]["median"]
    table = [["scan only", _cell(stages["scan only"]), "", ""]]
    table += [[name, _cell(v), f"{v['median'] - scan:.1f}", "yes" if same.get(name, True) else "NO"]
              for name, v in stages.items() if name != "scan only"]
    _table(f"Streaming top-K stages at the default settings, batch {bs}, K={k}: us median [p10-p90]",
           ["stage", "us", "select (difference of medians)", "same tokens as select_cap=0"], table)
    return out
