"""Section penalties: SGLang's penalties at every node (frequency, presence, repetition; each node's
own path counted): the torch reference (dense, then the path tokens) against the sparse in-place
step (its touched-token list alone too), the walk to the root as torch ops and Triton, and the
whole call with the touched tokens listed every round and with the lists kept from round to round
(the runtime's) plus their append at a commit, side by side; fails if either whole call differs
from the reference in any bit. The round, penalties and kept lists serve the posterior section too."""

from __future__ import annotations

import argparse
import dataclasses

import torch

from kernels.path_penalties import (Penalties, TouchedLists, apply_path_penalties, path_adjust_torch,
                                    sparse_adjust_triton, path_tokens_torch, path_tokens_triton, touched_tokens)
from scripts.bench.kernels.timing import Timer, _cell, _table


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
