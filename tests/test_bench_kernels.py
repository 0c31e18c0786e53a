"""scripts/bench/kernels: the posterior section's judgement of draws that differ from the torch
reference (only a draw whose two tokens have (almost) no mass between them is a float32 boundary case;
greedy rows never are), the penalties, scan and gemm sections on small problems, and the command line
(its section table, --help, a CPU run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
from scripts.bench.kernels import gemm, penalties, posterior, scan  # noqa: E402
from scripts.bench.kernels.timing import Timer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_boundary_draws_tell_rounding_from_a_wrong_token():
    x = torch.zeros(2, 1, 8)
    x[0, 0, 3] = -30.0  # token 3 holds ~1e-13 of the mass: 2 vs 4 is a boundary case
    temp = torch.tensor([1.0, 0.0])
    ref = torch.tensor([[2], [5]])
    assert posterior.boundary_draws(x, temp, ref, ref.clone()) == (0, 0)
    assert posterior.boundary_draws(x, temp, ref, torch.tensor([[4], [5]])) == (1, 1)
    assert posterior.boundary_draws(x, temp, ref, torch.tensor([[3], [5]])) == (1, 1)  # adjacent
    assert posterior.boundary_draws(x, temp, ref, torch.tensor([[6], [5]])) == (1, 0)  # 3 tokens between
    assert posterior.boundary_draws(x, temp, ref, torch.tensor([[2], [6]])) == (1, 0)  # greedy row


def test_a_first_draw_on_a_cdf_step_is_a_boundary_case_even_when_the_tokens_are_far_apart():
    """Seen on the CPU (batch 64, V=2048, top-k 50, peaked logits): the first draw's u sat 2e-6 under
    a CDF step, so one implementation kept a rank-7 token and the other rejected its neighbour and
    redrew the row's top token, 1000 ids away. The between-mass test alone calls that a wrong token."""
    x = torch.zeros(1, 1, 8)
    x[0, 0, 1] = 5.0  # the dominant token, far from the step below
    temp = torch.tensor([1.0])
    probs = torch.softmax(x[0, 0].double(), -1)
    step = float(probs[:6].sum())  # the CDF step between tokens 5 and 6
    ref, got = torch.tensor([[5]]), torch.tensor([[1]])
    assert posterior.boundary_draws(x, temp, ref, got) == (1, 0)
    on_step = torch.tensor([[step - 2e-6]])
    assert posterior.boundary_draws(x, temp, ref, got, first_u=on_step) == (1, 1)
    assert posterior.boundary_draws(x, temp, ref, got, first_u=torch.tensor([[step - 0.01]])) == (1, 0)


def test_cdf_eps_grows_with_the_vocabulary():
    assert 1e-5 < posterior.cdf_eps(2048) < 1.2e-5 and posterior.cdf_eps(8) == 1e-5
    assert 9e-5 < posterior.cdf_eps(151936) < 1e-4


def test_penalties_section_times_both_steps_and_compares_their_bits():
    import argparse

    if not torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
        pytest.skip("Triton on CPU needs TRITON_INTERPRET=1 (set by tests/kernels_env)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = argparse.Namespace(device=device, rows=4, vocab=3000, batch=[2], depth=15)
    (record,) = penalties.bench_penalties(args, Timer(device, samples=2, replays=1))
    assert record["same"] and set(record["us"]) == {"reference (torch)", "touched list", "sparse in place",
                                                    "walk torch", "walk Triton", "whole call, listed per round",
                                                    "append at commit", "whole call, kept lists (runtime)"}
    assert 0 < record["touched"] < 3000 * 0.05
    assert all(v["median"] > 0 for v in record["us"].values())


def test_scan_section_compares_each_form_on_the_real_groups():
    """Forms with another tile size pad the group maxima differently: only the real groups count."""
    import argparse

    if not torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
        pytest.skip("Triton on CPU needs TRITON_INTERPRET=1 (set by tests/kernels_env)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = argparse.Namespace(device=device, vocab=2100, batch=[1], depth=2)
    records = scan.bench_scan(args, Timer(device, samples=1, replays=1))
    assert {r["form"] for r in records} == set(scan.SCAN_VARIANTS)


@pytest.mark.heavy
def test_gemm_section_times_each_tile_set_and_checks_the_epilogue_topk(monkeypatch):
    """Every form per batch, the visible top-K relative to cuBLAS's GEMM; a tile set whose epilogue picks
    other tokens than the top-K of its own logits fails the section."""
    import argparse

    if not torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET"):
        pytest.skip("Triton on CPU needs TRITON_INTERPRET=1 (set by tests/kernels_env)")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    args = argparse.Namespace(device=device, vocab=1100, hidden=64, depth=3, batch=[1], topk_k=[8],
                              gemm_tiles=["16x64x32w4s1", "16x64x32w4s1t"])
    records = gemm.bench_gemm(args, Timer(device, samples=1, replays=1))
    assert [r["form"] for r in records] == ["cuBLAS GEMM", "cuBLAS GEMM + top-K", "Triton GEMM 16x64x32w4s1",
                                            "Triton GEMM 16x64x32w4s1 + epilogue scan + select",
                                            "Triton GEMM 16x64x32w4s1t",
                                            "Triton GEMM 16x64x32w4s1t + epilogue scan + select"]
    assert records[0]["topk_visible_us"] is None and all(r["topk_visible_us"] is not None for r in records[1:])
    assert gemm.gemm_tiles("128x256x64w8s3") == dict(block_m=128, block_n=256, block_k=64, num_warps=8,
                                                     num_stages=3, tma=False)
    assert gemm.gemm_tiles("128x256x64w8s3t")["tma"] is True
    with pytest.raises(argparse.ArgumentTypeError, match="expected BMxBNxBK"):
        gemm.gemm_tiles("128x256")

    real = gemm.head_gemm_topk

    def off_by_one(*a, **kw):  # an epilogue that picked the next token over
        parts, logits = real(*a, **kw)
        return parts._replace(tokens=parts.tokens + 1), logits

    monkeypatch.setattr(gemm, "head_gemm_topk", off_by_one)
    with pytest.raises(RuntimeError, match="not the top-K of its own logits"):
        gemm.bench_gemm(args, Timer(device, samples=1, replays=1))


def test_the_section_table_names_every_bench_function_of_the_package_under_its_own_name():
    """One bench module per kernel, one table in __main__.py: a section left out of the table, or mapped
    to its neighbour's function, would silently not run (or run twice) under `--sections`."""
    import importlib
    import pkgutil

    import scripts.bench.kernels as package

    cli = importlib.import_module("scripts.bench.kernels.__main__")
    modules = [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)
               if m.name != "__main__"]
    defined = {fn for module in modules for name, fn in vars(module).items()
               if name.startswith("bench_") and fn.__module__ == module.__name__}
    assert set(cli.SECTIONS.values()) == defined
    assert {name: fn.__name__ for name, fn in cli.SECTIONS.items()} == {
        name: "bench_" + name.replace("-", "_") for name in cli.SECTIONS}


def test_the_command_line_lists_every_section():
    done = subprocess.run([sys.executable, "-m", "scripts.bench.kernels", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sections = "topk,topk-tune,scan,build,mask,move,posterior,posterior-tune,posterior-profile,penalties,head,gemm,round"
    assert "{" + sections + "}" in done.stdout


def test_a_cpu_run_sets_triton_interpret_before_any_kernel_is_imported():
    """The kernels' decorators read TRITON_INTERPRET when their modules are imported: `--device cpu` must
    set it in __main__.py before that imports a section module, or the smoke run looks for a GPU driver."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "scripts.bench.kernels", "--device", "cpu", "--sections", "mask",
                           "--vocab", "300", "--batch", "1", "--budget", "4", "--depth", "2", "--prefix", "8",
                           "--samples", "1", "--replays", "1"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "## Tree mask, prefix 8" in done.stdout
