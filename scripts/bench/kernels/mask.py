"""Section mask: tree mask with the prefix ones vs tree columns only (`prefix_ones=False`)."""

from __future__ import annotations

import argparse

import torch

from kernels.tree_mask import build_tree_mask_triton
from scripts.bench.kernels.build import _tree
from scripts.bench.kernels.timing import Timer, _cell, _table


def bench_mask(args: argparse.Namespace, timer: Timer) -> list[dict]:
    out, rows = [], []
    for bs in args.batch:
        for budget in args.budget:
            parent = _tree(bs, budget, args)[3].parent
            prefix_lens = torch.full((bs,), args.prefix, device=args.device)
            total = args.prefix * bs
            t = timer.measure({
                "full": lambda: build_tree_mask_triton(parent, prefix_lens, total),
                "tree_only": lambda: build_tree_mask_triton(parent, prefix_lens, total, prefix_ones=False),
            })
            ratio = t["full"]["median"] / t["tree_only"]["median"]
            out.append({"batch": bs, "budget": budget, "prefix": args.prefix, "full_us": t["full"],
                        "tree_only_us": t["tree_only"], "ratio": ratio})
            rows.append([str(bs), str(budget), _cell(t["full"]), _cell(t["tree_only"]), f"{ratio:.2f}x"])
    _table(f"Tree mask, prefix {args.prefix}: us median [p10-p90]",
           ["batch", "budget", "with prefix ones", "tree columns only", "ratio"], rows)
    return out
