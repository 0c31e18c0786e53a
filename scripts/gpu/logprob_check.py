"""`return_logprob` under DDTREE on a real engine (GPU; SGLang 0.5.18+, which serve log-probs there).

usage: python -m scripts.gpu.logprob_check OUT.json --target MODEL --draft DFLASH_DRAFT [--budget N]

Starts a plain engine and a DDTREE one side by side, each in a process of its own (engine settings
as scripts/gpu/engine_run.py). Both serve the same prompts greedily with return_logprob and
top_logprobs_num=2; DDTREE then serves them sampled (temperature 1) with return_logprob. Passes when
every request is served with one finite, non-positive log-prob per output token carrying that
token's id, the greedy token is its own top-1, and DDTREE's greedy log-probs equal plain's (up to
each prompt's first differing token, the top-2 too, within TOL: the logits are bf16 from different
attention kernels, and a bf16 step is 0.125 at magnitudes 16-32). A log-prob read from the wrong
tree node has another top-1 on target_struct (margins 10+), which the top-1 check catches.
Prints one line per check and writes the log-probs to OUT.json; exit 0 only when all pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

from scripts.gpu.engine_run import engine_kwargs  # (same engine settings as the GPU matrix)

PROMPTS = [[5, 17, 33, 99, 120], [290, 291, 292, 293, 294, 295], [150] * 10, list(range(270, 296))]
TOL = 1.0
MAX_NEW = 24


def serve(cfg: dict, params: dict) -> list[dict]:
    """One engine's greedy (and, for DDTREE, sampled) outputs with log-probs; the engine is shut down."""
    from sglang.srt.entrypoints.engine import Engine

    engine = Engine(**engine_kwargs(cfg))
    try:
        runs = [engine.generate(input_ids=PROMPTS, sampling_params=dict(params, temperature=0.0),
                                return_logprob=True, top_logprobs_num=2)]
        if cfg.get("algo") == "DDTREE":
            runs.append(engine.generate(input_ids=PROMPTS, sampling_params=dict(params, temperature=1.0),
                                        return_logprob=True))
    finally:
        engine.shutdown()
    return [[{"ids": o["output_ids"], "finish": o["meta_info"].get("finish_reason"),
              "lp": [[t[0], t[1]] for t in o["meta_info"].get("output_token_logprobs") or []],
              "top": [[[t[0], t[1]] for t in step[:2]] for step in o["meta_info"].get("output_top_logprobs") or []]}
             for o in outs] for outs in runs]


def well_formed(out: dict, greedy: bool) -> str:
    """'' when every output token has its own finite, non-positive log-prob (greedy: and is its top-1)."""
    if len(out["lp"]) != len(out["ids"]) or not out["ids"]:
        return f"{len(out['lp'])} log-probs for {len(out['ids'])} tokens (finish {out['finish']})"
    for j, ((value, token), emitted) in enumerate(zip(out["lp"], out["ids"])):
        if token != emitted or value is None or not math.isfinite(value) or value > 1e-6:
            return f"position {j}: log-prob {value} for token {token}, emitted {emitted}"
        if greedy and (len(out["top"]) <= j or out["top"][j][0][1] != emitted):
            return f"position {j}: greedy token {emitted} is not its top-1 {out['top'][j:j + 1]}"
    return ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--serve", help=argparse.SUPPRESS)  # internal: one engine's config as JSON
    a = ap.parse_args()
    params = {"max_new_tokens": MAX_NEW, "ignore_eos": True}
    if a.serve:
        with open(a.out, "w") as f:
            json.dump(serve(json.loads(a.serve), params), f)
        return 0
    cfgs = {"plain": {"target": a.target, "algo": "NONE"},
            "ddtree": {"target": a.target, "draft": a.draft, "algo": "DDTREE", "budget": a.budget}}
    procs = {name: subprocess.Popen([sys.executable, "-m", __spec__.name, f"{a.out}.{name}", "--target", a.target,
                                     "--draft", a.draft, "--serve", json.dumps(cfg)]) for name, cfg in cfgs.items()}
    runs = {}
    for name, proc in procs.items():
        if proc.wait() != 0 or not os.path.exists(f"{a.out}.{name}"):
            print(f"FAIL the {name} engine exited {proc.returncode} without results (its log is above)", flush=True)
            return 1
        with open(f"{a.out}.{name}") as f:
            runs[name] = json.load(f)
    (plain,), (greedy, sampled) = runs["plain"], runs["ddtree"]
    checks = []
    for i, (p, d, s) in enumerate(zip(plain, greedy, sampled)):
        checks.append((f"prompt {i} greedy well-formed", well_formed(d, greedy=True)))
        checks.append((f"prompt {i} sampled well-formed", well_formed(s, greedy=False)))
        same = next((j for j, (x, y) in enumerate(zip(p["ids"], d["ids"])) if x != y), len(d["ids"]))
        pairs = [(x[0], y[0]) for x, y in zip(p["lp"][:same], d["lp"][:same])]
        pairs += [(u[0], v[0]) for x, y in zip(p["top"][:same], d["top"][:same]) for u, v in zip(x, y)]
        worst = max((abs(x - y) for x, y in pairs), default=0.0)
        checks.append((f"prompt {i} greedy log-probs == plain's over {same} tokens (max |diff| {worst:.4f})",
                       "" if same > 0 and worst <= TOL else f"max |diff| {worst:.4f} > {TOL} or no common prefix"))
    with open(a.out, "w") as f:
        json.dump({"plain": plain, "ddtree_greedy": greedy, "ddtree_sampled": sampled,
                   "checks": [[name, err or "PASS"] for name, err in checks]}, f, indent=1)
    for name, err in checks:
        print(f"{'FAIL' if err else 'PASS'} {name}{': ' + err if err else ''}", flush=True)
    failed = sum(bool(err) for _, err in checks)
    print(f"{len(checks) - failed}/{len(checks)} log-prob checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
