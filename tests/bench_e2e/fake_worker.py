"""Speaks scripts/bench/worker.py's protocol without SGLang (an Engine needs a GPU): used only to
test the coordinator's process handling, interleaving and report on CPU.

Config `fake`: {"fail_start": bool, "die_on": command id, "accept": tokens per round,
"per_token_s": seconds per verify round per request, "flip": prompt index whose output differs (at its
last token), "ties": [prompt index, step] pairs where a "top2" reply has a near-tie (gap 0.01; else 1.0)}.
Like SGLang's DFLASH, only plain answers "top2" (return_logprob).
"""

from __future__ import annotations

import json
import os
import sys
import time

cfg = json.load(open(sys.argv[1]))
fd = int(sys.argv[2])
fake = cfg.get("fake", {})


def reply(obj):
    os.write(fd, (json.dumps(obj) + "\n").encode())


if fake.get("fail_start"):
    reply({"ready": False, "name": cfg["name"], "error": "RuntimeError: fake start failure"})
    sys.exit(1)
if cfg["algo"] == "DFLASH":  # what SGLang logs when it lacks the sampling-verify kernel
    print("[2026-12-01 00:00:00] WARNING dflash_worker_v2.py: falling back to greedy argmax verification.", flush=True)
reply({"ready": True, "name": cfg["name"], "t_start": 0.1})
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd.get("quit"):
        break
    if cmd["id"] == fake.get("die_on"):
        os._exit(3)
    bs, new = len(cmd["prompts"]), cmd["max_new"]
    rounds = -(-(new - 1) // fake.get("accept", 1)) if new > 1 else 0
    seconds = 0.001 + rounds * fake.get("round_s", 0.0001)
    time.sleep(seconds)
    ids = [[(p[0] + k) % 97 for k in range(new)] for p in cmd["prompts"]]
    if cmd.get("return_ids") and fake.get("flip") is not None and fake["flip"] < bs:
        ids[fake["flip"]][-1] += 1
    if cmd.get("top2") and cfg["algo"] != "plain":
        reply({"id": cmd["id"], "error": "ValueError: return_logprob is not supported"})
        continue
    ties = {tuple(t) for t in fake.get("ties", [])}
    top2 = [[[-0.1, -0.11 if (i, k) in ties else -1.1] for k in range(new)] for i in range(bs)]
    reply({"id": cmd["id"], "seconds": seconds, "completion_tokens": [new] * bs,
           "verify_ct": [rounds if cfg["algo"] != "plain" else 0] * bs,
           "output_ids": ids if cmd.get("return_ids") else None, "top2": top2 if cmd.get("top2") else None})
