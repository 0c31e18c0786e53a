"""DDTREE's acceptance on a calibrated drafter of a given DFLASH acceptance: a model, not a run.

usage: python -m scripts.bench.calibrated_tree [--dflash-tau 7.79] [--block 16]
           [--budgets 15 16 32 64 128 256 512 1024] [--tails 0.3 0.5 0.7 0.9] [--ranks 64] [--json]

Why: the question users ask ("does a tree still pay where the drafter is strong?") has a part that
needs no GPU. Model: at every draft depth the drafter puts probability q on its first choice and
spreads the rest over the other ranks geometrically, (1 - q)(1 - a) a^(r - 2) for rank r >= 2, and it
is calibrated: the target's token has rank r with exactly that probability, independently per depth
given the path so far. That is the draft-factorised model DDTree's tree build assumes, so a node's
path probability is its acceptance probability and a best-first tree of budget B accepts, on
average, 1 + the sum of its B nodes' path probabilities (tau counts the bonus token, as the paper's
mean accepted length does). q is fitted so that the chain of block - 1 first choices (DFLASH)
accepts `--dflash-tau`; the tail ratio a is the free parameter the table sweeps. The tree is the
repository's own best-first build (`kernels.tree_build.select_tree_torch`).

What it leaves out: real drafters are not calibrated on their side branches (the DFlash drafter
drafts every depth from the committed prefix, so a depth-2 guess after a wrong depth-1 sibling is
over-rated; our widened strong pair measured observed/predicted 0.84 at budget 32), so the model
is an upper bound for a drafter of that chain acceptance; and it gives acceptance, not speed (a
wider verify costs more: scripts/bench_widened.sh measures both).
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from kernels.tree_build import select_tree_torch

PAPER = {"dflash_tau": 7.79, "ddtree_tau": 10.73, "source": "DDTree paper, Qwen3-8B, MATH-500, T=0, block 16"}


def chain_tau(q: float, depth: int) -> float:
    """Mean accepted length of DFLASH's chain: 1 + q + q^2 + ... + q^depth."""
    return 1.0 + sum(q**d for d in range(1, depth + 1))


def fit_first_choice(tau: float, depth: int) -> float:
    """The first-choice probability q whose chain of `depth` drafts accepts `tau` (bisection)."""
    if not 1.0 < tau < depth + 1.0:
        raise ValueError(f"a chain of {depth} drafts accepts between 1 and {depth + 1} tokens, not {tau}")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chain_tau(mid, depth) < tau else (lo, mid)
    return (lo + hi) / 2


def rank_logprobs(q: float, tail: float, ranks: int, depth: int) -> torch.Tensor:
    """log p(rank) per depth [1, depth, ranks], ranks in descending order of probability."""
    probs = [q] + [(1 - q) * (1 - tail) * tail**(r - 2) for r in range(2, ranks + 1)]
    if any(b > a for a, b in zip(probs, probs[1:])):
        raise ValueError(f"the first choice (q={q:.3f}) must be at least as likely as the second")
    row = torch.tensor([math.log(max(p, 1e-300)) for p in probs], dtype=torch.float64)
    return row.expand(1, depth, ranks).contiguous()


def tree_tau(q: float, tail: float, budget: int, depth: int, ranks: int) -> float:
    """Mean accepted length of the best-first tree of `budget` nodes under the calibrated model."""
    lp = rank_logprobs(q, tail, min(ranks, budget), depth).float()
    tok = torch.arange(lp.shape[2]).expand_as(lp).contiguous()
    tree = select_tree_torch(lp, tok, budget)
    return 1.0 + float(tree.logprob[0, 1:].double().exp().sum())


def table(dflash_tau: float, block: int, budgets: list[int], tails: list[float], ranks: int) -> dict:
    depth = block - 1
    q = fit_first_choice(dflash_tau, depth)
    rows = [{"tail": a, "tau": {str(b): round(tree_tau(q, a, b, depth, ranks), 3) for b in budgets}} for a in tails]
    return {"dflash_tau": dflash_tau, "block": block, "first_choice_q": round(q, 4), "ranks": ranks,
            "budgets": budgets, "rows": rows, "paper": PAPER}


def render(result: dict) -> str:
    budgets = result["budgets"]
    lines = [f"calibrated drafter: DFLASH tau {result['dflash_tau']} at block {result['block']} "
             f"-> first-choice probability q = {result['first_choice_q']}; tail (1-q)(1-a)a^(r-2) over "
             f"{result['ranks']} ranks",
             "tail a | " + " | ".join(f"B={b}" for b in budgets)]
    for row in result["rows"]:
        lines.append(f"{row['tail']:6} | " + " | ".join(f"{row['tau'][str(b)]:.2f}" for b in budgets))
    paper = result["paper"]
    lines.append(f"paper: DFLASH {paper['dflash_tau']} -> DDTree {paper['ddtree_tau']} ({paper['source']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dflash-tau", type=float, default=PAPER["dflash_tau"])
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--budgets", type=int, nargs="+", default=[15, 16, 32, 64, 128, 256, 512, 1024])
    ap.add_argument("--tails", type=float, nargs="+", default=[0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--ranks", type=int, default=64, help="ranks per depth the tree may read (K)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        result = table(a.dflash_tau, a.block, a.budgets, a.tails, a.ranks)
    except ValueError as error:
        ap.error(str(error))
    print(json.dumps(result, indent=1) if a.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
