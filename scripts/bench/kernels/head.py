"""Section head: the draft head's GEMM (cuBLAS, `--hidden` x V bf16, batch x depth rows) with the
top-K after it (today's runtime) against the GEMM run chunk by chunk with each chunk's scan right
behind it (`kernels/head_topk.py`), on the same stream and on a side stream (high priority, as the
runtime's, and default priority), for each `--head-chunks`; the chunked GEMM alone too.
"top-K visible" = a form's time minus the one-GEMM time: what the top-K adds to the head (issue 11:
<= 60 us at batch 64, K=64). Fails if a form's tokens differ from today's. The head problem and the
"top-K visible" rows serve the gemm section too."""

from __future__ import annotations

import argparse
from typing import Callable

import torch

from kernels.head_topk import chunk_plan, head_topk_parts
from kernels.vocab_topk import topk_parts_triton
from scripts.bench.kernels.timing import Stats, Timer, _cell, _table


def _head_problem(args: argparse.Namespace) -> tuple[torch.Generator, torch.Tensor]:
    """The head sections' generator and bf16 head weight [V, H]."""
    gen = torch.Generator(device=args.device).manual_seed(0)
    return gen, (torch.randn(args.vocab, args.hidden, generator=gen, device=args.device) * 0.02).to(torch.bfloat16)


def _head_features(args: argparse.Namespace, gen: torch.Generator, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft features [bs, D, H] and their rows [bs x D, H]."""
    x = torch.randn(bs, args.depth, args.hidden, generator=gen, device=args.device).to(torch.bfloat16)
    return x, x.view(-1, args.hidden)


def _visible_rows(bs: int, timings: dict[str, Stats], base: str, out: list[dict], table: list[list[str]]) -> None:
    """Each form's time and "top-K visible": its median minus the `base` form's (the head's GEMM alone)."""
    for name, stats in timings.items():
        visible = stats["median"] - timings[base]["median"] if name != base else None
        out.append({"batch": bs, "form": name, "us": stats, "topk_visible_us": visible})
        table.append([str(bs), name, _cell(stats), "" if visible is None else f"{visible:.1f}"])


def bench_head(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """One head GEMM + top-K (today) vs the chunked GEMM with each chunk's scan behind it, same stream
    and side stream, per batch and chunk count; the top-K's visible cost is each form minus the GEMM."""
    dev, k = args.device, args.topk_k[0]
    gen, weight = _head_problem(args)
    # the runtime's side stream (high priority: its scan blocks go first as GEMM blocks retire) and one at
    # the default priority, to see what the priority does
    sides = {"side stream": torch.cuda.Stream(priority=-1), "side stream, default priority": torch.cuda.Stream()} \
        if dev == "cuda" else {}
    out, table, differ = [], [], []
    for bs in args.batch:
        x, rows = _head_features(args, gen, bs)

        def gemm() -> torch.Tensor:
            return torch.mm(rows, weight.T)

        def today() -> object:
            return topk_parts_triton(gemm().view(bs, args.depth, args.vocab), k)

        fns: dict[str, Callable[[], object]] = {"GEMM": gemm, "GEMM + top-K": today}
        want = today().tokens
        for c in args.head_chunks:
            _, plan = chunk_plan(bs * args.depth, args.vocab, c, rows.device)

            def chunked(plan=plan) -> None:
                logits = torch.empty(rows.shape[0], args.vocab, dtype=weight.dtype, device=dev)
                for chunk in plan:
                    torch.mm(rows, weight[chunk.start:chunk.stop].T, out=logits[:, chunk.start:chunk.stop])

            fns[f"{len(plan)} chunks: GEMM"] = chunked
            scans = {f"{len(plan)} chunks: GEMM + scan, one stream": lambda c=c: head_topk_parts(x, weight, k, c)}
            scans.update({f"{len(plan)} chunks: GEMM + scan, {label}": (lambda c=c, st=st: head_topk_parts(x, weight, k, c, st))
                          for label, st in sides.items()})
            differ += [(bs, name) for name, fn in scans.items() if not torch.equal(fn()[0].tokens, want)]
            fns.update(scans)
        _visible_rows(bs, timer.measure(fns), "GEMM", out, table)
    _table(f"Draft head + top-K, V={args.vocab}, H={args.hidden}, D={args.depth}, K={k}, bf16: us median [p10-p90]; "
           "top-K visible = form - GEMM (issue 11: <= 60 us at batch 64)", ["batch", "form", "us", "top-K visible"],
           table)
    if differ:
        raise RuntimeError(f"chunked forms chose other tokens than today's at {differ}")
    return out
