"""Per-request refusals on a real DDTREE engine (GPU): the server refuses what DDTree lacks, alone.

usage: python -m scripts.gpu.request_check --target MODEL --draft DFLASH_DRAFT [--budget N]

Starts one SGLang Engine with --speculative-algorithm DDTREE (on an install patched by
`ddtree-patch apply`; engine settings as scripts/gpu/engine_run.py), then sends in order:
  1. a request with a grammar (json_schema)  -> must be refused with DDTree's grammar message (0.5.11-0.5.16;
     0.5.17+ serve it: scripts/gpu/grammar_check.py);
  2. a request with return_logprob           -> must be refused with DDTree's logprob message;
  3. a plain request                          -> must be served (tokens generated, not aborted).
Prints one line per check and exits 0 only when all pass (so the server kept serving).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from scripts.gpu.engine_run import engine_kwargs  # (same engine settings as the GPU matrix)

SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
PROMPT_IDS = [1, 2, 3, 4, 5, 6, 7, 8]  # ids: the GPU check's tiny models need no tokenizer text


def _outcome(engine, **request) -> tuple[str, str, list]:
    """("served" | "refused", message, output ids); an exception counts as a refusal with its text."""
    try:
        out = engine.generate(input_ids=PROMPT_IDS, **request)
    except Exception as error:  # noqa: BLE001 - some releases raise the abort to the caller
        return "refused", f"{type(error).__name__}: {error}", []
    finish = (out.get("meta_info") or {}).get("finish_reason") or {}
    if isinstance(finish, dict) and finish.get("type") == "abort":
        return "refused", str(finish.get("message")), out.get("output_ids") or []
    return "served", "", out.get("output_ids") or []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--budget", type=int, default=8)
    args = parser.parse_args()
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.speculative.ddtree.capabilities import CAPABILITIES
    from sglang.srt.speculative.ddtree.requests import implemented_here

    cfg = {"target": args.target, "draft": args.draft, "algo": "DDTREE", "budget": args.budget}
    engine = Engine(**engine_kwargs(cfg))
    greedy = {"temperature": 0.0, "max_new_tokens": 16}
    checks = [
        ("grammar (json_schema)", dict(sampling_params=dict(greedy, json_schema=SCHEMA)),
         "refused", CAPABILITIES["grammar"].refusal),
        ("return_logprob", dict(sampling_params=greedy, return_logprob=True),
         "refused", CAPABILITIES["logprobs"].refusal),
        ("plain", dict(sampling_params=greedy), "served", ""),
    ]
    if implemented_here(CAPABILITIES["grammar"]):  # 0.5.17+ serve grammars: scripts/gpu/grammar_check.py
        checks = checks[1:]
    passed = 0
    try:
        for name, request, expected, message in checks:
            got, text, ids = _outcome(engine, **request)
            ok = got == expected and (message in text if expected == "refused" else len(ids) > 0)
            passed += ok
            detail = text if got == "refused" else f"{len(ids)} tokens"
            print(f"{'PASS' if ok else 'FAIL'} {name}: expected {expected}, got {got} ({detail})", flush=True)
    finally:
        engine.shutdown()
    print(f"{passed}/{len(checks)} request checks passed", flush=True)
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
