"""Draws per row the exact posterior makes under its speed knobs, on the CPU: what a knob saves in
check passes before a GPU times it.

Every draw of a filtered row (top-k / top-p) is followed by one check pass over the row's blocks,
so draws per row = check passes per row; a launch of the split kernel runs as many check rounds
as its slowest row. The torch reference (`posterior_tokens_torch`) makes the same draws as the
kernels; its uniform is wrapped to count the rows each round draws for. Logits: randn x 4
("peaked") and x 0.3 ("flat"), as `scripts/bench/kernels/posterior.py`.

    python -m scripts.investigations.posterior_rounds [--vocab 151936] [--batch 8] [--rows 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

import kernels.posterior_reference as posterior

# (case, top_k, top_p) x knob settings (unit, top_k_cuts, top_p_cuts)
CASES = (("top_k=50", 50, 1.0), ("top_k=2000", 2000, 1.0), ("top_p=0.9", -1, 0.9), ("top_p=0.5", -1, 0.5))
KNOBS = ((256, 8, 8), (64, 8, 8), (32, 8, 8), (16, 8, 8), (32, 1, 8), (16, 1, 8), (16, 2, 8), (256, 8, 1),
         (256, 8, 2), (256, 8, 4))


def draws_per_row(logits: torch.Tensor, top_k: int, top_p: float, unit: int, top_k_cuts: int,
                  top_p_cuts: int) -> tuple[float, int]:
    """(mean draws per row, rounds of the slowest row) of one reference call at T=1."""
    bs, n, _ = logits.shape
    counted: list[int] = []
    uniform = posterior.uniform_torch

    def counting(seed: torch.Tensor, position: torch.Tensor, rnd: int) -> torch.Tensor:
        counted.append(len(seed))
        return uniform(seed, position, rnd)

    posterior.uniform_torch = counting
    try:
        posterior.posterior_tokens_torch(logits, torch.ones(bs), torch.full((bs,), top_k), torch.full((bs,), top_p),
                                         torch.arange(bs) * 31 + 7, positions=torch.arange(n).expand(bs, n) + 100,
                                         unit=unit, top_k_cuts=top_k_cuts, top_p_cuts=top_p_cuts, index_ties=True)
    finally:
        posterior.uniform_torch = uniform
    return sum(counted) / (bs * n), len(counted)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rows", type=int, default=8, help="nodes per request")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    records = []
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(args.batch, args.rows, args.vocab, generator=gen) * scale
        for case, top_k, top_p in CASES:
            for unit, kc, pc in KNOBS:
                if (top_k > 0 and pc != 8) or (top_k <= 0 and (unit, kc) != (256, 8)):
                    continue  # a knob that does not touch this case
                mean, rounds = draws_per_row(logits, top_k, top_p, unit, kc, pc)
                records.append({"logits": shape, "case": case, "unit": unit, "top_k_cuts": kc, "top_p_cuts": pc,
                                "draws_per_row": round(mean, 3), "max_rounds": rounds})
                if not args.json:
                    print(f"{shape:6} {case:10} unit={unit:<3} top-k cuts={kc} top-p cuts={pc}: "
                          f"{mean:.2f} draws per row, slowest row {rounds}", flush=True)
    if args.json:
        print(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
