"""Section gemm: the draft head's GEMM (cuBLAS) with the top-K after it (today's runtime) against a
Triton GEMM with the top-K's scan in its epilogue followed by the select (`kernels/head_gemm_scan.py`),
and that Triton GEMM without the epilogue, for each `--gemm-tiles` (BMxBNxBK, w warps, s stages; a
trailing t: the persistent kernel with tensor-descriptor (TMA) loads). "top-K visible" = a form's
time minus cuBLAS's GEMM alone. Fails if the epilogue's tokens are not the top-K of the logits it
wrote."""

from __future__ import annotations

import argparse
import re
from typing import Callable

import torch

from kernels.head_gemm_scan import head_gemm_scan, head_gemm_topk
from kernels.vocab_topk import topk_parts_triton
from scripts.bench.kernels.head import _head_features, _head_problem, _visible_rows
from scripts.bench.kernels.timing import Timer, _table


def gemm_tiles(spec: str) -> dict[str, int]:
    """`128x256x64w8s3` -> head_gemm_scan's tile keywords; a trailing `t`: the persistent descriptor (TMA) kernel."""
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)(t?)", spec)
    if not m:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected BMxBNxBKwWARPSsSTAGES[t], e.g. 128x256x64w8s3t")
    bm, bn, bk, w, st = map(int, m.groups()[:5])
    return dict(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=st, tma=m.group(6) == "t")


def bench_gemm(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """cuBLAS's head GEMM, then today's top-K, against the Triton GEMM with the scan in its epilogue, then
    the select (and the same GEMM without the epilogue), per batch and tile set."""
    k = args.topk_k[0]
    gen, weight = _head_problem(args)
    out, table, wrong = [], [], []
    for bs in args.batch:
        x, rows = _head_features(args, gen, bs)

        def gemm() -> torch.Tensor:
            return torch.mm(rows, weight.T)

        fns: dict[str, Callable[[], object]] = {
            "cuBLAS GEMM": gemm,
            "cuBLAS GEMM + top-K": lambda: topk_parts_triton(gemm().view(bs, args.depth, args.vocab), k)}
        for spec in args.gemm_tiles:
            tiles = gemm_tiles(spec)
            parts, logits = head_gemm_topk(x, weight, k, **tiles)
            if not torch.equal(parts.tokens, topk_parts_triton(logits, k).tokens):
                wrong.append((bs, spec))
            fns[f"Triton GEMM {spec}"] = lambda t=tiles: head_gemm_scan(rows, weight, scan=False, **t)
            fns[f"Triton GEMM {spec} + epilogue scan + select"] = lambda t=tiles: head_gemm_topk(x, weight, k, **t)
        _visible_rows(bs, timer.measure(fns), "cuBLAS GEMM", out, table)
    _table(f"Draft head GEMM with the scan in its epilogue, V={args.vocab}, H={args.hidden}, D={args.depth}, K={k}, "
           "bf16: us median [p10-p90]; top-K visible = form - cuBLAS GEMM (issue 11: <= 60 us at batch 64)",
           ["batch", "form", "us", "top-K visible"], table)
    if wrong:
        raise RuntimeError(f"the epilogue's top-K is not the top-K of its own logits at {wrong}")
    return out
