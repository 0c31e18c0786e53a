"""The calibrated off-chain pair: a constructed drafter at DFLASH's published 7.79 tokens per round.

usage: python -m scripts.offchain.calibrated_pair [OUT --template DIR] [--dflash-tau 7.79] [--tail 0.8] [--json]
  without OUT: print the analytic figures (CPU, about a minute); with OUT: also write the pair folder
  scripts/train/widen.py takes (OUT/target, OUT/draft with the template's tokenizer, OUT/prompts.json,
  OUT/manifest.json with the plan, the figures and sha256 of the weights).
  DIR: gpurig's model folders (its scripts/make_models.py OUTDIR), whose config.json files are the templates.

Why: real DFlash drafters accept 6-8 tokens per round, our trained pairs far fewer; this pair is the
off-chain oracle (scripts/offchain/oracle.py) with `oracle.calibrated_plan()`: block 16, a draft whose
first choice is right with the probability that makes DFLASH's chain accept `--dflash-tau`, and a
geometric tail (`--tail`), calibrated as scripts/offchain/calibration.py says. It is a model of such a
drafter, built by hand, not a trained one. Widened to Qwen3-8B's shape it costs what an 8B pair costs.

Figures (tokens per round, the bonus counted, as the paper's mean accepted length):
- `ring`: the mean over the 64 ring bonuses of one round's tokens: the calibrated figure;
- `model`: scripts/bench/calibrated_tree.py's analytic model at the same q, tail and ranks;
- `bench`: what SGLang's spec_accept_length should read on the bench's first b prompts
  (scripts/offchain/acceptance.py, PROMPT_LEN-token prompts, MAX_NEW new tokens, T=0). A request walks
  the ring (bonus -> bonus + tokens emitted) and settles on a cycle of bonuses, so a bench reads those
  bonuses, not the ring's mean; the prompts are ordered so that each batch's means, and their ratios to
  DFLASH's, stay near the ring's (`bench_order`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from scripts.bench.calibrated_tree import PAPER, tree_tau
from scripts.offchain import acceptance, oracle

PROMPT_LEN, MAX_NEW = 128, 128  # scripts/bench/e2e.py's --prompt-len and --max-new defaults
BENCH_BATCHES = (1, 4, 16, 64)
CONFIGS = ("DFLASH",) + tuple(f"DDTREE_b{b}" for b in oracle.CALIBRATED_BUDGETS)


def _algo(config: str) -> tuple[str, int | None]:
    return ("DFLASH", None) if config == "DFLASH" else ("DDTREE", int(config.split("_b")[1]))


def prompt(start: int) -> list[int]:
    """PROMPT_LEN ring tokens counting up from ring index `start`: the rule's own text."""
    return [oracle.RING_START + (start + i) % oracle.RING for i in range(PROMPT_LEN)]


def ring_figures(plan: oracle.Plan) -> dict[str, float]:
    """Per config, the mean over ring bonuses of one round's tokens (accepted + bonus)."""
    out = {}
    for config in CONFIGS:
        algo, budget = _algo(config)
        lengths = []
        for bonus in range(oracle.RING_START, oracle.RING_START + oracle.RING):
            prev = oracle.RING_START + (bonus - oracle.RING_START - 1) % oracle.RING
            round_ = (acceptance.dflash_round(prev, bonus, plan) if algo == "DFLASH"
                      else acceptance.ddtree_round(prev, bonus, budget, plan=plan))
            lengths.append(len(round_.emitted))
        out[config] = round(sum(lengths) / len(lengths), 4)
    return out


def model_figures(plan: oracle.Plan, tail: float) -> dict[str, float]:
    """calibrated_tree.py's model at the plan's q, tail, depths and candidate ranks."""
    q = plan.rank_probs[0]
    out = {"DFLASH": round(1 + sum(q**k for k in range(1, plan.depths + 1)), 4)}
    for config in CONFIGS[1:]:
        out[config] = round(tree_tau(q, tail, _algo(config)[1], plan.depths, plan.candidates), 4)
    return out


def per_start(plan: oracle.Plan) -> dict[str, list[float]]:
    """Per config, each start's analytic spec_accept_length over MAX_NEW tokens."""
    out = {}
    for config in CONFIGS:
        algo, budget = _algo(config)
        out[config] = [acceptance.simulate(prompt(s), MAX_NEW, algo, budget, plan).accept_length(MAX_NEW)
                       for s in range(oracle.RING)]
    return out


def _prefix_error(starts: dict[str, list[float]], ring: dict[str, float], chosen: list[int]) -> float:
    """How far the chosen starts' means are from the ring's: the worst relative error of a config's
    mean and of its ratio to DFLASH's (what a speed comparison reads), plus 1 where the means do not
    grow with the budget (DFLASH, then DDTREE by budget), which the ring's do."""
    mean = {c: sum(starts[c][i] for i in chosen) / len(chosen) for c in CONFIGS}
    values = [mean[c] for c in CONFIGS]
    ratio = [abs(mean[c] / mean["DFLASH"] / (ring[c] / ring["DFLASH"]) - 1) for c in CONFIGS]
    return (any(b < a for a, b in zip(values, values[1:]))
            + max(ratio + [abs(mean[c] / ring[c] - 1) for c in CONFIGS]))


def bench_order(starts: dict[str, list[float]], ring: dict[str, float]) -> list[int]:
    """Starts in the order that keeps every prefix nearest the ring (greedy on `_prefix_error`):
    the bench serves the first b prompts at batch b."""
    order, left = [], list(range(oracle.RING))
    while left:
        best = min(left, key=lambda s: _prefix_error(starts, ring, order + [s]))
        order.append(best)
        left.remove(best)
    return order


def figures(plan: oracle.Plan, tail: float) -> dict:
    ring = ring_figures(plan)
    starts = per_start(plan)
    order = bench_order(starts, ring)
    bench = {str(b): {c: round(sum(starts[c][s] for s in order[:b]) / b, 4) for c in CONFIGS} for b in BENCH_BATCHES}
    return {"ring": ring, "model": model_figures(plan, tail), "bench": bench, "order": order,
            "paper": PAPER, "prompt_len": PROMPT_LEN, "max_new": MAX_NEW}


def render(fig: dict) -> str:
    lines = ["tokens per round | " + " | ".join(CONFIGS)]
    rows = [("ring (calibrated)", fig["ring"]), ("calibrated_tree model", fig["model"])]
    rows += [(f"bench, batch {b}", fig["bench"][str(b)]) for b in BENCH_BATCHES]
    for name, values in rows:
        lines.append(f"{name} | " + " | ".join(f"{values[c]:.2f}" for c in CONFIGS))
    paper = fig["paper"]
    lines.append(f"paper: DFLASH {paper['dflash_tau']} -> DDTree {paper['ddtree_tau']} ({paper['source']})")
    return "\n".join(lines)


def write_pair(out: Path, template: Path, plan: oracle.Plan, fig: dict, meta: dict) -> dict:
    """target/, draft/ (checked by the plain-torch forward first), prompts.json, manifest.json."""
    from scripts.offchain.make_models import check, write

    target_cfg = json.loads((template / "target" / "config.json").read_text())
    dcfg = oracle.draft_config(json.loads((template / "draft" / "config.json").read_text()), plan)
    mask_id = int(dcfg["dflash_config"]["mask_token_id"])
    target_sd, draft_sd = oracle.target_state_dict(plan), oracle.draft_state_dict(mask_id, plan)
    every_bonus = tuple([oracle.RING_START + s, oracle.RING_START + (s + 1) % oracle.RING] for s in range(oracle.RING))
    problems = check(target_sd, draft_sd, mask_id, plan, every_bonus)
    if problems:
        raise SystemExit("calibrated_pair: the construction is wrong:\n  " + "\n  ".join(problems))
    write(out / "target", oracle.target_config(target_cfg, plan), target_sd, template / "target")
    write(out / "draft", dcfg, draft_sd, template / "target")
    (out / "prompts.json").write_text(json.dumps([prompt(s) for s in fig["order"]]))
    sha = {f"{n}/model.safetensors": hashlib.sha256((out / n / "model.safetensors").read_bytes()).hexdigest()
           for n in ("target", "draft")}
    manifest = {"pair": "calibrated off-chain oracle: constructed by hand, not trained (scripts/offchain/calibrated_pair.py)",
                "plan": {"block": plan.block, "heads": plan.heads, "seed": plan.seed, **meta,
                         "rank_probs": plan.rank_probs, "draft_probs": plan.draft_probs},
                "mask_token_id": mask_id, "figures": fig, "sha256": sha}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", help="write the pair here (else print the figures only)")
    ap.add_argument("--template", type=Path, help="gpurig's model folders (target/, draft/); needed with OUT")
    ap.add_argument("--dflash-tau", type=float, default=PAPER["dflash_tau"])
    ap.add_argument("--tail", type=float, default=0.8, help="the draft's tail ratio a (calibrated_tree.py)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.out and not a.template:
        ap.error("writing a pair needs --template DIR (gpurig's scripts/make_models.py output)")
    plan = oracle.calibrated_plan(a.dflash_tau, a.tail)
    fig = figures(plan, a.tail)
    if a.out:
        write_pair(a.out, a.template, plan, fig, {"dflash_tau": a.dflash_tau, "tail": a.tail})
    print(json.dumps(fig, indent=1) if a.json else render(fig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
