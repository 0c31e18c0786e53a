"""Compile, on this machine (nvcc, no GPU), the FlashInfer JIT modules that SGLang's flashinfer paths
load, so a gpurig bundle carries them compiled (scripts/rig/flashinfer.py --aot) and the GPU
machine compiles nothing.

    python -m scripts.rig.flashinfer_aot_build ~/.cache/ddtree-patch/flashinfer-aot/0.6.12-90a --head-dim 64
    python -m scripts.rig.flashinfer .gpurig-fi --aot ~/.cache/ddtree-patch/flashinfer-aot/0.6.12-90a \\
        $(python -m scripts.rig.flashinfer_aot_build --list --head-dim 64) --no-headers --seed quantization.cu

Which modules (FlashInfer 0.6.12, SGLang 0.5.15 with sglang-kernel 0.4.4, bf16, sm90), and why:
- per head dim: batch prefill fa2 (paged prefill and the speculative verify, custom mask; also the
  tensor-core decode SGLang uses at GQA group >= 4), batch prefill fa3 (ragged prefill: backend
  "auto" is fa3 on sm90 without a custom mask), batch decode (GQA group < 4);
- cascade (merge_state: an extend over a cached prefix), quantization (segment_packbits: the plan
  packs a custom mask), norm (sgl_kernel's rmsnorm / fused_add_rmsnorm call FlashInfer's when it
  imports: seen on the H200, 2026-12-02, every engine failed compiling it), sampling (sgl_kernel's
  renorm helpers do the same).
This machine's CUDA 13.0 toolkit lacks curand and cuBLAS headers and a driver: their headers come
from the nvidia-curand / nvidia-cublas wheels (downloaded once into --cache-dir) and the link takes
an empty stand-in libcuda.so (the modules do not link against it: --as-needed). Needs a Python with
torch (--python; CPU torch is enough), nvcc on PATH and gcc. Compiling fa3 takes ~6 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

FLASHINFER = "0.6.12"
ARCH = "9.0a"
# (label, generator call) per module; {hd} is the head dim. Names come from FlashInfer itself.
PER_HEAD_DIM = {
    "fa2": "gen_batch_prefill_module('fa2', bf, bf, bf, i32, {hd}, {hd}, 0, False, False, False)",
    "fa3": "gen_batch_prefill_module('fa3', bf, bf, bf, i32, {hd}, {hd}, 0, False, False, False)",
    "decode": "gen_batch_decode_module(bf, bf, bf, i32, {hd}, {hd}, 0, False, False)",
}
SHARED = {"cascade": "gen_cascade_module()", "quantization": "gen_quantization_module()",
          "norm": "gen_norm_module()", "sampling": "gen_sampling_module()"}
IMPORTS = ("import torch\n"
           "from flashinfer.jit.attention.modules import gen_batch_prefill_module, gen_batch_decode_module\n"
           "from flashinfer.jit.cascade import gen_cascade_module\n"
           "from flashinfer.jit.quantization import gen_quantization_module\n"
           "from flashinfer.jit.norm import gen_norm_module\n"
           "from flashinfer.jit.sampling import gen_sampling_module\n"
           "bf, i32 = torch.bfloat16, torch.int32\n")
HEADER_WHEELS = {"nvidia-curand": "nvidia/cu13/include", "nvidia-cublas": "nvidia/cu13/include"}


def calls(head_dims: list[int]) -> dict[str, str]:
    """label -> generator call, for these head dims plus the shared modules."""
    out = {f"{k}_hd{hd}": v.format(hd=hd) for hd in head_dims for k, v in PER_HEAD_DIM.items()}
    return out | SHARED


def child(py: str, env: dict, code: str) -> str:
    """Run code in py; its stdout, or exit with the end of its stderr."""
    r = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"compile step failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def pip_download(spec: str, cache: Path, py: str) -> Path:
    """The wheel for spec in cache (pip download --no-deps once), for the interpreter py."""
    name = spec.split("=")[0].split("<")[0].split(">")[0].replace("-", "_").lower()
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(name + "-"))
    if not found:
        subprocess.run([py, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), spec], check=True)
        found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(name + "-"))
    return found[-1]


def cuda_toolkit() -> Path:
    """$CUDA_HOME, else /usr/local/cuda, else the folder above nvcc's bin (nvcc may be a wrapper script)."""
    for cand in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if cand and (Path(cand) / "bin" / "nvcc").exists():
            return Path(cand)
    nvcc = shutil.which("nvcc")
    if not nvcc:
        raise SystemExit("no CUDA toolkit: set CUDA_HOME or put nvcc on PATH")
    return Path(os.path.realpath(nvcc)).parents[1]


def prepare(work: Path, cache: Path, py: str) -> dict:
    """A site with the full FlashInfer and its import-time needs, the extra headers, a stand-in
    libcuda.so; returns the environment the compile runs in."""
    site, inc, lib = work / "site", work / "include", work / "lib"
    if not (site / "flashinfer").is_dir():
        wheels = [pip_download(f"flashinfer_python=={FLASHINFER}", cache, py)]
        wheels += [pip_download(s, cache, py) for s in ("apache-tvm-ffi>=0.1.6,<0.2", "nvidia-ml-py", "tabulate")]
        subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), *map(str, wheels)],
                       check=True)
    for spec, member in HEADER_WHEELS.items():
        whl = pip_download(f"{spec}>=10", cache, py)
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if n.startswith(member + "/") and not n.endswith("/"):
                    dst = inc / n[len(member) + 1:]
                    if not dst.exists():
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        dst.write_bytes(z.read(n))
    lib.mkdir(parents=True, exist_ok=True)
    if not (lib / "libcuda.so").exists():
        subprocess.run(["gcc", "-shared", "-o", str(lib / "libcuda.so"), "-x", "c", "/dev/null"], check=True)
    cuda_home = cuda_toolkit()
    return dict(os.environ, PYTHONPATH=str(site), FLASHINFER_CUDA_ARCH_LIST=ARCH, CUDA_HOME=str(cuda_home),
                PATH=f"{cuda_home / 'bin'}:{os.environ['PATH']}", FLASHINFER_WORKSPACE_BASE=str(work / "ws"),
                FLASHINFER_EXTRA_LDFLAGS=f"-L{lib}", FLASHINFER_EXTRA_CUDAFLAGS=f"-isystem {inc}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path, nargs="?", help="written as OUT_DIR/NAME/NAME.so (FlashInfer's layout)")
    ap.add_argument("--head-dim", type=int, nargs="+", default=[64], help="attention head dims (tiny models: 64)")
    ap.add_argument("--only", nargs="+", help=f"labels to build, of {sorted(calls([64]))} (hd64 shown)")
    ap.add_argument("--list", action="store_true", help="print `--module NAME` for every module and stop")
    ap.add_argument("--python", default=sys.executable, help="interpreter with torch (default: this one)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="ninja jobs (MAX_JOBS)")
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache/ddtree-patch/flashinfer-build")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache/ddtree-patch/wheels")
    a = ap.parse_args()
    todo = {k: v for k, v in calls(a.head_dim).items() if not a.only or k in a.only}
    if a.only and set(a.only) - set(todo):
        raise SystemExit(f"unknown labels {sorted(set(a.only) - set(todo))}")
    a.cache_dir.mkdir(parents=True, exist_ok=True)
    env = dict(prepare(a.work, a.cache_dir, a.python), MAX_JOBS=str(a.jobs))
    names = json.loads(child(a.python, env, IMPORTS + "import json\nprint(json.dumps({"
                             + ", ".join(f"{k!r}: {v}.name" for k, v in todo.items()) + "}))"))
    if a.list:
        print(" ".join(f"--module {n}" for n in names.values()))
        return 0
    if a.out_dir is None:
        raise SystemExit("OUT_DIR is needed unless --list")
    for label, call in todo.items():
        name = names[label]
        dst = a.out_dir / name / f"{name}.so"
        if dst.exists():
            print(f"[aot] {label}: {name} already built")
            continue
        print(f"[aot] {label}: compiling {name} ...", flush=True)
        so = child(a.python, env, IMPORTS + f"s = {call}\ns.build(verbose=False)\nprint(s.jit_library_path)").strip()
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, dst)
        print(f"[aot] {label}: {dst.stat().st_size} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
