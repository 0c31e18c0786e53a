"""The DDTree GPU check matrix: run every engine configuration, compare with plain decoding, summarise.

usage: python -m scripts.gpu.matrix OUT_DIR [--suite base|offchain|all] [--only NAME ...] [--parallel N] [--deadline-s S]
                            [--tp-size N] [--page-size N] [--attention-backend triton|flashinfer]
                            [--kv-commit move|reorder|reorder-overlap] [--mask-in-place] [--auto-budget]

Suites: `base` = the gpurig tiny models in /tmp/models (target_struct, target_rand, draft_rand);
`offchain` = the off-chain oracle (scripts/offchain/make_models.py: target_offchain, draft_offchain), whose
DDTree accepted paths leave the first-child chain and whose acceptance is known in advance
(scripts/offchain/acceptance.py). Needs an SGLang patched for DDTREE on the path. Engines run as subprocesses
of scripts/gpu/engine_run.py, several at a time on the one GPU (each with a small KV pool); the engines
that also time rounds run last, together, and take the GPU in turns run by run (scripts/gpu/turns.py), so
their medians come from interleaved runs. Writes OUT_DIR/results/*.json, OUT_DIR/logs/*.log,
OUT_DIR/summary.{json,md}. Exit status 0 only when every comparison holds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from patches.budget_ladder import LOG_EVERY_ENV as AUTO_LOG_EVERY_ENV  # how often the auto worker logs its budgets

ENGINE_MODULE = "scripts.gpu.engine_run"  # one engine per subprocess: python -m ENGINE_MODULE CONFIG OUT
REPO = Path(__file__).resolve().parents[2]
CUTLASS_STAND_IN = REPO / "gpurig" / "stubs-extra" / "cutlass-permissive"  # the MLA rows' (model_path_prepend)
MODELS = Path("/tmp/models")
DRAFT = str(MODELS / "draft_rand")
VOCAB = 512
BUDGETS = (1, 8, 32)
TIE_GAP = 0.02
PROMPTS = {
    # successor-map target: each token is followed by the next id, 300 absorbs; mixes rejected and
    # fully accepted rounds once a sequence reaches 300
    "struct": [[5, 17, 33, 99, 120], [290, 291, 292, 293, 294, 295], [299, 300], [150] * 10,
               list(range(270, 296)), [296]],
    "rand": [[5, 17, 33, 99, 120], [200, 201, 202], list(range(10, 40)), [7] * 12],
}
BENCH = {"prompt": [299, 300], "max_new": 256, "repeats": 9}  # timed after one warm-up; the median is reported
MAX_NEW = 32
# Off-chain oracle: mixed prompt lengths (2..26) and starts, each ending in two ring neighbours.
OFFCHAIN = {"prompts": [[70, 71], [5, 17, 33, 99, 100], list(range(64, 90)), [300, 301], [120, 121, 122],
                        [200, 64, 65], [127, 64], [10, 11, 12, 13, 100, 101]],
            "max_new": 64, "budgets": (4, 8, 16, 32, 64)}
SUITES = ("base", "offchain")
ARCH = "arch"  # not in `all`: scripts/gpu/make_arch_models.py's MoE, MLA + MoE, sliding-window (gpt-oss), GDN
ARCH_MODELS = ("moe", "mla", "swa", "gdn")  # targets, judged as target_rand is
# Engine settings of an arch model's rows, plain reference included: the sliding-window target is served
# on triton only (patches/architectures.SWA_TREE_BACKENDS), and its bf16 experts run SGLang's Triton
# fused MoE (without it gpt-oss picks the triton_kernels package's MoE where that is installed). The GDN
# target (Qwen3-Next) runs SGLang's Triton GDN kernels, the only ones DDTREE verifies a tree with
# (server_args.gdn_refusal), and triton attention for its full-attention layers; GDN targets are opt-in
# until a whole round has run on one (architectures.py), so its rows opt in (the flag is DDTREE's only).
ARCH_ENGINE = {"swa": {"attention_backend": "triton", "moe_runner_backend": "triton"},
               "gdn": {"attention_backend": "triton", "linear_attn_backend": "triton",
                       "speculative_ddtree_allow_hybrid_unsafe": True}}
EAGER_STAGE = "ddtree_b8_struct_cg_eager_stage"
# What a DDTREE engine's log shows (at warning, the engines' level) when it commits by reordering
# req_to_token (patches/kv_commit.py).
REORDER_LOG = "DDTREE KV commit: reorder"
MASK_IN_PLACE_LOG = "DDTREE verify mask: built in place"  # patches/tree_verify.py's MASK_LOG begins so
# `--speculative-ddtree-budget auto` (patches/auto_budget.py): the ladder line every such engine logs
# once; with CUDA graphs the widths given a target verify graph (patches/verify_graphs.py), or, with
# the graph memory cap at 0, the reason the other widths are left out; and the periodic line of the
# budgets chosen (every AUTO_LOG_EVERY rounds, at warning level when the interval is set).
AUTO_LADDER_LOG = "DDTREE auto budget ladder: "
AUTO_WIDTHS_LOG = "DDTREE auto: target verify graphs at widths"
AUTO_GRAPHED_LOG = "no target verify graph at its width"
AUTO_CHOSEN_LOG = "DDTREE auto budget: batch<="
AUTO_LOG_EVERY = 4
AUTO_BESIDE = ("ddtree_b8_struct_eager", "ddtree_b8_struct_cg", "ddtree_b8_rand_eager", "ddtree_b8_rand_cg",
               "ddtree_b64_offchain_cg")  # the rows the `auto` rows copy (the engine, prompts, judging)


def configs(suites: tuple[str, ...] = SUITES, tp_size: int = 1, page_size: int = 1,
            attention_backend: str = "triton", eager_stage: bool = False, kv_commit: str = "move",
            mask_in_place: bool = False, auto_budget: bool = False) -> list[dict]:
    """Every engine of the suites; with `tp_size` > 1, `page_size` > 1 or another attention backend, all
    of them (plain references included) run with that setting, so DDTREE is compared with plain decoding on the
    same sharding (the tiny models' 4 heads, 2 KV heads and 512-token vocabulary split over 2 ranks)
    and the same KV page layout (issue 14: how the page sizes 16 and 64 were proven, docs/gpu-check.md).
    `kv_commit="reorder"`: every engine without the overlap scheduler (where the reordering commit
    needs no fence), DDTREE engines with DDTREE_KV_COMMIT=reorder and required to log that they ran it;
    `"reorder-overlap"`: the same under the overlap scheduler (the fenced commit, 0.5.15+).
    `mask_in_place`: DDTREE engines with DDTREE_MASK_IN_PLACE=1; those with CUDA graphs (the only ones
    that have the buffer) must log that they used it. `auto_budget`: also the `auto` rows
    (`auto_configs`)."""
    out = (base_configs(eager_stage) if "base" in suites else []) + \
        (offchain_configs() if "offchain" in suites else []) + (arch_configs() if ARCH in suites else [])
    if auto_budget:
        out += auto_configs(out, _spec_v2_worker())
    extra = {k: v for k, v in (("tp_size", tp_size), ("page_size", page_size)) if v > 1}
    if attention_backend != "triton":
        extra["attention_backend"] = attention_backend
    if kv_commit == "reorder":
        extra["disable_overlap_schedule"] = True
    if extra:
        out = [dict(c, engine={**c.get("engine", {}), **extra}) for c in out]
    if kv_commit in ("reorder", "reorder-overlap"):
        out = _ddtree_switch(out, "DDTREE_KV_COMMIT", "reorder", REORDER_LOG)
    if mask_in_place:
        out = _ddtree_switch(out, "DDTREE_MASK_IN_PLACE", "1", MASK_IN_PLACE_LOG, only_graphed=True)
    return [with_own_ports(c, i) for i, c in enumerate(out)]


def _ddtree_switch(cfgs: list[dict], name: str, value: str, log: str, only_graphed: bool = False) -> list[dict]:
    """DDTREE engines get the runtime switch `name=value` in their environment and must log `log`
    (one line each must show: an engine that fell back would pass its row doing something else);
    `only_graphed`: only engines with CUDA graphs must log it."""
    def must(c: dict) -> list[str]:
        return [*c.get("log_must", []), *([log] if c.get("cuda_graph") or not only_graphed else [])]

    return [dict(c, env={**c.get("env", {}), name: value}, log_must=must(c)) if c["algo"] == "DDTREE" else c
            for c in cfgs]


def _spec_v2_worker() -> bool:
    """Whether the installed SGLang runs DDTree's spec-v2 worker (0.5.14+), which chooses `auto`'s
    budget per round; True where no SGLang is installed (planning on another machine)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("sglang")
    except PackageNotFoundError:
        return True
    return tuple(int(p) for p in release.split(".")[:3] if p.isdigit()) >= (0, 5, 14)


def with_own_ports(cfg: dict, index: int) -> dict:
    """Fixed, distinct HTTP and NCCL ports per engine, below the ephemeral range: engines started in
    parallel otherwise race for the free port SGLang picks (seen: EADDRINUSE at the NCCL rendezvous)."""
    ports = {"port": 20000 + 10 * index, "nccl_port": 26000 + 10 * index}
    return dict(cfg, engine={**ports, **cfg.get("engine", {})})


def offchain_configs() -> list[dict]:
    base = {"target": str(MODELS / "target_offchain"), "prompts": OFFCHAIN["prompts"],
            "max_new": OFFCHAIN["max_new"], "model": "offchain", "suite": "offchain"}
    draft = str(MODELS / "draft_offchain")
    out = [dict(base, name="plain_offchain", algo="NONE")]
    for cg in (False, True):
        tag = f"offchain_{'cg' if cg else 'eager'}"
        out.append(dict(base, name=f"dflash_{tag}", algo="DFLASH", draft=draft, cuda_graph=cg))
        for b in OFFCHAIN["budgets"]:
            out.append(dict(base, name=f"ddtree_b{b}_{tag}", algo="DDTREE", draft=draft, budget=b, cuda_graph=cg))
    return out


def auto_configs(cfgs: list[dict], chooses_per_round: bool = True) -> list[dict]:
    """`--speculative-ddtree-budget auto` beside each suite's DDTREE rows, on both tiny targets eager
    and with CUDA graphs (a target verify graph per ladder width; the log must name the widths): every
    round chooses a budget of the ladder, the periodic line must show rounds chosen, and each row is
    judged against plain like every row. On the off-chain oracle with CUDA graphs the graph memory cap
    is 0, so only the target's own width has a graph and every round verifies the ladder's widest
    budget (64): its acceptance is judged against budget 64's analytic value and the log must say why
    the other widths are left out. `chooses_per_round=False` (the v1 worker, SGLang 0.5.11-0.5.13:
    every round the widest budget): only the ladder line is required."""
    out = []
    for cfg in cfgs:
        name = cfg["name"]
        if name not in AUTO_BESIDE:
            continue
        cg, offchain = bool(cfg.get("cuda_graph")), cfg.get("suite") == "offchain"
        auto = {k: v for k, v in cfg.items() if k != "bench"}
        env = {**cfg.get("env", {}), AUTO_LOG_EVERY_ENV: str(AUTO_LOG_EVERY)}
        per_round = [AUTO_CHOSEN_LOG] + ([AUTO_WIDTHS_LOG] if cg else [])
        if offchain:
            env["DDTREE_AUTO_GRAPH_MEM_GB"] = "0"
            per_round = [AUTO_WIDTHS_LOG, AUTO_GRAPHED_LOG]
            auto["analytic_budget"] = 64  # offchain_judge: the budget every round of this row verifies
        auto.update(name=name.replace("_b8_", "_auto_").replace("_b64_", "_auto_"), budget="auto", env=env,
                    log_must=[*cfg.get("log_must", []), AUTO_LADDER_LOG, *(per_round if chooses_per_round else [])])
        out.append(auto)
    return out


def base_configs(eager_stage: bool = False) -> list[dict]:
    """Plain, DFLASH and DDTREE per budget on both tiny targets, eager and with CUDA graphs; the
    timed pair (DFLASH, DDTREE budget 8 on target_struct with graphs), and with `eager_stage` a third
    timed engine: that DDTREE with its tree stage launched kernel by kernel (DDTREE_GRAPH_TREE_STAGE=0
    in its environment), also judged against plain."""
    out = []
    for model in ("struct", "rand"):
        base = {"target": str(MODELS / f"target_{model}"), "prompts": PROMPTS[model], "max_new": MAX_NEW,
                "model": model}
        out.append(dict(base, name=f"plain_{model}", algo="NONE", logprobs=model == "rand"))
        for cg in (False, True):
            tag = f"{model}_{'cg' if cg else 'eager'}"
            out.append(dict(base, name=f"dflash_{tag}", algo="DFLASH", draft=DRAFT, cuda_graph=cg))
            for b in BUDGETS:
                out.append(dict(base, name=f"ddtree_b{b}_{tag}", algo="DDTREE", draft=DRAFT, budget=b, cuda_graph=cg))
    for cfg in out:
        if cfg["name"] in ("dflash_struct_cg", "ddtree_b8_struct_cg"):
            cfg["bench"] = BENCH
    if eager_stage:
        timed = next(c for c in out if c["name"] == "ddtree_b8_struct_cg")
        out.append(dict(timed, name=EAGER_STAGE, env={"DDTREE_GRAPH_TREE_STAGE": "0"}))
    out.append({"name": "ddtree_b8_rand_cg_sampled", "model": "rand", "algo": "DDTREE", "draft": DRAFT,
                "budget": 8, "cuda_graph": True, "sampled": True, "target": str(MODELS / "target_rand"),
                "prompts": PROMPTS["rand"], "max_new": MAX_NEW})
    return out


def model_path_prepend(model: str) -> list[str]:
    """Folders an arch model's engines import before the site: for MLA, where `cutlass` is absent, the
    rig's CUTLASS DSL stand-in (without it SGLang's DeepSeek model does not import; see its docstring)."""
    if model != "mla" or importlib.util.find_spec("cutlass") is not None:
        return []
    return [str(CUTLASS_STAND_IN)]


def arch_configs() -> list[dict]:
    """Plain, DFLASH and DDTREE budgets 8 and 32 on each tiny architecture target, eager and with CUDA
    graphs; random weights, so DDTREE may differ from plain only at plain's near-ties (its top-2 logged).
    The sliding-window target's rows (plain too) run with ARCH_ENGINE's settings; a run's own
    --attention-backend other than triton still overrides them, as `configs` does for every row, and
    DDTREE's gate then refuses the swa DDTREE rows (sliding-window targets: triton only)."""
    out = []
    for model in ARCH_MODELS:
        base = {"target": str(MODELS / f"target_{model}_rand"), "prompts": PROMPTS["rand"], "max_new": MAX_NEW,
                "model": model, "path_prepend": model_path_prepend(model)}
        if model in ARCH_ENGINE:
            base["engine"] = dict(ARCH_ENGINE[model])
        out.append(dict(base, name=f"plain_{model}", algo="NONE", logprobs=True))
        for cg in (False, True):
            tag = f"{model}_{'cg' if cg else 'eager'}"
            out.append(dict(base, name=f"dflash_{tag}", algo="DFLASH", draft=DRAFT, cuda_graph=cg))
            for b in (8, 32):
                out.append(dict(base, name=f"ddtree_b{b}_{tag}", algo="DDTREE", draft=DRAFT, budget=b, cuda_graph=cg))
    return out


def take_turns(timed: list[dict], folder: Path) -> list[dict]:
    """The timed engines' configs, each with its place in the turns they take on the GPU (gpu_turns)."""
    shutil.rmtree(folder, ignore_errors=True)
    return [dict(c, bench=dict(c["bench"], turns={"dir": str(folder), "index": i, "count": len(timed)}))
            for i, c in enumerate(timed)]


def engine_env(cfg: dict) -> dict:
    """The engine process's environment: ours, with the row's `path_prepend` folders first on PYTHONPATH
    (set at the interpreter's start, so SGLang's spawned scheduler inherits them with sys.path)."""
    env = dict(os.environ)
    if cfg.get("path_prepend"):
        env["PYTHONPATH"] = os.pathsep.join([*cfg["path_prepend"], *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_one(cfg: dict, out_dir: Path, timeout_s: float) -> dict:
    cfg_path = out_dir / "configs" / f"{cfg['name']}.json"
    res_path = out_dir / "results" / f"{cfg['name']}.json"
    cfg_path.write_text(json.dumps(cfg))
    t0 = time.time()
    with open(out_dir / "logs" / f"{cfg['name']}.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", ENGINE_MODULE, str(cfg_path), str(res_path)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=engine_env(cfg))
        try:
            proc.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    if res_path.exists():
        res = json.loads(res_path.read_text())
    else:
        res = {"name": cfg["name"], "ok": False, "error": f"no result (timeout or crash) after {time.time() - t0:.0f}s"}
    if res.get("ok") and (must := missing_log_line(cfg, out_dir / "logs" / f"{cfg['name']}.log")):
        res = dict(res, ok=False, error=f"the engine's log lacks {must!r}")
    print(f"[{time.strftime('%T')}] {cfg['name']}: ok={res.get('ok')} t={time.time() - t0:.0f}s "
          f"{res.get('error', '')[:300]}", flush=True)
    if not res.get("ok"):
        print(failure_excerpt(out_dir / "logs" / f"{cfg['name']}.log"), flush=True)
    return res


def failure_excerpt(log: Path, lines: int = 40) -> str:
    """The first traceback of a failed engine's log (the scheduler's, usually), else its tail."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    start = next((i for i, line in enumerate(text) if "Traceback" in line), max(0, len(text) - lines))
    return "\n".join("    | " + line[:300] for line in text[start:start + lines])


def first_diffs(ref: list[list[int]], got: list[list[int]]) -> list[tuple[int, int]]:
    diffs = []
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            diffs.append((i, next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))))
    return diffs


def missing_log_line(cfg: dict, log: Path) -> str | None:
    """The first of `cfg["log_must"]` (one line or a list) that the engine's log (missing: empty) lacks:
    the engine did not run as asked."""
    must = cfg.get("log_must") or []
    text = log.read_text(errors="replace") if log.is_file() else ""
    return next((line for line in ([must] if isinstance(must, str) else must) if line not in text), None)


def judge(res: dict, plain: dict) -> dict:
    """Greedy output vs plain: struct must be equal; rand may differ only at a near-tie of plain."""
    row = {"ok": bool(res.get("ok"))}
    if not res.get("ok") or not plain or not plain.get("ok"):
        row["verdict"] = "ERROR" if not res.get("ok") else "NO REFERENCE"
        row["error"] = res.get("error") or (plain or {}).get("error")
        return row
    top2 = plain.get("top2")
    bugs, ties = [], []
    for kind in ("batch_ids", "single_ids"):
        for prompt, pos in first_diffs(plain[kind], res[kind]):
            gap = None
            if top2 and pos < len(top2[prompt]) and len(top2[prompt][pos]) == 2:
                gap = top2[prompt][pos][0] - top2[prompt][pos][1]
            (ties if gap is not None and gap < TIE_GAP else bugs).append(
                {"run": kind[:-4], "prompt": prompt, "pos": pos, "plain_top2_gap": gap})
    accept = [m.get("spec_accept_length") for m in res.get("meta", []) if m.get("spec_accept_length")]
    row.update(
        batch_equal=plain["batch_ids"] == res["batch_ids"],
        single_equal=plain["single_ids"] == res["single_ids"],
        tie_diffs=ties, bug_diffs=bugs,
        accept_per_round=round(sum(accept) / len(accept), 3) if accept else None,
        verdict="PASS" if not bugs else "FAIL",
    )
    if res.get("bench"):
        row["bench"] = res["bench"]
    return row


def judge_sampled(res: dict) -> dict:
    if not res.get("ok"):
        return {"ok": False, "verdict": "ERROR", "error": res.get("error")}
    ids = [t for seq in res["sampled_ids"] for t in seq]
    lengths = [len(seq) for seq in res["sampled_ids"]]
    in_vocab = all(0 <= t < VOCAB for t in ids)
    complete = all(n == MAX_NEW for n in lengths)
    accept = [m.get("spec_accept_length") for m in res.get("meta", []) if m.get("spec_accept_length")]
    return {"ok": True, "in_vocab": in_vocab, "lengths": lengths,
            "accept_per_round": round(sum(accept) / len(accept), 3) if accept else None,
            "verdict": "PASS" if in_vocab and complete else "FAIL"}


def offchain_expectations(cfgs: list[dict]) -> tuple[dict[str, dict], str | None]:
    """Analytic acceptance of the off-chain rows, or the error that prevented computing it."""
    if not any(c.get("suite") == "offchain" for c in cfgs):
        return {}, None
    try:
        from scripts.offchain import judge as offchain_judge

        expected = offchain_judge.expectations([c for c in cfgs if c.get("suite") == "offchain"])
    except Exception as e:  # noqa: BLE001 - reported in every off-chain row
        return {}, f"analytic acceptance failed: {type(e).__name__}: {e}"
    print("[analytic] off-chain accepted tokens / round: "
          + ", ".join(f"{name} {e['mean']}" for name, e in expected.items()), flush=True)
    return expected, None


def summarise(cfgs: list[dict], results: dict[str, dict],
              offchain: tuple[dict[str, dict], str | None] | None = None) -> tuple[dict, str]:
    """Rows and the markdown table; `offchain` = offchain_expectations(cfgs) when already computed."""
    rows = {}
    expected, expected_error = offchain if offchain is not None else offchain_expectations(cfgs)
    if expected_error:
        print(expected_error, flush=True)
    if any(c.get("suite") == "offchain" for c in cfgs):
        from scripts.offchain import judge as offchain_judge  # torch + the repo's kernels: only when the off-chain suite runs
    for cfg in cfgs:
        name = cfg["name"]
        res = results.get(name, {"ok": False, "error": "not run (deadline)"})
        if cfg.get("suite") == "offchain":
            if cfg["algo"] == "NONE":
                rows[name] = offchain_judge.judge_reference(cfg, res)
            else:
                tag = name.rsplit("_", 1)[1]
                rows[name] = offchain_judge.judge(cfg, res, results.get("plain_offchain"), rows.get("plain_offchain"),
                                                  expected.get(name), results.get(f"dflash_offchain_{tag}"))
                if expected_error:
                    rows[name].setdefault("problems", []).append(expected_error)
                    rows[name]["verdict"] = "FAIL" if rows[name]["verdict"] == "PASS" else rows[name]["verdict"]
        elif cfg.get("sampled"):
            rows[name] = judge_sampled(res)
        elif cfg["algo"] == "NONE":
            rows[name] = {"ok": res.get("ok"), "verdict": "REFERENCE" if res.get("ok") else "ERROR",
                          "error": res.get("error")}
        else:
            rows[name] = judge(res, results.get(f"plain_{cfg['model']}"))
    lines = ["| config | verdict | batch = plain | each alone = plain | near-tie diffs | bug diffs "
             "| accepted tokens / round |", "|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['verdict']} | {row.get('batch_equal', '')} | {row.get('single_equal', '')} "
                     f"| {len(row.get('tie_diffs', []))} | {len(row.get('bug_diffs', []))} "
                     f"| {row.get('accept_per_round', '')} |")
    d = rows.get("dflash_struct_cg", {}).get("bench")
    t = rows.get("ddtree_b8_struct_cg", {}).get("bench")
    bench = None
    if d and t:
        bench = {"dflash": d, "ddtree_b8": t, "round_time_ratio": round(t["ms_per_round"] / d["ms_per_round"], 3),
                 "accepted_per_round": {"dflash": d["spec_accept_length"], "ddtree_b8": t["spec_accept_length"]}}
        timed = [b for b in (d, t, rows.get(EAGER_STAGE, {}).get("bench")) if b]
        bench["interleaved"] = all(b.get("interleaved") for b in timed)
        order = ("the timed engines taking turns run by run" if bench["interleaved"] else
                 "NOT interleaved: a timed engine missed its turn, so runs may have overlapped")
        lines += ["", f"Round time at budget 8 (target_struct, CUDA graphs, 1 request, {BENCH['max_new']} tokens, "
                      f"median of {len(d.get('ms_per_round_all') or [0])} runs [min-max], {order}): "
                      f"DFLASH {d['ms_per_round']} ms {_spread(d)}, DDTREE {t['ms_per_round']} ms {_spread(t)}, "
                      f"ratio DDTREE/DFLASH = {bench['round_time_ratio']}; accepted tokens per round "
                      f"DFLASH {d['spec_accept_length']}, DDTREE {t['spec_accept_length']}."]
        e = rows.get(EAGER_STAGE, {}).get("bench")
        if e:
            bench["ddtree_b8_eager_stage"] = e
            bench["eager_stage_ratio"] = round(e["ms_per_round"] / d["ms_per_round"], 3)
            lines.append(f"The same DDTREE with its tree stage eager (DDTREE_GRAPH_TREE_STAGE=0): {e['ms_per_round']} ms "
                         f"{_spread(e)}, ratio to DFLASH = {bench['eager_stage_ratio']}.")
    offchain = {c["name"]: rows[c["name"]] for c in cfgs if c.get("suite") == "offchain"}
    if offchain:
        lines += offchain_judge.table(offchain, OFFCHAIN["max_new"], len(OFFCHAIN["prompts"]))
    for name, row in rows.items():
        if row.get("error"):
            lines.append(f"- {name}: {str(row['error'])[:400]}")
        for diff in row.get("bug_diffs", []):
            lines.append(f"- {name}: differs from plain at {diff}")
    return {"rows": rows, "bench": bench}, "\n".join(lines)


def _spread(bench: dict) -> str:
    """[min-max] of a timed engine's repeated runs (ms per round)."""
    runs = bench.get("ms_per_round_all")
    return f"[{min(runs)}-{max(runs)}]" if runs else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--suite", choices=(*SUITES, ARCH, "all"), default="all",
                    help="base: the gpurig tiny models; offchain: the off-chain oracle; all: both (default); "
                         "arch: the MoE, MLA + MoE and sliding-window targets (scripts/gpu/make_arch_models.py)")
    ap.add_argument("--only", nargs="*", help="config names; the plain references of their models are added")
    ap.add_argument("--no-reference", action="store_true", help="with --only: skip the plain references")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--deadline-s", type=float, default=480)
    ap.add_argument("--tp-size", type=int, default=1, help="--tp-size of every engine (needs that many GPUs)")
    ap.add_argument("--page-size", type=int, default=1, help="--page-size of every engine (KV tokens per page)")
    ap.add_argument("--attention-backend", default="triton", choices=["triton", "flashinfer"],
                    help="--attention-backend of every engine, plain references included")
    ap.add_argument("--kv-commit", choices=["move", "reorder", "reorder-overlap"], default="move",
                    help="reorder: DDTREE commits by reordering req_to_token (DDTREE_KV_COMMIT=reorder), every "
                         "engine without the overlap scheduler; reorder-overlap: the same under the overlap "
                         "scheduler (fenced, 0.5.15+)")
    ap.add_argument("--mask-in-place", action="store_true",
                    help="DDTREE engines build the verify mask in the attention backend's graph buffer "
                         "(DDTREE_MASK_IN_PLACE=1); those with CUDA graphs must log it")
    ap.add_argument("--auto-budget", action="store_true",
                    help="also the --speculative-ddtree-budget auto rows (eager and CUDA graphs, both suites)")
    ap.add_argument("--eager-stage", action="store_true",
                    help=f"also time {EAGER_STAGE}: the timed DDTREE with its tree stage launched kernel by kernel")
    a = ap.parse_args()
    deadline = time.time() + a.deadline_s
    for sub in ("configs", "results", "logs"):
        (a.out_dir / sub).mkdir(parents=True, exist_ok=True)
    cfgs = configs(SUITES if a.suite == "all" else (a.suite,), a.tp_size, a.page_size, a.attention_backend,
                   a.eager_stage, a.kv_commit, a.mask_in_place, a.auto_budget)
    if a.only:
        models = {c["model"] for c in cfgs if c["name"] in a.only}
        cfgs = [c for c in cfgs if c["name"] in a.only
                or (not a.no_reference and c["algo"] == "NONE" and c["model"] in models)]
    missing = sorted({Path(c[k]).name for c in cfgs for k in ("target", "draft") if k in c and not Path(c[k]).is_dir()})
    if missing:
        print(f"gpu_matrix: model folders missing under {MODELS}: {', '.join(missing)} (gpu_check.sh builds them: "
              "make_models.py --weights, then scripts/offchain/make_models.py; for --suite arch "
              "scripts/gpu/make_arch_models.py)", flush=True)
        return 2
    results: dict[str, dict] = {}

    def wave(batch: list[dict], parallel: int) -> None:
        todo = [c for c in batch if deadline - time.time() > 60]
        with ThreadPoolExecutor(max(1, parallel)) as pool:
            for res in pool.map(lambda c: run_one(c, a.out_dir, min(300, deadline - time.time())), todo):
                results[res["name"]] = res

    analytic = ThreadPoolExecutor(1)  # the off-chain expectations are computed while engines run
    expected = analytic.submit(offchain_expectations, cfgs)
    first = [c for c in cfgs if c["algo"] == "NONE"][:1]  # compiles the JIT kernels once
    last = [c for c in cfgs if c.get("bench")]
    wave(first, 1)
    wave([c for c in cfgs if c not in first and c not in last], a.parallel)
    wave(take_turns(last, a.out_dir / "turns"), len(last))
    summary, table = summarise(cfgs, results, expected.result())
    analytic.shutdown()
    (a.out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (a.out_dir / "summary.md").write_text(table + "\n")
    print(table)
    return 0 if all(r["verdict"] in ("PASS", "REFERENCE") for r in summary["rows"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
