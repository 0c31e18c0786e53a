"""Per-round cost of the DDTree kernels on one GPU: stages, side-by-side ratios, a CPU reference.

Every timed callable is captured alone in a CUDA graph; a sample is the mean of `--replays`
replays between two CUDA events (graph launch included), and each figure is the median of
`--samples` samples with the 10th-90th percentile spread. Side-by-side comparisons interleave
their samples (A, B, A, B, ...) so both see the same clocks and neighbours.

Sections (`--sections`, all by default):
- topk: vocab top-K + log-sum-exp, torch.topk + Triton LSE (old) vs the streaming kernel (new).
- topk-tune: the streaming kernel's launch settings (scan warps x super-groups per tile x programs
  per SM) at the largest batch, fastest first (the defaults are 4 warps, 8 super-groups, 8
  programs per SM); then the scan alone and the select sorting every key (`select_cap=0`) or at
  most 2 x KP or 4 x KP keys side by side.
- scan: the top-K's scan alone at the largest batch in each of its forms (next-tile prefetch,
  warps, programs per SM, tile size), side by side with the GB/s reached.
- build: best-first tree build for budgets 16..256 (us per node shows the linear growth), with the
  default warps per request against 1 and 2.
- mask: tree mask with the prefix ones vs tree columns only (`prefix_ones=False`).
- move: KV commit move over a Qwen3-8B-shaped pool (36 layers x K and V, 8 KV heads x 128,
  bf16), copying every pair (as SGLang's `move_kv_cache`) vs skipping identity and padding
  entries, byte by byte, and skipping by the widest word the pool allows (the runtime's), in tiles
  of 512 bytes (the default) and of a whole slot;
  first-child paths (nothing moves) and off-chain paths.
- posterior: the per-node posterior over batch x `--rows` fp32 target logits (SGLang's logits
  dtype): torch argmax, then the previous kernel (kernels/posterior.py, one program per node) and
  the runtime's split kernel (kernels/posterior_split.py, split over the row's blocks) side by
  side, greedy and exact sampling with each filter and after the per-node path penalties (with
  kept touched lists, as the runtime), on
  "peaked" (randn x 4) and "flat" (randn x 0.3) logits. Where the two draw other tokens, each
  one's draws off the torch reference are counted with those at a CDF boundary (two float32
  summation orders); the section fails on any other difference, or if the split kernel raises
  (the per-node kernel's figures are still printed).
- posterior-tune: the split kernel's speed knobs at the largest batch on T=1, top-p 0.9, top-k 50
  and 2000, fastest first, each setting's draws compared with the default's (counted: another
  float32 summation order, or another unit's floor, draws other tokens). `--tune launch`: block
  size x warps x split check rounds x the top-k floor's unit x blocks per mass / check program;
  `--tune cuts`: the cut candidates of rows without / with top-k (`top_p_cuts`, `top_k_cuts`), the
  latter with finer floor units (16-64 tokens: the floor then serves top-k 2000), defaults otherwise;
  `--tune pool`: the candidate pool pass's blocks per program, the stats pass's blocks per program,
  the first listed check round and a listed round's programs (the same draws).
- posterior-profile: GPU time per call of each of the split posterior's kernels (torch.profiler) on
  each case at the largest batch (whole blocks as the top-k floor's units; 256- and 32-token units,
  each also with 6 split check rounds), of the streaming top-K's scan and select, and of the KV move
  on a first-child path at budget 64: where the time goes (GPU only).
- penalties: SGLang's penalties at every node (frequency, presence, repetition; each node's own
  path counted): the torch reference (dense, then the path tokens) against the sparse in-place
  step (its touched-token list alone too), the walk to the root as torch ops and Triton, and the
  whole call with the touched tokens listed every round and with the lists kept from round to round
  (the runtime's) plus their append at a commit, side by side; fails if either whole call differs
  from the reference in any bit.
- head: the draft head's GEMM (cuBLAS, `--hidden` x V bf16, batch x depth rows) with the top-K after
  it (today's runtime) against the GEMM run chunk by chunk with each chunk's scan right behind it
  (`kernels/head_topk.py`), on the same stream and on a side stream (high priority, as the runtime's,
  and default priority), for each
  `--head-chunks`; the chunked GEMM alone too. "top-K visible" = a form's time minus the one-GEMM
  time: what the top-K adds to the head (issue 11: <= 60 us at batch 64, K=64). Fails if a form's
  tokens differ from today's.
- gemm: the draft head's GEMM (cuBLAS) with the top-K after it (today's runtime) against a Triton
  GEMM with the top-K's scan in its epilogue followed by the select (`kernels/head_gemm_scan.py`),
  and that Triton GEMM without the epilogue, for each `--gemm-tiles` (BMxBNxBK, w warps, s stages; a
  trailing t: the persistent kernel with tensor-descriptor (TMA) loads).
  "top-K visible" = a form's time minus cuBLAS's GEMM alone. Fails if the epilogue's tokens are not
  the top-K of the logits it wrote.
- round: the stages one round runs and build+mask+walk in one graph, against the host
  reference (device->host copy, plain-Python heap and numpy visibility per request); and
  "extra": every DDTree-only step of a round as the runtime runs it (top-K + LSE, tree build,
  tree-only mask, accept walk, commit, the KV move of an off-chain path skipping identity
  entries) in one graph, against issue 11's goal of <= 150 us at batch 64, budget 64; and
  "extra (reorder)": the same with the move-free commit (`DDTREE_KV_COMMIT=reorder`: each
  request's req_to_token row reordered, kernels/slot_reorder.py) in place of commit + move; and the
  draft head (one GEMM over `--hidden` features) beside the head in `--round-head-chunks` chunks
  with their scans on a side stream followed by the rest of "extra (reorder)": their difference is
  what the round's extra work would be with the head in chunks (kernels/head_topk.py, measured slower,
  not used by the runtime) and the reorder.

    python -m scripts.bench.kernels --json bench.json
    python -m scripts.bench.kernels --device cpu --vocab 3000 --batch 2 --topk-k 8 --budget 8 \
        --build-budget 8 16 --samples 2 --replays 1 --layers 2   # smoke run (TRITON_INTERPRET=1)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import re
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

from kernels.accept_walk import accept_walk_triton  # noqa: E402
from kernels.head_gemm_scan import head_gemm_scan, head_gemm_topk  # noqa: E402
from kernels.head_topk import chunk_plan, head_topk_parts  # noqa: E402
from kernels.commit import commit_slots_triton, move_slots_torch, move_slots_triton, move_word  # noqa: E402
from kernels.path_penalties import (Penalties, TouchedLists, apply_path_penalties, path_adjust_torch,  # noqa: E402
                                    sparse_adjust_triton, path_tokens_torch, path_tokens_triton, touched_tokens)
from kernels.posterior import (BLOCK, CUTS, POOL, TOP_K_CUTS, TOP_P_CUTS, UNIT, posterior_tokens_triton,  # noqa: E402
                               uniform_torch)
from kernels.posterior_reference import posterior_tokens_torch  # noqa: E402
from kernels.posterior_pool import pool_eligible_torch  # noqa: E402
from kernels.posterior_split import posterior_tokens_split  # noqa: E402
from kernels.slot_reorder import reorder_path_slots_triton  # noqa: E402
from kernels.tree_build import select_tree_triton  # noqa: E402
from kernels.tree_mask import build_tree_mask_triton  # noqa: E402
from kernels.vocab_topk import (GROUP, SELECT_CAP_PER_KP, SUPER, draft_topk_radix, draft_topk_stream,  # noqa: E402
                                draft_topk_triton, log_probs, scan_stage, topk_parts_triton)
from tests.cuda_graph import capture_graph  # noqa: E402
from tests.kernels_reference import heap_tree, visibility  # noqa: E402

Stats = dict[str, float]


class Timer:
    """Medians of interleaved samples; CUDA graph replays on a GPU, eager calls on the CPU."""

    def __init__(self, device: str, samples: int, replays: int):
        self.device, self.samples, self.replays = device, samples, replays

    def _runner(self, fn: Callable[[], object]) -> Callable[[], float]:
        if self.device == "cpu":
            def run_cpu() -> float:
                t0 = time.perf_counter()
                for _ in range(self.replays):
                    fn()
                return (time.perf_counter() - t0) * 1e6 / self.replays
            return run_cpu
        graph, _ = capture_graph(fn, warmups=2)
        for _ in range(3):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def run_graph() -> float:
            start.record()
            for _ in range(self.replays):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1000 / self.replays
        return run_graph

    def measure(self, fns: dict[str, Callable[[], object]]) -> dict[str, Stats]:
        runners = {name: self._runner(fn) for name, fn in fns.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(self.samples):
            for name, run in runners.items():
                samples[name].append(run())
        return {name: _stats(values) for name, values in samples.items()}


def _stats(values: list[float]) -> Stats:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]  # noqa: E731
    return {"median": statistics.median(ordered), "p10": pick(0.1), "p90": pick(0.9)}


def _cell(s: Stats) -> str:
    return f"{s['median']:.1f} [{s['p10']:.1f}-{s['p90']:.1f}]"


def _table(title: str, cols: list[str], rows: list[list[str]]) -> None:
    print(f"\n## {title}\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)


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


def _path_moves(bs: int, n: int, length: int, off_chain: bool, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """dst = a request's first `length` slots; src = accepted nodes' slots, -1 past the accepted
    length (3/4 of it accepted). First-child path: node d at depth d (src == dst)."""
    gen = torch.Generator().manual_seed(bs * n)
    accepted = max(1, 3 * length // 4)
    dst = torch.arange(bs * n).view(bs, n)[:, :length].clone()
    src = torch.full((bs, length), -1, dtype=torch.int64)
    for b in range(bs):
        nodes = torch.arange(accepted)
        if off_chain:
            nodes = torch.cat([torch.zeros(1, dtype=torch.int64),
                               torch.randperm(n - 1, generator=gen)[: accepted - 1].sort().values + 1])
        src[b, :accepted] = b * n + nodes
    return dst.to(device), src.to(device)


def _moves_agree(buffers: list[torch.Tensor], dst: torch.Tensor, src: torch.Tensor, full_src: torch.Tensor) -> bool:
    """Every variant (all pairs, skipping, skipping by words) on random copies of two buffers gives
    the torch reference's result."""
    gen = torch.Generator(device=buffers[0].device).manual_seed(0)
    start = [torch.randn(b.shape, generator=gen, device=b.device).to(b.dtype) for b in buffers]
    ref = [b.clone() for b in start]
    move_slots_torch(ref, dst, src)
    agree = True
    for pairs, skip, wide in ((src, True, False), (full_src, False, False), (src, True, True)):
        work = [b.clone() for b in start]
        ptrs = torch.tensor([b.data_ptr() for b in work], dtype=torch.uint64, device=dst.device)
        strides = torch.tensor([b.stride(0) * b.element_size() for b in work], device=dst.device)
        word = move_word([b.data_ptr() for b in work], strides.tolist()) if wide else 1
        move_slots_triton(ptrs, strides, int(strides.max()), dst, pairs, skip_identity=skip, word=word)
        agree &= all(torch.equal(w, r) for w, r in zip(work, ref))
    return agree


def _kv_pool(args: argparse.Namespace, slots: int) -> tuple[list[torch.Tensor], torch.Tensor, int, torch.Tensor, int]:
    """A Qwen3-8B-shaped KV pool (K and V of every layer, bf16) as the move kernel sees it:
    (buffers, their addresses, bytes per slot, per-buffer bytes per slot, the widest move word)."""
    buffers = [torch.zeros(slots, args.kv_heads, args.head_dim, dtype=torch.bfloat16, device=args.device)
               for _ in range(2 * args.layers)]
    ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64, device=args.device)
    stride = buffers[0].stride(0) * buffers[0].element_size()
    word = move_word([b.data_ptr() for b in buffers], [stride])
    return buffers, ptrs, stride, torch.full((len(buffers),), stride, dtype=torch.int64, device=args.device), word


def bench_move(args: argparse.Namespace, timer: Timer) -> list[dict]:
    out, rows = [], []
    length = args.depth + 1
    for bs in args.batch:
        for budget in args.budget:
            n = budget + 1
            buffers, ptrs, stride, strides, word = _kv_pool(args, bs * n + 1)
            for kind in ("first-child", "off-chain"):
                dst, src = _path_moves(bs, n, min(length, n), kind == "off-chain", args.device)
                full_src = torch.where(src >= 0, src, dst)  # what SGLang's move is handed: every pair
                same = _moves_agree(buffers[:2], dst, src, full_src)
                t = timer.measure({
                    "all": lambda: move_slots_triton(ptrs, strides, stride, dst, full_src, skip_identity=False),
                    "skip": lambda: move_slots_triton(ptrs, strides, stride, dst, src),
                    "words": lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word),
                    "words, whole slot": lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word,
                                                                   tile=1 << (stride - 1).bit_length()),
                })
                moved = int(((src >= 0) & (src != dst)).sum()) * stride * len(buffers) * 2
                ratio = t["all"]["median"] / t["skip"]["median"]
                out.append({"batch": bs, "budget": budget, "paths": kind, "all_us": t["all"], "skip_us": t["skip"],
                            "skip_words_us": t["words"], "skip_words_slot_tile_us": t["words, whole slot"], "word": word,
                            "ratio": ratio, "same_result": same,
                            "bytes_moved_skip": moved, "bytes_moved_all": dst.numel() * stride * len(buffers) * 2})
                rows.append([str(bs), str(budget), kind, _cell(t["all"]), _cell(t["skip"]), _cell(t["words"]),
                             _cell(t["words, whole slot"]),
                             f"{ratio:.2f}x", f"{t['skip']['median'] / t['words']['median']:.2f}x",
                             f"{moved / 1e6:.1f}", "yes" if same else "NO"])
            del buffers
    _table(f"KV commit move, {args.layers} layers x K,V of [{args.kv_heads}, {args.head_dim}] bf16, "
           f"path length {length} (3/4 accepted): us median [p10-p90]",
           ["batch", "budget", "paths", "every pair (bytes)", "skip identity (bytes)", "skip identity (words)",
            "words, a slot per program", "every pair/skip", "bytes/words", "MB read+written (skip)", "same result"], rows)
    return out


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


POSTERIOR_CASES = {
    # name: (temperature, top_k, top_p, min_p, penalties)
    "greedy (T=0)": (0.0, -1, 1.0, 0.0, False),
    "T=1": (1.0, -1, 1.0, 0.0, False),
    "top_p=0.9": (1.0, -1, 0.9, 0.0, False),
    "top_k=50": (1.0, 50, 1.0, 0.0, False),
    "top_k=2000": (1.0, 2000, 1.0, 0.0, False),
    "min_p=0.1": (1.0, -1, 1.0, 0.1, False),
    "k=50,p=0.9,min_p=0.05,T=0.7": (0.7, 50, 0.9, 0.05, False),
    "penalties+top_p=0.9": (1.0, -1, 0.9, 0.0, True),
}


def _case_params(case: tuple, bs: int, device: str | torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A POSTERIOR_CASES entry as per-request tensors: ([temperature, top_k, top_p], min_p)."""
    t, k, p, mp, _ = case
    params = [torch.full((bs,), v, device=device, dtype=dt) for v, dt in
              ((t, torch.float32), (k, torch.int64), (p, torch.float32))]
    return params, torch.full((bs,), mp, device=device)


def _posterior_fns(logits: torch.Tensor, case: tuple, seed: torch.Tensor, positions: torch.Tensor,
                   penalise: Callable[[torch.Tensor], torch.Tensor]) -> tuple:
    """The per-node (one program per node) and split (program per row and block) kernels on one case
    (timed), the two again from the case's own logits (compared), and the untimed torch reference:
    (its tokens, the logits it sampled from, the temperatures)."""
    params, min_p = _case_params(case, logits.shape[0], logits.device)
    penalised = case[4]
    # the penalties adjust the logits in place, as the runtime's verify logits: timed replays drift
    # (the touched tokens penalised again each time); `fresh` restores them before a compared call
    work = logits.clone() if penalised else logits

    def run(kernel: Callable[..., torch.Tensor]) -> torch.Tensor:
        x = penalise(work) if penalised else logits
        return kernel(x, *params, seed, min_p=min_p, positions=positions)

    def reference(pool: int = POOL) -> tuple[torch.Tensor, ...]:
        x = penalise(work) if penalised else logits
        return posterior_tokens_torch(x, *params, seed, min_p=min_p, positions=positions, pool=pool), x, params[0]

    def fresh(fn: Callable[..., object]) -> Callable[..., object]:
        return lambda *a: (work.copy_(logits), fn(*a))[1] if penalised else fn(*a)

    fns = {"per_node": lambda: run(posterior_tokens_triton), "split": lambda: run(posterior_tokens_split)}
    if _pooled_case(case, logits.shape[-1]):  # the same kernel without its candidate pool, side by side
        fns["split_no_pool"] = lambda: run(functools.partial(posterior_tokens_split, pool=0))
    return fns, fresh(fns["per_node"]), fresh(fns["split"]), fresh(reference)


def _pooled_case(case: tuple, vocab: int) -> bool:
    """Whether a case's rows may draw from the candidate pool (kernels/posterior_pool.py) at the
    default block and unit (top-k above the row's floor units, at most V / 64)."""
    nb = -(-vocab // BLOCK)
    return POOL > 0 and case[0] > 0 and bool(pool_eligible_torch(torch.ones(1, dtype=torch.bool), torch.tensor([case[1]]),
                                                                 vocab, nb, min(UNIT, BLOCK), BLOCK)[0])


def cdf_eps(vocab: int) -> float:
    """How far two float32 summation orders of a row's CDF can drift apart, with margin: a rounding
    random walk of ~sqrt(V) steps of 2**-24 (half an ulp of 1), times 4 (1.1e-5 at V=2048, 9.3e-5
    at V=151936), and never below 1e-5."""
    return max(1e-5, 4 * vocab**0.5 * 2.0**-24)


def boundary_draws(x: torch.Tensor, temperature: torch.Tensor, ref: torch.Tensor, got: torch.Tensor,
                   eps: float | None = None, first_u: torch.Tensor | None = None,
                   min_p: torch.Tensor | None = None) -> tuple[int, int]:
    """(draws that differ from the reference, those of them at a CDF boundary). A boundary case is
    a draw that fell where two float32 summation orders disagree (within `eps`, default `cdf_eps`):
    - the float64 mass of softmax(x / T) strictly between the two tokens (in index order, the order
      every kernel sums in) is below eps (filters only remove mass, so the unfiltered softmax
      bounds it); or
    - with `first_u` [bs, n] (the first round's uniforms): that first draw's target u lies within
      eps of a step of the float64 CDF it is drawn from (min-p applied). The kernels draw, check
      top-k / top-p, then redraw above a raised floor, so a first draw on either side of a step can
      end in tokens far apart.
    Greedy rows never count."""
    eps = cdf_eps(x.shape[-1]) if eps is None else eps
    diff = (got != ref).nonzero().tolist()
    near = 0
    for b, r in diff:
        t = float(temperature[b])
        if t <= 0:
            continue
        probs = torch.softmax(x[b, r].double() / t, -1)
        cum = probs.cumsum(0)
        lo, hi = sorted((int(ref[b, r]), int(got[b, r])))
        at_step = False
        if first_u is not None:
            w = probs / probs.max()
            if min_p is not None and float(min_p[b]) > 0:
                w = torch.where(w >= float(min_p[b]), w, 0.0)
            steps = (w.cumsum(0) / w.sum())[w > 0]
            target = float(first_u[b, r])
            i = int(torch.searchsorted(steps, torch.tensor([target], dtype=steps.dtype, device=steps.device))[0])
            gaps = [abs(target - float(steps[j])) for j in (i - 1, i) if 0 <= j < len(steps)]
            at_step = min(gaps) < eps
        near += at_step or float(cum[hi - 1] - cum[lo]) < eps
    return len(diff), near


def bench_posterior(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The posterior of one round (batch x rows nodes): torch argmax, then the per-node and the split
    kernel (the runtime's) side by side on each sampling case (interleaved samples). Where their
    draws differ, each kernel's draws off the torch reference are counted, with those a float32
    summation order explains (`boundary_draws`); any other difference, or a split kernel that
    raises, fails the section at the end (the per-node kernel still timed)."""
    dev, rows, vocab = args.device, args.rows, args.vocab
    records, table, split_errors = [], [], []
    for bs in args.batch:
        gen, parent, tokens = _chain_round(bs, rows, vocab, dev, seed=bs * 7 + rows)
        seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
        positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
        pen = _kept_lists(_penalties(bs, vocab, gen, dev))
        penalise = lambda x: apply_path_penalties(x, tokens, parent, min(args.depth, rows - 1), pen, None,  # noqa: E731
                                                  in_place=True)
        for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
            logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
            argmax = timer.measure({"argmax": lambda logits=logits: logits.argmax(dim=-1)})["argmax"]
            records.append({"batch": bs, "rows": rows, "logits": shape, "case": "torch argmax", "us": argmax})
            table.append([str(bs), shape, "torch argmax", _cell(argmax), "", "", "", ""])
            for name, case in POSTERIOR_CASES.items():
                fns, per_node, split_fn, reference = _posterior_fns(logits, case, seed, positions, penalise)
                expected = per_node()
                try:
                    split = split_fn()
                    same = bool(torch.equal(expected, split))
                except Exception as exc:  # never compiled on a GPU before: keep the per-node kernel's figures
                    if not split_errors:
                        traceback.print_exc()
                    split_errors.append(f"batch {bs}, {shape}, {name}: {type(exc).__name__}: {exc}")
                    t = timer.measure({"per_node": fns["per_node"]})
                    records.append({"batch": bs, "rows": rows, "logits": shape, "case": name,
                                    "per_node_us": t["per_node"], "split_error": split_errors[-1]})
                    table.append([str(bs), shape, name, _cell(t["per_node"]), "FAILED", "", "", ""])
                    continue
                agreement = "yes"
                if not same:  # which kernel left its torch reference, how often, and whether only at boundaries
                    u0 = uniform_torch(seed[:, None], positions, 0)
                    off = {}
                    for k, v, pool in (("per_node", expected, 0), ("split", split, POOL)):  # no pool per node
                        ref, x, temp = reference(pool)
                        off[k] = boundary_draws(x, temp, ref, v, first_u=u0, min_p=torch.full((bs,), case[3], device=dev))
                    counts = ", ".join(f"{k} {n} of {bs * rows} off the torch reference, {near} of them at a CDF boundary"
                                       for k, (n, near) in off.items())
                    pooled = "pooled: " if "split_no_pool" in fns else ""  # the split kernel's draws are another rule's
                    agreement = f"{pooled}boundary only ({counts})"
                    if not any(n for n, _ in off.values()):
                        agreement = "pooled: each kernel == its torch reference (split with its pool, per node without)"
                    if any(n > near for n, near in off.values()):  # a difference float32 summation order cannot explain
                        agreement = f"NO ({counts})"
                        split_errors.append(f"batch {bs}, {shape}, {name}: {counts}")
                t = timer.measure(fns)
                ratio = t["per_node"]["median"] / t["split"]["median"]
                records.append({"batch": bs, "rows": rows, "logits": shape, "case": name, "per_node_us": t["per_node"],
                                "split_us": t["split"], "ratio": ratio, "same_tokens": same, "agreement": agreement,
                                **({"split_no_pool_us": t["split_no_pool"]} if "split_no_pool" in t else {})})
                table.append([str(bs), shape, name, _cell(t["per_node"]), _cell(t["split"]),
                              _cell(t["split_no_pool"]) if "split_no_pool" in t else "", f"{ratio:.2f}x", agreement])
    _table(f"posterior, {rows} rows per request, V={vocab}, fp32 logits: us per round, median [p10-p90]",
           ["batch", "logits", "case", "per node (previous)", "split (runtime: program per row, block)",
            "split without the pool", "per node/split", "same tokens"], table)
    if split_errors:
        raise RuntimeError("a posterior kernel failed, or left the reference off a CDF boundary:\n"
                           + "\n".join(split_errors))
    return records


TUNE_CASES = ("T=1", "top_p=0.9", "top_k=50", "top_k=2000")


def bench_posterior_tune(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The split posterior's speed knobs at the largest batch (`--tune launch`: block size x warps x
    check rounds run split before the per-row tail (`par_rounds`) x the top-k floor's unit (`unit`,
    which the mass pass also skips by) x blocks per mass / check program; `--tune cuts`: the check's
    cut candidates per row without / with top-k, the latter under finer units; `--tune pool`: blocks
    per program of the candidate pool's pass, blocks per program of the stats pass, the first
    check round over the list of rows still drawing, and a listed round's programs), on
    T=1, top-p 0.9, top-k 50 and 2000, peaked and flat logits, fastest first per case.
    Each setting's draws are compared with the default's, counted, not failed: another block sums in
    another float32 order (a few boundary draws), another unit sets another top-k floor (other,
    equally exact draws); the pool's knobs must change no draw."""
    bs, rows, vocab, dev = max(args.batch), args.rows, args.vocab, args.device
    gen = torch.Generator(device=dev).manual_seed(bs * 11 + rows)
    seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
    positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
    blocks = [b for b in (2048, 4096) if b <= vocab] or [vocab]
    base = {"block": blocks[0], "warps": 4, "par_rounds": 3, "unit": 256, "blocks_per_program": 8,
            "top_p_cuts": TOP_P_CUTS, "top_k_cuts": TOP_K_CUTS}
    settings = [{}]  # the defaults
    if "launch" in args.tune:
        settings += [dict(par_rounds=r, unit=u, blocks_per_program=g) for r in (2, 3, 4) for u in (256, 512)
                     for g in (4, 8, 16)]
        settings += [dict(unit=blocks[0]), dict(warps=8)]
        settings += [dict(block=b, unit=u, blocks_per_program=g) for b in blocks[1:] for u in (256, b) for g in (4, 8)]
    if "cuts" in args.tune:
        settings += [dict(par_rounds=r, top_p_cuts=p) for r in (2, 3) for p in (1, 2, 4, CUTS)]
        settings += [dict(unit=u, top_k_cuts=k) for u in (16, 32, 64, 256) for k in (1, 2, 4, CUTS)]
    if "pool" in args.tune:
        settings += [dict(pool_bpp=g) for g in (8, 32)] + [dict(stats_bpp=1)]
        settings += [dict(listed_from=r) for r in (1, 3)] + [dict(check_programs=132 * 4)]
    configs = {" ".join(f"{k}={v}" for k, v in {**base, **kw}.items()): {**base, **kw} for kw in settings}
    out, table = [], []
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
        for case in TUNE_CASES:
            params, min_p = _case_params(POSTERIOR_CASES[case], bs, dev)
            fns = {name: (lambda kw=kw: posterior_tokens_split(logits, *params, seed, min_p=min_p, positions=positions,
                                                               **kw))
                   for name, kw in configs.items()}
            want = posterior_tokens_split(logits, *params, seed, min_p=min_p, positions=positions)
            differ = {name: int((fn() != want).sum()) for name, fn in fns.items()}
            times = timer.measure(fns)
            for name in sorted(configs, key=lambda n: times[n]["median"]):
                out.append({"batch": bs, "rows": rows, "logits": shape, "case": case, **configs[name],
                            "us": times[name], "draws_differing_from_default": differ[name]})
                table.append([shape, case, name, _cell(times[name]), str(differ[name])])
    _table(f"Split posterior settings, batch {bs} x {rows} rows, V={vocab}: us median [p10-p90], fastest first per "
           "case", ["logits", "case", "setting", "us", f"draws != the default's (of {bs * rows})"], table)
    return out


PROFILE_CASES = ("T=1", "top_p=0.9", "top_k=50", "top_k=2000", "min_p=0.1", "k=50,p=0.9,min_p=0.05,T=0.7")


def kernel_breakdown(fn: Callable[[], object], calls: int) -> dict[str, float]:
    """GPU time per call of every kernel `fn` launches (torch.profiler, eager calls after a warm-up),
    us, slowest first: which pass of a multi-kernel call costs what."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = {e.key: getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)) / calls
           for e in prof.key_averages()}
    return dict(sorted(((k, v) for k, v in per.items() if v > 0), key=lambda kv: -kv[1]))


def _breakdown_cells(per: dict[str, float]) -> list[str]:
    """A `kernel_breakdown` as table cells: the sum, then each kernel (short name) and its us."""
    return [f"{sum(per.values()):.1f}", "; ".join(f"{k.split('(')[0][:40]} {v:.1f}" for k, v in per.items())]


def bench_posterior_profile(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Where the split posterior's time goes at the largest batch: GPU time per call of each of its
    kernels (`kernel_breakdown`) on each case, peaked and flat logits, with whole blocks as the top-k
    floor's units, with 256-token units, with 32-token units (a floor for top-k up to V / 32), each of
    the latter two also with 6 split check rounds; then the streaming
    top-K's scan and select, and the KV move of a first-child path (nothing to move) beside every
    pair's. GPU only."""
    if args.device != "cuda":
        raise RuntimeError("the profile section needs a GPU (torch.profiler's CUDA activity)")
    bs, rows, vocab, dev = max(args.batch), args.rows, args.vocab, args.device
    gen = torch.Generator(device=dev).manual_seed(bs * 13 + rows)
    seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
    positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
    out, table = [], []
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
        for case in args.profile_cases:
            params, min_p = _case_params(POSTERIOR_CASES[case], bs, dev)
            for par_rounds, unit in ((3, 2048), (3, 256), (6, 256), (3, 32), (6, 32)):
                per = kernel_breakdown(lambda: posterior_tokens_split(logits, *params, seed, min_p=min_p,
                                                                      positions=positions, par_rounds=par_rounds,
                                                                      unit=unit),
                                       calls=5)
                out.append({"logits": shape, "case": case, "par_rounds": par_rounds, "unit": unit,
                            "kernels_us": per})
                table.append([shape, case, f"{par_rounds}, {unit}", *_breakdown_cells(per)])
    draft = _draft_logits(bs, args.depth, vocab, dev, seed=bs)
    for k in args.topk_k:
        per = kernel_breakdown(lambda: draft_topk_stream(draft, k), calls=5)
        out.append({"case": f"streaming top-K, K={k}", "kernels_us": per})
        table.append(["draft bf16", f"top-K K={k}", "-", *_breakdown_cells(per)])
    n = 65  # budget 64: the KV move of a first-child path (nothing moves) and of every pair
    _, ptrs, stride, strides, word = _kv_pool(args, bs * n + 1)
    dst, src = _path_moves(bs, n, args.depth + 1, False, dev)
    for name, fn in (("skip identity", lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word)),
                     ("every pair", lambda: move_slots_triton(ptrs, strides, stride, dst, torch.where(src >= 0, src, dst),
                                                              skip_identity=False))):
        per = kernel_breakdown(fn, calls=5)
        out.append({"case": f"KV move, first-child, {name}", "kernels_us": per})
        table.append(["KV pool", f"move first-child, {name}", "-", *_breakdown_cells(per)])
    _table(f"Kernel breakdown (torch.profiler, GPU us per call, eager), batch {bs} x {rows} rows, V={vocab}",
           ["logits", "case", "split rounds, unit", "sum of kernels", "kernels, slowest first"], table)
    return out


def _chain_round(bs: int, rows: int, vocab: int, dev: str, seed: int
                 ) -> tuple[torch.Generator, torch.Tensor, torch.Tensor]:
    """A round's generator (seeded `seed`), tree (a chain: the deepest paths) and draft tokens."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    parent = torch.arange(rows, device=dev).expand(bs, rows) - 1
    tokens = torch.randint(0, vocab, (bs, rows), generator=gen, device=dev)
    return gen, parent, tokens


def _penalties(bs: int, vocab: int, gen: torch.Generator, dev: str) -> Penalties:
    """The sections' penalties: 0.5% of the vocabulary counted; frequency 0.5, presence 0.3, repetition 1.3."""
    return Penalties(counts=(torch.rand(bs, vocab, generator=gen, device=dev) < 0.005).float(),
                     frequency=torch.full((bs,), 0.5, device=dev), presence=torch.full((bs,), 0.3, device=dev),
                     repetition=torch.full((bs,), 1.3, device=dev))


def _kept_lists(pen: Penalties) -> Penalties:
    """`pen` with its touched lists kept as the runtime keeps them (`TouchedLists`, listed once at a restart)."""
    bs, vocab = pen.counts.shape
    lists = TouchedLists(bs, vocab, pen.counts.device)
    lists.restart(pen.counts, torch.arange(bs, device=pen.counts.device), pen.stop_tokens, None)
    return dataclasses.replace(pen, lists=lists.state())


def bench_penalties(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The path penalties side by side: the torch reference (dense adjustment, then the path tokens;
    the previous runtime ran the dense part as one Triton pass) against the runtime's sparse step
    (touched-token list + in-place adjustment of only those and the path tokens), and the walk to
    the root, torch loop vs Triton. The timed in-place calls drift (the same tokens penalised again
    each replay); the results are compared once, on fresh logits."""
    dev, rows, vocab = args.device, args.rows, args.vocab
    records, table, differ = [], [], []
    for bs in args.batch:
        gen, parent, tokens = _chain_round(bs, rows, vocab, dev, seed=bs * 11 + rows)
        pen = _penalties(bs, vocab, gen, dev)
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * 4
        work = logits.clone()
        depth = min(args.depth, rows - 1)
        path = path_tokens_triton(tokens, parent, depth)
        kept = _kept_lists(pen)
        lists = TouchedLists(bs, vocab, dev)
        lists.restart(pen.counts, torch.arange(bs, device=dev), None, None)
        # a commit of 16 tokens per request, all counted before: the append's reads and checks, no growth
        counted = pen.counts.argsort(dim=1, descending=True)[:, :16].contiguous()
        lengths = torch.full((bs,), 16, device=dev)
        fns = {"reference (torch)": lambda: path_adjust_torch(logits, path, pen, None, None),
               "touched list": lambda: touched_tokens(pen, None),
               "sparse in place": lambda: sparse_adjust_triton(work, path, pen, None, None),
               "walk torch": lambda: path_tokens_torch(tokens, parent, depth),
               "walk Triton": lambda: path_tokens_triton(tokens, parent, depth),
               "whole call, listed per round": lambda: apply_path_penalties(work, tokens, parent, depth, pen, None,
                                                                             in_place=True),
               "append at commit": lambda: lists.append(torch.arange(bs, device=dev), counted, lengths),
               "whole call, kept lists (runtime)": lambda: apply_path_penalties(work, tokens, parent, depth, kept, None,
                                                                                 in_place=True, sparse=True)}
        same = torch.equal(path_adjust_torch(logits, path, pen, None, None),
                           apply_path_penalties(logits.clone(), tokens, parent, depth, pen, None, in_place=True))
        same = same and torch.equal(path_adjust_torch(logits, path, pen, None, None),
                                    apply_path_penalties(logits.clone(), tokens, parent, depth, kept, None,
                                                         in_place=True, sparse=True))
        same = same and torch.equal(path, path_tokens_torch(tokens, parent, depth))
        if not same:
            differ.append(f"batch {bs}")
        t = timer.measure(fns)
        records.append({"batch": bs, "rows": rows, "depth": depth, "us": t, "same": same,
                        "touched": int(touched_tokens(pen, None)[1].max())})
        table.append([str(bs), *(_cell(t[name]) for name in fns), "yes" if same else "NO"])
    _table(f"path penalties (frequency, presence, repetition; ~{0.005 * vocab:.0f} touched tokens per request), "
           f"{rows} rows per request, depth {min(args.depth, rows - 1)}, V={vocab}, fp32: us per round, median [p10-p90]",
           ["batch", *fns, "same results"], table)
    if differ:
        raise RuntimeError(f"a Triton step differs from its torch reference at {differ}")
    return records


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


SECTIONS: dict[str, Callable[[argparse.Namespace, Timer], list[dict]]] = {
    "topk": bench_topk, "topk-tune": bench_topk_tune, "scan": bench_scan, "build": bench_build, "mask": bench_mask,
    "move": bench_move,
    "posterior": bench_posterior, "posterior-tune": bench_posterior_tune,
    "posterior-profile": bench_posterior_profile, "penalties": bench_penalties,
    "head": bench_head, "gemm": bench_gemm, "round": bench_round,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--depth", type=int, default=15)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--topk-k", type=int, nargs="+", default=[64])
    parser.add_argument("--budget", type=int, nargs="+", default=[16, 64], help="mask, move and round sections")
    parser.add_argument("--build-budget", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--prefix", type=int, default=1024, help="prefix length of every request (mask width)")
    parser.add_argument("--rows", type=int, default=16, help="tree nodes per request (posterior section)")
    parser.add_argument("--tune", nargs="+", default=["launch", "cuts"], choices=["launch", "cuts", "pool"],
                        help="posterior-tune's knob groups")
    parser.add_argument("--profile-cases", nargs="+", default=list(PROFILE_CASES), choices=list(PROFILE_CASES),
                        help="the posterior-profile section's cases")
    parser.add_argument("--hidden", type=int, default=4096, help="head section: the draft features' width")
    parser.add_argument("--head-chunks", type=int, nargs="+", default=[4, 8, 16], help="head section: chunk counts")
    parser.add_argument("--gemm-tiles", nargs="+", default=["128x256x64w8s4", "128x256x64w8s3t", "128x256x64w8s4t",
                                                            "128x128x64w8s4t", "64x128x64w4s4"],
                        type=lambda spec: gemm_tiles(spec) and spec,  # a bad spec fails before any section runs
                        help="gemm section: Triton tile sets, BMxBNxBKwWARPSsSTAGES, a trailing t: the persistent "
                             "descriptor (TMA) kernel")
    parser.add_argument("--round-head-chunks", type=int, default=8, help="round section: the chunked head's chunks")
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--samples", type=int, default=11)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    timer = Timer(args.device, args.samples, args.replays)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)"
    import triton

    meta = {"device": name, "torch": torch.__version__, "triton": triton.__version__, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    print(f"# {name}, torch {torch.__version__}, triton {triton.__version__}; samples={args.samples} x "
          f"replays={args.replays}")
    results: dict[str, object] = {"meta": meta}
    failed = []
    for section in args.sections:
        t0 = time.perf_counter()
        try:
            results[section] = SECTIONS[section](args, timer)
        except Exception:  # report the others; the exit status says one failed
            traceback.print_exc()
            failed.append(section)
            results[section] = {"error": traceback.format_exc()}
        print(f"({section}: {time.perf_counter() - t0:.0f} s)", flush=True)
        if args.json:  # after every section: a run cut short keeps what it measured
            args.json.write_text(json.dumps(results, indent=1))
    if failed:
        print(f"FAILED sections: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
