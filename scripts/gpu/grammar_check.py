"""Grammar-constrained DDTREE in a real engine (GPU): constrained greedy == plain, outputs parse, and
sampled tokens under a regex distributed as plain SGLang's.

usage (on the GPU machine, SGLang 0.5.17+ patched for DDTREE and a real xgrammar, the release's pin):
    python -m scripts.gpu.grammar_check OUT_DIR --target /tmp/models/target_struct --draft /tmp/models/draft_rand
        [--budget 16] [--draws 4000] [--positions 4] [--cuda-graph]

Engines, each in its own process (as scripts/gpu/sampling_check.py runs them; grammar backend
xgrammar, pytorch sampling, triton attention):
  plain   no speculative decoding;
  ddtree  --speculative-algorithm DDTREE at --budget;
  biased  DDTREE with DDTREE_TEST_POSTERIOR_BIAS=0.03 (a node with a child emits its first child 3 %
          of the time), which the chi-square must catch.
Greedy: the JSON schemas, regexes and EBNF grammar of fixtures/grammar_constraints.json (here over
the target's own tokenizer), one request each, batched, 64 new tokens: DDTREE's output ids must equal
plain's, and every finished output must parse / match. Sampled (T=1) under REGEX_SAMPLED: --draws
requests per engine, and at each of the first --positions output positions a 2 x B chi-square
(scripts.gpu.sampling_check.homogeneity) between plain and ddtree must pass (p > ALPHA / positions)
while plain vs biased must fail at some position. Exit 0 only when everything passes.
With --sampled-target the sampled engines (plain, ddtree, biased) run on that target, the greedy ones
on --target: a sampled check on target_struct has no power (one token takes nearly all the mass).
--cost-budgets B...: then, a benchmark beside the verdict, the masks' cost per round at each budget
(CUDA graphs on): a batch of COST_BATCH requests under COST_REGEX against the same batch unconstrained.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

from scripts.gpu.sampling_check import ALPHA, check_parser, homogeneity, run_engine

_CONSTRAINTS = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "grammar_constraints.json").read_text())
SCHEMAS, REGEXES, EBNF = _CONSTRAINTS["json_schemas"], _CONSTRAINTS["regexes"], _CONSTRAINTS["ebnf"]
REGEX_SAMPLED = r"[a-z0-9]{8}"  # many allowed tokens per position: a distribution worth comparing
COST_REGEX, COST_TOKENS, COST_BATCH = r"[a-z0-9 ,.]{64}", 64, 16  # the mask timing: many tokens allowed, fixed length
PROMPT = [5, 17, 33, 99, 120, 7, 7, 7]
ENGINE = {"module": "scripts.gpu.grammar_check", "port_base": 23000}  # its engines run this module
GREEDY_TOKENS = 64


def requests() -> list[tuple[str, dict]]:
    """(name, grammar sampling params) of the greedy set."""
    out = [(f"json{i}", {"json_schema": json.dumps(s)}) for i, s in enumerate(SCHEMAS)]
    out += [(f"regex{i}", {"regex": r}) for i, r in enumerate(REGEXES)]
    return out + [("ebnf", {"ebnf": EBNF})]


def valid(params: dict, text: str) -> bool:
    if "regex" in params:
        return re.fullmatch(params["regex"], text) is not None
    if "ebnf" in params:
        return re.fullmatch(r"[0-9+*()]+", text) is not None and text.count("(") == text.count(")")
    try:
        value = json.loads(text)
    except ValueError:
        return False
    schema = json.loads(params["json_schema"])
    return isinstance(value, dict) and set(value) == set(schema["required"])


def engine_main(cfg_path: str, out_path: str) -> None:
    """One engine: its outputs (`engine_outputs`) or, for a cost config, the masks' cost, written as JSON;
    the engine is shut down either way."""
    from sglang.srt.entrypoints.engine import Engine

    cfg = json.loads(Path(cfg_path).read_text())
    kw = dict(model_path=cfg["target"], tokenizer_path=cfg["target"], dtype="bfloat16", attention_backend="triton",
              sampling_backend="pytorch", grammar_backend="xgrammar", disable_flashinfer_autotune=True,
              mem_fraction_static=0.35, context_length=512, random_seed=cfg["seed"], log_level="warning",
              max_running_requests=512, port=cfg["port"], nccl_port=cfg["port"] + 5)
    if not cfg["cuda_graph"]:
        kw.update(disable_cuda_graph=True)
    if cfg["algo"] != "NONE":
        kw.update(speculative_algorithm=cfg["algo"], speculative_draft_model_path=cfg["draft"],
                  speculative_ddtree_budget=cfg["budget"])
    eng = Engine(**kw)
    try:
        out = {"cost": time_masks(eng, cfg["repeats"])} if cfg.get("cost") else engine_outputs(eng, cfg)
        Path(out_path).write_text(json.dumps(out))
    finally:
        eng.shutdown()


def engine_outputs(eng, cfg: dict) -> dict:
    """The greedy set (unless `greedy` is off), then the sampled regex requests (unless `sampled` is off)."""
    out: dict = {}
    if cfg.get("greedy", True):
        out["greedy"] = {}
        names, grammars = zip(*requests())
        res = eng.generate(input_ids=[PROMPT] * len(names),
                           sampling_params=[dict(g, temperature=0.0, max_new_tokens=GREEDY_TOKENS) for g in grammars])
        for name, r in zip(names, res):
            out["greedy"][name] = {"ids": r["output_ids"], "text": r.get("text", ""),
                                   "finish": (r["meta_info"].get("finish_reason") or {}).get("type")}
    if not cfg.get("sampled", True):
        return out
    t0 = time.time()
    res = eng.generate(input_ids=[PROMPT] * cfg["draws"],
                       sampling_params={"regex": REGEX_SAMPLED, "temperature": 1.0, "max_new_tokens": 32})
    out["sampled"] = [r["output_ids"] for r in res]
    out["sampled_text"] = [r.get("text", "") for r in res[:50]]
    rounds = sum(r["meta_info"].get("spec_verify_ct", 0) for r in res)
    out["tokens_per_round"] = sum(map(len, out["sampled"])) / rounds if rounds else None
    print(f"[{cfg['name']}] {cfg['draws']} sampled requests in {time.time() - t0:.1f}s, "
          f"tokens/round {out['tokens_per_round']}", flush=True)
    return out


def time_masks(eng, repeats: int) -> dict:
    """Milliseconds per round of a batch under COST_REGEX against the same batch unconstrained (same
    length, greedy), alternating which goes first; medians and (min, max) over `repeats` after a warm-up."""
    prompts = [PROMPT[:-1] + [7 + i] for i in range(COST_BATCH)]
    settings = {"grammar": {"regex": COST_REGEX, "temperature": 0.0, "max_new_tokens": COST_TOKENS},
                "none": {"temperature": 0.0, "max_new_tokens": COST_TOKENS, "ignore_eos": True}}
    runs: dict = {name: [] for name in settings}
    for r in range(repeats + 1):
        for name in sorted(settings, reverse=bool(r % 2)):
            t0 = time.perf_counter()
            res = eng.generate(input_ids=prompts, sampling_params=settings[name])
            seconds = time.perf_counter() - t0
            rounds = [r_["meta_info"].get("spec_verify_ct", 0) for r_ in res]
            if r and max(rounds):
                runs[name].append({"ms_per_round": 1000 * seconds / max(rounds),
                                   "tokens_per_round": sum(len(r_["output_ids"]) for r_ in res) / sum(rounds)})
    out = {}
    for name, rows in runs.items():
        ms = [row["ms_per_round"] for row in rows]
        out[name] = {"ms_per_round": statistics.median(ms) if ms else None, "spread": [min(ms), max(ms)] if ms else None,
                     "tokens_per_round": statistics.median(row["tokens_per_round"] for row in rows) if rows else None}
    return out


def judge(plain: dict, ddtree: dict, biased: dict, positions: int) -> bool:
    ok = True
    for name, params in requests():
        p, d = plain["greedy"][name], ddtree["greedy"][name]
        same = p["ids"] == d["ids"]
        parses = d["finish"] != "stop" or valid(params, d["text"])
        ok &= same and parses
        print(f"{'PASS' if same and parses else 'FAIL'} greedy {name}: equal {same}, parses {parses}, "
              f"{len(d['ids'])} tokens {d['text'][:60]!r}", flush=True)
    threshold = ALPHA / positions
    worst, caught = 1.0, False
    for pos in range(positions):
        at = lambda runs: [r[pos] for r in runs if len(r) > pos]  # noqa: E731
        p_val, power = homogeneity(at(plain["sampled"]), at(ddtree["sampled"]), threshold)
        p_bias, _ = homogeneity(at(plain["sampled"]), at(biased["sampled"]), threshold)
        worst, caught = min(worst, p_val), caught or p_bias < threshold
        print(f"position {pos}: plain vs ddtree p={p_val:.3g} (power {power:.2f}), plain vs biased p={p_bias:.3g}",
              flush=True)
    inside = all(re.fullmatch(REGEX_SAMPLED, t) for t in ddtree["sampled_text"] if t)
    print(f"{'PASS' if worst > threshold else 'FAIL'} sampled regex: smallest p {worst:.3g} > {threshold:.3g}; "
          f"{'PASS' if caught else 'FAIL'} biased DDTREE caught; {'PASS' if inside else 'FAIL'} outputs match",
          flush=True)
    return ok and worst > threshold and caught and inside


def main() -> int:
    ap = check_parser(__doc__, engine_main)
    if ap is None:
        return 0
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--sampled-target", default=None,
                    help="the sampled check's target (default --target): one whose next-token distribution is "
                         "spread (target_rand), or the chi-square has no power (target_struct's margins are 10+)")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--draws", type=int, default=4000)
    ap.add_argument("--positions", type=int, default=4, help="sampled positions compared")
    ap.add_argument("--cuda-graph", action="store_true", help="capture CUDA graphs (default: eager)")
    ap.add_argument("--cost-budgets", type=int, nargs="*", default=[],
                    help="also time the masks (a benchmark, no verdict): one DDTREE engine per budget, CUDA "
                         "graphs on, ms per round of a batch under a regex vs unconstrained (cost.json)")
    ap.add_argument("--cost-repeats", type=int, default=5)
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    base = dict(target=args.target, draft=args.draft, budget=args.budget, draws=args.draws,
                cuda_graph=args.cuda_graph)
    sampled_target = args.sampled_target or args.target
    split = sampled_target != args.target  # greedy engines on --target, sampled ones on --sampled-target
    greedy_only = dict(sampled=False) if split else {}
    plain = run_engine("plain", dict(base, algo="NONE", seed=1, **greedy_only), args.out_dir, **ENGINE)
    ddtree = run_engine("ddtree", dict(base, algo="DDTREE", seed=2, **greedy_only), args.out_dir, **ENGINE)
    sampled = dict(base, target=sampled_target, greedy=False) if split else base
    if split:
        plain.update(run_engine("plain_sampled", dict(sampled, algo="NONE", seed=6), args.out_dir, **ENGINE))
        ddtree.update(run_engine("ddtree_sampled", dict(sampled, algo="DDTREE", seed=7), args.out_dir, **ENGINE))
    biased = run_engine("biased", dict(sampled, algo="DDTREE", seed=3), args.out_dir,
                        env={"DDTREE_TEST_POSTERIOR_BIAS": "0.03"}, **ENGINE)
    ok = judge(plain, ddtree, biased, args.positions)
    print("PASS" if ok else "FAIL", flush=True)
    cost = {}
    for i, budget in enumerate(args.cost_budgets):
        cfg = dict(base, algo="DDTREE", seed=4 + i, budget=budget, cuda_graph=True, cost=True, repeats=args.cost_repeats)
        cost[budget] = run_engine(f"cost_b{budget}", cfg, args.out_dir, **ENGINE)["cost"]
        g, n = cost[budget]["grammar"], cost[budget]["none"]
        print(f"[cost] budget {budget}, batch {COST_BATCH}: {g['ms_per_round']:.2f} ms/round under a regex "
              f"({g['spread'][0]:.2f}-{g['spread'][1]:.2f}), {n['ms_per_round']:.2f} unconstrained "
              f"({n['spread'][0]:.2f}-{n['spread'][1]:.2f}): x{g['ms_per_round'] / n['ms_per_round']:.2f}", flush=True)
    if cost:
        (args.out_dir / "cost.json").write_text(json.dumps(cost, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
