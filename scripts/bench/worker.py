"""One long-lived SGLang Engine for scripts/bench/e2e.py: start once, then run timed batches on request.

usage: python -m scripts.bench.worker CONFIG_JSON REPLY_FD
CONFIG: {"name", "engine": {Engine kwargs}}. Commands arrive as JSON lines on stdin:
  {"id", "prompts": [[ids]...], "temperature", "max_new"}  -> one timed generate of the whole batch
      (+ "return_ids": the output ids; + "top2": also each output token's top-2 logprobs; plain only,
      SGLang's DFLASH refuses return_logprob)
  {"quit": true}                                          -> shut the engine down and exit
Replies are JSON lines on REPLY_FD (a pipe the coordinator owns, so SGLang's own output on
stdout/stderr cannot interleave with them): {"ready": ...} once, then one line per command.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
import time
import traceback


def reply(fd: int, obj: dict) -> None:
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def watch_children(fd: int, name: str, stop: threading.Event) -> None:
    """Reply with an error and exit when an engine child process dies (an Engine whose scheduler died
    can wait forever instead of raising; the coordinator would only see a timeout)."""

    def loop() -> None:
        while not stop.wait(1.0):
            try:  # started children, dead ones included; `exitcode` polls without reaping
                children = list(multiprocessing.process._children)  # noqa: SLF001
            except RuntimeError:  # the set changed while it was read
                continue
            dead = sorted((p.name, p.exitcode) for p in children if p.exitcode not in (None, 0))
            if dead and not stop.is_set():
                reply(fd, {"ready": False, "name": name, "error": "engine child process died: "
                           + ", ".join(f"{n} (exit {c})" for n, c in dead)})
                os._exit(1)

    threading.Thread(target=loop, daemon=True).start()


def timed_generate(eng, cmd: dict) -> dict:
    params = {"temperature": float(cmd["temperature"]), "max_new_tokens": int(cmd["max_new"]),
              "ignore_eos": True}
    if params["temperature"] > 0:
        params.update(top_p=1.0, top_k=-1)
    lp = dict(return_logprob=True, top_logprobs_num=2) if cmd.get("top2") else {}
    t0 = time.perf_counter()
    outs = eng.generate(input_ids=cmd["prompts"], sampling_params=params, **lp)
    seconds = time.perf_counter() - t0
    metas = [o["meta_info"] for o in outs]
    return {"id": cmd["id"], "seconds": seconds,
            "completion_tokens": [m["completion_tokens"] for m in metas],
            "verify_ct": [m.get("spec_verify_ct") or 0 for m in metas],
            "output_ids": [o["output_ids"] for o in outs] if cmd.get("return_ids") else None,
            "top2": [[[t[0] for t in step[:2]] for step in m["output_top_logprobs"]] for m in metas] if lp else None}


def main() -> None:
    cfg = json.load(open(sys.argv[1]))
    fd = int(sys.argv[2])
    stop = threading.Event()
    watch_children(fd, cfg["name"], stop)
    try:
        from sglang.srt.entrypoints.engine import Engine

        t0 = time.time()
        eng = Engine(**cfg["engine"])
        reply(fd, {"ready": True, "name": cfg["name"], "t_start": round(time.time() - t0, 1)})
    except BaseException as e:  # noqa: BLE001 - the coordinator reports it
        reply(fd, {"ready": False, "name": cfg["name"], "error": f"{type(e).__name__}: {e}"[:2000],
                   "traceback": traceback.format_exc()[-4000:]})
        os._exit(1)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("quit"):
            break
        try:
            reply(fd, timed_generate(eng, cmd))
        except BaseException as e:  # noqa: BLE001
            reply(fd, {"id": cmd.get("id"), "error": f"{type(e).__name__}: {e}"[:2000],
                       "traceback": traceback.format_exc()[-4000:]})
    stop.set()  # shutdown ends the children on purpose
    try:
        eng.shutdown()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
