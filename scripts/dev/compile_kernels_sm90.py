"""Compile the Triton kernels for an H100/H200 (sm_90) on a machine without a GPU.

The CPU tests run the kernels interpreted, which does not type-check or lower them: a kernel can
pass every interpreted test and still fail to compile on the GPU. Triton's own compiler (frontend,
TTGIR, PTX and the bundled ptxas) needs no device, so this compiles to a cubin:
- every kernel of `kernels/posterior.py`, `kernels/posterior_split.py` and `kernels/posterior_pool.py` in each of its switch
  variants (tie order, per-row tail, top-k floor units of 256 and 32 tokens) with the constexprs
  of V=151936 (a table here);
- with `--launches FILE`, every launch that `scripts/dev/record_launches.py` recorded from interpreted
  tests: the argument types and constexprs the other kernels' launchers really pass.
Run without TRITON_INTERPRET (the kernels must be JIT functions).

usage: python -m scripts.dev.compile_kernels_sm90 [--launches FILE] [--json]   (exit 1 if any fails)
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import json
import os
import sys
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import posterior, posterior_pool, posterior_split

TARGET = GPUTarget("cuda", 90, 32)
# pointer arguments that are not fp32; scalars are int32 (the launchers pass ints)
POINTERS = {"logits_ptr": "*bf16", "out_ptr": "*i64", "topk_ptr": "*i64", "seed_ptr": "*i64", "pos_ptr": "*i64",
            "barg_ptr": "*i32", "istate_ptr": "*i32", "cnt_ptr": "*i32", "pi_ptr": "*i32", "pn_ptr": "*i32",
            "pooled_ptr": "*i32", "list_ptr": "*i32", "count_ptr": "*i32"}
# the launchers' constexprs at V = 151936 (block 2048)
CONSTEXPRS = {"BLOCK": 2048, "NBP": 128, "NC": posterior.CUTS, "KC": posterior.TOP_K_CUTS, "PC": posterior.TOP_P_CUTS,
              "SPAN": posterior.SPAN, "BPP": posterior_split.BLOCKS_PER_PROGRAM, "POOL": posterior.POOL,
              "CH": posterior_pool.POOL_CHUNK}
VARIANTS = {"INDEX_TIES": (False, True), "SEQUENTIAL": (False, True), "LISTED": (False, True)}
SWITCHES = (*VARIANTS, "UNIT")  # the constexprs a variant's report names
# the top-k floor's units: the default, and units finer than a span (the mass pass's other branch);
# UP: the per-node kernel's unit maxima per row, a power of two
UNITS = ({"UNIT": posterior.UNIT, "UP": 1024}, {"UNIT": 32, "UP": 8192})
KERNELS = (posterior._posterior_kernel, posterior_split._stats_kernel, posterior_split._floor_kernel,
           posterior_split._mass_kernel, posterior_split._start_kernel, posterior_split._check_kernel,
           posterior_split._finish_kernel, posterior_pool._pool_pass_kernel)


def variants(fn) -> list[dict]:
    """Every combination of the kernel's switch constexprs and units, with its fixed ones."""
    names = list(inspect.signature(fn.fn).parameters)
    fixed = {k: v for k, v in CONSTEXPRS.items() if k in names}
    switches = [k for k in VARIANTS if k in names]
    units = [{k: v for k, v in u.items() if k in names} for u in UNITS] if "UNIT" in names else [{}]
    return [dict(fixed, **unit, **dict(zip(switches, combo)))
            for unit in units for combo in itertools.product(*(VARIANTS[k] for k in switches))]


def table_signature(fn, consts: dict) -> dict:
    """The posterior table's argument types: POINTERS, other pointers fp32, scalars int32."""
    return {n: "constexpr" if n in consts else POINTERS.get(n, "*fp32") if n.endswith("_ptr") else "i32"
            for n in inspect.signature(fn.fn).parameters}


def compile_one(fn, sig: dict, consts: dict, options: dict | None = None) -> int:
    """Bytes of the cubin; raises on a compile error."""
    kernel = triton.compile(ASTSource(fn, sig, constexprs=consts), target=TARGET,
                            options={"num_warps": 4, **(options or {})})
    return len(kernel.asm["cubin"])


def _attempt(row: dict, fn, sig: dict, consts: dict, options: dict | None = None) -> dict:
    try:
        return dict(row, ok=True, cubin_bytes=compile_one(fn, sig, consts, options))
    except Exception as exc:  # noqa: BLE001  (any compiler error is this variant's result)
        return dict(row, ok=False, error=f"{type(exc).__name__}: {exc}")


def recorded(path: Path) -> list[dict]:
    """Compile results of the launches in a `scripts/dev/record_launches.py` file."""
    rows = []
    for launch in json.loads(path.read_text()):
        fn = getattr(importlib.import_module(launch["module"]), launch["kernel"])
        consts = {k: tuple(v) if isinstance(v, list) else v for k, v in launch["constexprs"].items()}
        rows.append(_attempt({"kernel": launch["kernel"], "recorded": True}, fn, launch["signature"], consts,
                             launch["options"]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=Path, help="a scripts/dev/record_launches.py file: compile those launches too")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: interpreted kernels cannot be compiled")
    rows = []
    for fn in KERNELS:
        for consts in variants(fn):
            switch = {k: consts[k] for k in SWITCHES if k in consts}
            rows.append(_attempt({"kernel": fn.fn.__name__, **switch}, fn, table_signature(fn, consts), consts))
    if args.launches:
        rows += recorded(args.launches)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            switch = " ".join(f"{k}={r[k]}" for k in SWITCHES if k in r)
            switch += " (recorded)" if r.get("recorded") else ""
            print(f"{'OK  ' if r['ok'] else 'FAIL'} {r['kernel']} {switch} "
                  f"{r.get('cubin_bytes', '')}{r.get('error', '')[:2000]}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
