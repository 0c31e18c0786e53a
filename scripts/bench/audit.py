"""Audit speed, measured side by side in one run: naive libcst parse vs cold audit vs warm audit.

    python -m scripts.bench.audit --version 0.5.23 [--repeat 3]

naive = one process parsing every candidate file (the files that mention dflash) with
libcst.parse_module; cold = the full audit (prefilter, outline, chunk parse, rules, policy) with an
empty cache; warm = the same audit again, nothing changed (results cached by file hash).
Each figure is the median of --repeat runs; ratios are against the naive parse of the same run.
Then whole commands, as a user runs them (a fresh interpreter each, startup and imports included):
`ddtree-patch audit --json` warm, against `python -c "import typer, rich"` (the floor any typer +
rich command pays).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import libcst

from ddtree_patch.audit import audit
from ddtree_patch.locate import from_folder
from tests.sglang_releases import install_release


def _naive(files: list[Path]) -> None:
    for path in files:
        libcst.parse_module(path.read_bytes())


def _command(argv: list[str], env: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.5.23")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        install = from_folder(install_release(args.version, Path(tmp) / "site"))
        files = [p for p in install.package_dir.rglob("*.py") if b"dflash" in p.read_bytes().lower()]
        naive, cold, warm = [], [], []
        for run in range(args.repeat):
            os.environ["DDTREE_PATCH_CACHE"] = str(Path(tmp) / f"cache-{run}")
            start = time.perf_counter()
            _naive(files)
            naive.append(time.perf_counter() - start)
            start = time.perf_counter()
            report = audit(install)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            again = audit(install)
            warm.append(time.perf_counter() - start)
            assert again.result.cache_hits == len(again.result.files) and report.ok
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        audit_cmd = [sys.executable, "-m", "ddtree_patch", "audit", "--json", "--target", str(install.site_packages)]
        subprocess.run(audit_cmd, env=env, check=True, stdout=subprocess.DEVNULL)  # fills the cache
        command = _command(audit_cmd, env, args.repeat)
        floor = _command([sys.executable, "-c", "import typer, rich"], env, args.repeat)
    n, c, w = (statistics.median(x) for x in (naive, cold, warm))
    print(f"SGLang {args.version}: {len(files)} candidate files of {report.result.scanned}, "
          f"{len(report.sites)} sites, {os.cpu_count()} CPUs, median of {args.repeat}")
    print(f"| naive libcst parse | {n:.2f} s | 1.00x |")
    print(f"| cold audit         | {c:.2f} s | {c / n:.2f}x |")
    print(f"| warm audit         | {w:.3f} s | {w / n:.3f}x |")
    print()
    print("| whole command | time | ratio to `import typer, rich` |")
    print("|---|---|---|")
    print(f"| python -c \"import typer, rich\" | {floor:.3f} s | 1.00x |")
    print(f"| ddtree-patch audit --json (warm) | {command:.3f} s | {command / floor:.2f}x |")


if __name__ == "__main__":
    main()
