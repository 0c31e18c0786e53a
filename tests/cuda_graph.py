"""One CUDA-graph capture for the kernel tests and the benchmark scripts (no import side effects,
so the scripts can use it without the tests' TRITON_INTERPRET setting)."""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

T = TypeVar("T")


def capture_graph(fn: Callable[[], T], warmups: int = 1) -> tuple[torch.cuda.CUDAGraph, T]:
    """(graph, fn's static output): `fn` captured in a CUDA graph after `warmups` calls on a side
    stream, as torch requires."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out
