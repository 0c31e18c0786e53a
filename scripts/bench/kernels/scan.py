"""Section scan: the top-K's scan alone at the largest batch in each of its forms (next-tile
prefetch, warps, programs per SM, tile size), side by side with the GB/s reached."""

from __future__ import annotations

import argparse

import torch

from kernels.vocab_topk import GROUP, SUPER, scan_stage
from scripts.bench.kernels.timing import Timer, _cell, _table
from scripts.bench.kernels.topk import _draft_logits


# name: scan_stage keyword arguments (the default: prefetch, fast exp, 4 warps, 8 super-groups per tile)
SCAN_VARIANTS = {
    "default": {}, "no prefetch": {"prefetch": False}, "no prefetch, 8 warps": {"prefetch": False, "scan_warps": 8},
    "8 warps": {"scan_warps": 8}, "16 programs/SM": {"programs_per_sm": 16}, "16 super-groups": {"scan_supers": 16},
    "tl.exp": {"fast_exp": False},
}


def bench_scan(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The streaming top-K's scan (its one read of the logits) alone at the largest batch, in each
    `SCAN_VARIANTS` form side by side, with the GB/s it reaches; fails if a form's parts differ."""
    bs = max(args.batch)
    rows = _draft_logits(bs, args.depth, args.vocab, args.device, seed=bs).view(-1, args.vocab)
    groups = -(-args.vocab // GROUP)
    real = lambda parts: (parts.gmax[:, :groups], parts.smax[:, :-(-groups // SUPER)])  # noqa: E731 (padding differs by tile)
    want = real(scan_stage(rows))
    differ = [name for name, kw in SCAN_VARIANTS.items()
              if not all(torch.equal(a, b) for a, b in zip(real(scan_stage(rows, **kw)), want))]
    t = timer.measure({name: (lambda kw=kw: scan_stage(rows, **kw)) for name, kw in SCAN_VARIANTS.items()})
    size = rows.numel() * rows.element_size()
    _table(f"Top-K scan forms, batch {bs} x {args.depth} depths, V={args.vocab} bf16 ({size / 1e6:.0f} MB): us "
           "median [p10-p90]", ["form", "us", "GB/s", "same group maxima"],
           [[name, _cell(t[name]), f"{size / (t[name]['median'] * 1e3):.0f}", "NO" if name in differ else "yes"]
            for name in SCAN_VARIANTS])
    if differ:
        raise RuntimeError(f"scan forms differ from the default: {differ}")
    return [{"batch": bs, "form": name, "us": t[name]} for name in SCAN_VARIANTS]
