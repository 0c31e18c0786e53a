"""Per-round cost of the DDTree kernels on one GPU, against the CPU heap + numpy visibility reference.

Each stage is captured alone in a CUDA graph and timed over many replays with CUDA events (the
graph launch is included); "build+mask+walk" is the three captured together, the shape a serving
round would use. The reference copies the per-depth top-K to the host, runs the plain-Python
best-first heap and the numpy visibility matrix for every request (tests/kernels_reference.py).

    python scripts/bench_kernels.py --vocab 151936 --depth 15 --batch 1 8 64 --budget 16 64 256

`--posterior` times the per-node posterior instead: batch x rows fp32 target logits (SGLang's
logits dtype), for greedy (torch argmax), sampled rows with each filter, and sampled rows after
the per-node path penalties, on "peaked" (randn x 4) and "flat" (randn x 0.3) logits:

    python scripts/bench_kernels.py --posterior --vocab 151936 --batch 64 --rows 16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.accept_walk import accept_walk_triton  # noqa: E402
from kernels.commit import commit_slots_triton  # noqa: E402
from kernels.path_penalties import Penalties, apply_path_penalties  # noqa: E402
from kernels.posterior import posterior_tokens_triton  # noqa: E402
from kernels.tree_build import select_tree_triton  # noqa: E402
from kernels.tree_mask import build_tree_mask_triton  # noqa: E402
from kernels.vocab_topk import draft_topk_triton  # noqa: E402
from tests.kernels_reference import heap_tree, visibility  # noqa: E402

DEVICE = "cuda"


def graph_time_us(fn, replays: int) -> float:
    """Mean microseconds per replay of `fn` captured once in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(3):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / replays


def reference_us(lp: torch.Tensor, budget: int, reps: int) -> float:
    """Host reference per round: device->host copy, heap per request, numpy visibility per request."""
    best = float("inf")
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        host = lp.cpu().numpy()
        for b in range(host.shape[0]):
            nodes = heap_tree(host[b], budget)
            visibility([-1] + [parent for parent, _, _ in nodes])
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def bench(bs: int, budget: int, depth: int, vocab: int, prefix: int, replays: int) -> dict[str, float]:
    dev = DEVICE
    gen = torch.Generator(device=dev).manual_seed(bs * 1000 + budget)
    draft = (torch.randn(bs, depth, vocab, generator=gen, device=dev) * 4).to(torch.bfloat16)
    k = min(budget, vocab)
    lp, tok = draft_topk_triton(draft, k)
    tree = select_tree_triton(lp, tok, budget)
    n = budget + 1
    prefix_lens = torch.full((bs,), prefix, device=dev)
    prefix_sum = prefix * bs
    tokens = tree.tokens.clone()
    tokens[:, 0] = 0
    kid = tokens.gather(1, tree.first_child.clamp(min=0))
    posterior = torch.where(torch.rand(bs, n, generator=gen, device=dev) < 0.7, kid,
                            torch.randint(0, vocab, (bs, n), generator=gen, device=dev))
    cache_loc = torch.arange(bs * n, device=dev).view(bs, n)
    acc, length, _ = accept_walk_triton(tokens, tree.first_child, tree.next_sibling, posterior, depth)

    def round_fn() -> None:
        t = select_tree_triton(lp, tok, budget)
        build_tree_mask_triton(t.parent, prefix_lens, prefix_sum)
        accept_walk_triton(t.tokens, t.first_child, t.next_sibling, posterior, depth)

    out = {
        "topk": graph_time_us(lambda: draft_topk_triton(draft, k), replays),
        "build": graph_time_us(lambda: select_tree_triton(lp, tok, budget), replays),
        "mask": graph_time_us(lambda: build_tree_mask_triton(tree.parent, prefix_lens, prefix_sum), replays),
        "walk": graph_time_us(lambda: accept_walk_triton(tokens, tree.first_child, tree.next_sibling,
                                                         posterior, depth), replays),
        "commit": graph_time_us(lambda: commit_slots_triton(acc, length, cache_loc), replays),
        "build+mask+walk": graph_time_us(round_fn, replays),
        "reference": reference_us(lp, budget, reps=3),
        "mean_accept": float(length.float().mean()),
    }
    out["speedup"] = out["reference"] / out["build+mask+walk"]
    return out


POSTERIOR_CASES = {
    # name: (temperature, top_k, top_p, min_p, penalties)
    "T=1": (1.0, -1, 1.0, 0.0, False),
    "top_p=0.9": (1.0, -1, 0.9, 0.0, False),
    "top_k=50": (1.0, 50, 1.0, 0.0, False),
    "top_k=2000": (1.0, 2000, 1.0, 0.0, False),
    "min_p=0.1": (1.0, -1, 1.0, 0.1, False),
    "k=50,p=0.9,min_p=0.05,T=0.7": (0.7, 50, 0.9, 0.05, False),
    "penalties+top_p=0.9": (1.0, -1, 0.9, 0.0, True),
}


def bench_posterior(bs: int, rows: int, vocab: int, depth: int, replays: int) -> dict[str, float]:
    """Microseconds per round of the posterior over bs x rows nodes, per case and logit shape."""
    dev = DEVICE
    gen = torch.Generator(device=dev).manual_seed(bs * 7 + rows)
    out = {}
    parent = torch.arange(rows, device=dev).expand(bs, rows) - 1  # a chain: the deepest paths
    tokens = torch.randint(0, vocab, (bs, rows), generator=gen, device=dev)
    seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
    positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
    pen = Penalties(counts=(torch.rand(bs, vocab, generator=gen, device=dev) < 0.005).float(),
                    frequency=torch.full((bs,), 0.5, device=dev), presence=torch.full((bs,), 0.3, device=dev),
                    repetition=torch.full((bs,), 1.3, device=dev))
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
        out[f"greedy/{shape}"] = graph_time_us(lambda: logits.argmax(dim=-1), replays)
        for name, (t, k, p, mp, penalised) in POSTERIOR_CASES.items():
            args = [torch.full((bs,), v, device=dev, dtype=dt) for v, dt in
                    ((t, torch.float32), (k, torch.int64), (p, torch.float32))]
            min_p = torch.full((bs,), mp, device=dev)

            def fn(args=args, min_p=min_p, penalised=penalised, logits=logits):
                x = apply_path_penalties(logits, tokens, parent, min(depth, rows - 1), pen, None) if penalised else logits
                return posterior_tokens_triton(x, *args, seed, min_p=min_p, positions=positions)

            out[f"{name}/{shape}"] = graph_time_us(fn, replays)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--depth", type=int, default=15)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--budget", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--prefix", type=int, default=1024, help="prefix length of every request (mask width)")
    parser.add_argument("--replays", type=int, default=200)
    parser.add_argument("--posterior", action="store_true", help="time the per-node posterior instead")
    parser.add_argument("--rows", type=int, default=16, help="tree nodes per request (--posterior)")
    args = parser.parse_args()
    if args.posterior:
        print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, V={args.vocab}, fp32 logits, "
              f"times in us per round (CUDA graph replay)")
        print("| batch | rows | case | us |\n|---|---|---|---|")
        for bs in args.batch:
            for name, us in bench_posterior(bs, args.rows, args.vocab, args.depth, args.replays).items():
                print(f"| {bs} | {args.rows} | {name} | {us:.1f} |", flush=True)
        return
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, V={args.vocab}, D={args.depth}, "
          f"prefix={args.prefix}, times in us per round (CUDA graph replay)")
    cols = ["topk", "build", "mask", "walk", "commit", "build+mask+walk", "reference", "speedup"]
    print("| batch | budget | " + " | ".join(cols) + " |")
    print("|" + "---|" * (len(cols) + 2))
    for bs in args.batch:
        for budget in args.budget:
            r = bench(bs, budget, args.depth, args.vocab, args.prefix, args.replays)
            cells = [f"{r[c]:.1f}" if c != "speedup" else f"{r[c]:.0f}x" for c in cols]
            print(f"| {bs} | {budget} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
