"""scripts/bench/verify_attention.py on SGLang 0.5.15's own Triton target-verify kernel (CPU, interpreted).

The benchmark's verdict is only worth its timings if its correctness check can fail: the smoke
mode must pass on the real kernel, and a wrong mask handed to the kernel must make it exit
non-zero. Both run in a subprocess with the cached 0.5.15 CPU venv (SGLang on PYTHONPATH, as
tests/test_serverargs_behaviour.py does); SGLang is never imported into this process.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cpu_serverargs.venv_builder import venv_cache

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.5.15"
VENV_PYTHON = venv_cache() / VERSION / "bin" / "python"

needs_venv = pytest.mark.skipif(
    not VENV_PYTHON.exists(),
    reason=f"no SGLang {VERSION} CPU venv at {VENV_PYTHON} (built by tests/cpu_serverargs/venv_builder.py)",
)


def _run(site: Path, *args: str, interpret: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([str(VENV_PYTHON), "-m", "scripts.bench.verify_attention", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=600)


def _rows(stdout: str) -> dict[tuple[str, str, str], str]:
    """(batch, prefix, variant) -> status, from the markdown table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0].isdigit():
            rows[(cells[0], cells[1], cells[2])] = cells[-1]
    return rows


@pytest.fixture(scope="module")
def site(release_site) -> Path:
    return release_site(VERSION)


@pytest.mark.heavy
@needs_venv
def test_smoke_mode_passes_on_sglangs_own_kernel(site: Path) -> None:
    done = _run(site, "--device", "cpu")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("command: TRITON_INTERPRET=1 ")
    assert out.splitlines()[0].endswith(" -m scripts.bench.verify_attention --device cpu")
    machine = next(line for line in out.splitlines() if line.startswith("machine: "))
    assert f"sglang {VERSION}" in machine and str(site) in machine and "triton " in machine
    rows = _rows(out)
    variants = {v for _, _, v in rows}
    assert {"causal", "chain_mask", "tree_mask", "tree_mask_bool", "tree_split", "causal@M16N64w4",
            "tree_mask@M16N64w4"} <= variants
    assert len(rows) == 2 * 2 * len(variants) and set(rows.values()) == {"OK"}


@pytest.mark.heavy
@needs_venv
def test_a_wrong_mask_is_caught(site: Path) -> None:
    """The last node's ancestors hidden in the masks the kernel reads: every masked variant is
    WRONG, the unmasked one still OK, and the exit status is 1."""
    done = _run(site, "--device", "cpu", "--corrupt-mask", "--batch", "3", "--prefix", "70",
                "--configs", "M16N64w4")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(done.stdout)
    assert rows[("3", "70", "causal")] == "OK" and rows[("3", "70", "causal@M16N64w4")] == "OK"
    masked = {v: s for (_, _, v), s in rows.items() if not v.startswith("causal")}
    assert masked and set(masked.values()) == {"WRONG"}, masked
    assert "WRONG output: " in done.stdout


@pytest.mark.slow
@needs_venv
def test_compile_report_runs_without_a_gpu(site: Path) -> None:
    """The sm_90 build of every variant (stand-in driver, the Triton bundle's ptxas/cuobjdump)."""
    done = _run(site, "--compile-report", "--configs", "M16N64w4", interpret=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("| ") and "variant" not in line]
    names = [line.split("|")[1].strip() for line in lines]
    assert names == ["causal", "chain_mask", "tree_mask", "tree_mask_bool", "causal@M16N64w4",
                     "tree_mask@M16N64w4"]
    for line in lines:
        regs = line.split("|")[5].strip()
        assert regs.isdigit() and 0 < int(regs) <= 255, line


def test_best_first_tree_is_the_top_prefixes_and_leaves_the_chain() -> None:
    """The benchmark's tree is DDTree's: the n-1 highest-scoring prefixes (brute force), parent
    index < child index, and it branches (else tree and chain masks would agree)."""
    torch = pytest.importorskip("torch")
    from scripts.bench import verify_attention as bench  # noqa: PLC0415

    import math

    n, probs = 16, bench.TREE_PROBS
    parents = bench.best_first_parents(n)
    assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)
    assert parents != bench.chain_parents(n)
    paths = {0: ()}
    ranks = {}
    for i, p in enumerate(parents[1:], 1):
        ranks.setdefault(p, 0)
        paths[i] = paths[p] + (ranks[p],)
        ranks[p] += 1
    def score(path: tuple[int, ...]) -> float:
        return sum(math.log(probs[r]) for r in path)

    floor = min(score(paths[i]) for i in range(1, n)) - 1e-9
    every, stack = [], [()]
    while stack:  # every prefix scoring >= the tree's lowest (scores fall along a path)
        path = stack.pop()
        for r in range(len(probs)):
            if score(path + (r,)) >= floor:
                every.append(path + (r,))
                stack.append(path + (r,))
    best = sorted(map(score, every), reverse=True)[: n - 1]
    assert best == pytest.approx(sorted((score(paths[i]) for i in range(1, n)), reverse=True))
    vis = bench.visibility(parents)
    assert torch.equal(vis, vis & torch.ones(n, n, dtype=torch.bool).tril())  # ancestors only
