"""Per-round cost of the DDTree kernels on one GPU: stages, side-by-side ratios, a CPU reference.

Sections (`--sections`, all by default), one module each beside this one, whose docstring says what
it measures: topk and topk-tune (topk.py), scan, build, mask, move, posterior, posterior-tune and
posterior-profile (posterior.py), penalties, head, gemm, round; timing.py says how a figure is taken.

    python -m scripts.bench.kernels --json bench.json
    python -m scripts.bench.kernels --device cpu --vocab 3000 --batch 2 --topk-k 8 --budget 8 \
        --build-budget 8 16 --samples 2 --replays 1 --layers 2   # smoke run (TRITON_INTERPRET=1)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

def _asks_for_cpu(argv: list[str]) -> bool:
    """`--device cpu` or `--device=cpu` among the arguments (read before argparse: see below)."""
    at = argv.index("--device") if "--device" in argv else -1
    return "--device=cpu" in argv or (0 <= at < len(argv) - 1 and argv[at + 1] == "cpu")


if _asks_for_cpu(sys.argv):
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402

from scripts.bench.kernels.build import bench_build  # noqa: E402
from scripts.bench.kernels.gemm import bench_gemm, gemm_tiles  # noqa: E402
from scripts.bench.kernels.head import bench_head  # noqa: E402
from scripts.bench.kernels.mask import bench_mask  # noqa: E402
from scripts.bench.kernels.move import bench_move  # noqa: E402
from scripts.bench.kernels.penalties import bench_penalties  # noqa: E402
from scripts.bench.kernels.posterior import (PROFILE_CASES, bench_posterior, bench_posterior_profile,  # noqa: E402
                                             bench_posterior_tune)
from scripts.bench.kernels.round import bench_round  # noqa: E402
from scripts.bench.kernels.scan import bench_scan  # noqa: E402
from scripts.bench.kernels.timing import Timer  # noqa: E402
from scripts.bench.kernels.topk import bench_topk, bench_topk_tune  # noqa: E402


SECTIONS: dict[str, Callable[[argparse.Namespace, Timer], list[dict]]] = {
    "topk": bench_topk, "topk-tune": bench_topk_tune, "scan": bench_scan, "build": bench_build, "mask": bench_mask,
    "move": bench_move,
    "posterior": bench_posterior, "posterior-tune": bench_posterior_tune,
    "posterior-profile": bench_posterior_profile, "penalties": bench_penalties,
    "head": bench_head, "gemm": bench_gemm, "round": bench_round,
}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.bench.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--depth", type=int, default=15)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--topk-k", type=int, nargs="+", default=[64])
    parser.add_argument("--budget", type=int, nargs="+", default=[16, 64], help="mask, move and round sections")
    parser.add_argument("--build-budget", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--prefix", type=int, default=1024, help="prefix length of every request (mask width)")
    parser.add_argument("--rows", type=int, default=16, help="tree nodes per request (posterior section)")
    parser.add_argument("--tune", nargs="+", default=["launch", "cuts"], choices=["launch", "cuts", "pool"],
                        help="posterior-tune's knob groups")
    parser.add_argument("--profile-cases", nargs="+", default=list(PROFILE_CASES), choices=list(PROFILE_CASES),
                        help="the posterior-profile section's cases")
    parser.add_argument("--hidden", type=int, default=4096, help="head section: the draft features' width")
    parser.add_argument("--head-chunks", type=int, nargs="+", default=[4, 8, 16], help="head section: chunk counts")
    parser.add_argument("--gemm-tiles", nargs="+", default=["128x256x64w8s4", "128x256x64w8s3t", "128x256x64w8s4t",
                                                            "128x128x64w8s4t", "64x128x64w4s4"],
                        type=lambda spec: gemm_tiles(spec) and spec,  # a bad spec fails before any section runs
                        help="gemm section: Triton tile sets, BMxBNxBKwWARPSsSTAGES, a trailing t: the persistent "
                             "descriptor (TMA) kernel")
    parser.add_argument("--round-head-chunks", type=int, default=8, help="round section: the chunked head's chunks")
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--samples", type=int, default=11)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    timer = Timer(args.device, args.samples, args.replays)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (Triton interpreter)"
    import triton

    meta = {"device": name, "torch": torch.__version__, "triton": triton.__version__, "args": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
    print(f"# {name}, torch {torch.__version__}, triton {triton.__version__}; samples={args.samples} x "
          f"replays={args.replays}")
    results: dict[str, object] = {"meta": meta}
    failed = []
    for section in args.sections:
        t0 = time.perf_counter()
        try:
            results[section] = SECTIONS[section](args, timer)
        except Exception:  # report the others; the exit status says one failed
            traceback.print_exc()
            failed.append(section)
            results[section] = {"error": traceback.format_exc()}
        print(f"({section}: {time.perf_counter() - t0:.0f} s)", flush=True)
        if args.json:  # after every section: a run cut short keeps what it measured
            args.json.write_text(json.dumps(results, indent=1))
    if failed:
        print(f"FAILED sections: {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
