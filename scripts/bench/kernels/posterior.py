"""Sections posterior, posterior-tune and posterior-profile: the per-node posterior (sampling).

- posterior: the per-node posterior over batch x `--rows` fp32 target logits (SGLang's logits
  dtype): torch argmax, then the previous kernel (kernels/posterior.py, one program per node) and
  the runtime's split kernel (kernels/posterior_split.py, split over the row's blocks) side by
  side, greedy and exact sampling with each filter and after the per-node path penalties (with
  kept touched lists, as the runtime), on
  "peaked" (randn x 4) and "flat" (randn x 0.3) logits. Where the two draw other tokens, each
  one's draws off the torch reference are counted with those at a CDF boundary (two float32
  summation orders); the section fails on any other difference, or if the split kernel raises
  (the per-node kernel's figures are still printed).
- posterior-tune: the split kernel's speed knobs at the largest batch on T=1, top-p 0.9, top-k 50
  and 2000, fastest first, each setting's draws compared with the default's (counted: another
  float32 summation order, or another unit's floor, draws other tokens). `--tune launch`: block
  size x warps x split check rounds x the top-k floor's unit x blocks per mass / check program;
  `--tune cuts`: the cut candidates of rows without / with top-k (`top_p_cuts`, `top_k_cuts`), the
  latter with finer floor units (16-64 tokens: the floor then serves top-k 2000), defaults otherwise;
  `--tune pool`: the candidate pool pass's blocks per program, the stats pass's blocks per program,
  the first listed check round and a listed round's programs (the same draws).
- posterior-profile: GPU time per call of each of the split posterior's kernels (torch.profiler) on
  each case at the largest batch (whole blocks as the top-k floor's units; 256- and 32-token units,
  each also with 6 split check rounds), of the streaming top-K's scan and select, and of the KV move
  on a first-child path at budget 64: where the time goes (GPU only).
"""

from __future__ import annotations

import argparse
import functools
import traceback
from typing import Callable

import torch

from kernels.commit import move_slots_triton
from kernels.path_penalties import apply_path_penalties
from kernels.posterior import (BLOCK, CUTS, POOL, TOP_K_CUTS, TOP_P_CUTS, UNIT, posterior_tokens_triton,
                               uniform_torch)
from kernels.posterior_pool import pool_eligible_torch
from kernels.posterior_reference import posterior_tokens_torch
from kernels.posterior_split import posterior_tokens_split
from kernels.vocab_topk import draft_topk_stream
from scripts.bench.kernels.move import _kv_pool, _path_moves
from scripts.bench.kernels.penalties import _chain_round, _kept_lists, _penalties
from scripts.bench.kernels.timing import Timer, _cell, _table
from scripts.bench.kernels.topk import _draft_logits


POSTERIOR_CASES = {
    # name: (temperature, top_k, top_p, min_p, penalties)
    "greedy (T=0)": (0.0, -1, 1.0, 0.0, False),
    "T=1": (1.0, -1, 1.0, 0.0, False),
    "top_p=0.9": (1.0, -1, 0.9, 0.0, False),
    "top_k=50": (1.0, 50, 1.0, 0.0, False),
    "top_k=2000": (1.0, 2000, 1.0, 0.0, False),
    "min_p=0.1": (1.0, -1, 1.0, 0.1, False),
    "k=50,p=0.9,min_p=0.05,T=0.7": (0.7, 50, 0.9, 0.05, False),
    "penalties+top_p=0.9": (1.0, -1, 0.9, 0.0, True),
}


def _case_params(case: tuple, bs: int, device: str | torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
    """A POSTERIOR_CASES entry as per-request tensors: ([temperature, top_k, top_p], min_p)."""
    t, k, p, mp, _ = case
    params = [torch.full((bs,), v, device=device, dtype=dt) for v, dt in
              ((t, torch.float32), (k, torch.int64), (p, torch.float32))]
    return params, torch.full((bs,), mp, device=device)


def _posterior_fns(logits: torch.Tensor, case: tuple, seed: torch.Tensor, positions: torch.Tensor,
                   penalise: Callable[[torch.Tensor], torch.Tensor]) -> tuple:
    """The per-node (one program per node) and split (program per row and block) kernels on one case
    (timed), the two again from the case's own logits (compared), and the untimed torch reference:
    (its tokens, the logits it sampled from, the temperatures)."""
    params, min_p = _case_params(case, logits.shape[0], logits.device)
    penalised = case[4]
    # the penalties adjust the logits in place, as the runtime's verify logits: timed replays drift
    # (the touched tokens penalised again each time); `fresh` restores them before a compared call
    work = logits.clone() if penalised else logits

    def run(kernel: Callable[..., torch.Tensor]) -> torch.Tensor:
        x = penalise(work) if penalised else logits
        return kernel(x, *params, seed, min_p=min_p, positions=positions)

    def reference(pool: int = POOL) -> tuple[torch.Tensor, ...]:
        x = penalise(work) if penalised else logits
        return posterior_tokens_torch(x, *params, seed, min_p=min_p, positions=positions, pool=pool), x, params[0]

    def fresh(fn: Callable[..., object]) -> Callable[..., object]:
        return lambda *a: (work.copy_(logits), fn(*a))[1] if penalised else fn(*a)

    fns = {"per_node": lambda: run(posterior_tokens_triton), "split": lambda: run(posterior_tokens_split)}
    if _pooled_case(case, logits.shape[-1]):  # the same kernel without its candidate pool, side by side
        fns["split_no_pool"] = lambda: run(functools.partial(posterior_tokens_split, pool=0))
    return fns, fresh(fns["per_node"]), fresh(fns["split"]), fresh(reference)


def _pooled_case(case: tuple, vocab: int) -> bool:
    """Whether a case's rows may draw from the candidate pool (kernels/posterior_pool.py) at the
    default block and unit (top-k above the row's floor units, at most V / 64)."""
    nb = -(-vocab // BLOCK)
    return POOL > 0 and case[0] > 0 and bool(pool_eligible_torch(torch.ones(1, dtype=torch.bool), torch.tensor([case[1]]),
                                                                 vocab, nb, min(UNIT, BLOCK), BLOCK)[0])


def cdf_eps(vocab: int) -> float:
    """How far two float32 summation orders of a row's CDF can drift apart, with margin: a rounding
    random walk of ~sqrt(V) steps of 2**-24 (half an ulp of 1), times 4 (1.1e-5 at V=2048, 9.3e-5
    at V=151936), and never below 1e-5."""
    return max(1e-5, 4 * vocab**0.5 * 2.0**-24)


def boundary_draws(x: torch.Tensor, temperature: torch.Tensor, ref: torch.Tensor, got: torch.Tensor,
                   eps: float | None = None, first_u: torch.Tensor | None = None,
                   min_p: torch.Tensor | None = None) -> tuple[int, int]:
    """(draws that differ from the reference, those of them at a CDF boundary). A boundary case is
    a draw that fell where two float32 summation orders disagree (within `eps`, default `cdf_eps`):
    - the float64 mass of softmax(x / T) strictly between the two tokens (in index order, the order
      every kernel sums in) is below eps (filters only remove mass, so the unfiltered softmax
      bounds it); or
    - with `first_u` [bs, n] (the first round's uniforms): that first draw's target u lies within
      eps of a step of the float64 CDF it is drawn from (min-p applied). The kernels draw, check
      top-k / top-p, then redraw above a raised floor, so a first draw on either side of a step can
      end in tokens far apart.
    Greedy rows never count."""
    eps = cdf_eps(x.shape[-1]) if eps is None else eps
    diff = (got != ref).nonzero().tolist()
    near = 0
    for b, r in diff:
        t = float(temperature[b])
        if t <= 0:
            continue
        probs = torch.softmax(x[b, r].double() / t, -1)
        cum = probs.cumsum(0)
        lo, hi = sorted((int(ref[b, r]), int(got[b, r])))
        at_step = False
        if first_u is not None:
            w = probs / probs.max()
            if min_p is not None and float(min_p[b]) > 0:
                w = torch.where(w >= float(min_p[b]), w, 0.0)
            steps = (w.cumsum(0) / w.sum())[w > 0]
            target = float(first_u[b, r])
            i = int(torch.searchsorted(steps, torch.tensor([target], dtype=steps.dtype, device=steps.device))[0])
            gaps = [abs(target - float(steps[j])) for j in (i - 1, i) if 0 <= j < len(steps)]
            at_step = min(gaps) < eps
        near += at_step or float(cum[hi - 1] - cum[lo]) < eps
    return len(diff), near


def bench_posterior(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The posterior of one round (batch x rows nodes): torch argmax, then the per-node and the split
    kernel (the runtime's) side by side on each sampling case (interleaved samples). Where their
    draws differ, each kernel's draws off the torch reference are counted, with those a float32
    summation order explains (`boundary_draws`); any other difference, or a split kernel that
    raises, fails the section at the end (the per-node kernel still timed)."""
    dev, rows, vocab = args.device, args.rows, args.vocab
    records, table, split_errors = [], [], []
    for bs in args.batch:
        gen, parent, tokens = _chain_round(bs, rows, vocab, dev, seed=bs * 7 + rows)
        seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
        positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
        pen = _kept_lists(_penalties(bs, vocab, gen, dev))
        penalise = lambda x: apply_path_penalties(x, tokens, parent, min(args.depth, rows - 1), pen, None,  # noqa: E731
                                                  in_place=True)
        for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
            logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
            argmax = timer.measure({"argmax": lambda logits=logits: logits.argmax(dim=-1)})["argmax"]
            records.append({"batch": bs, "rows": rows, "logits": shape, "case": "torch argmax", "us": argmax})
            table.append([str(bs), shape, "torch argmax", _cell(argmax), "", "", "", ""])
            for name, case in POSTERIOR_CASES.items():
                fns, per_node, split_fn, reference = _posterior_fns(logits, case, seed, positions, penalise)
                expected = per_node()
                try:
                    split = split_fn()
                    same = bool(torch.equal(expected, split))
                except Exception as exc:  # never compiled on a GPU before: keep the per-node kernel's figures
                    if not split_errors:
                        traceback.print_exc()
                    split_errors.append(f"batch {bs}, {shape}, {name}: {type(exc).__name__}: {exc}")
                    t = timer.measure({"per_node": fns["per_node"]})
                    records.append({"batch": bs, "rows": rows, "logits": shape, "case": name,
                                    "per_node_us": t["per_node"], "split_error": split_errors[-1]})
                    table.append([str(bs), shape, name, _cell(t["per_node"]), "FAILED", "", "", ""])
                    continue
                agreement = "yes"
                if not same:  # which kernel left its torch reference, how often, and whether only at boundaries
                    u0 = uniform_torch(seed[:, None], positions, 0)
                    off = {}
                    for k, v, pool in (("per_node", expected, 0), ("split", split, POOL)):  # no pool per node
                        ref, x, temp = reference(pool)
                        off[k] = boundary_draws(x, temp, ref, v, first_u=u0, min_p=torch.full((bs,), case[3], device=dev))
                    counts = ", ".join(f"{k} {n} of {bs * rows} off the torch reference, {near} of them at a CDF boundary"
                                       for k, (n, near) in off.items())
                    pooled = "pooled: " if "split_no_pool" in fns else ""  # the split kernel's draws are another rule's
                    agreement = f"{pooled}boundary only ({counts})"
                    if not any(n for n, _ in off.values()):
                        agreement = "pooled: each kernel == its torch reference (split with its pool, per node without)"
                    if any(n > near for n, near in off.values()):  # a difference float32 summation order cannot explain
                        agreement = f"NO ({counts})"
                        split_errors.append(f"batch {bs}, {shape}, {name}: {counts}")
                t = timer.measure(fns)
                ratio = t["per_node"]["median"] / t["split"]["median"]
                records.append({"batch": bs, "rows": rows, "logits": shape, "case": name, "per_node_us": t["per_node"],
                                "split_us": t["split"], "ratio": ratio, "same_tokens": same, "agreement": agreement,
                                **({"split_no_pool_us": t["split_no_pool"]} if "split_no_pool" in t else {})})
                table.append([str(bs), shape, name, _cell(t["per_node"]), _cell(t["split"]),
                              _cell(t["split_no_pool"]) if "split_no_pool" in t else "", f"{ratio:.2f}x", agreement])
    _table(f"posterior, {rows} rows per request, V={vocab}, fp32 logits: us per round, median [p10-p90]",
           ["batch", "logits", "case", "per node (previous)", "split (runtime: program per row, block)",
            "split without the pool", "per node/split", "same tokens"], table)
    if split_errors:
        raise RuntimeError("a posterior kernel failed, or left the reference off a CDF boundary:\n"
                           + "\n".join(split_errors))
    return records


TUNE_CASES = ("T=1", "top_p=0.9", "top_k=50", "top_k=2000")


def bench_posterior_tune(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """The split posterior's speed knobs at the largest batch (`--tune launch`: block size x warps x
    check rounds run split before the per-row tail (`par_rounds`) x the top-k floor's unit (`unit`,
    which the mass pass also skips by) x blocks per mass / check program; `--tune cuts`: the check's
    cut candidates per row without / with top-k, the latter under finer units; `--tune pool`: blocks
    per program of the candidate pool's pass, blocks per program of the stats pass, the first
    check round over the list of rows still drawing, and a listed round's programs), on
    T=1, top-p 0.9, top-k 50 and 2000, peaked and flat logits, fastest first per case.
    Each setting's draws are compared with the default's, counted, not failed: another block sums in
    another float32 order (a few boundary draws), another unit sets another top-k floor (other,
    equally exact draws); the pool's knobs must change no draw."""
    bs, rows, vocab, dev = max(args.batch), args.rows, args.vocab, args.device
    gen = torch.Generator(device=dev).manual_seed(bs * 11 + rows)
    seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
    positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
    blocks = [b for b in (2048, 4096) if b <= vocab] or [vocab]
    base = {"block": blocks[0], "warps": 4, "par_rounds": 3, "unit": 256, "blocks_per_program": 8,
            "top_p_cuts": TOP_P_CUTS, "top_k_cuts": TOP_K_CUTS}
    settings = [{}]  # the defaults
    if "launch" in args.tune:
        settings += [dict(par_rounds=r, unit=u, blocks_per_program=g) for r in (2, 3, 4) for u in (256, 512)
                     for g in (4, 8, 16)]
        settings += [dict(unit=blocks[0]), dict(warps=8)]
        settings += [dict(block=b, unit=u, blocks_per_program=g) for b in blocks[1:] for u in (256, b) for g in (4, 8)]
    if "cuts" in args.tune:
        settings += [dict(par_rounds=r, top_p_cuts=p) for r in (2, 3) for p in (1, 2, 4, CUTS)]
        settings += [dict(unit=u, top_k_cuts=k) for u in (16, 32, 64, 256) for k in (1, 2, 4, CUTS)]
    if "pool" in args.tune:
        settings += [dict(pool_bpp=g) for g in (8, 32)] + [dict(stats_bpp=1)]
        settings += [dict(listed_from=r) for r in (1, 3)] + [dict(check_programs=132 * 4)]
    configs = {" ".join(f"{k}={v}" for k, v in {**base, **kw}.items()): {**base, **kw} for kw in settings}
    out, table = [], []
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
        for case in TUNE_CASES:
            params, min_p = _case_params(POSTERIOR_CASES[case], bs, dev)
            fns = {name: (lambda kw=kw: posterior_tokens_split(logits, *params, seed, min_p=min_p, positions=positions,
                                                               **kw))
                   for name, kw in configs.items()}
            want = posterior_tokens_split(logits, *params, seed, min_p=min_p, positions=positions)
            differ = {name: int((fn() != want).sum()) for name, fn in fns.items()}
            times = timer.measure(fns)
            for name in sorted(configs, key=lambda n: times[n]["median"]):
                out.append({"batch": bs, "rows": rows, "logits": shape, "case": case, **configs[name],
                            "us": times[name], "draws_differing_from_default": differ[name]})
                table.append([shape, case, name, _cell(times[name]), str(differ[name])])
    _table(f"Split posterior settings, batch {bs} x {rows} rows, V={vocab}: us median [p10-p90], fastest first per "
           "case", ["logits", "case", "setting", "us", f"draws != the default's (of {bs * rows})"], table)
    return out


PROFILE_CASES = ("T=1", "top_p=0.9", "top_k=50", "top_k=2000", "min_p=0.1", "k=50,p=0.9,min_p=0.05,T=0.7")


def kernel_breakdown(fn: Callable[[], object], calls: int) -> dict[str, float]:
    """GPU time per call of every kernel `fn` launches (torch.profiler, eager calls after a warm-up),
    us, slowest first: which pass of a multi-kernel call costs what."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = {e.key: getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)) / calls
           for e in prof.key_averages()}
    return dict(sorted(((k, v) for k, v in per.items() if v > 0), key=lambda kv: -kv[1]))


def _breakdown_cells(per: dict[str, float]) -> list[str]:
    """A `kernel_breakdown` as table cells: the sum, then each kernel (short name) and its us."""
    return [f"{sum(per.values()):.1f}", "; ".join(f"{k.split('(')[0][:40]} {v:.1f}" for k, v in per.items())]


def bench_posterior_profile(args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Where the split posterior's time goes at the largest batch: GPU time per call of each of its
    kernels (`kernel_breakdown`) on each case, peaked and flat logits, with whole blocks as the top-k
    floor's units, with 256-token units, with 32-token units (a floor for top-k up to V / 32), each of
    the latter two also with 6 split check rounds; then the streaming
    top-K's scan and select, and the KV move of a first-child path (nothing to move) beside every
    pair's. GPU only."""
    if args.device != "cuda":
        raise RuntimeError("the profile section needs a GPU (torch.profiler's CUDA activity)")
    bs, rows, vocab, dev = max(args.batch), args.rows, args.vocab, args.device
    gen = torch.Generator(device=dev).manual_seed(bs * 13 + rows)
    seed = torch.randint(0, 2**62, (bs,), generator=gen, device=dev)
    positions = torch.arange(rows, device=dev).expand(bs, rows) + 1000
    out, table = [], []
    for shape, scale in (("peaked", 4.0), ("flat", 0.3)):
        logits = torch.randn(bs, rows, vocab, generator=gen, device=dev) * scale
        for case in args.profile_cases:
            params, min_p = _case_params(POSTERIOR_CASES[case], bs, dev)
            for par_rounds, unit in ((3, 2048), (3, 256), (6, 256), (3, 32), (6, 32)):
                per = kernel_breakdown(lambda: posterior_tokens_split(logits, *params, seed, min_p=min_p,
                                                                      positions=positions, par_rounds=par_rounds,
                                                                      unit=unit),
                                       calls=5)
                out.append({"logits": shape, "case": case, "par_rounds": par_rounds, "unit": unit,
                            "kernels_us": per})
                table.append([shape, case, f"{par_rounds}, {unit}", *_breakdown_cells(per)])
    draft = _draft_logits(bs, args.depth, vocab, dev, seed=bs)
    for k in args.topk_k:
        per = kernel_breakdown(lambda: draft_topk_stream(draft, k), calls=5)
        out.append({"case": f"streaming top-K, K={k}", "kernels_us": per})
        table.append(["draft bf16", f"top-K K={k}", "-", *_breakdown_cells(per)])
    n = 65  # budget 64: the KV move of a first-child path (nothing moves) and of every pair
    _, ptrs, stride, strides, word = _kv_pool(args, bs * n + 1)
    dst, src = _path_moves(bs, n, args.depth + 1, False, dev)
    for name, fn in (("skip identity", lambda: move_slots_triton(ptrs, strides, stride, dst, src, word=word)),
                     ("every pair", lambda: move_slots_triton(ptrs, strides, stride, dst, torch.where(src >= 0, src, dst),
                                                              skip_identity=False))):
        per = kernel_breakdown(fn, calls=5)
        out.append({"case": f"KV move, first-child, {name}", "kernels_us": per})
        table.append(["KV pool", f"move first-child, {name}", "-", *_breakdown_cells(per)])
    _table(f"Kernel breakdown (torch.profiler, GPU us per call, eager), batch {bs} x {rows} rows, V={vocab}",
           ["logits", "case", "split rounds, unit", "sum of kernels", "kernels, slowest first"], table)
    return out
