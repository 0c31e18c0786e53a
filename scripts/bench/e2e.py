"""End-to-end benchmark (one GPU call): plain / DFLASH / DDTREE on the trained pair, and round time
on a Qwen3-8B-shape target, written as docs-style markdown + plots.

usage (GPU machine, SGLang patched for DDTREE; scripts/bench_e2e.sh does the setup):
  python -m scripts.bench.e2e --pair /tmp/trained-pair --out $OUT/bench [--deadline-s 500]
Phases (--phases), in priority order: the trained pair at T=0, then T=1 (configs plain, DFLASH, DDTREE at
budgets 4 8 16 32 64; batches 1 8 32), then the 8B shape (random weights from SGLang's dummy
loader, a 5-layer DFlash draft, DFLASH vs DDTREE at budget block-1 = equal verify width; batches
1..64). Every engine starts once, in its own process (scripts/bench/worker.py), and stays up; the
timed runs start when all are ready and go one at a time, the repeats interleaved across configs
(see METHOD). At the deadline the running phase stops and the report covers what finished; the
report is rewritten after every phase. Exit 1 if an engine failed or a phase was cut.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from patches import verify_tile  # the tile's syntax, as the engines parse it
from scripts.bench import report as bench_report
from scripts.gpu import matrix as gpu_matrix
from scripts.train import stdlib_corpus

HERE = Path(__file__).resolve().parent

BUDGETS = (4, 8, 16, 32, 64)
PAIR_TOKENS = 65536  # each pair engine's KV pool (--pair-tokens)
RUNTIME_SWITCHES = ("DDTREE_VERIFY_TILE", "DDTREE_GRAPH_TREE_STAGE", "DDTREE_KV_COMMIT",
                    "DDTREE_AUTO_MAX_BUDGET")  # runtime switches, read by the engines
BATCHES = (1, 8, 32)
BIG_BATCHES = (1, 2, 4, 8, 16, 32, 64)
# the eager-stage variant, as both phases' options describe it
EAGER_STAGE_HELP = ("with DDTREE_GRAPH_TREE_STAGE=0 (its tree stage launched kernel by kernel), beside the default "
                    "(one CUDA graph replay)")
METHOD = [
    "- Each configuration is one SGLang `Engine` started once in its own process and kept alive "
    "(start-up is ~45 s, so restarting per repeat is not affordable). Timing begins when every engine "
    "is ready; then exactly one engine works at a time, the others idle (memory held, no GPU work; "
    "`sleep_on_idle`, so an idle scheduler blocks on its socket instead of spinning a CPU core).",
    "- Interleaving: each repeat visits every (batch size, configuration) once, configurations in an "
    "order rotated by one per repeat; so the repeats of all configurations alternate in time, and each "
    "speed-up is the median of per-repeat ratios (run r of one config against run r of the other, "
    "taken seconds apart). Spread = min-max over the repeats.",
    "- One untimed warm-up run per (configuration, batch size, temperature) precedes the repeats "
    "(CUDA graphs are captured at start; the warm-up covers Triton JIT and allocator growth). At T=0 plain "
    "then runs each batch once more, untimed, with top-2 logprobs (`top_logprobs_num=2`): the reference "
    "greedy outputs of the `= plain` column and their near-tie judgement.",
    "- Output tokens/s = batch x new tokens / wall time of one `Engine.generate` over the whole batch "
    "(prefill included, `ignore_eos`), timed inside the engine process. Accepted tokens / round = "
    "sum of `completion_tokens` / sum of `spec_verify_ct` over the batch (SGLang's `spec_accept_length` "
    "definition: the bonus token counts).",
    "- Prompts: fixed windows (128 tokens unless --prompt-len says otherwise) of held-out standard-library files (never trained on), the same "
    "for every configuration and repeat; batch b uses the first b prompts. SGLang's radix cache serves "
    "their prefill after the warm-up, so the timings are dominated by decoding.",
]
EAGER_METHOD = ("- CUDA graphs off in every engine (`--no-cuda-graph`: `disable_cuda_graph`): all configurations "
                "run eager, so absolute tokens/s are below a run with graphs; the ratios compare eager with eager.")


def engine_kwargs(model: str, tokenizer: str, *, max_bs: int, tokens: int, extra: dict,
                  cuda_graph: bool = True) -> dict:
    """`cuda_graph=False`: every round eager (`disable_cuda_graph`)."""
    kw = dict(model_path=model, tokenizer_path=tokenizer, dtype="bfloat16", attention_backend="triton",
              sampling_backend="pytorch", grammar_backend="none", disable_flashinfer_autotune=True,
              mem_fraction_static=0.8, max_total_tokens=tokens, context_length=1024, random_seed=0,
              log_level="warning", max_running_requests=max_bs, disable_prefill_cuda_graph=True,
              cuda_graph_max_bs_decode=max_bs, sleep_on_idle=True)
    if not cuda_graph:
        kw["disable_cuda_graph"] = True
    kw.update(extra)
    return kw


def pair_configs(pair: Path, eager_stage_budgets: tuple[int, ...] = (), budgets: tuple[int, ...] = BUDGETS,
                 tokens: int = PAIR_TOKENS, batches: tuple[int, ...] = BATCHES, plain: bool = True,
                 auto: bool = False, cuda_graph: bool = True) -> list[dict]:
    """plain, DFLASH, DDTREE per budget, each engine with a KV pool of `tokens` (a pair widened to an
    8B shape, scripts/train/widen.py, needs ~150 KB a token); plus, per `eager_stage_budgets`, DDTREE with its tree stage
    launched kernel by kernel (variant "eager stage": DDTREE_GRAPH_TREE_STAGE=0 in that engine; the
    default replays it from a CUDA graph). Engines take batches up to max(batches); `plain=False` leaves
    plain out (a GPU that holds only a few 8B-shape engines benches the budgets in groups, each beside DFLASH).
    `auto` adds DDTREE with `--speculative-ddtree-budget auto` (budget None, variant "auto budget"),
    logging its choices every 25 rounds (DDTREE_AUTO_LOG_EVERY); with CUDA graphs it chooses among the
    widths that got a verify graph; `cuda_graph=False` is shared by every engine (eager beside eager)."""
    t, d = str(pair / "target"), str(pair / "draft")
    spec = dict(speculative_draft_model_path=d)
    out = [{"name": "plain", "algo": "plain", "budget": None, "extra": {}}] if plain else []
    out += [{"name": "dflash", "algo": "DFLASH", "budget": None, "extra": dict(spec, speculative_algorithm="DFLASH")}]
    out += [{"name": f"ddtree_b{b}", "algo": "DDTREE", "budget": b,
             "extra": dict(spec, speculative_algorithm="DDTREE", speculative_ddtree_budget=b)} for b in budgets]
    out += [{"name": f"ddtree_b{b}_eager_stage", "algo": "DDTREE", "budget": b, "variant": "eager stage",
             "env": {"DDTREE_GRAPH_TREE_STAGE": "0"},
             "extra": dict(spec, speculative_algorithm="DDTREE", speculative_ddtree_budget=b)}
            for b in eager_stage_budgets]
    if auto:
        out.append({"name": "ddtree_auto", "algo": "DDTREE", "budget": None, "variant": "auto budget",
                    "extra": dict(spec, speculative_algorithm="DDTREE", speculative_ddtree_budget="auto"),
                    "env": {gpu_matrix.AUTO_LOG_EVERY_ENV: os.environ.get(gpu_matrix.AUTO_LOG_EVERY_ENV) or "25"}})  # choices in its log
    for c in out:
        c["engine"] = engine_kwargs(t, t, max_bs=max(batches), tokens=tokens, extra=c.pop("extra"),
                                    cuda_graph=cuda_graph)
        c["phase"] = "pair"
    return out


BIG_TARGET = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, hidden_act="silu",
                  attention_bias=False, model_type="qwen3", torch_dtype="bfloat16", bos_token_id=None,
                  eos_token_id=0, pad_token_id=0)
BIG_BLOCK = 16
PAIR_TOKENIZER = (4096, 12_000_000)  # scripts/train/pair.py's default vocab and tokenizer_chars: the same prompts


def write_big_shape(root: Path, pair: Path) -> tuple[Path, Path]:
    """Qwen3-8B's shape (config only: SGLang's dummy loader makes random weights on the GPU) and a
    DFlash draft of z-lab's Qwen3-8B-DFlash-b16 shape (5 layers, block 16). The engines skip the
    tokenizer (ids in, ids out); the pair's tokenizer files are copied only so the folders are
    complete model folders, and its <|MASK|> is id 1, which the draft config names."""
    target, draft = root / "target", root / "draft"
    for d in (target, draft):
        d.mkdir(parents=True, exist_ok=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(pair / "target" / f, d / f)
    (target / "config.json").write_text(json.dumps(dict(BIG_TARGET, architectures=["Qwen3ForCausalLM"])))
    (draft / "config.json").write_text(json.dumps(dict(
        BIG_TARGET, num_hidden_layers=5, architectures=["DFlashDraftModel"], block_size=BIG_BLOCK,
        num_target_layers=36, layer_types=["full_attention"] * 5,
        dflash_config={"mask_token_id": 1, "target_layer_ids": [1, 9, 17, 25, 33], "block_size": BIG_BLOCK})))
    return target, draft


def big_configs(root: Path, pair: Path, backends: tuple[str, ...] = ("triton",),
                tiles: tuple[str, ...] = (), eager_stage: bool = False, reorder: bool = False,
                cuda_graph: bool = True) -> list[dict]:
    """DFLASH and DDTREE on the 8B shape, per attention backend (names `8b_dflash`, `8b_ddtree` on
    triton; `8b_dflash_<backend>`, `8b_ddtree_<backend>` on the others), and on triton one more DDTREE
    per verify tile (`8b_ddtree_tile_<tile>`, DDTREE_VERIFY_TILE in that engine: variant `verify tile
    <tile>`) and, with `eager_stage`, one with its tree stage launched kernel by kernel
    (`8b_ddtree_eager_stage`, DDTREE_GRAPH_TREE_STAGE=0: variant `eager stage`) and, with `reorder`,
    one that commits by reordering req_to_token (`8b_ddtree_reorder`, DDTREE_KV_COMMIT=reorder under
    the overlap scheduler, hence fenced: variant `reorder commit`; its log must say the reorder ran);
    each variant pairs with the same DFLASH (which verifies without a mask and has no tree stage)."""
    target, draft = write_big_shape(root, pair)
    # no detokenizing: a random 8B model emits ids far beyond the borrowed tokenizer's 4096
    spec = dict(speculative_draft_model_path=str(draft), load_format="dummy", skip_tokenizer_init=True)
    out = []
    for backend in backends:
        tail = "" if backend == "triton" else f"_{backend}"
        pair_cfgs = [{"name": f"8b_dflash{tail}", "algo": "DFLASH", "budget": None,
                      "extra": dict(spec, speculative_algorithm="DFLASH")},
                     {"name": f"8b_ddtree{tail}", "algo": "DDTREE", "budget": BIG_BLOCK - 1,
                      "extra": dict(spec, speculative_algorithm="DDTREE", speculative_ddtree_budget=BIG_BLOCK - 1)}]
        if backend == "triton":
            pair_cfgs += [dict(pair_cfgs[1], name=f"8b_ddtree_tile_{t}", variant=f"verify tile {t}",
                               env={"DDTREE_VERIFY_TILE": t}, extra=dict(pair_cfgs[1]["extra"])) for t in tiles]
            if eager_stage:
                pair_cfgs.append(dict(pair_cfgs[1], name="8b_ddtree_eager_stage", variant="eager stage",
                                      env={"DDTREE_GRAPH_TREE_STAGE": "0"}, extra=dict(pair_cfgs[1]["extra"])))
            if reorder:
                pair_cfgs.append(dict(pair_cfgs[1], name="8b_ddtree_reorder", variant="reorder commit",
                                      env={"DDTREE_KV_COMMIT": "reorder"}, log_must=gpu_matrix.REORDER_LOG,
                                      extra=dict(pair_cfgs[1]["extra"])))
        for c in pair_cfgs:
            c["engine"] = engine_kwargs(str(target), str(target), max_bs=max(BIG_BATCHES), tokens=40000,
                                        extra=dict(c.pop("extra"), attention_backend=backend), cuda_graph=cuda_graph)
            c["phase"], c["backend"] = "big", backend
        out += pair_cfgs
    return out


class Worker:
    """One engine process; commands on its stdin, replies on a private pipe."""

    def __init__(self, cfg: dict, work: Path, script: Path = HERE / "worker.py") -> None:
        self.cfg, self.name, self.buf, self.dead = cfg, cfg["name"], b"", None
        path = work / f"{self.name}.json"
        path.write_text(json.dumps(cfg))
        self.log = work / f"{self.name}.log"
        r, w = os.pipe()
        self.fd = r
        self.proc = subprocess.Popen([sys.executable, str(script), str(path), str(w)], env=dict(os.environ, **cfg.get("env", {})),
                                     stdin=subprocess.PIPE, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     pass_fds=(w,), start_new_session=True, text=True)
        os.close(w)

    def recv(self, timeout: float) -> dict | None:
        end = time.time() + timeout
        while b"\n" not in self.buf:
            left = end - time.time()
            if left <= 0:
                return None
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    return None
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, cmd: dict, timeout: float) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        res = self.recv(timeout)
        if res is None:
            self.dead = f"{self.name}: no reply within {timeout:.0f} s (exit code {self.proc.poll()}); " \
                        f"log tail: {self.log_tail()}"
            raise RuntimeError(self.dead)
        if "error" in res:
            self.dead = f"{self.name}: {res['error']}"
            raise RuntimeError(self.dead)
        return res

    def log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-6:])[-1500:]
        except OSError:
            return ""

    def ask_to_quit(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def stop(self, wait_s: float = 30.0) -> None:
        self.ask_to_quit()
        try:
            self.proc.wait(timeout=max(0.1, wait_s))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


def stop_all(workers, wait_s: float = 30.0) -> None:
    """Every engine shuts down at once; whatever still runs after wait_s is killed with its children."""
    for w in workers:
        w.ask_to_quit()
    end = time.time() + wait_s
    for w in workers:
        w.stop(end - time.time())


def start_all(cfgs: list[dict], work: Path, timeout: float, log, script: Path = HERE / "worker.py"
              ) -> tuple[dict[str, Worker], list[str]]:
    workers = {c["name"]: Worker(c, work, script) for c in cfgs}
    pending, failures, t0 = dict(workers), [], time.time()
    while pending and time.time() - t0 < timeout:
        ready = select.select([w.fd for w in pending.values()], [], [], 5)[0]
        for name, w in list(pending.items()):
            if w.fd not in ready and w.proc.poll() is None:
                continue
            msg = w.recv(1)
            if msg is None or not msg.get("ready"):
                why = msg.get("error") if msg else f"exited with {w.proc.poll()}"
                failures.append(f"{name} did not start: {why}; log tail: {w.log_tail()}")
                w.stop(2)
                del workers[name]
            else:
                log(f"[start] {name} ready after {msg['t_start']} s")
            del pending[name]
    for name, w in pending.items():
        failures.append(f"{name} not ready within {timeout:.0f} s; log tail: {w.log_tail()}")
        w.stop(2)
        del workers[name]
    return workers, failures


def command_line(environ: Mapping[str, str], argv: list[str]) -> str:
    """The command as run, led by the DDTree runtime switches that were set (they reach every engine
    through the environment, so a figure is only reproducible with them)."""
    switches = [f"{k}={environ[k]}" for k in RUNTIME_SWITCHES if environ.get(k)]
    return " ".join(switches + [environ.get("BENCH_COMMAND") or "python -m scripts.bench.e2e " + " ".join(argv)])


def compare_with_plain(ref: dict, got: list[list[int]]) -> dict:
    """`same_as_plain` and the differing prompts judged as gpu_matrix.judge does (so the benchmark and
    the GPU matrix call a difference the same thing): at the first differing token, plain's top-2
    logprob gap < gpu_matrix.TIE_GAP is a bf16 near-tie (plain decode and speculative verify reduce in
    different orders), anything else a bug. `ref`: plain's reply with "output_ids" and "top2"."""
    plain = {"ok": True, "batch_ids": ref["output_ids"], "single_ids": [], "top2": ref["top2"]}
    row = gpu_matrix.judge({"ok": True, "batch_ids": got, "single_ids": []}, plain)  # no runs alone here
    same = sum(x == y for x, y in zip(got, ref["output_ids"]))
    return {"same_as_plain": f"{same}/{len(ref['output_ids'])}", "tie_diffs": len(row["tie_diffs"]),
            "bug_diffs": len(row["bug_diffs"]),
            # plain's top-2 gap where each unexplained difference begins: bf16 logits near 10 round to
            # 1/16, so gaps of that size say numerics, gaps of whole logits say a wrong token
            "bug_gaps": sorted(round(d["plain_top2_gap"], 4) for d in row["bug_diffs"] if d["plain_top2_gap"] is not None)}


def prompts_from(pair: Path, count: int, length: int) -> list[list[int]]:
    """The pair's own held-out prompts (prompts.json, scripts/train/pair.py) where it has `count` of `length`
    tokens, else evenly spaced windows of the held-out stdlib files through the pair's tokenizer."""
    own = pair / "prompts.json"
    if own.is_file():
        kept = [p[:length] for p in json.loads(own.read_text()) if len(p) >= length]
        if len(kept) >= count:
            return kept[:count]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pair / "target" / "tokenizer.json"))
    stream = stdlib_corpus.encode(tok, stdlib_corpus.load().held_out)
    step = (len(stream) - length) // count
    if step < length:
        raise SystemExit(f"held-out text too short for {count} prompts of {length} tokens")
    return [stream[i * step: i * step + length] for i in range(count)]


def tokenizer_only_pair(root: Path) -> Path:
    """What the 8B-shape phase alone needs of a pair: its tokenizer (the prompts' ids, the model
    folders' tokenizer files). Trained as scripts/train/pair.py trains it (the same prompts); no models, so a big-only
    call on a cold machine does not spend minutes training a pair it never serves."""
    if not (root / "target" / "tokenizer.json").is_file():
        tok = stdlib_corpus.train_tokenizer(stdlib_corpus.load().train, PAIR_TOKENIZER[0], PAIR_TOKENIZER[1])
        stdlib_corpus.save_tokenizer(tok, root / "target")
    return root


class Bench:
    def __init__(self, a, workers: dict[str, Worker], prompts: list[list[int]], log) -> None:
        self.a, self.workers, self.prompts, self.log = a, workers, prompts, log
        self.records: list[dict] = []
        self.failures: list[str] = []
        self.finished: list[str] = []
        self.cut: list[str] = []

    def left(self) -> float:
        return self.a.t0 + self.a.deadline_s - time.time()

    def call(self, name: str, cmd: dict) -> dict | None:
        w = self.workers.get(name)
        if w is None or w.dead:
            return None
        try:
            return w.run(cmd, timeout=max(10.0, min(120.0, self.left())) + 5)
        except RuntimeError as e:
            self.failures.append(str(e))
            self.log(f"[fail] {e}")
            return None

    def plain_references(self) -> dict[int, dict]:
        """Plain's greedy outputs with top-2 logprobs per batch size, untimed (before the timed runs):
        what every T=0 output is compared with. Only plain is asked: SGLang's DFLASH refuses return_logprob."""
        refs = {}
        for b in self.a.batches:
            res = self.call("plain", {"id": f"plain-{b}-ref", "prompts": self.prompts[:b], "temperature": 0.0,
                                      "max_new": self.a.max_new, "return_ids": True, "top2": True})
            if res is not None:
                refs[b] = res
        return refs

    def pair_phase(self, names: list[str], temperature: float) -> bool:
        names = [n for n in names if n in self.workers]
        cfg = {n: self.workers[n].cfg for n in names}
        for b in self.a.batches:  # warm-up
            for n in names:
                self.call(n, {"id": "warm", "prompts": self.prompts[:b], "temperature": temperature, "max_new": 16})
        refs = self.plain_references() if temperature == 0 and "plain" in names else {}
        ids: dict[tuple[str, int], list] = {}
        for rep in range(self.a.repeats):
            for b in self.a.batches:
                order = names[rep % len(names):] + names[:rep % len(names)]
                for n in order:
                    if self.left() < 15:
                        return False
                    res = self.call(n, {"id": f"{n}-{b}-{rep}", "prompts": self.prompts[:b],
                                        "temperature": temperature, "max_new": self.a.max_new,
                                        "return_ids": temperature == 0 and rep == 0})
                    if res is None:
                        continue
                    if res.get("output_ids") is not None:
                        ids[(n, b)] = res["output_ids"]
                    self.records.append({"phase": "pair", "config": n, "algo": cfg[n]["algo"],
                                         "budget": cfg[n]["budget"], "variant": cfg[n].get("variant"),
                                         "batch": b, "temperature": temperature,
                                         "repeat": rep, "seconds": res["seconds"],
                                         "tokens": res["completion_tokens"], "verify_ct": res["verify_ct"]})
            self.log(f"[pair T={temperature:g}] repeat {rep + 1}/{self.a.repeats} done, {self.left():.0f} s left")
        for rec in self.records:
            key = (rec["config"], rec["batch"])
            if rec["phase"] == "pair" and rec["temperature"] == 0 and rec["repeat"] == 0 and rec["batch"] in refs \
                    and key in ids:
                rec.update(compare_with_plain(refs[rec["batch"]], ids[key]))
        return True

    def big_phase(self, names: list[str]) -> bool:
        names = [n for n in names if n in self.workers]
        cfg = {n: self.workers[n].cfg for n in names}
        if len(names) < 2:
            return False
        for b in self.a.big_batches:  # warm-up
            for n in names:
                self.call(n, {"id": "warm", "prompts": self.prompts[:b], "temperature": 0, "max_new": 8})
        for rep in range(self.a.big_repeats):
            for b in self.a.big_batches:
                for n in names[rep % len(names):] + names[:rep % len(names)]:
                    if self.left() < 15:
                        return False
                    pre = self.call(n, {"id": "prefill", "prompts": self.prompts[:b], "temperature": 0, "max_new": 1})
                    full = self.call(n, {"id": f"{n}-{b}-{rep}", "prompts": self.prompts[:b], "temperature": 0,
                                         "max_new": self.a.big_max_new})
                    if pre is None or full is None or not max(full["verify_ct"]):
                        continue
                    self.records.append({"phase": "big", "config": n, "algo": cfg[n]["algo"], "batch": b,
                                         "backend": cfg[n].get("backend", "triton"), "variant": cfg[n].get("variant"),
                                         "repeat": rep, "seconds": full["seconds"], "prefill_seconds": pre["seconds"],
                                         "rounds": max(full["verify_ct"]), "tokens": full["completion_tokens"],
                                         "verify_ct": full["verify_ct"]})
            self.log(f"[8b] repeat {rep + 1}/{self.a.big_repeats} done, {self.left():.0f} s left")
        return True


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def log_warnings(workers, limit: int = 12) -> list[str]:
    """Distinct warning / error lines of the engine logs (log level `warning`), per engine: e.g.
    DFLASH's "falling back to greedy argmax verification" would mean its T=1 runs verified greedily."""
    out = []
    for w in workers:
        try:
            lines = w.log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        seen = []
        for line in lines:
            text = line.split("] ", 1)[-1].strip()
            if any(k in line for k in ("WARNING", "Warning", "ERROR", "Error")) and text not in seen:
                seen.append(text)
        out += [f"{w.name}: {t[:300]}" for t in seen[:limit]]
    return out


def missing_log_lines(workers) -> list[str]:
    """A variant whose engine log lacks the line that proves it ran as asked (`log_must`): e.g. a
    reorder engine whose release blocked the reorder moved the KV instead, so its rows time the move."""
    return [f"{w.name}: its engine log lacks {must!r}; its rows do not time what they are named for"
            for w in workers if (must := gpu_matrix.missing_log_line(w.cfg, w.log))]


def machine() -> str:
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().replace("\n", "; ")
    except (OSError, subprocess.TimeoutExpired):
        gpu = "no nvidia-smi"
    return f"{gpu}; {os.cpu_count()} CPU cores; Python {sys.version.split()[0]}"


def _widened_note(m: dict) -> str:
    if "widened" not in m:
        return ""
    w, hd = m["widened"]["shape"], m["widened"]["head_dim"]
    return (f" Then widened by `scripts/train/widen.py` to hidden {w['hidden']}, MLP {w['inter']}, "
            f"{w['layers']} target layers ({w['heads']} x {hd} query / {w['kv_heads']} x {hd} KV heads), vocab "
            f"{w['vocab']}, a {w['draft_layers']}-layer drafter: the same function (the trained weights in "
            f"the first dims, every other weight zero, new tokens' logits far below), at that shape's cost.")


def calibrated_notes(m: dict) -> list[str]:
    """The calibrated off-chain pair's manifest (scripts/offchain/calibrated_pair.py): what it is and the
    analytic tokens per round its prompts should give, to read the measured ones against."""
    plan, fig = m["plan"], m["figures"]
    first = (f"The calibrated off-chain pair (`scripts/offchain/calibrated_pair.py`), constructed by hand, not trained: "
             f"block {plan['block']}, a drafter right at its first choice with probability {plan['rank_probs'][0]:.3f} "
             f"at every depth, geometric tail a = {plan['tail']}, so DFLASH's chain accepts {fig['ring']['DFLASH']} "
             f"tokens per round over the ring (published DFLASH: {plan['dflash_tau']}); the target counts on a ring "
             f"of 64 tokens.") + _widened_note(m)
    bench = "; ".join(f"batch {b}: " + ", ".join(f"{c} {v}" for c, v in row.items()) for b, row in fig["bench"].items())
    return [first, f"Analytic tokens per round on these prompts (T=0, what spec_accept_length should read): {bench}. "
                   f"Over the ring: {', '.join(f'{c} {v}' for c, v in fig['ring'].items())}."]


def pair_notes(pair: Path) -> list[str]:
    m = json.loads((pair / "manifest.json").read_text())
    if "figures" in m:
        return calibrated_notes(m)
    s = m["sizes"]
    est = m["held_out_estimate"]
    first = (f"`scripts/train/pair.py` ({m['command']}), seed {m['seed']}, {m['seconds']} s on {m['device']}: "
            f"target Qwen3 {s['target_layers']} layers, hidden {s['hidden']}, vocab {s['vocab']} "
            f"({m['params']['target'] / 1e6:.1f} M parameters, {m['target']['steps_done']} steps, held-out loss "
            f"{m['target']['held_out_loss']}); DFlash drafter {s['draft_layers']} layers, block {s['block']}, "
            f"target_layer_ids {s['target_layer_ids']} ({m['params']['draft'] / 1e6:.1f} M parameters, "
            f"{m['draft']['steps_done']} steps). Trained on {m['files']['train']} standard-library files "
            f"of Python {m['python']} ({m['tokens']['train']} tokens).")
    corpus = m.get("corpus", {})
    if corpus.get("name") == "mixed":
        first += (f" Mixed with {corpus['structured_docs']['train']} generated structured documents "
                  f"(`scripts/train/structured_corpus.py`, {corpus['structured_share']:.0%} of the characters); the prompts "
                  f"are held-out windows of both (`prompts.json`).")
    if m["sizes"].get("draft_labels") == "greedy" and "greedy_data" in m["draft"]:
        first += (f" The drafter trained on {m['draft']['greedy_data']['rows_done']} of the target's own greedy "
                  f"continuations.")
    first += _widened_note(m)
    if "error" in est:
        return [first, f"Offline acceptance estimate failed: {est['error']}"]
    return [first,
            f"Offline estimate on held-out greedy continuations (scripts/train/pair.py, the repo's tree kernels): "
            f"DFlash {est['dflash_tokens_per_round']} tokens/round, DDTree by budget "
            f"{est.get('ddtree_tokens_per_round')}; depth-1 top-1 / top-4 agreement {est['per_depth'][0]['top1']} / "
            f"{est['per_depth'][0]['top4']}; distinct-token fraction of the greedy text "
            f"{est['greedy_distinct_token_fraction']} (low = repetitive)."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pair", type=Path, required=True, help="scripts/train/pair.py output folder")
    ap.add_argument("--out", type=Path, required=True, help="report folder (benchmarks.md, PNGs, results.json)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-e2e"), help="configs, logs, 8B-shape configs")
    ap.add_argument("--deadline-s", type=float, default=500.0, help="stop measuring after this many seconds")
    ap.add_argument("--startup-timeout-s", type=float, default=240.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--big-repeats", type=int, default=5)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--big-max-new", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS),
                    help=f"DDTREE budgets of the pair phases (default {' '.join(map(str, BUDGETS))}; one engine each)")
    ap.add_argument("--pair-tokens", type=int, default=PAIR_TOKENS,
                    help="KV pool of each pair engine, in tokens (a widened pair: scripts/train/widen.py; 16384 suits batch 32)")
    ap.add_argument("--batches", nargs="+", type=int, default=list(BATCHES),
                    help=f"batch sizes of the pair phases (default {' '.join(map(str, BATCHES))}; at most 64)")
    ap.add_argument("--no-plain", action="store_true",
                    help="pair phases without the plain engine (a further group of budgets beside DFLASH)")
    ap.add_argument("--eager-stage-budgets", nargs="*", type=int, default=[],
                    help=f"also run DDTREE at these budgets {EAGER_STAGE_HELP}")
    ap.add_argument("--auto", action="store_true",
                    help="pair phases: also DDTREE with --speculative-ddtree-budget auto (engine ddtree_auto; "
                         "with CUDA graphs it captures a verify graph per ladder width)")
    ap.add_argument("--no-cuda-graph", action="store_true",
                    help="every engine (plain, DFLASH, DDTREE, both phases) runs eager (disable_cuda_graph=True)")
    ap.add_argument("--big-backends", nargs="+", default=["triton"], choices=["triton", "flashinfer"],
                    help="attention backends of the 8B-shape phase (each gets its DFLASH and DDTREE engine)")
    ap.add_argument("--big-verify-tiles", nargs="*", default=[], metavar="TILE",
                    help="also run the 8B-shape DDTREE on triton with DDTREE_VERIFY_TILE=TILE (e.g. M32N64w4, or "
                         "sglang for SGLang's own tile), one engine per tile, beside the default")
    ap.add_argument("--big-eager-stage", action="store_true",
                    help=f"also run the 8B-shape DDTREE on triton {EAGER_STAGE_HELP}")
    ap.add_argument("--big-reorder", action="store_true",
                    help="also run the 8B-shape DDTREE on triton with DDTREE_KV_COMMIT=reorder (the move-free, "
                         "fenced KV commit), beside the default (the move)")
    ap.add_argument("--big-batches", nargs="+", type=int, default=list(BIG_BATCHES),
                    help=f"batch sizes of the 8B-shape phase (default {' '.join(map(str, BIG_BATCHES))})")
    ap.add_argument("--phases", default="pair0,pair1,big",
                    help="comma list, run in this order: pair0 (trained pair, T=0), pair1 (T=1), big (8B shape)")
    ap.add_argument("--worker", type=Path, default=HERE / "worker.py",
                    help="engine process script (the CPU tests pass a protocol stand-in)")
    a = ap.parse_args()
    a.t0 = time.time()
    wanted = [x.strip() for x in a.phases.split(",") if x.strip()]
    if not wanted or set(wanted) - {"pair0", "pair1", "big"}:
        raise SystemExit(f"--phases takes pair0, pair1, big; got {a.phases!r}")
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M")

    def log(msg: str) -> None:
        print(f"[{time.time() - a.t0:6.1f}s] {msg}", flush=True)

    if a.repeats < 1 or a.big_repeats < 1:
        raise SystemExit("--repeats and --big-repeats must be >= 1")
    if not all(1 <= b <= max(BIG_BATCHES) for b in a.batches):
        raise SystemExit(f"--batches takes sizes from 1 to {max(BIG_BATCHES)} (the prompts on hand)")
    if not set(a.big_batches) <= set(BIG_BATCHES):
        raise SystemExit(f"--big-batches takes sizes from {' '.join(map(str, BIG_BATCHES))} (the engines' capacity)")
    for t in (t for t in a.big_verify_tiles if t != verify_tile.KEEP_SGLANG):
        try:
            verify_tile.parse_tile(t)
        except ValueError as e:
            raise SystemExit(f"--big-verify-tiles: {e}") from None
    pair_wanted = bool({"pair0", "pair1"} & set(wanted))
    if pair_wanted:
        for f in ("target/model.safetensors", "draft/model.safetensors", "manifest.json"):
            if not (a.pair / f).is_file():
                raise SystemExit(f"{a.pair / f} missing: run scripts/train/pair.py {a.pair} first")
    elif not (a.pair / "target" / "tokenizer.json").is_file():
        a.pair = tokenizer_only_pair(a.work / "tokenizer-only")
    a.work.mkdir(parents=True, exist_ok=True)
    prompts = prompts_from(a.pair, max(BIG_BATCHES), a.prompt_len)
    cfgs = (pair_configs(a.pair, tuple(a.eager_stage_budgets), tuple(a.budgets), a.pair_tokens, tuple(a.batches),
                         not a.no_plain, a.auto, not a.no_cuda_graph) if pair_wanted else []) + \
        (big_configs(a.work / "big-shape", a.pair, tuple(a.big_backends), tuple(a.big_verify_tiles), a.big_eager_stage,
                     a.big_reorder, not a.no_cuda_graph)
         if "big" in wanted else [])
    log(f"starting {len(cfgs)} engines: {', '.join(c['name'] for c in cfgs)}")
    workers, start_failures = start_all(cfgs, a.work, a.startup_timeout_s, log, script=a.worker)
    bench = Bench(a, workers, prompts, log)
    bench.failures += start_failures
    meta = {"machine": machine(), "torch": version("torch"), "sglang": version("sglang"), "started": started,
            "command": command_line(os.environ, sys.argv[1:]),
            "method": METHOD + ([EAGER_METHOD] if a.no_cuda_graph else []), "pair": pair_notes(a.pair) if pair_wanted else [],
            "big": [f"Qwen3-8B shape ({BIG_TARGET['num_hidden_layers']} layers, hidden {BIG_TARGET['hidden_size']}, "
                    f"vocab {BIG_TARGET['vocab_size']}), random weights from SGLang's `load_format=dummy` (built on "
                    f"the GPU), a 5-layer DFlash draft (block {BIG_BLOCK}, also dummy). DFLASH verifies {BIG_BLOCK} "
                    f"tokens per round, DDTREE budget {BIG_BLOCK - 1} verifies {BIG_BLOCK} (equal verify width). "
                    f"ms / round = (wall of {a.big_max_new} new tokens - median over the repeats of the wall of the same "
                    f"batch's prefill alone on the same engine) / "
                    f"rounds (the batch's largest `spec_verify_ct`), greedy, CUDA graphs {'off' if a.no_cuda_graph else 'on'}."]}

    def report() -> None:
        meta.update(wall_s=time.time() - a.t0, finished=bench.finished, cut=bench.cut, failures=bench.failures)
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "results.json").write_text(json.dumps({"meta": meta, "records": bench.records}, indent=1))
        log(f"[report] {bench_report.write(a.out, meta, bench.records)}")

    pair_names = [c["name"] for c in cfgs if c["phase"] == "pair"]
    big_names = [c["name"] for c in cfgs if c["phase"] == "big"]
    known = {"pair0": ("trained pair T=0", lambda: bench.pair_phase(pair_names, 0.0)),
             "pair1": ("trained pair T=1", lambda: bench.pair_phase(pair_names, 1.0)),
             "big": ("8B shape", lambda: bench.big_phase(big_names))}
    phases = [known[x] for x in wanted]
    try:
        for label, run in phases:
            if bench.left() < 20:
                bench.cut.append(label)
                continue
            (bench.finished if run() else bench.cut).append(label)
            report()
    finally:
        stop_all(workers.values())
        meta["warnings"] = log_warnings(workers.values())
        bench.failures += missing_log_lines(workers.values())
        report()
    sys.exit(1 if bench.failures or bench.cut else 0)


if __name__ == "__main__":
    main()
