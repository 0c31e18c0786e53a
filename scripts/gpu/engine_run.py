"""Run one SGLang Engine configuration of the DDTree GPU check and dump what it generated as JSON.

usage: python -m scripts.gpu.engine_run CONFIG_JSON OUT_JSON

CONFIG keys: target, prompts (list of id lists), max_new; optional draft, algo, budget,
cuda_graph, logprobs (plain only: top-2 logprobs of the batch run), sampled (temperature 1 run),
bench ({"prompt": ids, "max_new": n, "repeats": r}: timed single-request generation after a warm-up;
with "turns" ({"dir", "index", "count"}: gpu_turns.Turns) the timed engines take turns run by run), engine
(extra Engine kwargs), env (environment variables set before the engine starts). Greedy runs generate the prompts as one batch, then each prompt alone.
"""

from __future__ import annotations

import inspect
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import traceback

from scripts.gpu.turns import Turns

META_KEYS = ("completion_tokens", "spec_verify_ct", "spec_accept_length", "spec_num_correct_drafts")


def engine_kwargs(cfg: dict) -> dict:
    kw = dict(
        model_path=cfg["target"], tokenizer_path=cfg["target"], dtype="bfloat16",
        attention_backend="triton", sampling_backend="pytorch", grammar_backend="none",
        disable_flashinfer_autotune=True, mem_fraction_static=0.3, max_total_tokens=32768,
        context_length=1024, random_seed=0, log_level="warning", max_running_requests=8,
    )
    if cfg.get("cuda_graph"):
        kw.update(decode_cuda_graph_kwargs())
    else:
        kw.update(disable_cuda_graph=True)
    if cfg.get("draft"):
        kw.update(speculative_algorithm=cfg.get("algo", "DFLASH"), speculative_draft_model_path=cfg["draft"])
        if cfg.get("budget") is not None:
            kw.update(speculative_ddtree_budget=cfg["budget"])
    kw.update(cfg.get("engine", {}))
    return kw


def decode_cuda_graph_kwargs() -> dict:
    """CUDA graphs for decode / verify only, batch sizes up to 8, in this release's field names."""
    from sglang.srt.server_args import ServerArgs

    fields = inspect.signature(ServerArgs).parameters  # a dataclass up to 0.5.22, assembled records after
    if "cuda_graph_max_bs_decode" in fields:  # 0.5.14+: separate prefill / decode graph settings
        return dict(disable_prefill_cuda_graph=True, cuda_graph_max_bs_decode=8)
    return dict(disable_piecewise_cuda_graph=True, cuda_graph_max_bs=8)  # 0.5.11-0.5.13


def meta(out: dict) -> dict:
    return {k: out["meta_info"].get(k) for k in META_KEYS}


def watch_children(res: dict, out_path: str, t0: float, stop: threading.Event) -> None:
    """End the run when an engine child process dies: SGLang 0.5.17's Engine keeps waiting for a
    scheduler that died at start-up (e.g. DDTREE refused at worker creation) instead of raising."""

    def loop() -> None:
        while not stop.wait(1.0):
            try:
                # The started children, dead ones included (`active_children()` would reap those
                # before they are seen); `exitcode` polls without reaping.
                children = list(multiprocessing.process._children)  # noqa: SLF001
            except RuntimeError:  # the set changed while it was read; next tick
                continue
            dead = sorted((p.name, p.exitcode) for p in children if p.exitcode not in (None, 0))
            if dead and not stop.is_set():
                names = ", ".join(f"{name} (exit {code})" for name, code in dead)
                res["error"] = f"engine child process died: {names}; its traceback is in the log above"
                finish(res, out_path, t0)

    threading.Thread(target=loop, daemon=True).start()


def run(cfg: dict, res: dict, stop: threading.Event) -> None:
    from sglang.srt.entrypoints.engine import Engine

    t0 = time.time()
    os.environ.update(cfg.get("env", {}))  # before the engine: its scheduler process inherits them
    eng = Engine(**engine_kwargs(cfg))
    res["t_start"] = round(time.time() - t0, 1)
    prompts, max_new = cfg["prompts"], cfg["max_new"]
    greedy = {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True}
    if cfg.get("sampled"):
        sampled = dict(greedy, temperature=1.0)
        outs = eng.generate(input_ids=prompts, sampling_params=sampled)
        res["sampled_ids"] = [o["output_ids"] for o in outs]
        res["meta"] = [meta(o) for o in outs]
    else:
        lp = dict(return_logprob=True, top_logprobs_num=2) if cfg.get("logprobs") else {}
        t1 = time.time()
        outs = eng.generate(input_ids=prompts, sampling_params=greedy, **lp)
        res["t_batch"] = round(time.time() - t1, 3)
        res["batch_ids"] = [o["output_ids"] for o in outs]
        res["meta"] = [meta(o) for o in outs]
        if lp:
            res["top2"] = [[[t[0] for t in step[:2]] for step in o["meta_info"]["output_top_logprobs"]]
                           for o in outs]
        res["single_ids"] = [eng.generate(input_ids=p, sampling_params=greedy)["output_ids"] for p in prompts]
    bench = cfg.get("bench")
    if bench:
        params = dict(greedy, max_new_tokens=bench["max_new"])
        eng.generate(input_ids=bench["prompt"], sampling_params=params)
        turns = Turns.from_config(bench.get("turns"))
        repeats = bench.get("repeats", 1)
        if turns:
            turns.ready()
        per_round = []
        for run in range(repeats):  # the same greedy generation: the same rounds each time
            if turns:
                turns.take(run)
            t2 = time.time()
            out = eng.generate(input_ids=bench["prompt"], sampling_params=params)
            elapsed = time.time() - t2
            if turns:
                turns.give(run)
            rounds = out["meta_info"].get("spec_verify_ct") or out["meta_info"]["completion_tokens"]
            per_round.append(round(1000 * elapsed / rounds, 4))
        if turns:
            turns.finish(repeats)
        res["bench"] = {"seconds": round(elapsed, 4), "rounds": rounds, "ms_per_round": statistics.median(per_round),
                        "ms_per_round_all": per_round, "interleaved": bool(turns and turns.interleaved), **meta(out)}
    stop.set()  # shutdown ends the children on purpose
    eng.shutdown()


def finish(res: dict, out_path: str, t0: float) -> None:
    res["t_total"] = round(time.time() - t0, 1)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print("RESULT", res["name"], json.dumps({k: res.get(k) for k in ("ok", "error", "t_start", "t_total")}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if res["ok"] else 1)


def main() -> None:
    cfg = json.load(open(sys.argv[1]))
    res = {"name": cfg["name"], "config": cfg, "ok": False}
    t0 = time.time()
    stop = threading.Event()
    watch_children(res, sys.argv[2], t0, stop)
    try:
        run(cfg, res, stop)
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - every failure is reported in the JSON
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-6000:]
        print(res["traceback"], file=sys.stderr)
    stop.set()
    finish(res, sys.argv[2], t0)


if __name__ == "__main__":
    main()
