"""Section build: best-first tree build for budgets 16..256 (us per node shows the linear growth),
with the default warps per request against 1, 2, 4 and 8 (`BUILD_WARPS`). `_tree` is the tree the
mask and round sections start from."""

from __future__ import annotations

import argparse

from kernels.tree_build import select_tree_triton
from kernels.vocab_topk import draft_topk_radix
from scripts.bench.kernels.timing import Timer, _cell, _table
from scripts.bench.kernels.topk import _draft_logits


BUILD_WARPS = (1, 2, 4, 8)


def bench_build(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Default launch (`select_tree_triton`'s warps per request) side by side with 1, 2, 4 and 8 warps per
    request (the data for the default's rule)."""
    out, rows = [], []
    for bs in args.batch:
        draft = _draft_logits(bs, args.depth, args.vocab, args.device, seed=bs + 1)
        for budget in args.build_budget:
            lp, tok = draft_topk_radix(draft, min(budget, args.vocab))
            forms = {"default": lambda: select_tree_triton(lp, tok, budget)}
            forms.update({f"{w} warps": (lambda w=w: select_tree_triton(lp, tok, budget, num_warps=w))
                          for w in BUILD_WARPS})
            t = timer.measure(forms)
            out.append({"batch": bs, "budget": budget, **{f"{name}_us": v for name, v in t.items()},
                        "us_per_node": t["default"]["median"] / budget})
            rows.append([str(bs), str(budget), _cell(t["default"]), f"{t['default']['median'] / budget:.2f}",
                         *(_cell(t[f"{w} warps"]) for w in BUILD_WARPS)])
    _table(f"Tree build (K = budget), D={args.depth}: us median [p10-p90]",
           ["batch", "budget", "default", "us per node", *(f"{w} warps" for w in BUILD_WARPS)], rows)
    return out


def _tree(bs: int, budget: int, args: argparse.Namespace):
    draft = _draft_logits(bs, args.depth, args.vocab, args.device, seed=bs * 1000 + budget)
    lp, tok = draft_topk_radix(draft, min(budget, args.vocab))
    return draft, lp, tok, select_tree_triton(lp, tok, budget)
