"""Drop packages an LLM engine never imports from a gpurig bundle's sglang wheel, so the bundle fits.

    python -m scripts.rig.slim_sglang .gpurig-0.5.13            # drop DROP, rewrite the wheel in place
    python -m scripts.rig.slim_sglang .gpurig-0.5.11 --dry-run  # only report sizes

A device call carries checkout + bundle in 64 MiB. The 0.5.11 and 0.5.13 bundles exceed it (0.5.13's
wheel holds a 2.8 MB gRPC extension, both the diffusion runtime `multimodal_gen`). Nothing under
DROP is imported by `sglang.Engine` or `launch_server` for a text model (checked by grep on 0.5.13:
no module outside sglang/srt/grpc imports it; multimodal_gen is the separate diffusion entry point).
The wheel keeps its name and version (ddtree-patch reads the release from its metadata); only the
dropped members and their RECORD rows go, and a note in the dist-info says what was dropped.
Running it again on a slimmed wheel drops nothing more and writes the same wheel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.rig.flashinfer import LIMIT, checkout_bytes, tree_bytes
from scripts.rig.wheel import rewrite

DROP = ("sglang/multimodal_gen/", "sglang/srt/grpc/")
NOTE = "DDTREE_PATCH_SLIMMED"


def sglang_wheel(bundle: Path) -> Path:
    wheels = sorted((bundle / "whl").glob("sglang-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"{bundle}/whl holds {len(wheels)} sglang wheels, expected 1")
    return wheels[0]


def slim(src: Path, out: Path, drop: tuple[str, ...] = DROP) -> tuple[int, int]:
    """Write src without the members under `drop` to out; return (members dropped, bytes dropped)."""
    note = ("dropped by ddtree-patch scripts/rig/slim_sglang.py (not imported by a text-model "
            f"engine): {', '.join(drop)}\n").encode()
    gone = rewrite(src, out, lambda name: name.startswith(drop), NOTE, note)
    return len(gone), sum(i.file_size for i in gone)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--dry-run", action="store_true", help="write the slim wheel beside, report, keep the bundle")
    ap.add_argument("--drop", action="append", default=[], metavar="PREFIX",
                    help="also drop wheel members under PREFIX (a release's '#drop' line, scripts/gpurig_compat.sh)")
    a = ap.parse_args()
    src = sglang_wheel(a.bundle)
    tmp = src.with_name(src.name + ".slim")
    bundle_bytes = tree_bytes(a.bundle)
    n, size = slim(src, tmp, DROP + tuple(a.drop))
    before, after = src.stat().st_size, tmp.stat().st_size
    total = bundle_bytes - before + after + checkout_bytes()
    print(f"{src.name}: dropped {n} files ({size} bytes unpacked); wheel {before} -> {after} bytes; "
          f"bundle + checkout allowance {total} of {LIMIT}")
    if a.dry_run:
        tmp.unlink()
        return 0
    tmp.replace(src)
    return 0 if total <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
