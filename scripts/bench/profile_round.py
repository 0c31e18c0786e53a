"""Where a speculative round's GPU time goes: DFLASH vs DDTREE on the 8B-shape target, kernel by kernel.

usage: python -m scripts.bench.profile_round OUT_DIR [--batches 1 8 64] [--steps 24] [--max-new 96]
                                        [--pair WIDENED_PAIR --budget N]

One SGLang Engine per algorithm (Qwen3-8B shape and a 5-layer DFlash draft, random weights from
`load_format=dummy`, the same engines as `scripts/bench/e2e.py`'s 8B phase: DDTREE budget 15 = DFLASH's
verify width 16), each in its own process; both start at once, then take turns on the GPU (a file
lock), so no timed or profiled run overlaps the other engine's. Per batch size: one warm-up
generate, 3 timed generates (wall per round), then one generate under SGLang's own profiler
(`Engine.start_profile(num_steps=...)`, GPU activity only). From each trace: per kernel name, the
GPU time per step; the GPU-busy time per step (kernels, copies and sets); and the span from the
first to the last GPU event per step (span - busy = time the GPU waited for the host).

Writes OUT_DIR/profile.json and OUT_DIR/profile.md (per batch: the totals and the kernels whose
time per step differs most between the two algorithms).

With --pair (a pair widened by scripts/train/widen.py, on the same 8B shape): DFLASH and DDTREE at --budget on
that pair's trained weights and its own held-out prompts (scripts/bench/e2e.py's engines), so the profile is
of the rounds the end-to-end benchmark timed, at the acceptance it measured.
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import json
import multiprocessing as mp
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def kernel_table(trace_path: Path, steps: int) -> dict:
    """Per-step GPU totals and per-kernel times (us) from a chrome trace written by torch.profiler."""
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in GPU_CATS and "dur" in e]
    if not gpu:
        return {"error": f"no GPU events in {trace_path.name}"}
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in gpu:
        rec = per_name[e["name"][:120]]
        rec[0] += float(e["dur"])
        rec[1] += 1
    busy = sum(float(e["dur"]) for e in gpu)
    span = max(float(e["ts"]) + float(e["dur"]) for e in gpu) - min(float(e["ts"]) for e in gpu)
    return {
        "steps": steps,
        "busy_us_per_step": busy / steps,
        "span_us_per_step": span / steps,
        "events_per_step": len(gpu) / steps,
        "kernels": {k: {"us_per_step": v[0] / steps, "calls_per_step": v[1] / steps} for k, v in per_name.items()},
    }


def engine_run(cfg: dict, out: Path, lock_path: Path, batches: list[int], steps: int, max_new: int,
               prompts: list[list[int]]) -> None:
    """Child process: start the engine, then (holding the GPU lock) time and profile each batch."""
    os.environ["SGLANG_TORCH_PROFILER_DIR"] = str(out / "traces")
    from sglang.srt.entrypoints.engine import Engine

    name = cfg["name"]
    res: dict = {"name": name, "batches": {}}
    try:
        t0 = time.time()
        eng = Engine(**cfg["engine"])
        res["t_start"] = round(time.time() - t0, 1)
        params = {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True}
        with open(lock_path, "w") as lock:  # held until closed: one engine on the GPU at a time
            fcntl.flock(lock, fcntl.LOCK_EX)
            for b in batches:
                batch = prompts[:b]
                eng.generate(input_ids=batch, sampling_params=params)  # warm-up (and radix-cache the prompts)
                walls, rounds = [], []
                for _ in range(3):
                    t = time.perf_counter()
                    outs = eng.generate(input_ids=batch, sampling_params=params)
                    walls.append(time.perf_counter() - t)
                    rounds.append(max(int(o["meta_info"].get("spec_verify_ct") or 0) for o in outs))
                tokens = sum(o["meta_info"]["completion_tokens"] for o in outs)
                pid = f"{name}-bs{b}"
                eng.start_profile(output_dir=str(out / "traces"), num_steps=steps, activities=["GPU"],
                                  with_stack=False, record_shapes=False, profile_id=pid)
                eng.generate(input_ids=batch, sampling_params=params)
                trace = None
                for _ in range(120):  # the scheduler writes the trace once its `steps` forwards ran
                    found = sorted((out / "traces").glob(f"{pid}*.trace.json.gz"))
                    if found:
                        time.sleep(2.0)
                        trace = found[0]
                        break
                    time.sleep(0.5)
                entry = {"wall_ms_per_round": [1000 * w / r for w, r in zip(walls, rounds)],
                         "rounds": rounds, "accepted_per_round": tokens / max(1, sum(
                             int(o["meta_info"].get("spec_verify_ct") or 0) for o in outs))}
                entry["profile"] = kernel_table(trace, steps) if trace else {"error": "no trace written"}
                res["batches"][str(b)] = entry
                print(f"[{name}] bs={b} wall/round {statistics.median(entry['wall_ms_per_round']):.2f} ms "
                      f"busy/step {entry['profile'].get('busy_us_per_step', float('nan')) / 1000:.2f} ms",
                      flush=True)
        eng.shutdown()
    except BaseException as e:  # noqa: BLE001 - reported in the result file
        import traceback

        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        res["traceback"] = traceback.format_exc()[-3000:]
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))
    os._exit(0)


def report(results: dict, batches: list[int], top: int = 18) -> str:
    lines = ["# Round profile: DFLASH vs DDTREE, 8B-shape target, greedy", ""]
    for name, r in results.items():
        if "error" in r:
            lines += [f"- {name}: ERROR {r['error']}", "```", r.get("traceback", ""), "```"]
    for b in batches:
        rows = {n: r["batches"].get(str(b)) for n, r in results.items() if "batches" in r}
        if not all(rows.values()) or len(rows) < 2:
            continue
        lines += [f"## batch {b}", "", "| config | wall ms / round (3 runs) | GPU busy ms / step | GPU span ms / step | GPU events / step |",
                  "|---|---|---|---|---|"]
        for n, e in rows.items():
            p = e["profile"]
            walls = ", ".join(f"{w:.2f}" for w in e["wall_ms_per_round"])
            lines.append(f"| {n} | {walls} | {p.get('busy_us_per_step', 0) / 1000:.3f} | "
                         f"{p.get('span_us_per_step', 0) / 1000:.3f} | {p.get('events_per_step', 0):.0f} |")
        (na, ea), (nb, eb) = list(rows.items())[:2]
        ka, kb = ea["profile"].get("kernels", {}), eb["profile"].get("kernels", {})
        diff = sorted(set(ka) | set(kb), key=lambda k: -abs(kb.get(k, {}).get("us_per_step", 0)
                                                            - ka.get(k, {}).get("us_per_step", 0)))
        lines += ["", f"Kernels whose GPU time per step differs most ({nb} - {na}), us per step (calls per step):", "",
                  f"| kernel | {na} | {nb} | diff |", "|---|---|---|---|"]
        for k in diff[:top]:
            a, c = ka.get(k, {}), kb.get(k, {})
            lines.append(f"| `{k[:90]}` | {a.get('us_per_step', 0):.1f} ({a.get('calls_per_step', 0):.1f}) | "
                         f"{c.get('us_per_step', 0):.1f} ({c.get('calls_per_step', 0):.1f}) | "
                         f"{c.get('us_per_step', 0) - a.get('us_per_step', 0):+.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--tokenizer-from", type=Path, default=Path(os.environ.get("RIG", ".gpurig")) / "models",
                    help="a folder with target/tokenizer*.json to copy into the model folders")
    ap.add_argument("--pair", type=Path, default=None, help="a widened pair (scripts/train/widen.py) instead of random weights")
    ap.add_argument("--budget", type=int, default=None, help="with --pair: DDTREE's budget")
    a = ap.parse_args()
    from scripts.bench.e2e import big_configs, pair_configs, prompts_from

    if (a.pair is None) != (a.budget is None):
        raise SystemExit("--pair and --budget go together: python -m scripts.bench.profile_round OUT --pair WIDE --budget 32")
    a.out.mkdir(parents=True, exist_ok=True)
    if a.pair is None:
        cfgs = big_configs(a.out / "big-shape", a.tokenizer_from)
        prompts = [[(7 * i + 13 * j) % 30000 + 100 for j in range(a.prompt_len)] for i in range(max(a.batches))]
    else:
        cfgs = pair_configs(a.pair, budgets=(a.budget,), tokens=16384, batches=tuple(a.batches), plain=False)
        prompts = prompts_from(a.pair, max(a.batches), a.prompt_len)
    lock = a.out / "gpu.lock"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=engine_run, args=(c, a.out, lock, a.batches, a.steps, a.max_new, prompts))
             for c in cfgs]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    results = {}
    for c in cfgs:
        f = a.out / f"{c['name']}.json"
        results[c["name"]] = json.loads(f.read_text()) if f.exists() else {"error": "no result (process died)"}
    (a.out / "profile.json").write_text(json.dumps(results, indent=1))
    md = report(results, a.batches)
    (a.out / "profile.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
