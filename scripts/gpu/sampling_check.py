"""End-to-end check on the GPU: DDTREE's sampled tokens are distributed as plain SGLang sampling's.

For every setting (T=1; top-p 0.9; top-k 2000; top-k 20, which the kernel's top-k floor serves on
an 8k vocabulary; min-p 0.2; top-k 50 + top-p 0.8 + min-p 0.05; repetition 1.3; frequency 0.5;
presence 0.5; logit bias), one plain engine and one DDTREE engine each generate DRAWS requests of the same
prompt (batched), `--positions` tokens each. At every compared position the two samples of that
position's token are tested for homogeneity by a 2 x B chi-square (bins: token ids grouped in id
order to >= 10 pooled draws each). A third engine runs DDTREE with DDTREE_TEST_POSTERIOR_BIAS=0.03
(every tree node with a child emits its first child, the draft's top guess, 3 % of the time): it
must fail. Pass: every unbiased p-value > ALPHA / (settings x positions) (Bonferroni); fail
required: some biased p-value < that threshold, for every setting.

Each comparison runs two chi-squares on the same draws (bins of >= 1/16 of the pooled draws, and
bins of >= 10), joined by Bonferroni. Power: printed per setting (the smallest over positions) for
the alternative "3 % of the probability mass moved from the less likely half of the coarse bins to
the likelier half" (total variation 0.03), computed from the plain sample by the normal
approximation of the noncentral chi-square.

usage (on the GPU machine, SGLang patched for DDTREE on the path):
    python -m scripts.gpu.sampling_check OUT_DIR [--target T] [--draft D] [--draws 20000]
    python -m scripts.gpu.sampling_check OUT_DIR --make-models /tmp/models8k   # 8192-token models first
    python -m scripts.gpu.sampling_check OUT_DIR --make-models /tmp/m152k --vocab 151936 --only top_k=2000
    python -m scripts.gpu.sampling_check OUT_DIR --offchain /tmp/models   # paths off the first-child chain
    (--parallel: the three engines side by side, a quarter of the GPU's memory each)
Defaults: the gpurig models /tmp/models/target_rand and /tmp/models/draft_rand (vocab 512: top-k
2000 is then off; use --make-models for a vocab >= 8k). A random draft is almost never accepted,
so there nearly every DDTREE token is a tree root's.
--offchain DIR uses the off-chain oracle (DIR/target_offchain, DIR/draft_offchain, built by
scripts/offchain/make_models.py; gpu_check.sh leaves them in /tmp/models) at temperature 3: the target's
logits are 22.6 on its rule's token and exactly 0 on the 511 others, so at T=3 it samples that
token 78.7 % of the time and each other 0.04 %, and the draft holds that token at rank 1, 2 or 3
per depth (offchain_oracle.RANK_PROBS): accepted sampled paths leave the first-child chain. Top-p
0.9 cuts inside that run of tied logits (~270 of them kept): the pytorch sampler (this script's
default backend) keeps the tied tokens of lowest index, as DDTREE does on that backend
(kernels/posterior.py, `index_ties`), so it runs there too (OFFCHAIN_SETTINGS). `--sampling-backend
flashinfer` (a bundle with a real FlashInfer) checks the other order: every engine samples with
FlashInfer, which keeps a tie whole, and so does DDTREE on that backend.

Top-k 20 and the joint filter (top-k 50, NUMERICS_SENSITIVE) run only when named in --only: their
cut falls where the logits tie or nearly tie, and two engines whose attention kernels differ keep
different tokens there (the joint filter, plain vs plain on torch_native: p 2.3e-4 under a 2.5e-4
threshold, H200, 2026-12-03).
On the 8k random models (bf16 logits tie at a top-k 20 cut in about half the contexts) plain vs
plain with another attention backend fails it as DDTREE vs plain does (`--control-attention B`:
the compared engine is plain decoding on backend B). On the off-chain oracle the "others" are
not all exactly 0: attention leaks put 1e-27..4e-12 on the successors of earlier tokens
(scripts/offchain/reference.py, bf16 torch math), which the verify forward keeps and plain's decode
kernel flushes to 0, so DDTREE keeps those tokens at the cut, as the reference math does.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ALPHA = 1e-3
MOVED = 0.03
COARSE_BINS = 16
SETTINGS = {
    "T=1": {"temperature": 1.0},
    "top_p=0.9": {"temperature": 1.0, "top_p": 0.9},
    "top_k=2000": {"temperature": 1.0, "top_k": 2000},
    "top_k=20": {"temperature": 1.0, "top_k": 20},
    "min_p=0.2": {"temperature": 1.0, "min_p": 0.2},
    # all three filters: SGLang's joint order on pytorch; on FlashInfer (min-p in the batch) top-p over
    # the renormalised top-k set, then min-p (kernels/sequential_top_p.py)
    "top_k=50,top_p=0.8,min_p=0.05": {"temperature": 1.0, "top_k": 50, "top_p": 0.8, "min_p": 0.05},
    # the same orders with the top-k cut among tokens of tiny mass (as top-k 2000's: numerics do not decide it)
    "top_k=2000,top_p=0.8,min_p=0.05": {"temperature": 1.0, "top_k": 2000, "top_p": 0.8, "min_p": 0.05},
    "repetition=1.3": {"temperature": 1.0, "repetition_penalty": 1.3},
    "frequency=0.5": {"temperature": 1.0, "frequency_penalty": 0.5},
    "presence=0.5": {"temperature": 1.0, "presence_penalty": 0.5},
    "logit_bias": {"temperature": 1.0, "logit_bias": {str(t): 4.0 for t in (5, 6, 7, 8)} | {"9": -100.0}},
}
# Settings run on the off-chain oracle (min-p 0.2 keeps its rule token only; top-k 2000 is off at vocab 512).
OFFCHAIN_SETTINGS = ("T=1", "top_p=0.9", "repetition=1.3", "frequency=0.5", "presence=0.5", "logit_bias")
# Settings whose cut falls on (near-)tied logits, so kernel numerics alone decide it (module docstring).
NUMERICS_SENSITIVE = ("top_k=20", "top_k=50,top_p=0.8,min_p=0.05")
OFFCHAIN_TEMPERATURE = 3.0
PROMPT = [5, 17, 33, 99, 120, 7, 7, 7]
REPO = Path(__file__).resolve().parents[2]


def make_models(out: Path, vocab: int) -> None:
    """The gpurig tiny models with another vocabulary size (runs its make_models.py, VOCAB replaced)."""
    candidates = [os.environ.get("GPURIG_MAKE_MODELS", ""), Path(os.environ.get("RIG", REPO / ".gpurig")) /
                  "scripts/make_models.py", REPO.parent / "shared/gpurig/scripts/make_models.py"]
    src = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if src is None:
        raise SystemExit("make_models.py not found: set RIG or GPURIG_MAKE_MODELS")
    code = src.read_text().replace("VOCAB = 512", f"VOCAB = {vocab}")
    subprocess.run([sys.executable, "-c", code, str(out), "--weights"], check=True)


def engine_main(cfg_path: str, out_path: str) -> None:
    """One engine: every setting, DRAWS requests each; writes {setting: [[token ids]...]}."""
    from sglang.srt.entrypoints.engine import Engine

    cfg = json.loads(Path(cfg_path).read_text())
    kw = dict(model_path=cfg["target"], tokenizer_path=cfg["target"], skip_tokenizer_init=True, dtype="bfloat16",
              attention_backend=cfg.get("attention", "triton"), sampling_backend=cfg.get("sampling", "pytorch"),
              grammar_backend="none",
              disable_flashinfer_autotune=True, mem_fraction_static=cfg["mem_fraction"], context_length=256,
              random_seed=cfg["seed"], log_level="warning", max_running_requests=cfg.get("max_running", 1024),
              disable_cuda_graph=True,
              port=cfg["port"], nccl_port=cfg["port"] + 5)
    if cfg["algo"] != "NONE":
        kw.update(speculative_algorithm=cfg["algo"], speculative_draft_model_path=cfg["draft"],
                  speculative_ddtree_budget=cfg["budget"])
    # Engines side by side profile free memory at start-up; one starting while another allocates
    # its KV pool sees that pool as its own weights and refuses. So start-ups take turns.
    with open(Path(out_path).with_name("engine-start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        eng = Engine(**kw)
    out = {}
    for name, params in cfg["settings"].items():
        t0 = time.time()
        sp = dict(params, max_new_tokens=cfg["positions"], ignore_eos=True)
        res = eng.generate(input_ids=[PROMPT] * cfg["draws"], sampling_params=sp)
        out[name] = [r["output_ids"] for r in res]
        rounds = sum(r["meta_info"].get("spec_verify_ct", 0) for r in res)
        out.setdefault("tokens_per_round", {})[name] = (sum(map(len, out[name])) / rounds) if rounds else None
        print(f"[{cfg['name']}] {name}: {len(res)} requests in {time.time() - t0:.1f}s, "
              f"tokens/round {out['tokens_per_round'][name]}", flush=True)
        Path(out_path).write_text(json.dumps(out))  # after every setting: a cut run can still be re-judged
    eng.shutdown()


def run_engine(name: str, cfg: dict, out_dir: Path, env: dict | None = None, *,
               module: str = "scripts.gpu.sampling_check", port_base: int = 21000) -> dict:
    """One engine in its own process, `python -m module --engine CFG OUT` (the grammar check's engines
    too); each gets the ports of its seed above `port_base`, so engines can run side by side."""
    cfg = dict(cfg, name=name, port=port_base + 10 * cfg["seed"])
    cfg_path, res_path = out_dir / f"{name}.cfg.json", out_dir / f"{name}.json"
    cfg_path.write_text(json.dumps(cfg))
    with open(out_dir / f"{name}.log", "w") as log:
        rc = subprocess.run([sys.executable, "-m", module, "--engine", str(cfg_path), str(res_path)],
                            env=dict(os.environ, **(env or {})), stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0 or not res_path.exists():
        tail = (out_dir / f"{name}.log").read_text()[-3000:]
        raise SystemExit(f"engine {name} failed (rc={rc}):\n{tail}")
    return json.loads(res_path.read_text())


def check_parser(doc: str, engine: Callable[[str, str], None]) -> argparse.ArgumentParser | None:
    """A check's command line. As `run_engine` starts it (`--engine CFG OUT`): runs `engine(CFG, OUT)`,
    returns None; else the check's parser, its first argument the output folder."""
    if sys.argv[1:2] == ["--engine"]:
        engine(sys.argv[2], sys.argv[3])
        return None
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    return ap


def _bins(pooled: dict[int, int], min_count: int) -> list[list[int]]:
    """Token ids in id order, grouped to >= min_count pooled draws per bin (the tail joins the last)."""
    groups, cur, n = [], [], 0
    for tok in sorted(pooled):
        cur.append(tok)
        n += pooled[tok]
        if n >= min_count:
            groups.append(cur)
            cur, n = [], 0
    if cur and groups:
        groups[-1] += cur
    elif cur:
        groups.append(cur)
    return groups


def _chi2_sf(stat: float, df: int) -> float:
    if df <= 0:
        return 1.0
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def _counts(draws: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for t in draws:
        out[t] = out.get(t, 0) + 1
    return out


def _chi2(ca: dict[int, int], cb: dict[int, int], groups: list[list[int]]) -> tuple[float, int]:
    """2 x B homogeneity statistic and its degrees of freedom."""
    na, nb = sum(ca.values()), sum(cb.values())
    stat = 0.0
    for g in groups:
        oa, ob = sum(ca.get(t, 0) for t in g), sum(cb.get(t, 0) for t in g)
        ea, eb = (oa + ob) * na / (na + nb), (oa + ob) * nb / (na + nb)
        stat += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
    return stat, len(groups) - 1


def tv_power(p: list[float], na: int, nb: int, threshold: float) -> float:
    """Power of the 2 x B chi-square at `threshold` against 3 % of the probability mass moved (total
    variation 0.03) from the less likely bins to the likelier ones, pro rata: bins sorted by p, the
    likeliest up to half the mass gain MOVED, the rest lose it (a shift towards or away from the
    dominant tokens, as a sampler that favours the draft's guesses makes)."""
    order = sorted(range(len(p)), key=lambda i: -p[i])
    top, mass = set(), 0.0
    for i in order:
        if mass >= 0.5:
            break
        top.add(i)
        mass += p[i]
    if not 0 < mass < 1 or len(p) < 2:
        return 0.0
    moved = min(MOVED, 1 - mass)
    q = [x * (1 + moved / mass) if i in top else x * (1 - moved / (1 - mass)) for i, x in enumerate(p)]
    lam = (na * nb / (na + nb)) * sum((qi - pi) ** 2 / pi for pi, qi in zip(p, q) if pi > 0)
    df = len(p) - 1
    crit = _chi2_quantile(threshold, df)
    return 0.5 * math.erfc((crit - df - lam) / math.sqrt(2 * (df + 2 * lam)) / math.sqrt(2))


def homogeneity(a: list[int], b: list[int], threshold: float) -> tuple[float, float]:
    """(p-value, power) of two 2 x B chi-squares on the same draws, Bonferroni-joined: a coarse one
    (at most COARSE_BINS bins, so few degrees of freedom: power against broad shifts of mass) and a
    fine one (>= 10 pooled draws per bin: sensitive to mass moved onto or off a few tokens). The
    p-value is 2 x the smaller of the two (capped at 1); the power is the coarse test's against
    3 % of the mass moved (tv_power), at threshold / 2."""
    ca, cb = _counts(a), _counts(b)
    pooled = {t: ca.get(t, 0) + cb.get(t, 0) for t in set(ca) | set(cb)}
    coarse = _bins(pooled, max(10, (len(a) + len(b)) // COARSE_BINS))
    fine = _bins(pooled, 10)
    p_min = min(_chi2_sf(*_chi2(ca, cb, g)) for g in (coarse, fine))
    p_plain = [sum(ca.get(t, 0) for t in g) / len(a) for g in coarse]
    return min(1.0, 2 * p_min), tv_power(p_plain, len(a), len(b), threshold / 2)


def _chi2_quantile(alpha: float, df: int) -> float:
    lo, hi = 0.0, df + 100 * math.sqrt(2 * df + 1) + 100
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf(mid, df) > alpha else (lo, mid)
    return hi


def select_settings(only: list[str] | None, offchain: bool) -> dict[str, dict]:
    """The settings to run (without --only: all but NUMERICS_SENSITIVE); on the off-chain oracle
    OFFCHAIN_SETTINGS, each at T=3."""
    names = [k for k in SETTINGS if (k in only if only else k not in NUMERICS_SENSITIVE)
             and (not offchain or k in OFFCHAIN_SETTINGS)]
    if only and not names:
        raise SystemExit(f"no setting left of {only}" + (f" (off-chain runs only {OFFCHAIN_SETTINGS})" if offchain else ""))
    if not offchain:
        return {k: SETTINGS[k] for k in names}
    return {k.replace("T=1", f"T={OFFCHAIN_TEMPERATURE:g}"): dict(SETTINGS[k], temperature=OFFCHAIN_TEMPERATURE)
            for k in names}


def judge(settings: dict, plain: dict, ddtree: dict, biased: dict, positions: int,
          threshold: float) -> list[tuple[str, float, float, float, bool]]:
    """Per setting: (name, worst DDTREE p, best biased p, smallest power, passed) over the positions.
    Passed: DDTREE is never told apart from plain, and the biased run is, at some position."""
    rows = []
    for name in settings:
        worst_p, best_biased, min_power = 1.0, 1.0, 1.0
        for pos in range(positions):
            a = [o[pos] for o in plain[name]]
            p, power = homogeneity(a, [o[pos] for o in ddtree[name]], threshold)
            pb, _ = homogeneity(a, [o[pos] for o in biased[name]], threshold)
            worst_p, best_biased, min_power = min(worst_p, p), min(best_biased, pb), min(min_power, power)
        rows.append((name, worst_p, best_biased, min_power, worst_p > threshold and best_biased < threshold))
    return rows


def main() -> None:
    ap = check_parser(__doc__, engine_main)
    if ap is None:
        return
    ap.add_argument("--target", default="/tmp/models/target_rand")
    ap.add_argument("--draft", default="/tmp/models/draft_rand")
    ap.add_argument("--make-models", type=Path, help="build gpurig models of --vocab tokens here and use them")
    ap.add_argument("--vocab", type=int, default=8192,
                    help="the vocabulary of --make-models (151936, Qwen's: top-k 2000 rows then draw from their "
                         "candidate pools, kernels/posterior_pool.py)")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--positions", type=int, default=4, help="tokens per request; every position is compared")
    ap.add_argument("--only", nargs="*", help="setting names to run")
    ap.add_argument("--offchain", type=Path, help="use the off-chain oracle models in this folder, at T=3")
    ap.add_argument("--rejudge", action="store_true",
                    help="start no engine: judge the draws a former run left in OUT_DIR (plain/ddtree/ddtree_biased.json)")
    ap.add_argument("--sampling-backend", default="pytorch", choices=("pytorch", "flashinfer"),
                    help="SGLang's sampling backend for every engine (default pytorch)")
    ap.add_argument("--control-attention", metavar="BACKEND",
                    help="compare plain with plain decoding on this attention backend instead of DDTREE (a control: "
                         "what kernel numerics alone do to a setting); the biased DDTREE run stays")
    ap.add_argument("--parallel", action="store_true",
                    help="run the three engines side by side on the one GPU (a quarter of its memory each)")
    ap.add_argument("--max-running", type=int, default=1024, metavar="N",
                    help="--max-running-requests of every engine (default 1024). SGLang sizes a verify's logits "
                         "buffer by it: at V=151936 and budget 16, 1024 asks 9.85 GiB, more than a quarter of "
                         "the GPU leaves; 256 lets --parallel run there")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.make_models:
        make_models(args.make_models, args.vocab)
        args.target, args.draft = str(args.make_models / "target_rand"), str(args.make_models / "draft_rand")
    settings = select_settings(args.only, args.offchain is not None)
    if args.offchain:
        args.target, args.draft = str(args.offchain / "target_offchain"), str(args.offchain / "draft_offchain")
    base = dict(target=args.target, draft=args.draft, budget=args.budget, draws=args.draws,
                positions=args.positions, settings=settings, mem_fraction=0.25 if args.parallel else 0.5,
                sampling=args.sampling_backend, max_running=args.max_running)
    t0 = time.time()
    if args.rejudge:
        plain, ddtree, biased = (json.loads((args.out_dir / f"{n}.json").read_text())
                                 for n in ("plain", "ddtree", "ddtree_biased"))
        settings = {k: v for k, v in settings.items() if k in plain and k in ddtree and k in biased}
    else:
        compared = dict(base, algo="NONE", attention=args.control_attention) if args.control_attention else \
            dict(base, algo="DDTREE")
        runs = [("plain", dict(base, algo="NONE", seed=1), None), ("ddtree", dict(compared, seed=2), None),
                ("ddtree_biased", dict(base, algo="DDTREE", seed=3), {"DDTREE_TEST_POSTERIOR_BIAS": str(MOVED)})]
        with ThreadPoolExecutor(len(runs) if args.parallel else 1) as pool:
            plain, ddtree, biased = pool.map(lambda r: run_engine(r[0], r[1], args.out_dir, env=r[2]), runs)
    threshold = ALPHA / (len(settings) * args.positions)
    rows = judge(settings, plain, ddtree, biased, args.positions, threshold)
    ok = all(r[-1] for r in rows)
    if args.control_attention:
        print(f"# CONTROL: the 'DDTREE' column is plain decoding with attention backend {args.control_attention}")
    print(f"# target {args.target}, draft {args.draft}, budget {args.budget}, sampling backend {args.sampling_backend}, "
          f"{args.draws} draws x "
          f"{args.positions} positions per setting, threshold {threshold:.2e}, {time.time() - t0:.0f}s")
    print("| setting | min p (DDTREE vs plain) | min p (biased vs plain) | power (TV 0.03) | pass |")
    print("|---|---|---|---|---|")
    for name, p, pb, power, passed in rows:
        print(f"| {name} | {p:.3g} | {pb:.3g} | {power:.3f} | {'yes' if passed else 'NO'} |")
    (args.out_dir / "summary.json").write_text(json.dumps(rows))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
