"""Section round: the stages one round runs and build+mask+walk in one graph, against the host
reference (device->host copy, plain-Python heap and numpy visibility per request); and
"extra": every DDTree-only step of a round as the runtime runs it (top-K + LSE, tree build,
tree-only mask, accept walk, commit, the KV move of an off-chain path skipping identity
entries) in one graph, against issue 11's goal of <= 150 us at batch 64, budget 64; and
"extra (reorder)": the same with the move-free commit (`DDTREE_KV_COMMIT=reorder`: each
request's req_to_token row reordered, kernels/slot_reorder.py) in place of commit + move; and the
draft head (one GEMM over `--hidden` features) beside the head in `--round-head-chunks` chunks
with their scans on a side stream followed by the rest of "extra (reorder)": their difference is
what the round's extra work would be with the head in chunks (kernels/head_topk.py, measured slower,
not used by the runtime) and the reorder."""

from __future__ import annotations

import argparse
import time

import torch

from kernels.accept_walk import accept_walk_triton
from kernels.commit import commit_slots_triton, move_slots_triton
from kernels.head_topk import head_topk_parts
from kernels.slot_reorder import reorder_path_slots_triton
from kernels.tree_build import select_tree_triton
from kernels.tree_mask import build_tree_mask_triton
from kernels.vocab_topk import draft_topk_triton, log_probs
from scripts.bench.kernels.build import _tree
from scripts.bench.kernels.move import _kv_pool, _path_moves
from scripts.bench.kernels.timing import Timer, _table
from tests.kernels_reference import heap_tree, visibility


def reference_us(lp: torch.Tensor, budget: int, reps: int) -> float:
    """Host reference per round: device->host copy, heap per request, numpy visibility per request."""
    best = float("inf")
    for _ in range(reps):
        if lp.is_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        host = lp.cpu().numpy()
        for b in range(host.shape[0]):
            nodes = heap_tree(host[b], budget)
            visibility([-1] + [parent for parent, _, _ in nodes])
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def bench_round(args: argparse.Namespace, timer: Timer) -> list[dict]:
    out, rows = [], []
    cols = ["topk", "build", "mask", "walk", "commit", "move", "reorder", "build+mask+walk", "extra", "extra (reorder)",
            "head GEMM", "head chunks + extra (reorder)", "extra (chunks, reorder)", "reference"]
    gen0 = torch.Generator(device=args.device).manual_seed(1)
    weight = (torch.randn(args.vocab, args.hidden, generator=gen0, device=args.device) * 0.02).to(torch.bfloat16)
    side = torch.cuda.Stream(priority=-1) if args.device == "cuda" else None
    for bs in args.batch:
        hidden = torch.randn(bs, args.depth, args.hidden, generator=gen0, device=args.device).to(torch.bfloat16)
        for budget in args.budget:
            dev, depth, k = args.device, args.depth, min(budget, args.vocab)
            draft, lp, tok, tree = _tree(bs, budget, args)
            gen = torch.Generator(device=dev).manual_seed(bs + budget)
            n = budget + 1
            prefix_lens = torch.full((bs,), args.prefix, device=dev)
            prefix_sum = args.prefix * bs
            tokens = tree.tokens.clone()
            tokens[:, 0] = 0
            kid = tokens.gather(1, tree.first_child.clamp(min=0))
            posterior = torch.where(torch.rand(bs, n, generator=gen, device=dev) < 0.7, kid,
                                    torch.randint(0, args.vocab, (bs, n), generator=gen, device=dev))
            cache_loc = torch.arange(bs * n, device=dev).view(bs, n)
            acc, length, _ = accept_walk_triton(tokens, tree.first_child, tree.next_sibling, posterior, depth)
            buffers, ptrs, stride, strides, word = _kv_pool(args, bs * n + 1)
            dst, src = _path_moves(bs, n, min(depth + 1, n), True, dev)
            # The request-to-token table the reordering commit rewrites (each request's row: prefix + tree).
            table = torch.arange(bs * (args.prefix + n), device=dev, dtype=torch.int32).view(bs, args.prefix + n)
            req_rows = torch.arange(bs, device=dev)

            def round_fn() -> None:
                t = select_tree_triton(lp, tok, budget)
                build_tree_mask_triton(t.parent, prefix_lens, prefix_sum)
                accept_walk_triton(t.tokens, t.first_child, t.next_sibling, posterior, depth)

            def tree_steps() -> tuple[torch.Tensor, torch.Tensor]:  # the runtime's DDTree-only steps up to the commit
                t = select_tree_triton(*draft_topk_triton(draft, k), budget)
                build_tree_mask_triton(t.parent, prefix_lens, prefix_sum, prefix_ones=False)
                a, ln, _ = accept_walk_triton(t.tokens, t.first_child, t.next_sibling, posterior, depth)
                return a, ln

            def extra_fn() -> None:  # then the commit and the KV move, in the runtime's order
                a, ln = tree_steps()
                commit_slots_triton(a, ln, cache_loc)
                move_slots_triton(ptrs, strides, stride, dst, src, word=word)

            def extra_reorder_fn() -> None:  # then the commit by reordering req_to_token (page size 1)
                reorder_path_slots_triton(table, req_rows, prefix_lens, *tree_steps(), n)

            def head_gemm() -> torch.Tensor:  # the draft head alone (one GEMM): what the goal leaves out
                return torch.mm(hidden.view(-1, args.hidden), weight.T)

            def chunked_extra_fn() -> None:  # the head in chunks + the reorder: head, top-K, build, mask, walk, reorder
                parts, _ = head_topk_parts(hidden, weight, k, args.round_head_chunks, side)
                t = select_tree_triton(*log_probs(parts), budget)
                build_tree_mask_triton(t.parent, prefix_lens, prefix_sum, prefix_ones=False)
                a, ln, _ = accept_walk_triton(t.tokens, t.first_child, t.next_sibling, posterior, depth)
                reorder_path_slots_triton(table, req_rows, prefix_lens, a, ln, n)

            t = timer.measure({
                "topk": lambda: draft_topk_triton(draft, k),
                "build": lambda: select_tree_triton(lp, tok, budget),
                "mask": lambda: build_tree_mask_triton(tree.parent, prefix_lens, prefix_sum),
                "walk": lambda: accept_walk_triton(tokens, tree.first_child, tree.next_sibling, posterior, depth),
                "commit": lambda: commit_slots_triton(acc, length, cache_loc),
                "move": lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word),
                "reorder": lambda: reorder_path_slots_triton(table, req_rows, prefix_lens, acc, length, n),
                "build+mask+walk": round_fn,
                "extra": extra_fn,
                "extra (reorder)": extra_reorder_fn,
                "head GEMM": head_gemm,
                "head chunks + extra (reorder)": chunked_extra_fn,
            })
            del buffers
            diff = t["head chunks + extra (reorder)"]["median"] - t["head GEMM"]["median"]
            t["extra (chunks, reorder)"] = {"median": diff, "p10": diff, "p90": diff}  # a difference of medians
            ref = reference_us(lp, budget, reps=3)
            t["reference"] = {"median": ref, "p10": ref, "p90": ref}
            speedup = ref / t["build+mask+walk"]["median"]
            out.append({"batch": bs, "budget": budget, **{c: t[c] for c in cols}, "speedup": speedup,
                        "mean_accept": float(length.float().mean())})
            rows.append([str(bs), str(budget)] + [f"{t[c]['median']:.1f}" for c in cols] + [f"{speedup:.0f}x"])
    _table(f"Round stages (medians, us), V={args.vocab}, D={args.depth}, prefix={args.prefix}; mask: build+mask+walk "
           "with the prefix ones, extra tree columns only; move: an off-chain path of "
           f"{args.layers} layers' K and V, identity skipped; reorder: the move-free commit (req_to_token rewritten, "
           "page size 1); extra = topk+build+mask+walk+commit+move in one graph, extra (reorder) = "
           "topk+build+mask+walk+reorder (issue 11: <= 150 us at batch 64, budget 64); head GEMM = the draft head "
           f"(H={args.hidden}) alone; head chunks + extra (reorder) = the head in {args.round_head_chunks} chunks with "
           "their scans on a side stream + select+build+mask+walk+reorder; extra (chunks, reorder) = that minus head "
           "GEMM (a difference of medians); reference = best of 3 host runs",
           ["batch", "budget", *cols, "speedup"], rows)
    return out
