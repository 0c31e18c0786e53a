"""How every section times a callable, and how it prints the figures.

Every timed callable is captured alone in a CUDA graph; a sample is the mean of `--replays`
replays between two CUDA events (graph launch included), and each figure is the median of
`--samples` samples with the 10th-90th percentile spread. Side-by-side comparisons interleave
their samples (A, B, A, B, ...) so both see the same clocks and neighbours.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from tests.cuda_graph import capture_graph


Stats = dict[str, float]


class Timer:
    """Medians of interleaved samples; CUDA graph replays on a GPU, eager calls on the CPU."""

    def __init__(self, device: str, samples: int, replays: int):
        self.device, self.samples, self.replays = device, samples, replays

    def _runner(self, fn: Callable[[], object]) -> Callable[[], float]:
        if self.device == "cpu":
            def run_cpu() -> float:
                t0 = time.perf_counter()
                for _ in range(self.replays):
                    fn()
                return (time.perf_counter() - t0) * 1e6 / self.replays
            return run_cpu
        graph, _ = capture_graph(fn, warmups=2)
        for _ in range(3):
            graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def run_graph() -> float:
            start.record()
            for _ in range(self.replays):
                graph.replay()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) * 1000 / self.replays
        return run_graph

    def measure(self, fns: dict[str, Callable[[], object]]) -> dict[str, Stats]:
        runners = {name: self._runner(fn) for name, fn in fns.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(self.samples):
            for name, run in runners.items():
                samples[name].append(run())
        return {name: _stats(values) for name, values in samples.items()}


def _stats(values: list[float]) -> Stats:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]  # noqa: E731
    return {"median": statistics.median(ordered), "p10": pick(0.1), "p90": pick(0.9)}


def _cell(s: Stats) -> str:
    return f"{s['median']:.1f} [{s['p10']:.1f}-{s['p90']:.1f}]"


def _table(title: str, cols: list[str], rows: list[list[str]]) -> None:
    print(f"\n## {title}\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(row) + " |", flush=True)
