"""Put a slimmed FlashInfer wheel into a gpurig bundle, so SGLang can run `--attention-backend flashinfer`.

    python -m scripts.rig.flashinfer .gpurig-fi            # pin from the bundle's sglang wheel
    python -m scripts.rig.flashinfer .gpurig --dry-run     # only report sizes
    python -m scripts.rig.flashinfer .gpurig --wheel ~/.cache/ddtree-patch/wheels/flashinfer_python-0.6.12-py3-none-any.whl
    python -m scripts.rig.flashinfer .gpurig-fi --aot ~/.cache/ddtree-patch/flashinfer-aot/0.6.12-90a \
        $(python -m scripts.rig.flashinfer_aot_build --list) --no-headers --seed quantization.cu   # what ran on the H200

--aot/--module put modules compiled ahead of time (scripts/rig/flashinfer_aot_build.py) into the wheel's
data/aot, where FlashInfer loads a module instead of compiling it; --no-headers then keeps only the
data/csrc files the module generators read (they read them even for an AOT module), so nothing can
compile on the GPU machine and the wheel stays small enough to travel (docs/gpu-check.md, FlashInfer).

The flashinfer_python version comes from the `Requires-Dist: flashinfer_python...==X` line of the
bundle's sglang wheel; that wheel is downloaded once with pip (--no-deps) into --cache-dir. The copy
written to <bundle>/whl (version X+slim) keeps all Python files but, of the C++/CUDA tree under
flashinfer/data (csrc, include, cutlass, cccl, spdlog), only the #include closure of the sources
that SGLang's flashinfer attention backend JIT-compiles (SEEDS: batch prefill fa2 and fa3/sm90,
batch decode, cascade merge_state; --seed adds more data/csrc files). Includes are resolved against
every JIT include dir, conditional #include and __has_include lines count, CUTLASS's
CUDA_STD_HEADER(x) counts as <cuda/std/x>, and a reached file with any other macro #include keeps its
whole top-level header package. CCCL stays (only the closure): FlashInfer 0.6.12 needs CCCL >= 3.1
(cuda::fast_mod_div), newer than CUDA 13.0's own 3.0, and its -I copy takes precedence over the
toolkit's. Other FlashInfer JIT modules (sampling, norm, gemm, MoE, ...) are not compilable from
the slimmed wheel unless their sources are seeded. Then <bundle>/stubs/flashinfer (the stand-in that
raises) is removed. The bundle is left unchanged (exit 1) when bundle + checkout would exceed --limit.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

LIMIT = 67_108_864  # what travels to the GPU machine: checkout + bundle
CHECKOUT = 1_572_864  # allowance for the checkout where git cannot say (it was 2.2 MB on 2026-12-03)
REPO = Path(__file__).resolve().parents[2]
DATA = "flashinfer/data/"
# include dirs the JIT passes (flashinfer/jit/cpp_ext.py: -I CCCL, then -isystem), inside the wheel
INCLUDE_DIRS = (
    DATA + "cccl/cub",
    DATA + "cccl/libcudacxx/include",
    DATA + "cccl/thrust",
    DATA + "include",
    DATA + "csrc",
    DATA + "cutlass/include",
    DATA + "cutlass/tools/util/include",
    DATA + "spdlog/include",
)
# data/csrc files the generators open for SGLang's flashinfer attention backend
# (flashinfer/jit/attention/modules.py gen_customize_batch_{prefill,decode}_module, jit/cascade.py)
SEEDS = (
    "batch_prefill_customize_config.jinja", "batch_prefill_paged_kernel_inst.jinja",
    "batch_prefill_ragged_kernel_inst.jinja", "batch_prefill.cu", "batch_prefill_jit_binding.cu",
    "batch_prefill_sm90_customize_config.jinja", "batch_prefill_paged_sm90_kernel_inst.jinja",
    "batch_prefill_ragged_sm90_kernel_inst.jinja", "batch_prefill_sm90.cu", "batch_prefill_sm90_jit_binding.cu",
    "batch_prefill_fp8_paged_sm90_kernel_inst.jinja", "batch_prefill_fp8_ragged_sm90_kernel_inst.jinja",
    "batch_prefill_fp8_sm90.cu",
    "batch_decode_customize_config.jinja", "batch_decode_kernel_inst.jinja", "batch_decode.cu",
    "batch_decode_jit_binding.cu",
    "cascade.cu", "flashinfer_cascade_binding.cu",
)
# Python files whose generated C++ carries #include lines (variant_decl strings)
GENERATORS = ("flashinfer/jit/attention/modules.py", "flashinfer/jit/attention/variants.py", "flashinfer/jit/cascade.py")
INCLUDE_RE = re.compile(rb'(?:^[ \t]*#[ \t]*include|__has_include)[ \t]*\(?[ \t]*[<"]([^>"\n]+)[>"]', re.M)
STD_HEADER_RE = re.compile(rb"^[ \t]*#[ \t]*include[ \t]+CUDA_STD_HEADER\(([^)\s]+)\)", re.M)
MACRO_INCLUDE_RE = re.compile(rb"^[ \t]*#[ \t]*include[ \t]+(?!CUDA_STD_HEADER\()[A-Za-z_]", re.M)
PY_INCLUDE_RE = re.compile(rb'#\s*include\s*[<"]([^>"\n{}]+)[>"]')
PIN_RE = re.compile(r"^Requires-Dist:\s*flashinfer[-_]python(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)", re.M | re.I)


def checkout_bytes(repo: Path = REPO) -> int:
    """Bytes of what the device call copies from the checkout: tracked files and untracked ones git
    does not ignore (CHECKOUT where git cannot list them)."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return CHECKOUT
    return sum((repo / name).stat().st_size for name in out.decode().split("\0") if name and (repo / name).is_file())


def tree_bytes(path: Path) -> int:
    """Apparent size of a tree, counted like `du -sb` (files, links and directories)."""
    if not path.exists():
        return 0
    total = path.lstat().st_size
    for p in path.rglob("*"):
        total += p.lstat().st_size
    return total


def flashinfer_pin(bundle: Path) -> str:
    """The flashinfer_python version pinned by the bundle's sglang wheel."""
    wheels = sorted((bundle / "whl").glob("sglang-*.whl"))
    if not wheels:
        raise SystemExit(f"no sglang-*.whl in {bundle / 'whl'}")
    with zipfile.ZipFile(wheels[0]) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        m = PIN_RE.search(z.read(meta).decode())
    if not m:
        raise SystemExit(f"{wheels[0].name}: no flashinfer_python==X requirement")
    return m.group(1)


def fetch_wheel(version: str, cache: Path) -> Path:
    """flashinfer_python==version from the cache folder, downloading it with pip if missing."""
    name = f"flashinfer_python-{version}-py3-none-any.whl"
    if not (cache / name).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "-d", str(cache), f"flashinfer_python=={version}"]
        subprocess.run(cmd, check=True)
    if not (cache / name).is_file():
        raise SystemExit(f"pip did not produce {cache / name}")
    return cache / name


def data_closure(files: dict[str, bytes], seeds: list[str]) -> tuple[set[str], list[str]]:
    """Files under flashinfer/data reached by #include from the seed sources, and notes on macro includes."""
    def resolve(cur: str, name: str) -> list[str]:
        found = [posixpath.normpath(posixpath.join(b, name)) for b in (posixpath.dirname(cur), *INCLUDE_DIRS)]
        return [f for f in dict.fromkeys(found) if f in files]

    def package(cur: str) -> list[str]:
        """Every file of cur's top-level header package (e.g. all of cccl/thrust/thrust/)."""
        root = max((d for d in INCLUDE_DIRS if cur.startswith(d + "/")), key=len, default=posixpath.dirname(cur))
        top = root + "/" + cur[len(root) + 1:].split("/")[0] + "/"
        return [f for f in files if f.startswith(top)] if "/" in cur[len(root) + 1:] else [cur]

    todo = [DATA + "csrc/" + s for s in seeds]
    for gen in GENERATORS:  # #include lines the Python JIT generators write out
        for name in PY_INCLUDE_RE.findall(files.get(gen, b"")):
            todo += resolve(DATA + "include/x", name.decode())
    seen: set[str] = set()
    notes: list[str] = []
    while todo:
        cur = todo.pop()
        if cur in seen:
            continue
        seen.add(cur)
        text = files[cur]
        names = [n.decode() for n in INCLUDE_RE.findall(text)]
        names += ["cuda/std/" + n.decode() for n in STD_HEADER_RE.findall(text)]
        for name in names:
            todo += [h for h in resolve(cur, name) if h not in seen]
        if MACRO_INCLUDE_RE.search(text):
            pkg = package(cur)
            notes.append(f"{cur[len(DATA):]}: macro #include, kept its package ({len(pkg)} files)")
            todo += [h for h in pkg if h not in seen]
    return seen, notes


def record_row(name: str, data: bytes) -> list[str]:
    """One RECORD row (PEP 376 / wheel spec): name, hash, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def record_text(rows: list[list[str]], record: str) -> str:
    """The RECORD file: the rows, then RECORD's own hashless row, as csv (pip reads it with the csv
    module, so a name with a comma, such as SGLang's MoE tuning configs, must be quoted)."""
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows([*rows, [record, "", ""]])
    return text.getvalue()


def aot_modules(cache: Path, names: list[str]) -> dict[str, bytes]:
    """Compiled JIT modules (cache/NAME/NAME.so, FlashInfer's cached_ops layout) as wheel members
    under data/aot/, where FlashInfer loads a module instead of compiling it (jit/core.py is_aot)."""
    out = {}
    for name in names:
        so = cache / name / f"{name}.so"
        if not so.is_file():
            raise SystemExit(f"no compiled module {so}")
        out[f"{DATA}aot/{name}/{name}.so"] = so.read_bytes()
    return out


def slim_wheel(src: Path, outdir: Path, seeds: list[str], aot: dict[str, bytes] | None = None,
               generator_inputs_only: bool = False) -> tuple[Path, list[str]]:
    """Write the slimmed copy of src into outdir (plus the `aot` members); return its path and
    summary lines. generator_inputs_only: keep the seed files alone, not the headers they include
    (the module generators read the seeds; with no headers only the AOT modules can load)."""
    with zipfile.ZipFile(src) as zin:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        files = {i.filename: zin.read(i) for i in infos}
    missing = [s for s in seeds if DATA + "csrc/" + s not in files]
    if missing:
        raise SystemExit(f"{src.name} lacks data/csrc/{missing}: this FlashInfer is not the one SEEDS was read from")
    ver = re.match(r"flashinfer_python-([^-]+)-", src.name).group(1)  # type: ignore[union-attr]
    slim = f"{ver}+slim"
    if generator_inputs_only:  # the generators read these even when they then load an AOT module
        reached, notes = {DATA + "csrc/" + n for n in seeds}, []
    else:
        reached, notes = data_closure(files, seeds)
    aot = aot or {}

    def keep(name: str) -> bool:
        if not name.startswith(DATA) or name in reached:
            return True
        return "/" not in name[len(DATA):] and name.endswith(".py")  # data/build_backend.py, build_utils.py

    old_di, new_di = f"flashinfer_python-{ver}.dist-info/", f"flashinfer_python-{slim}.dist-info/"
    kept = [i for i in infos if keep(i.filename) and i.filename != old_di + "RECORD"]
    areas: dict[str, int] = {}
    for n in reached:
        area = "/".join(n[len(DATA):].split("/")[:1])
        areas[area] = areas.get(area, 0) + 1
    note = (f"flashinfer_python {ver} slimmed by ddtree-patch scripts/rig/flashinfer.py: of data/ only the "
            f"#include closure of data/csrc/{{{','.join(seeds)}}} is kept ({areas}); compiled modules in "
            f"data/aot: {sorted(n.split('/')[-1] for n in aot)}.\n").encode()
    out = outdir / src.name.replace(f"-{ver}-", f"-{slim}-")
    records: list[list[str]] = []
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        def put(name: str, data: bytes, like: zipfile.ZipInfo | None) -> None:
            zi = zipfile.ZipInfo(name, date_time=like.date_time if like else (2020, 1, 1, 0, 0, 0))
            zi.external_attr = like.external_attr if like else 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(zi, data)
            records.append(record_row(name, data))
        for info in (i for i in kept if not i.filename.startswith(old_di)):
            put(info.filename, files[info.filename], info)
        put(DATA + "SLIMMED.txt", note, None)
        for name, data in sorted(aot.items()):
            put(name, data, None)
        for info in (i for i in kept if i.filename.startswith(old_di)):  # dist-info last
            data = files[info.filename]
            if info.filename.endswith("/METADATA"):
                data = data.replace(f"\nVersion: {ver}\n".encode(), f"\nVersion: {slim}\n".encode(), 1)
            put(new_di + info.filename[len(old_di):], data, info)
        zout.writestr(new_di + "RECORD", record_text(records, new_di + "RECORD"))
    lines = [f"{out.name}: {out.stat().st_size} bytes (from {src.stat().st_size}); kept {len(kept)} of "
             f"{len(infos)} files; data/ closure by area: {dict(sorted(areas.items()))}; "
             f"{len(aot)} AOT modules ({sum(map(len, aot.values()))} bytes before compression)"] + notes
    return out, lines


def main() -> int:
    """Slim the pinned FlashInfer wheel into the bundle, or refuse when it would not fit."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("bundle", type=Path, help="gpurig bundle folder (holds whl/ and stubs/)")
    ap.add_argument("--wheel", type=Path, help="use this flashinfer_python wheel instead of the pinned download")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache/ddtree-patch/wheels",
                    help="where the full wheel is downloaded (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=LIMIT, help="bytes allowed for bundle + checkout (%(default)s)")
    ap.add_argument("--checkout-bytes", type=int, default=None,
                    help="bytes reserved for the checkout (default: what git lists in this checkout)")
    ap.add_argument("--seed", action="append", default=[], metavar="CSRC_FILE",
                    help="one more data/csrc file whose #include closure to keep (repeatable)")
    ap.add_argument("--aot", type=Path, metavar="CACHED_OPS",
                    help="a FlashInfer JIT cache's cached_ops folder: put its --module .so files into the wheel's "
                         "data/aot, so the GPU machine loads them instead of compiling")
    ap.add_argument("--module", action="append", default=[], help="module name under --aot (repeatable)")
    ap.add_argument("--no-headers", action="store_true",
                    help="keep only the data/csrc files the module generators read, not the headers they include "
                         "(then only the --aot modules can load; nothing compiles)")
    ap.add_argument("--dry-run", action="store_true", help="report sizes, change nothing")
    args = ap.parse_args()
    bundle: Path = args.bundle.resolve()
    if not (bundle / "whl").is_dir():
        raise SystemExit(f"{bundle} has no whl/ folder")
    version = flashinfer_pin(bundle)
    src = args.wheel or fetch_wheel(version, args.cache_dir)
    if f"-{version}-" not in src.name:
        raise SystemExit(f"{src.name} is not flashinfer_python {version} (the sglang pin)")
    with tempfile.TemporaryDirectory(prefix="gpurig-fi-") as tmp:
        if args.module and not args.aot:
            raise SystemExit("--module needs --aot")
        aot = aot_modules(args.aot, args.module) if args.aot else {}
        out, summary = slim_wheel(src, Path(tmp), [*SEEDS, *args.seed], aot, generator_inputs_only=args.no_headers)
        print("\n".join(summary))
        old = sorted((bundle / "whl").glob("flashinfer_python-*.whl"))
        stub = bundle / "stubs" / "flashinfer"
        before = tree_bytes(bundle)
        after = before - sum(w.stat().st_size for w in old) - tree_bytes(stub) + out.stat().st_size
        checkout = checkout_bytes() if args.checkout_bytes is None else args.checkout_bytes
        total = after + checkout
        print(f"bundle {bundle.name}: {before} -> {after} bytes; + checkout {checkout} = {total} "
              f"(limit {args.limit}, headroom {args.limit - total})")
        if total > args.limit:
            print("refusing: the bundle would not fit; nothing changed", file=sys.stderr)
            return 1
        if args.dry_run:
            return 0
        for w in old:
            w.unlink()
        shutil.copy2(out, bundle / "whl" / out.name)
        if stub.exists():
            shutil.rmtree(stub)
    print(f"bundle size now {tree_bytes(bundle)} bytes; on the GPU machine: rm -rf /tmp/site, source "
          "scripts/env.sh, then export SGLANG_IS_FLASHINFER_AVAILABLE=true")
    return 0


if __name__ == "__main__":
    sys.exit(main())
