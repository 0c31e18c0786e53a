"""SGLang's Triton target-verify attention, causal (DFLASH) vs custom tree mask (DDTREE), per layer.

Calls the installed SGLang's own `extend_attention_fwd` (never a copy) the way its Triton backend
does in target verify (docs/verify-attention.md has the line references): `qo_indptr` in steps of
the verify width, `kv_indptr`/`kv_indices` over the prefix only, the new tokens' K/V passed apart,
`is_causal=True`, `max_len_extend` = the width, and with a mask the request-packed
`[width, prefix + width]` layout and `mask_indptr` over it. The prefix columns of every mask are
0: the kernel's default `skip_prefix_custom_mask=True` must not read them (DDTree's
`prefix_ones=False` relies on that), so a kernel that did would fail the check.

Variants, interleaved sample by sample (each sample's variant order shuffled):
- causal: no mask (what DFLASH verifies);
- chain_mask: a mask that is exactly causal (a chain tree) through the custom-mask path;
- tree_mask: a best-first tree (a main chain with side branches) as DDTree builds it;
  both uint8, the dtype of the backend's CUDA-graph mask buffer, which is what replays read;
- tree_mask_bool: the same tree as a bool mask (what an eager, graph-less verify passes);
- tree_split: exact decomposition with flags SGLang's kernel has (the DCP path uses them): prefix
  without a mask (`skip_extend`, LSE out) + tree part with the mask (`skip_prefix`, LSE out),
  merged with SGLang's `merge_state_triton`;
- causal@CFG / tree_mask@CFG: SGLang's kernel with other block sizes / warps / stages
  (`--configs`, e.g. M16N64w4s1), set by wrapping its block-size function and launcher for the
  call: the extend is 16 rows, the Hopper choice is a 128-row tile.

Every variant's output is checked against a float32 torch reference (max |err|); the exit status
is 1 if any is wrong. On CUDA each variant is captured in a CUDA graph of `--layers` calls (one
per layer, each with its own KV pool), a sample is one replay between CUDA events, and the table
gives the median and 10th-90th percentile per call. Tree keys get `--tree-logit-boost` extra
logits (a shared direction in q and the new keys) so that the tree columns carry a sizeable part
of the attention mass even after a 2048-token prefix: a mask error then shows far above bf16
rounding.

    python -m scripts.bench.verify_attention                          # H200: the 8B shape
    TRITON_INTERPRET=1 python -m scripts.bench.verify_attention --device cpu   # correctness smoke
    python -m scripts.bench.verify_attention --compile-report         # regs/spills/SASS, no GPU needed

`--compile-report` compiles the variants for `--arch` (default sm_90) without running them (a
stand-in Triton driver where there is no GPU) and prints registers, spill stack, shared memory
and per-loop SASS counts from the Triton bundle's cuobjdump. `--corrupt-mask` hides the ancestors
of the last node of every request in the masks handed to the kernel (the reference keeps them):
the run must then fail. `--out FILE` also writes the report to FILE.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import importlib
import importlib.util
import inspect
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import statistics
import subprocess
import site
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

REPO = Path(__file__).resolve().parents[2]
STAND_IN_DIR = REPO / "tests" / "cpu_serverargs"  # torchvision / xgrammar stand-ins for CPU venvs

if "--device" in sys.argv and sys.argv.index("--device") + 1 < len(sys.argv) \
        and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported anywhere

import torch  # noqa: E402

from tests.cuda_graph import capture_graph  # noqa: E402

MODULES = (  # where the kernel lives: srt/layers/attention/triton_ops up to 0.5.2x, later sglang/kernels
    "sglang.srt.layers.attention.triton_ops.extend_attention",
    "sglang.kernels.ops.attention.extend_attention",
)
MERGE_MODULES = (
    "sglang.srt.layers.attention.triton_ops.merge_state",
    "sglang.kernels.ops.attention.merge_state",
)
TOLERANCE = {torch.float32: 1e-3, torch.bfloat16: 2e-2, torch.float16: 5e-3}
# Per-depth draft probabilities of the synthetic best-first tree (rank 0 first).
TREE_PROBS = (0.7, 0.2, 0.07, 0.03)


# ----------------------------------------------------------------------------- variants

@dataclass(frozen=True)
class KernelConfig:
    """Block sizes / warps / stages for `_fwd_kernel`; None fields keep SGLang's choice."""

    block_m: Optional[int] = None
    block_n: Optional[int] = None
    warps: Optional[int] = None
    stages: Optional[int] = None

    @property
    def label(self) -> str:
        parts = [f"{k}{v}" for k, v in (("M", self.block_m), ("N", self.block_n), ("w", self.warps),
                                         ("s", self.stages)) if v is not None]
        return "".join(parts)


def parse_config(text: str) -> KernelConfig:
    """'M16N64w4s1' (any subset, in this order) -> KernelConfig."""
    match = re.fullmatch(r"(?:M(\d+))?(?:N(\d+))?(?:w(\d+))?(?:s(\d+))?", text)
    if not match or not text:
        raise argparse.ArgumentTypeError(f"bad config {text!r}: expected e.g. M16N64w4s1")
    values = [int(v) if v else None for v in match.groups()]
    if (values[0] is None) != (values[1] is None):
        raise argparse.ArgumentTypeError(f"config {text!r}: give both M and N")
    return KernelConfig(*values)


@dataclass(frozen=True)
class Variant:
    name: str
    mask: str  # "none" | "chain" | "tree"
    mask_dtype: torch.dtype = torch.uint8
    config: KernelConfig = field(default_factory=KernelConfig)
    split: bool = False
    base: Optional[str] = None  # the variant whose output it is compared with, bit for bit

    @property
    def reference_kind(self) -> str:
        return "tree" if self.mask == "tree" else "causal"

    @property
    def compile_key(self) -> tuple:
        """Variants with equal keys run the same compiled kernel."""
        return (self.mask != "none", self.mask_dtype if self.mask != "none" else None, self.config, self.split)


def make_variants(configs: list[KernelConfig], split: bool = True) -> list[Variant]:
    """(a) causal, (b) chain mask, (c) tree mask, then the candidates."""
    out = [
        Variant("causal", "none"),
        Variant("chain_mask", "chain", base="causal"),
        Variant("tree_mask", "tree"),
        Variant("tree_mask_bool", "tree", torch.bool, base="tree_mask"),
    ]
    if split:
        out.append(Variant("tree_split", "tree", split=True, base="tree_mask"))
    for cfg in configs:
        out.append(Variant(f"causal@{cfg.label}", "none", config=cfg, base="causal"))
        out.append(Variant(f"tree_mask@{cfg.label}", "tree", config=cfg, base="tree_mask"))
    return out


# ----------------------------------------------------------------------------- tree and masks

def best_first_parents(n: int, probs: tuple[float, ...] = TREE_PROBS) -> list[int]:
    """Parents of an n-node tree built best-first (DDTree's rule) from the same per-depth draft
    probabilities at every depth: node 0 is the root, parent index < child index."""
    lp = [math.log(p) for p in probs]
    parents, depth = [-1], [0]
    heap = [(-lp[0], 0, 0, 0)]  # (-score, parent, rank, tiebreak)
    tie = 1
    while len(parents) < n:
        neg, parent, rank, _ = heapq.heappop(heap)
        node = len(parents)
        parents.append(parent)
        depth.append(depth[parent] + 1)
        if rank + 1 < len(lp):
            heapq.heappush(heap, (neg + lp[rank] - lp[rank + 1], parent, rank + 1, tie))
        heapq.heappush(heap, (neg - lp[0], node, 0, tie + 1))
        tie += 2
    return parents


def chain_parents(n: int) -> list[int]:
    return [-1] + list(range(n - 1))


def visibility(parents: list[int]) -> torch.Tensor:
    """bool [n, n]: row i sees column j iff j is i or an ancestor of i."""
    n = len(parents)
    vis = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            vis[i] = vis[p]
        vis[i, i] = True
    return vis


def corrupted(vis: torch.Tensor) -> torch.Tensor:
    """The last node sees only itself among the tree columns (its ancestors hidden)."""
    bad = vis.clone()
    bad[-1] = False
    bad[-1, -1] = True
    return bad


def flat_mask(vis: torch.Tensor, prefixes: list[int], dtype: torch.dtype) -> torch.Tensor:
    """SGLang's tree layout: per request `[n, prefix + n]` row-major, requests packed; the prefix
    columns are left 0 (the Triton kernel skips them)."""
    n = vis.shape[0]
    parts = []
    for p in prefixes:
        rows = torch.zeros(n, p + n, dtype=torch.bool, device=vis.device)
        rows[:, p:] = vis
        parts.append(rows.reshape(-1))
    return torch.cat(parts).to(dtype)


def ragged_prefixes(bs: int, prefix: int) -> list[int]:
    """P, P-1, P-2, P-3, P, ...: unequal lengths exercise the packed layout and unaligned rows."""
    return [max(1, prefix - (b % 4)) for b in range(bs)]


# ----------------------------------------------------------------------------- inputs

@dataclass
class Shape:
    bs: int
    prefix: int
    extend: int
    heads: int
    kv_heads: int
    head_dim: int


@dataclass
class Inputs:
    """One verify batch: shared q / new K,V, a KV pool per layer, the index and mask tensors."""

    shape: Shape
    prefixes: list[int]
    q: torch.Tensor
    k_ext: torch.Tensor
    v_ext: torch.Tensor
    k_pools: list[torch.Tensor]
    v_pools: list[torch.Tensor]
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    mask_indptr: torch.Tensor
    vis: dict[str, torch.Tensor]  # reference visibility per kind ("causal", "tree")
    masks: dict[tuple[str, torch.dtype], torch.Tensor]  # what the kernel is handed
    sm_scale: float


def make_inputs(shape: Shape, layers: int, dtype: torch.dtype, device: str, seed: int, boost: float,
                corrupt: bool) -> Inputs:
    """Random inputs in SGLang's target-verify layout (index dtypes as its CUDA-graph buffers)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    prefixes = ragged_prefixes(shape.bs, shape.prefix)
    n, total = shape.extend, sum(prefixes)
    rows = shape.bs * n
    group = shape.heads // shape.kv_heads
    sm_scale = shape.head_dim ** -0.5

    def randn(*size: int, dt: torch.dtype = torch.float32) -> torch.Tensor:  # on the device: GBs of KV
        return torch.randn(*size, generator=gen, device=device, dtype=dt)

    # A shared unit direction per KV head in q and the new keys: +boost logits on tree keys.
    u = torch.nn.functional.normalize(randn(shape.kv_heads, shape.head_dim), dim=-1)
    g = math.sqrt(boost / sm_scale) if boost > 0 else 0.0
    q = randn(rows, shape.heads, shape.head_dim) + g * u.repeat_interleave(group, 0)
    k_ext = randn(rows, shape.kv_heads, shape.head_dim) + g * u
    v_ext = randn(rows, shape.kv_heads, shape.head_dim)
    k_pools = [randn(total, shape.kv_heads, shape.head_dim, dt=dtype) for _ in range(layers)]
    v_pools = [randn(total, shape.kv_heads, shape.head_dim, dt=dtype) for _ in range(layers)]
    zero = torch.zeros(1, dtype=torch.int64)
    lens = torch.tensor(prefixes, dtype=torch.int64)
    vis = {"causal": visibility(chain_parents(n)), "tree": visibility(best_first_parents(n))}
    vis = {kind: v.to(device) for kind, v in vis.items()}
    handed = {kind: corrupted(v) if corrupt else v for kind, v in vis.items()}
    masks = {
        (kind, dt): flat_mask(handed["tree" if kind == "tree" else "causal"], prefixes, dt).to(device)
        for kind in ("chain", "tree") for dt in (torch.uint8, torch.bool)
    }
    return Inputs(
        shape=shape, prefixes=prefixes,
        q=q.to(device, dtype), k_ext=k_ext.to(device, dtype), v_ext=v_ext.to(device, dtype),
        k_pools=k_pools, v_pools=v_pools,
        qo_indptr=(torch.arange(shape.bs + 1, dtype=torch.int64) * n).to(device),
        kv_indptr=torch.cat([zero, lens.cumsum(0)]).to(device, torch.int32),
        kv_indices=torch.arange(total, dtype=torch.int64).to(device),
        mask_indptr=torch.cat([zero, (n * (lens + n)).cumsum(0)]).to(device),
        vis=vis, masks=masks, sm_scale=sm_scale,
    )


def reference(inp: Inputs, kind: str, layer: int = 0) -> torch.Tensor:
    """float32 attention of every verify row over its whole prefix plus its visible tree columns."""
    s, n = inp.shape, inp.shape.extend
    group = s.heads // s.kv_heads
    out = torch.empty(s.bs * n, s.heads, s.head_dim, dtype=torch.float32, device=inp.q.device)
    allowed_tree = inp.vis[kind].to(inp.q.device)
    start = 0
    for b, p in enumerate(inp.prefixes):
        rows = slice(b * n, (b + 1) * n)
        keys = torch.cat([inp.k_pools[layer][start:start + p], inp.k_ext[rows]]).float()
        values = torch.cat([inp.v_pools[layer][start:start + p], inp.v_ext[rows]]).float()
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        scores = torch.einsum("nhd,thd->hnt", inp.q[rows].float(), keys) * inp.sm_scale
        allowed = torch.cat([torch.ones(n, p, dtype=torch.bool, device=keys.device), allowed_tree], 1)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
        out[rows] = torch.einsum("hnt,thd->nhd", weights, values)
        start += p
    return out


# ----------------------------------------------------------------------------- SGLang

@dataclass
class SGLang:
    extend: Any  # the extend_attention module
    merge: Optional[Callable[..., Any]]
    version: str
    module_file: str


def _install_stand_ins() -> None:
    """CPU venvs lack torchvision (and xgrammar) that SGLang imports at module level."""
    missing = tuple(m for m in ("torchvision", "xgrammar") if importlib.util.find_spec(m) is None)
    if not missing or not (STAND_IN_DIR / "torchvision_stand_in.py").exists():
        return
    from tests.cpu_serverargs import torchvision_stand_in  # noqa: PLC0415

    torchvision_stand_in.install(tuple(m for m in missing if m != "torchvision"))


_UNPACKED: list[tempfile.TemporaryDirectory] = []  # kept alive for the run, removed at exit


def _sglang_from_cached_wheel() -> Optional[str]:
    """Where no SGLang is importable (the repo's CPU venvs hold its dependencies only, see
    tests/cpu_serverargs/venv_builder.py): unpack the venv's release from the wheel cache into a
    temporary folder for this run. Returns the wheel used, or None."""
    stamp = Path(sys.prefix) / "ddtree-cpu-venv.json"
    if not stamp.exists():
        return None
    version = json.loads(stamp.read_text()).get("sglang")
    cache = Path(os.environ.get("DDTREE_PATCH_WHEEL_CACHE", Path.home() / ".cache" / "ddtree-patch" / "wheels"))
    wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not version or not wheels:
        return None
    folder = tempfile.TemporaryDirectory(prefix=f"sglang-{version}-")
    _UNPACKED.append(folder)
    with zipfile.ZipFile(wheels[-1]) as whl:
        whl.extractall(folder.name, [m for m in whl.namelist() if m.startswith("sglang/")])
    site.addsitedir(folder.name)  # no sglang is importable (load_sglang checked), so a site folder at the end is enough
    return str(wheels[-1])


def load_sglang() -> SGLang:
    """The installed SGLang's extend-attention module and merge_state (imported, never copied)."""
    if not torch.cuda.is_available():
        _install_stand_ins()
        if importlib.util.find_spec("sglang") is None:
            wheel = _sglang_from_cached_wheel()
            if wheel is None:
                raise SystemExit("sglang is not importable: put an install on PYTHONPATH, e.g. "
                                 "pip install --no-deps --target DIR sglang==0.5.15")
            print(f"sglang: not installed in this venv; unpacked {wheel} into a temporary folder")
    import sglang  # noqa: PLC0415

    extend = None
    for name in MODULES:
        try:
            extend = importlib.import_module(name)
            break
        except ModuleNotFoundError:
            continue
    if extend is None:
        raise SystemExit(f"no extend_attention module in sglang {sglang.__version__} ({', '.join(MODULES)})")
    merge = None
    for name in MERGE_MODULES:
        try:
            merge = importlib.import_module(name).merge_state_triton
            break
        except (ModuleNotFoundError, AttributeError):
            continue
    params = inspect.signature(extend.extend_attention_fwd).parameters
    if not {"lse_extend", "skip_prefix", "skip_extend"} <= set(params):
        merge = None  # this release's kernel cannot run the split candidate
    return SGLang(extend, merge, getattr(sglang, "__version__", "?"), extend.__file__)


class _StagesLauncher:
    """Stands in for `_fwd_kernel` inside the module: same kernel, another `num_stages`."""

    def __init__(self, kernel: Any, stages: int):
        self.kernel, self.stages = kernel, stages

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launch = self.kernel[grid]
        return lambda *a, **kw: launch(*a, **{**kw, "num_stages": self.stages})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


@contextlib.contextmanager
def kernel_config(ea: Any, cfg: KernelConfig) -> Iterator[None]:
    """Run SGLang's `extend_attention_fwd` with `cfg`: its module-level block-size function and
    kernel launcher are looked up at call time, so wrapping them for the call is enough."""
    saved = ea._get_block_sizes_for_extend_attention, ea._fwd_kernel
    if cfg.block_m is not None or cfg.warps is not None:
        def block_sizes(lq: int, lv: int) -> tuple:
            dmodel, dpe, dv, m, n, warps = saved[0](lq, lv)
            return (dmodel, dpe, dv, cfg.block_m or m, cfg.block_n or n, cfg.warps or warps)

        ea._get_block_sizes_for_extend_attention = block_sizes
    if cfg.stages is not None:
        ea._fwd_kernel = _StagesLauncher(saved[1], cfg.stages)
    try:
        yield
    finally:
        ea._get_block_sizes_for_extend_attention, ea._fwd_kernel = saved


@dataclass
class Scratch:
    """Output buffers of one variant (split: the two partial states and their LSEs)."""

    out: torch.Tensor
    parts: Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = None


def make_scratch(inp: Inputs, v: Variant) -> Scratch:
    out = torch.empty_like(inp.q)
    if not v.split:
        return Scratch(out)
    o = torch.empty(inp.q.shape, dtype=torch.float32, device=inp.q.device)
    lse = torch.empty(inp.q.shape[:2], dtype=torch.float32, device=inp.q.device)
    return Scratch(out, (o, lse, torch.empty_like(o), torch.empty_like(lse)))


def attend(sg: SGLang, inp: Inputs, v: Variant, layer: int, scratch: Scratch) -> None:
    """One target-verify attention call of one layer, as SGLang's Triton backend makes it."""
    ea = sg.extend
    mask = inp.masks[(v.mask, v.mask_dtype)] if v.mask != "none" else None
    common = (inp.k_ext, inp.v_ext)
    index = (inp.k_pools[layer], inp.v_pools[layer], inp.qo_indptr, inp.kv_indptr, inp.kv_indices)
    n = inp.shape.extend
    if not v.split:
        with kernel_config(ea, v.config):
            ea.extend_attention_fwd(inp.q, *common, scratch.out, *index, mask, True,
                                    inp.mask_indptr if mask is not None else None, n, 1.0, 1.0,
                                    sm_scale=inp.sm_scale)
        return
    o_pre, lse_pre, o_tree, lse_tree = scratch.parts
    ea.extend_attention_fwd(inp.q, *common, o_pre, *index, None, True, None, n, 1.0, 1.0,
                            sm_scale=inp.sm_scale, lse_extend=lse_pre, skip_extend=True)
    ea.extend_attention_fwd(inp.q, *common, o_tree, *index, mask, True, inp.mask_indptr, n, 1.0, 1.0,
                            sm_scale=inp.sm_scale, lse_extend=lse_tree, skip_prefix=True)
    sg.merge(o_pre, lse_pre, o_tree, lse_tree, output=scratch.out)


# ----------------------------------------------------------------------------- compiled kernels

def compiled_kernels(jit_fn: Any) -> dict[int, Any]:
    """The compiled kernels a Triton JITFunction holds (layout differs across Triton releases)."""
    found: dict[int, Any] = {}
    caches = getattr(jit_fn, "device_caches", None) or getattr(jit_fn, "cache", None) or {}
    for entry in caches.values():
        for part in entry if isinstance(entry, tuple) else (entry,):
            if isinstance(part, dict):
                found.update({id(k): k for k in part.values() if hasattr(k, "asm")})
    return found


def resources(kernel: Any) -> str:
    """'regs R, spills S, smem B' of a launched compiled kernel ('-' where unknown)."""
    regs, spills = getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)
    shared = getattr(getattr(kernel, "metadata", None), "shared", None)
    if regs is None:
        return "-"
    return f"{regs} / {spills} / {shared}"


# ----------------------------------------------------------------------------- timing

def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def time_variants(runs: dict[str, Callable[[], None]], layers: int, samples: int, warmup: int,
                  use_graph: bool, seed: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    """us per call per sample; variants interleaved, in a fresh random order every sample.
    A variant whose capture or warm-up raises is left out (its error returned)."""
    steps: dict[str, Callable[[], None]] = {}
    errors: dict[str, str] = {}
    for name, fn in runs.items():
        try:
            step = capture_graph(fn)[0].replay if use_graph else fn
            for _ in range(warmup):
                step()
            torch.cuda.synchronize()
            steps[name] = step
        except Exception as error:  # noqa: BLE001
            errors[name] = f"{type(error).__name__}: {error}"[:120]
    rng = random.Random(seed)
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(samples):
        rng.shuffle(names)
        marks = []
        for name in names:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            steps[name]()
            end.record()
            marks.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in marks:
            times[name].append(start.elapsed_time(end) * 1000.0 / layers)
    return times, errors


# ----------------------------------------------------------------------------- one shape

@dataclass
class Row:
    shape: Shape
    variant: Variant
    err: float
    delta: Optional[float]
    ok: bool
    times: list[float] = field(default_factory=list)
    kernel: str = "-"
    error: str = ""  # the exception a candidate raised (compile / launch / capture), if any

    @property
    def status(self) -> str:
        return f"ERROR {self.error}" if self.error else ("OK" if self.ok else "WRONG")


def run_shape(sg: SGLang, shape: Shape, variants: list[Variant], args: argparse.Namespace,
              kernel_info: dict[tuple, str]) -> list[Row]:
    """Check every variant against the reference, then (CUDA) time them interleaved."""
    cuda = args.device == "cuda"
    layers = args.layers if cuda else 1
    inp = make_inputs(shape, layers, args.dtype, args.device, args.seed, args.tree_logit_boost,
                      args.corrupt_mask)
    refs = {kind: reference(inp, kind) for kind in ("causal", "tree")}
    tol = TOLERANCE[args.dtype]
    separation = float((refs["tree"] - refs["causal"]).abs().max())
    if separation <= 10 * tol:
        raise SystemExit(f"tree and causal references differ by only {separation:.2e}: the check could not "
                         "tell the masks apart (raise --tree-logit-boost)")
    scratch = {v.name: make_scratch(inp, v) for v in variants}
    outputs: dict[str, torch.Tensor] = {}
    rows = [check_variant(sg, inp, v, scratch[v.name], refs, outputs, tol, kernel_info) for v in variants]
    if cuda and not args.no_timing:
        timed = [r for r in rows if not r.error]
        runs = {r.variant.name: _all_layers(sg, inp, r.variant, scratch[r.variant.name], layers) for r in timed}
        times, errors = time_variants(runs, layers, args.samples, args.warmup, not args.no_graph, args.seed)
        for row in timed:
            row.error = errors.get(row.variant.name, "")
            row.times = times.get(row.variant.name, [])
            row.kernel = kernel_info.get(row.variant.compile_key, "-")
            if row.times:
                row.ok &= replay_matches_eager(sg, inp, row.variant, scratch[row.variant.name], layers - 1)
    del inp
    if cuda:
        torch.cuda.empty_cache()
    return rows


def check_variant(sg: SGLang, inp: Inputs, v: Variant, scratch: Scratch, refs: dict[str, torch.Tensor],
                  outputs: dict[str, torch.Tensor], tol: float, kernel_info: dict[tuple, str]) -> Row:
    """One eager call on layer 0 against the reference (and against its base variant's bits);
    notes the compiled kernel's resources the first time its constexprs are seen."""
    before = compiled_kernels(sg.extend._fwd_kernel)
    try:
        attend(sg, inp, v, 0, scratch)
        if inp.q.is_cuda:
            torch.cuda.synchronize()
    except Exception as error:  # a candidate config may not compile or launch here: report, go on
        return Row(inp.shape, v, float("nan"), None, False, error=f"{type(error).__name__}: {error}"[:120])
    new = [k for i, k in compiled_kernels(sg.extend._fwd_kernel).items() if i not in before]
    if new and not v.split:
        kernel_info.setdefault(v.compile_key, resources(new[-1]))
    outputs[v.name] = scratch.out.float().clone()
    err = float((outputs[v.name] - refs[v.reference_kind]).abs().max())
    delta = float((outputs[v.name] - outputs[v.base]).abs().max()) if v.base in outputs else None
    return Row(inp.shape, v, err, delta, math.isfinite(err) and err <= tol,
               kernel=kernel_info.get(v.compile_key, "-"))


def replay_matches_eager(sg: SGLang, inp: Inputs, v: Variant, scratch: Scratch, layer: int) -> bool:
    """The timed graphs ran the checked kernels: the last replay's output (layer `layer`) equals
    an eager call's, bit for bit."""
    replayed = scratch.out.clone()
    attend(sg, inp, v, layer, scratch)
    torch.cuda.synchronize()
    same = torch.equal(replayed, scratch.out)
    if not same:
        print(f"{v.name}: graph replay and eager call differ on layer {layer}", file=sys.stderr)
    return same


def _all_layers(sg: SGLang, inp: Inputs, v: Variant, scratch: Scratch, layers: int) -> Callable[[], None]:
    def step() -> None:
        for layer in range(layers):
            attend(sg, inp, v, layer, scratch)
    return step


# ----------------------------------------------------------------------------- compile report

class _TargetOnlyDriver:
    """A Triton driver with a target and no device: enough for `JITFunction.warmup` to compile."""

    def __init__(self, arch: int):
        from triton.backends.compiler import GPUTarget  # noqa: PLC0415

        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self) -> Any:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: Optional[int] = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


class _CompileOnly:
    """Stands in for `_fwd_kernel`: compiles on 'launch' (warmup) and keeps the compiled kernel."""

    def __init__(self, kernel: Any, stages: Optional[int]):
        self.kernel, self.stages, self.compiled = kernel, stages, None

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(*a: Any, **kw: Any) -> None:
            if self.stages is not None:
                kw["num_stages"] = self.stages
            self.compiled = self.kernel.warmup(*a, grid=grid, **kw)
        return launch


def cuda_tool(name: str) -> Optional[str]:
    """A CUDA binary utility from the Triton bundle (or PATH)."""
    try:
        import triton.backends.nvidia as nv  # noqa: PLC0415

        path = Path(nv.__file__).parent / "bin" / name
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return shutil.which(name)


def sass_stats(cubin: bytes) -> dict[str, Any]:
    """Registers / stack / shared from cuobjdump, and per-loop instruction counts of the SASS."""
    tool = cuda_tool("cuobjdump")
    if tool is None:
        return {}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    res = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            toks = m.group(2).split()
            toks = toks[1:] if toks and toks[0].startswith("@") else toks
            ins.append((int(m.group(1), 16), toks[0] if toks else "", m.group(2)))
    loops = []
    for addr, op, text in ins:
        target = re.search(r"0x([0-9a-f]+)", text) if op.startswith("BRA") else None
        if target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))

    def counts(ops: list[str]) -> dict[str, int]:
        def c(*prefixes: str) -> int:
            return sum(o.startswith(prefixes) for o in ops)
        return {"ins": len(ops), "LDG": c("LDG"), "spill": c("LDL", "STL"), "BAR": c("BAR"), "SHFL": c("SHFL")}

    return {"regs": res.get("REG"), "stack": res.get("STACK"), "ins": len(ins),
            "spill_ops": counts([o for _, o, _ in ins])["spill"],
            "loops": [counts([o for ad, o, _ in ins if a <= ad <= b]) for a, b in loops]}


def _compile_row(sg: SGLang, inp: Inputs, v: Variant, kernel: Any) -> list[str]:
    """Compile one variant through SGLang's own wrapper (launch replaced by warmup) -> table row."""
    ea = sg.extend
    proxy = _CompileOnly(kernel, v.config.stages)
    with kernel_config(ea, KernelConfig(v.config.block_m, v.config.block_n, v.config.warps)):
        ea._fwd_kernel = proxy  # restored by kernel_config on the way out
        attend(sg, inp, v, 0, make_scratch(inp, v))
    meta = proxy.compiled.metadata
    st = sass_stats(proxy.compiled.asm["cubin"])
    keys = ("ins", "LDG", "spill", "BAR", "SHFL")
    loops = " ; ".join("/".join(str(c[k]) for k in keys) for c in st.get("loops", []))
    return [v.name, str(meta.num_warps), str(meta.num_stages), str(meta.shared), str(st.get("regs", "-")),
            str(st.get("stack", "-")), str(st.get("spill_ops", "-")), str(st.get("ins", "-")), loops or "-"]


@contextlib.contextmanager
def compile_target(ea: Any, arch: int) -> Iterator[str]:
    """The device to build inputs on; without a GPU a target-only Triton driver for sm_`arch`, and
    SGLang's block-size choice made for that architecture."""
    if torch.cuda.is_available():
        yield "cuda"
        return
    from triton.runtime import driver  # noqa: PLC0415

    saved = getattr(ea, "_is_cuda", None), getattr(ea, "CUDA_CAPABILITY", None)
    driver.set_active(_TargetOnlyDriver(arch))
    ea._is_cuda, ea.CUDA_CAPABILITY = True, (arch // 10, arch % 10)
    try:
        yield "cpu"
    finally:
        ea._is_cuda, ea.CUDA_CAPABILITY = saved  # the stand-in driver stays: there is no real one


def compile_report(sg: SGLang, variants: list[Variant], args: argparse.Namespace) -> int:
    """Compile each (non-split) variant for `--arch` and print its resources; runs nothing."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("--compile-report needs the Triton compiler: unset TRITON_INTERPRET", file=sys.stderr)
        return 2
    kernel = sg.extend._fwd_kernel
    with compile_target(sg.extend, args.arch) as device:
        shape = Shape(2, 100, args.extend, args.heads, args.kv_heads, args.head_dim)
        inp = make_inputs(shape, 1, torch.bfloat16, device, args.seed, 0.0, False)
        rows = [_compile_row(sg, inp, v, kernel) for v in variants if not v.split]
    print(f"\n### `_fwd_kernel` compiled for sm_{args.arch} (head dim {args.head_dim}, "
          f"{args.heads}/{args.kv_heads} heads, bf16)\n")
    print("loops: one `instructions/LDG/spill LDL+STL/BAR/SHFL` group per SASS loop, in address order "
          "(the prefix loop, then the extend loop)\n")
    table(["variant", "warps", "stages", "smem B", "regs", "spill stack B", "spill ops", "SASS ins", "loops"],
          rows)
    return 0


# ----------------------------------------------------------------------------- output

def table(cols: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def machine_line(sg: SGLang, device: str) -> str:
    import triton  # noqa: PLC0415

    cpu = f"CPU ({platform.processor() or platform.machine()})"
    gpu = torch.cuda.get_device_name() if device == "cuda" else cpu
    cuda = f", CUDA {torch.version.cuda}" if device == "cuda" else ""
    interp = " TRITON_INTERPRET=1" if os.environ.get("TRITON_INTERPRET") == "1" else ""
    return (f"machine: {gpu}{cuda}; python {platform.python_version()}, torch {torch.__version__}, "
            f"triton {triton.__version__}{interp}, sglang {sg.version} ({sg.module_file})")


def report(rows: list[Row], layers: int, timed: bool) -> None:
    """The per-variant table, then one line per shape: causal, tree mask, the best exact tree."""
    print()
    cols = ["batch", "prefix", "variant", "median us/call", "p10-p90 us", "x causal",
            f"ms/step ({layers} layers)", "max abs err", "max abs diff vs base", "regs/spills/smem", "status"]
    out = []
    causal: dict[tuple[int, int], float] = {}
    for r in rows:
        med = statistics.median(r.times) if r.times else None
        key = (r.shape.bs, r.shape.prefix)
        if r.variant.name == "causal" and med is not None:
            causal[key] = med
        ratio = f"{med / causal[key]:.3f}" if med is not None and key in causal else "-"
        delta = "-" if r.delta is None else ("0 (same bits)" if r.delta == 0 else f"{r.delta:.2e}")
        out.append([str(r.shape.bs), str(r.shape.prefix), r.variant.name,
                    f"{med:.2f}" if med is not None else "-",
                    f"{percentile(r.times, .1):.2f}-{percentile(r.times, .9):.2f}" if r.times else "-",
                    ratio, f"{med * layers / 1000:.3f}" if med is not None else "-",
                    f"{r.err:.2e}", delta, r.kernel, r.status])
    table(cols, out)
    if timed:
        summary(rows, causal)


def summary(rows: list[Row], causal: dict[tuple[int, int], float]) -> None:
    """Per shape: causal, the tree mask, the fastest correct tree variant, the fastest causal one."""
    print("\nper shape (median us/call, x = / causal):\n")

    def median(r: Row) -> float:
        return statistics.median(r.times)

    def cell(r: Optional[Row], c: float, named: bool = True) -> str:
        if r is None:
            return "-"
        return (f"{r.variant.name}: " if named else "") + f"{median(r):.2f} ({median(r) / c:.3f}x)"

    out = []
    for key, c in causal.items():
        group = [r for r in rows if (r.shape.bs, r.shape.prefix) == key and r.times and r.ok]
        tree = next((r for r in group if r.variant.name == "tree_mask"), None)
        best_tree = min((r for r in group if r.variant.mask == "tree"), key=median, default=None)
        best_causal = min((r for r in group if r.variant.mask == "none"), key=median, default=None)
        out.append([str(key[0]), str(key[1]), f"{c:.2f}", cell(tree, c, named=False), cell(best_tree, c),
                    cell(best_causal, c)])
    table(["batch", "prefix", "causal", "tree_mask", "fastest tree variant", "fastest causal variant"], out)


# ----------------------------------------------------------------------------- main

def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: TRITON_INTERPRET=1, tiny sizes, correctness only")
    ap.add_argument("--batch", type=int, nargs="+")
    ap.add_argument("--prefix", type=int, nargs="+", help="prefix length (requests get P, P-1, P-2, P-3, ...)")
    ap.add_argument("--extend", type=int, default=16, help="verify width (tree nodes per request)")
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int)
    ap.add_argument("--head-dim", type=int)
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--layers", type=int, default=36, help="calls per sample, each on its own KV pool")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--configs", type=parse_config, nargs="*",
                    default=[parse_config(c) for c in ("M64N64w8", "M32N64w4", "M16N64w4")],
                    help="candidate block configs, e.g. M16N64w4 M64N64w8s2")
    ap.add_argument("--no-split", action="store_true", help="leave out the tree_split candidate")
    ap.add_argument("--no-graph", action="store_true", help="time eager launches instead of graph replays")
    ap.add_argument("--no-timing", action="store_true", help="correctness only")
    ap.add_argument("--tree-logit-boost", type=float, default=4.0)
    ap.add_argument("--corrupt-mask", action="store_true", help="self-test: hand the kernel a wrong mask")
    ap.add_argument("--compile-report", action="store_true", help="compile for --arch and print resources")
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    args = ap.parse_args(argv)
    cpu = args.device == "cpu"
    defaults = {"batch": [1, 3] if cpu else [1, 8, 64], "prefix": [5, 70] if cpu else [160, 512, 2048],
                "heads": 4 if cpu else 32, "kv_heads": 2 if cpu else 8, "head_dim": 32 if cpu else 128,
                "dtype": "float32" if cpu else "bfloat16"}
    if args.compile_report:
        defaults.update(heads=32, kv_heads=8, head_dim=128)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.dtype = getattr(torch, args.dtype)
    if args.heads % args.kv_heads:
        ap.error("--heads must be a multiple of --kv-heads")
    return args


class _Tee:
    """stdout and a copy in `--out` (the device tool returns files, and only a tail of stdout)."""

    def __init__(self, stream: Any, path: Path):
        self.stream, self.file = stream, path.open("w", encoding="utf-8")

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stream.flush()


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout = _Tee(sys.stdout, args.out)
    env = "TRITON_INTERPRET=1 " if os.environ.get("TRITON_INTERPRET") == "1" else ""
    print("command: " + env + shlex.join([sys.executable, "-m", __spec__.name] + (sys.argv[1:] if argv is None else argv)))
    if args.device == "cuda" and not args.compile_report and not torch.cuda.is_available():
        print("no CUDA device: use --device cpu (correctness smoke) or --compile-report", file=sys.stderr)
        return 2
    if args.device == "cpu":
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # 0/0 in padding rows, never stored
    warnings.filterwarnings("ignore", message="tl.where with a non-boolean condition")  # SGLang's uint8 mask
    warnings.filterwarnings("ignore", message="TRITON_DEFAULT_FP_FUSION")
    sg = load_sglang()
    print(machine_line(sg, "cuda" if torch.cuda.is_available() and args.device == "cuda" else "cpu"))
    variants = make_variants(args.configs, split=not args.no_split and sg.merge is not None)
    if args.compile_report:
        return compile_report(sg, variants, args)
    n = args.extend
    print(f"tree (parents, best-first, {n} nodes): {best_first_parents(n)}")
    print(f"shape: {args.heads} q heads / {args.kv_heads} kv heads, head dim {args.head_dim}, {args.dtype}, "
          f"verify width {n}, tolerance {TOLERANCE[args.dtype]}"
          + (", MASK CORRUPTED (self-test)" if args.corrupt_mask else ""))
    rows: list[Row] = []
    kernel_info: dict[tuple, str] = {}
    for bs in args.batch:
        for prefix in args.prefix:
            shape = Shape(bs, prefix, n, args.heads, args.kv_heads, args.head_dim)
            rows += run_shape(sg, shape, variants, args, kernel_info)
    timed = args.device == "cuda" and not args.no_timing
    report(rows, args.layers if timed else 1, timed)
    wrong = [f"{r.variant.name} (batch {r.shape.bs}, prefix {r.shape.prefix}: "
             + (r.status if r.error else f"{r.err:.2e}") + ")" for r in rows if not r.ok or r.error]
    if wrong:
        print("\nWRONG output: " + ", ".join(wrong))
        return 1
    print(f"\nall {len(rows)} outputs match the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
